"""The model gateway killed in the middle of a real run: the runner restarts it, and the attempt it
failed is neither lost nor scored: voided by the voiding table's ``gateway_failed`` row and run again.

``marathon run`` of the plain arm on calc-partial (real harbor, Docker, codex; the scripted
``never-finish`` model through the gateway, a 10 s budget; the key is the demo's declared
placeholder, by name). Once the attempt's first model call is on the ledger, the test sends SIGKILL
to the gateway the runner started (its registered identity). The runner must find it dead and start another (``gateway_restart``), record the outage with the live
attempt, void that attempt when it ends (whatever it scored) and run the pair again in its second
pass, on the new gateway, to a scored end.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from runner_support import DEMO_TASKS, done_jobs, events, start_marathon, wait_for

from marathon.commands.demo import DEMO_KEY_VAR
from runner.ops.gateway import process
from runner.results import ledger as L
from runner.results.tree import voided_root

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASK = "calc-partial"
BUDGET = 10


@pytest.fixture(scope="module")
def killed_run(module_out, docker_engine):
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    ensure_demo_image()
    out = module_out
    log = out.parent / "runner.console.log"
    proc = start_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", TASK, "--arms", "plain",
        "--model", "scripted/never-finish", "--goal-timeout-sec", str(BUDGET), "--max-passes", "2",
        "--concurrency", "1", "--model-key-var", DEMO_KEY_VAR, "--plain", log=log,
    )  # fmt: skip
    try:
        # the attempt works through the gateway: its first model call is on the ledger
        wait_for(
            lambda: (
                proc.poll() is not None
                or sum(1 for c in L.read_ledger(out, keep_calls=True).calls if c.forwarded) >= 1
            ),
            900,
            "model calls",
        )
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]  # the runner still runs
        st = process.running(out)
        assert st is not None
        first = st.pid
        os.kill(st.ident.pid, signal.SIGKILL)  # the gateway our runner started, by its registered pid
        rc = proc.wait(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.terminate()  # the runner this test started
            proc.wait(120)
    return out, rc, first, log.read_text(errors="replace")


def test_the_runner_restarts_a_killed_gateway_and_records_the_outage(killed_run):
    out, rc, first, console = killed_run
    assert rc == 0, console[-3000:]
    (restart,) = events(out, "gateway_restart")
    assert restart["pid"] != first
    (outage,) = L.read_outages(out)
    assert outage.by == "runner" and len(outage.attempts) == 1
    ((task, arm, stamp),) = outage.attempts
    assert (task, arm) == (TASK, "plain")
    starts = [r for r in L.read_ledger(out).gateways if r.get("kind") == L.GATEWAY_START]
    assert len({r["gateway"] for r in starts}) >= 2 and {r["pid"] for r in starts} >= {first, restart["pid"]}


def test_the_attempt_the_gateway_failed_is_voided_and_the_pair_is_done_on_the_next(killed_run):
    out, _rc, _first, console = killed_run
    ((_t, _a, failed),) = L.read_outages(out)[0].attempts
    voided = voided_root(out) / TASK / "plain" / failed
    assert (voided / "void.json").is_file(), console[-3000:]
    why = json.loads((voided / "void.json").read_text())["reason"]
    assert "model gateway failed" in why, why
    (job,) = done_jobs(out)[(TASK, "plain")]
    assert job.parent.name != failed  # the pair is scored by its second attempt, never by the failed one
    led = L.read_ledger(out)
    u = led.usage(TASK, "plain", job.parent.name)
    assert u is not None and u.forwarded > 0
    assert not [o for o in L.read_outages(out) if (TASK, "plain", job.parent.name) in o.attempts]
    finish = [e for e in events(out, "job_finish") if e["stamp"] == failed]
    assert finish and finish[0]["status"] == "void", finish
