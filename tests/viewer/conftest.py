"""The viewer tests reuse the core tests' hostile tree (tests/core/hostile_tree.py) and the console
tests' ``marathon`` runner (tests/console/console_support.py)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
for _p in (TESTS / "core", TESTS / "console"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
