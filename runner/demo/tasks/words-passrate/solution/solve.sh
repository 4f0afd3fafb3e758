#!/bin/bash
set -e
cat > words.py <<'PY'
def count_words(text):
    return len(text.split())


def longest(text):
    best = ""
    for w in text.split():
        if len(w) > len(best):
            best = w
    return best


def capitalize_all(text):
    return " ".join(w.capitalize() for w in text.split())
PY
