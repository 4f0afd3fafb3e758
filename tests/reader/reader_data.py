"""The recorded real trials of the five arms (tests/data/trajectories/, made by
tests/data/record_trajectories.py) and where each arm's trial sits in them."""

from __future__ import annotations

from pathlib import Path

RECORDED = Path(__file__).resolve().parents[1] / "data" / "trajectories"
TASK = "calc-partial"


def trial_of(root: Path, arm: str) -> Path:
    """The one recorded trial dir of ``arm`` under an output tree ``root``."""
    (trial,) = [p for p in (root / TASK / arm).glob("*/*/*") if (p / "agent").is_dir()]
    return trial
