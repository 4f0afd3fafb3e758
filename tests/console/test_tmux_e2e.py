"""End to end in a real terminal: tmux drives `marathon console` like an operator over ssh would.

A private tmux server (-L) with a fixed window size; keys go in with send-keys, the screen comes
back with capture-pane. Attach to a live runner, drill down, kill; nothing of the run is left in
Docker. Then the runner must outlive the console: quitting it, and closing its terminal.
"""

from __future__ import annotations

import shutil
import time

import psutil
import pytest
from console_support import Tmux, docker_leftovers, marathon, runner_pid, write_config

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]


@pytest.fixture
def tmux():
    made: list[Tmux] = []

    def make(name: str) -> Tmux:
        t = Tmux(name)
        made.append(t)
        return t

    yield make
    for t in made:
        t.kill_server()


def _start_runner(out) -> int:
    r = marathon("run", str(out), "--resume", "--detach", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    pid = runner_pid(out)
    assert pid is not None
    return pid


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


def test_attach_drill_down_and_kill_in_tmux(docker_engine, fresh_out, tmux):
    out = fresh_out
    write_config(out, arms="oracle,nop", concurrency=1)  # 8 jobs one at a time: still running at K
    pid = _start_runner(out)
    t = tmux("attach")
    t.start(out)
    t.wait_for("alive", 60)
    assert f"pid {pid}" in t.screen()
    t.wait_for("build-gate", 120)  # the grid shows the first pair
    t.keys("Enter")
    t.wait_for("test-stdout", 30)  # drill-down: the trial's files
    t.keys("Escape")
    t.wait_for("Kill", 30)  # back on the grid (footer)
    # wait for a trial container so that the kill has Docker objects to remove
    from runner.ops.cleanup import plan_cleanup

    deadline = time.monotonic() + 180
    while not plan_cleanup(out).containers and time.monotonic() < deadline:
        time.sleep(1)
    t.keys("K")
    plan = t.wait_for("Cancel", 60)
    assert "Kill" in plan and str(pid) in plan
    t.keys("y")
    t.wait_for(": done", 240)
    assert _gone(pid, 10)
    assert docker_leftovers(out) == []
    t.keys("Enter")
    t.keys("q")


def test_runner_outlives_console_quit_and_closed_terminal(docker_engine, fresh_out, tmux):
    out = fresh_out
    write_config(out, "calc-partial", "words-passrate", "two-stage", arms="oracle,nop", concurrency=1)
    pid = _start_runner(out)
    first = tmux("quit")
    console_pid = first.start(out)
    first.wait_for("alive", 60)
    first.keys("q")
    assert _gone(console_pid, 15), "console did not quit"
    assert psutil.pid_exists(pid) and runner_pid(out) == pid, "runner died with the console"

    second = tmux("hangup")
    console_pid = second.start(out)
    second.wait_for("alive", 60)
    proc = psutil.Process(console_pid)
    second.run("kill-session", "-t", second.session)  # the terminal goes away (SIGHUP)
    assert _gone(console_pid, 10), (
        f"console still there after its terminal closed: {proc.status()} cpu {proc.cpu_percent(1.0)}%"
    )
    time.sleep(2)
    assert runner_pid(out) == pid, "runner died when the console's terminal closed"
