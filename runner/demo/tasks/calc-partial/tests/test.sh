#!/bin/bash
# Verifier shape (a): metrics.json with passed/failed/total and partial_score = passed/total.
python3 /tests/verify.py
