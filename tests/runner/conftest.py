"""Fixtures for the runner tests (real harbor, real Docker, the bundled mini-benchmark)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from runner_support import remove_objects_of


@pytest.fixture
def out_tree():
    """A fresh output dir (and its voided sibling), with every Docker object of its trials removed after."""
    base = Path(tempfile.mkdtemp(prefix="mrun-"))
    out = base / "out"
    try:
        yield out
    finally:
        remove_objects_of(out)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def module_out():
    """Like out_tree, shared by the tests of one module (one real run, several assertions)."""
    base = Path(tempfile.mkdtemp(prefix="mrun-"))
    out = base / "out"
    try:
        yield out
    finally:
        remove_objects_of(out)
        shutil.rmtree(base, ignore_errors=True)
