"""Fixtures for the console tests (helpers live in console_support.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from console_support import stop_runner_if_alive


@pytest.fixture
def fresh_out(tmp_path: Path):
    """An output dir for a test that starts a runner; whatever it leaves running is stopped."""
    out = tmp_path / "out"
    out.mkdir()
    yield out
    stop_runner_if_alive(out)


@pytest.fixture
def tree(mini_tree, tmp_path: Path) -> Path:
    """A copy of the recorded mini tree (real harbor files) the test may change."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    return out
