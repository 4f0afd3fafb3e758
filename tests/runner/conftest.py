"""Fixtures for the runner tests (real harbor, real Docker, the bundled mini-benchmark)."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import five_arm_run as five
import pytest
from runner_support import remove_objects_of


@contextmanager
def _fresh_out():
    """A fresh output dir (and room for its voided sibling); its trials' Docker objects removed after."""
    base = Path(tempfile.mkdtemp(prefix="mrun-"))
    out = base / "out"
    try:
        yield out
    finally:
        remove_objects_of(out)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def out_tree():
    """A fresh output dir per test."""
    with _fresh_out() as out:
        yield out


@pytest.fixture(scope="module")
def module_out():
    """Like out_tree, shared by the tests of one module (one real run, several assertions)."""
    with _fresh_out() as out:
        yield out


@pytest.fixture(scope="session")
def five_arm_run(docker_engine):
    """The shared five-arm deadline run with a canary credential (tests/runner/five_arm_run.py),
    read by the equal-budget and the leak tests."""
    with _fresh_out() as out:
        yield five.make(out.parent)
