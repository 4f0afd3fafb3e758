"""Helpers for the safety tests (imported by conftest and the test modules)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "marathon-base:bookworm"
REQUIRE_DOCKER = os.environ.get("CI") == "true" or os.environ.get("MARATHON_REQUIRE_DOCKER") == "1"


def marathon(*args: str, env: dict | None = None, timeout: float = 120, prefix: list[str] | None = None):
    """Run the real CLI as a subprocess (``python -m marathon.cli``)."""
    cmd = [*(prefix or []), sys.executable, "-m", "marathon.cli", *args]
    return subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def need(cond: bool, why: str) -> None:
    if cond:
        return
    if REQUIRE_DOCKER:
        pytest.fail(why)
    pytest.skip(why)


def make_tree(
    root: Path, trials: dict[tuple[str, str], list[str]], stamp: str = "2026-01-01__00-00-00"
) -> Path:
    """An output tree with job dirs and trial dirs holding harbor's trial config.json (what makes
    a dir a trial): {(task, arm): [trial names]}."""
    for (task, arm), names in trials.items():
        job = root / task / arm / stamp / arm
        for n in names:
            write_trial_config(job / n)
    return root


def write_trial_config(trial_dir: Path) -> Path:
    """What harbor's Trial.run writes first into a trial dir (the fields that matter here)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"task": {"path": "/tasks/x"}, "trial_name": trial_dir.name, "trials_dir": str(trial_dir.parent)}
    (trial_dir / "config.json").write_text(json.dumps(cfg, indent=4))
    return trial_dir
