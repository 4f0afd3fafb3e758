"""Fixtures for the trajectory reader and the arm comparison: the recorded real trials, copied.

These tests need neither Docker nor a runner (see reader_data.py for the data).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from reader_data import RECORDED
from real_trees import restore_write_order


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A private copy of the recorded output tree (tests may change it), with harbor's order of
    writes restored (git keeps no file times; see ``restore_write_order``)."""
    out = tmp_path / "out"
    shutil.copytree(RECORDED, out)
    restore_write_order(out)
    return out
