#!/bin/bash
# Verifier shape: pass_rate only
python3 /tests/verify.py
