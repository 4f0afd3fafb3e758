"""The fleet tests reuse the runner tests' helpers and the private engine."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE.parent, HERE.parent / "runner"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
