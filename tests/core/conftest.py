"""Core-area fixtures: a real output tree with errored and partial trials besides oracle and nop."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import real_trees


@pytest.fixture(scope="session")
def core_tree(mini_tree, tmp_path_factory) -> Path:
    """mini_tree (oracle + nop) plus the errored/partial jobs of tests.harbor_agents: the recorded
    trees ``mini`` and ``agents`` in one output tree. No Docker needed. Read-only."""
    out = tmp_path_factory.mktemp("core_tree") / "out"
    real_trees.copy_recorded("mini", out)
    return real_trees.copy_recorded("agents", out)


@pytest.fixture
def tree_copy(core_tree, tmp_path) -> Path:
    """A private, writable copy of core_tree (its voided root is a sibling in tmp_path)."""
    dst = tmp_path / "out"
    shutil.copytree(core_tree, dst, symlinks=True)
    return dst


@pytest.fixture(scope="session")
def handmade(tmp_path_factory) -> Path:
    """The hand-made 15-task tree of tests/core/handmade_tree.py (no Docker). Read-only."""
    from handmade_tree import build

    return build(tmp_path_factory.mktemp("handmade") / "out")
