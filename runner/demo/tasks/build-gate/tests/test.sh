#!/bin/bash
# Verifier shape: compiled with a build gate: phase build_failed
python3 /tests/verify.py
