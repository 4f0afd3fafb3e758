"""The end of the agent phase kills what the agent left running, and only that (agents.leftovers).

Real processes in a private PID namespace this test makes (``unshare --pid``, as the trial
container's namespace is): its init and a pre-existing process stand for what the environment
started; a ``setsid``'d loop (the hostile test's metrics forger) and a process that keeps forking
stand for what the agent left. The scripts run inside the namespace (``nsenter``), never on the host.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import subprocess
import time

import psutil
import pytest

from agents import leftovers
from agents.loopx_profile import ExecResult

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare")


@pytest.fixture
def namespace():
    """The host PID of a private PID namespace's init (``sleep``), with one more process in it."""
    holder = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            "sleep 600 & exec sleep 600",
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            kids = psutil.Process(holder.pid).children()
            if kids and len(kids[0].children()) == 1 and kids[0].name() == "sleep":
                break
            assert time.monotonic() < deadline, "the namespace did not start"
            time.sleep(0.05)
        yield kids[0].pid
    finally:
        holder.kill()  # our child, by its handle; --kill-child ends the namespace with it
        holder.wait(timeout=30)


def exec_in(init: int):
    async def run(command, env=None, user=None, timeout_sec=None):
        p = await asyncio.create_subprocess_exec(
            "nsenter", "--target", str(init), "--pid", "--mount", "sh", "-c", command,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(p.communicate(), timeout_sec)
        return ExecResult(p.returncode, out.decode(), err.decode())

    return run


def test_the_sweep_kills_what_started_after_the_snapshot_and_spares_the_rest(namespace):
    run = exec_in(namespace)
    before = asyncio.run(leftovers.snapshot(run))
    assert before is not None and len(before) == 2  # init and the pre-existing sleep
    assert any(i.startswith("1:") for i in before)
    left = (
        "setsid sh -c 'while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 & "
        "sh -c 'while :; do sleep 30 & sleep 0.01; done' </dev/null >/dev/null 2>&1 & "
        "sleep 0.5; echo started"
    )
    assert asyncio.run(run(left, None, "root", 30)).stdout.strip() == "started"
    during = asyncio.run(leftovers.snapshot(run))
    assert before < during and len(during - before) >= 4  # both loops and their children

    rec = asyncio.run(leftovers.end_leftovers(run, before))
    assert rec["ended"] >= 4 and "incomplete" not in rec, rec
    time.sleep(0.5)  # a loop that survived would have forked again by now
    assert asyncio.run(leftovers.snapshot(run)) == before


def test_records_name_processes_by_pid_and_start_time():
    """Identity is PID and start time: the same PID with another start time is a new process."""
    assert leftovers.parse_listing("1:100\n7:200\njunk\n8:\n") == frozenset({"1:100", "7:200"})
    assert "7:200" in leftovers.sweep_command(frozenset({"7:200"}))
    assert leftovers.parse_sweep("ended 4\nleft 0\n") == (4, 0)
    assert leftovers.parse_sweep("garbage") == (0, -1)
    assert leftovers.sweep_record(0, "ended 2\nleft 0\n") == {"rule": leftovers.RULE, "ended": 2}
    assert "incomplete" in leftovers.sweep_record(0, "ended 2\nleft 1\n")
    assert "incomplete" in leftovers.sweep_record(137, "")


def test_the_sweep_spares_its_own_wrappers(namespace):
    """An environment's exec may wrap the command (``timeout``, ``sh -c``): the sweep's ancestors in
    the sandbox are new processes too, and must not be killed under it."""
    run = exec_in(namespace)
    before = asyncio.run(leftovers.snapshot(run))

    async def wrapped(command, env=None, user=None, timeout_sec=None):
        inner = "sh -c " + shlex.quote(command)
        return await run(f"timeout 60 {inner}; echo wrapper-alive", env, user, timeout_sec)

    r = asyncio.run(wrapped(leftovers.sweep_command(before), None, "root", 60))
    assert r.stdout.strip().splitlines()[-1] == "wrapper-alive", r.stdout
    assert leftovers.sweep_record(r.return_code, r.stdout) == {"rule": leftovers.RULE, "ended": 0}
