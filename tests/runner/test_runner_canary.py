"""The canary proves the timeout path: an arm whose budget runs out is scored and not errored; an
arm whose timeout escapes as an exception (the field's split-class bug) fails the canary."""

from __future__ import annotations

import pytest
from runner_support import AGENTS, run_marathon

pytestmark = [pytest.mark.docker]


def test_canary_scores_exhausted_budget_and_fails_an_escaping_timeout(docker_engine, out_tree):
    arms = f"oracle,sleeper={AGENTS}:GoalSleeperAgent,crash=tests.harbor_agents:CrashAgent"
    r = run_marathon(
        "canary", str(out_tree), "--arms", arms, "--task", "calc-partial", "--goal-timeout-sec", "8"
    )
    assert r.returncode == 1, r.stdout + r.stderr
    lines = {
        ln.split()[0]: ln
        for ln in r.stdout.splitlines()
        if ln.split() and ln.split()[0] in ("oracle", "sleeper", "crash")
    }
    assert "budget exhausted, scored" in lines["sleeper"] and "0.2" in lines["sleeper"]  # nop-like partial
    assert "finished before the deadline" in lines["oracle"]
    assert "FAILED: errored" in lines["crash"] and "RuntimeError" in lines["crash"]
    assert "canary FAILED: 2/3 arms scored without error; timeout path exercised by 1" in r.stdout
