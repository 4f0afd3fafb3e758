#!/bin/bash
# Verifier shape: two-stage: partial_score = 0.5*unit + 0.5*ux overwrites the gate fraction
python3 /tests/verify.py
