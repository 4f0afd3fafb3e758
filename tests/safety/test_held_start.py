"""A job's program runs only once its identity is on record (runner.ops.held), with real processes.

The CI failure it answers: the runner was killed between starting a ``harbor run`` and recording
its PID; the restarted runner started the pair again and both finished done.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from runner.ops.held import NOT_RELEASED, start_held
from runner.ops.procs import alive, identity_of

REPO = Path(__file__).resolve().parents[2]


def _gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")


def test_a_starter_killed_before_the_release_never_runs_the_program(tmp_path):
    marker = tmp_path / "ran"
    starter = textwrap.dedent(f"""
        import os, signal, subprocess
        from runner.ops.held import start_held
        held = start_held(["sh", "-c", "echo ran > {marker}"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, cwd="/", env=dict(os.environ))
        print(held.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # this starter only: the runner dying before it records
    """)
    p = subprocess.run([sys.executable, "-c", starter], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == -9, p.stderr
    gate = int(p.stdout.split()[0])
    _gone(gate)  # it read EOF and exited (reparented, reaped by init)
    assert not marker.exists()


def test_a_released_program_keeps_the_recorded_identity(tmp_path):
    marker, go = tmp_path / "ran", tmp_path / "go"
    # the program runs until the test says go: checked while it surely runs, never after it exited
    program = f"while [ ! -e {go} ]; do sleep 0.05; done; echo ran > {marker}"
    held = start_held(
        ["sh", "-c", program],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env=dict(os.environ),
    )
    recorded = identity_of(held.pid)
    time.sleep(0.2)
    assert not marker.exists() and held.proc.poll() is None  # held: waiting for the word
    held.release()
    deadline = time.monotonic() + 30
    while psutil.Process(held.pid).name() != "sh":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert alive(recorded)  # exec kept PID and start ticks: the record names the program
    go.touch()
    assert held.proc.wait(timeout=30) == 0
    assert marker.read_text() == "ran\n"


def test_an_aborted_start_exits_without_running_and_a_missing_program_raises(tmp_path):
    marker = tmp_path / "ran"
    held = start_held(
        ["sh", "-c", f"echo ran > {marker}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd="/", env=dict(os.environ),
    )  # fmt: skip
    held.abort()
    assert held.proc.wait(timeout=30) == NOT_RELEASED
    assert not marker.exists()
    with pytest.raises(FileNotFoundError, match="no executable 'no-such-program-x'"):
        start_held(["no-such-program-x"], stdout=None, stderr=None, cwd="/", env=dict(os.environ))
