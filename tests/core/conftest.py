"""Core-area fixtures: a real output tree with errored and partial trials besides oracle and nop."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: The test-agent jobs of core_tree: (task, arm). The timeout multiplier gives the sleeper ~3.6 s.
AGENT_JOBS = [
    ("calc-partial", "crash"),
    ("words-passrate", "sleeper"),
    ("build-gate", "exit1"),
    ("calc-partial", "partial"),
]


@pytest.fixture(scope="session")
def core_tree(docker_engine, harbor_jobs, tmp_path_factory, request) -> Path:
    """mini_tree (oracle + nop) plus real errored/partial jobs from tests.harbor_agents. Read-only.

    The test-agent jobs start first and run while mini_tree is built, so the two overlap.
    """
    out = tmp_path_factory.mktemp("core_tree") / "out"
    out.mkdir()
    handle = harbor_jobs.start(out, AGENT_JOBS, "--agent-timeout-multiplier", "0.03")
    mini = request.getfixturevalue("mini_tree")
    harbor_jobs.wait(handle)
    for task_dir in mini.iterdir():
        if task_dir.is_dir():
            shutil.copytree(task_dir, out / task_dir.name, symlinks=True, dirs_exist_ok=True)
    return out


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
