"""Equal budgets: harbor's agent timeout is raised to hold GOAL_TIMEOUT_SEC of model time plus the
preparation, the same for every arm of a task (stand-ins keep the knob); the codex binary's sha256
is computed once per file version. The Docker half (five real arms, one deadline) is
tests/runner/test_equal_budgets.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from agents.staging import file_sha256
from modes.budget import MAX_MARGIN_SEC, PREP_ALLOWANCE_SEC, agent_timeout_multiplier, deadline_margin_sec
from modes.profiles import DEFAULT_ARMS
from runner.schedule.config import agent_timeout_mult, resolve
from runner.schedule.harbor_run import harbor_argv
from runner.schedule.health import _task_budget_sec

REPO = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO / "runner" / "demo" / "tasks"


def _mult(argv: list[str]) -> float:
    return float(argv[argv.index("--agent-timeout-multiplier") + 1])


@pytest.mark.parametrize("goal", [25, 120, 5340])
def test_harbor_timeout_holds_the_budget_the_allowance_and_the_margin_for_every_arm(tmp_path, goal):
    flags = {"tasks_dir": str(DEMO_TASKS), "arms": [*DEFAULT_ARMS, "nop"], "goal_timeout_sec": goal}
    cfg = resolve(tmp_path / "out", flags, environ={})
    mults = {a.name: _mult(harbor_argv(cfg, "calc-partial", a, tmp_path / "j")) for a in cfg.arm_specs()}
    real = {mults[a] for a in DEFAULT_ARMS}
    assert len(real) == 1  # the same harbor timeout for the five arms
    harbor_sec = 120.0 * real.pop()  # calc-partial's task.toml: agent timeout_sec = 120
    # what the arm computes at its budget start (agents.base_codex._start_budget): never a clamp
    assert harbor_sec - deadline_margin_sec(harbor_sec) - PREP_ALLOWANCE_SEC >= goal
    assert mults["nop"] == 1.0  # a stand-in keeps the knob
    assert _task_budget_sec(cfg, "calc-partial") >= harbor_sec


def test_a_task_timeout_that_already_holds_the_budget_keeps_the_knob(tmp_path):
    assert agent_timeout_multiplier(5340, 21600, 1.0) == 1.0
    assert agent_timeout_multiplier(5340, None, 1.5) == 1.5  # no harbor timeout at all
    need = 5340 + PREP_ALLOWANCE_SEC + MAX_MARGIN_SEC
    assert agent_timeout_multiplier(5340, 5400, 1.0) * 5400 >= need
    cfg = resolve(tmp_path / "out", {"tasks_dir": str(DEMO_TASKS), "goal_timeout_sec": 25}, environ={})
    spec = cfg.arm_specs()[0]
    assert agent_timeout_mult(cfg, "no-such-task", spec) == 1.0  # unreadable task.toml: the knob


def test_codex_sha256_is_hashed_once_per_file_version(tmp_path):
    f = tmp_path / "codex"
    f.write_bytes(b"\x7fELF" + os.urandom(1 << 16))
    cache = tmp_path / "cache"
    assert file_sha256(f, cache) == hashlib.sha256(f.read_bytes()).hexdigest()
    (entry,) = (cache / "sha256").iterdir()
    # the cached value is what the next trial gets (no rehash) while size and mtime stay ...
    known = json.loads(entry.read_text())
    entry.write_text(json.dumps({**known, "sha256": "cached"}))
    assert file_sha256(f, cache) == "cached"
    # ... and a re-staged file (new size) is hashed anew
    f.write_bytes(b"\x7fELF" + os.urandom(100))
    assert file_sha256(f, cache) == hashlib.sha256(f.read_bytes()).hexdigest()
