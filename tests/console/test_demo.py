"""`marathon demo`, the README's main job: headless it runs and reports; on a terminal it opens the
console on a runner that is not the console's child and keeps running after the console quits.

Stand-in arms (oracle, nop) keep these short; the five real arms are covered by the arms' tests.
"""

from __future__ import annotations

import json
import os
import shutil

import psutil
import pytest
from console_support import Tmux, docker_leftovers, marathon, runner_pid, stop_runner_if_alive

pytestmark = [pytest.mark.docker]


def test_demo_headless_runs_every_pair_and_prints_the_status(tmp_path, docker_engine):
    out = tmp_path / "out"
    r = marathon("demo", "--headless", "--arms", "oracle,nop", "--out", str(out), timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "8/8 pairs done" in r.stdout
    report = json.loads(marathon("report", str(out), "--format", "json").stdout)
    assert {report["cells"][t]["oracle"]["reward"] for t in report["tasks"]} == {1.0}
    assert report["cells"]["build-gate"]["nop"]["build_failed"] is True
    assert docker_leftovers(out) == []


def test_demo_tasks_runs_the_named_tasks_and_refuses_an_unknown_one(tmp_path, docker_engine):
    """``--tasks`` (a shorter demo; the resume test's two tasks): an unknown name is one line, exit 2,
    nothing written; the named ones are the run's whole grid."""
    out = tmp_path / "out"
    r = marathon("demo", "--headless", "--arms", "oracle", "--tasks", "calc-partial,nope", "--out", str(out))
    assert r.returncode == 2 and "unknown task(s)" in r.stderr and "nope" in r.stderr, r.stdout + r.stderr
    assert not out.exists()
    r = marathon(
        "demo", "--headless", "--arms", "oracle", "--tasks", "words-passrate", "--out", str(out), timeout=900
    )
    assert r.returncode == 0 and "1/1 pairs done" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(marathon("report", str(out), "--format", "json").stdout)["tasks"] == ["words-passrate"]
    assert docker_leftovers(out) == []


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_demo_on_a_terminal_opens_the_console_and_the_run_outlives_it(tmp_path, docker_engine):
    out = tmp_path / "out"
    term = Tmux("demo")
    try:
        pane_pid = term.start(out, cols=110, rows=30, command=f"demo --arms oracle,nop --out {out}")
        term.wait_for("runner ● alive", timeout=180)
        pid = runner_pid(out)
        assert pid is not None
        runner = psutil.Process(pid)
        pane = psutil.Process(pane_pid)
        # never the console's child: its own session, outside the terminal's process tree
        assert pid not in {p.pid for p in pane.children(recursive=True)}
        assert os.getsid(pid) == pid
        term.keys("q")
        pane.wait(timeout=60)  # the demo (console) process exits, and with it the terminal
        assert runner.is_running() and runner.status() != psutil.STATUS_ZOMBIE
        assert runner_pid(out) == pid
    finally:
        term.kill_server()
        stop_runner_if_alive(out)
    assert docker_leftovers(out) == []
