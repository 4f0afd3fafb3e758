#!/bin/bash
set -e
cat > kv.py <<'PY'
_DATA = {}


def put(key, value):
    _DATA[key] = value


def get(key):
    return _DATA.get(key)


def delete(key):
    _DATA.pop(key, None)


def keys():
    return sorted(_DATA)
PY
echo ready > STATUS
