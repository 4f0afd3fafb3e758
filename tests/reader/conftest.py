"""Fixtures for the trajectory reader and the arm comparison: the recorded real trials, copied.

The data under tests/data/trajectories/ comes from real runs of the five arms (see
tests/data/record_trajectories.py); these tests need neither Docker nor a runner.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parents[1] / "data" / "trajectories"
TASK = "calc-partial"


def trial_of(root: Path, arm: str) -> Path:
    """The one recorded trial dir of ``arm`` under an output tree ``root``."""
    (trial,) = [p for p in (root / TASK / arm).glob("*/*/*") if (p / "agent").is_dir()]
    return trial


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A private copy of the recorded output tree (tests may change it)."""
    out = tmp_path / "out"
    shutil.copytree(RECORDED, out)
    return out
