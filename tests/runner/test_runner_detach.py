"""--detach: the runner starts in its own session with stdin from /dev/null and its output in
OUT/.runner/runner.log, so a terminal or ssh hang-up cannot reach it; it runs to the end."""

from __future__ import annotations

import os

import pytest
from runner_support import DEMO_TASKS, events, run_marathon, wait_for

from runner.lock import lock_holder

pytestmark = [pytest.mark.docker]


def test_detach_runs_in_own_session_and_finishes(docker_engine, out_tree):
    r = run_marathon(
        "run", str(out_tree), "--tasks-dir", str(DEMO_TASKS), "--tasks", "words-passrate", "--arms", "nop",
        "--detach", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(r.stdout.split("PID ")[1].split()[0])
    h = lock_holder(out_tree)
    assert h is not None and h.pid == pid
    assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own: no controlling terminal of ours
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(out_tree.resolve() / ".runner" / "runner.log")
    wait_for(lambda: events(out_tree, "runner_exit"), 300, "the detached runner to finish")
    assert events(out_tree, "runner_exit")[-1]["done"] == 1
    assert "runner exit: all pairs done" in (out_tree / ".runner" / "runner.log").read_text()
