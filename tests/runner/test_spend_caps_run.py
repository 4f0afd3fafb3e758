"""``marathon run --max-spend`` end to end: real harbor, Docker, the staged codex driving two real arms
through the run's gateway, the scripted model as its upstream, priced by ``--price``.

The run's cap ($0.05) is passed by the first model call of the first attempt (each call is at least
50 input and 20 output tokens at $1000 per million): under ``--on-cap stop`` the gateway refuses that
attempt's next call (402), the runner stops it, records the cut and voids it (the voiding table's
``spend_cap_stopped`` row: nothing of it is scored), starts nothing more and exits paused (5). A
resume with a higher cap reruns it, and every pair is done exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from runner_support import DEMO_TASKS, done_jobs, events, run_marathon, start_marathon

from runner.results import ledger as L
from runner.results.caps import cut_of, read_caps
from runner.results.tree import iter_job_dirs, voided_root
from runner.schedule.breaker import EXIT_PAUSED, last_pause

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = "calc-partial"
ARMS = ("plain", "goal")
KEY = "MARATHON_CAPS_TEST_KEY"
PRICE = "scripted/solve=1000,1000,1000"


@pytest.mark.timeout(1800)
def test_a_run_cap_reached_mid_attempt_stops_voids_pauses_and_a_higher_cap_resumes(docker_engine, out_tree):
    out = out_tree
    common = ["--ak", f"api_key_var={KEY}", "--plain", "--price", PRICE]
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", TASK, "--arms", ",".join(ARMS),
        "--model", "scripted/solve", "--concurrency", "1", "--max-spend", "0.05", "--on-cap", "stop",
        *common, timeout=900, **{KEY: "sk-caps-test-not-a-secret"},
    )  # fmt: skip
    log = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == EXIT_PAUSED, log
    (start,) = events(out, "job_start")  # the first attempt, and nothing started after the cap
    (cap,) = events(out, "spend_cap")
    assert cap["scope"] == "run" and cap["on_cap"] == "stop" and cap["cap_usd"] == 0.05
    assert cap["spent_usd"] >= 0.05 and [x["stamp"] for x in cap["running"]] == [start["stamp"]]
    (paused,) = events(out, "run_paused")
    assert paused["cause"] == "spend cap" and "spend cap of the run reached" in paused["reason"], paused
    assert last_pause(out) == paused["reason"]
    # the cut attempt: recorded, voided by the table's row, nothing of it scored
    assert cut_of(out, TASK, start["arm"], start["stamp"]).startswith("stopped at the spend cap of the run")
    (void,) = events(out, "void")
    assert void["stamp"] == start["stamp"] and "spend cap" in void["reason"], void
    assert list(iter_job_dirs(out)) == [] and len(list(iter_job_dirs(voided_root(out)))) == 1
    # the wire: the attempt was forwarded its first call, and nothing was forwarded past the cap
    led = L.read_ledger(out, keep_calls=True)
    u = led.usage(TASK, start["arm"], start["stamp"])
    assert u is not None and u.forwarded >= 1, led.calls
    spent_at_cap = cap["spent_usd"]
    ok = sorted((c for c in led.calls if c.outcome == L.OK), key=lambda c: c.at)
    crossing = ok[0]  # one call passes $0.05; the gateway counts it before its answer's end is out
    later = [c for c in ok if c.at > crossing.at + (crossing.total_ms or 0) / 1000]
    assert later == [], later  # so no call of any attempt was forwarded after it
    assert set(u.refused) <= {L.SPEND_CAP_RUN, L.ENDED, L.GONE}, u.refused
    (exit_ev,) = events(out, "runner_exit")
    assert exit_ev["paused"] == paused["reason"]
    assert "sk-caps-test" not in (out / ".runner" / "events.jsonl").read_text()
    # status shows the spend against the cap
    s = run_marathon("status", str(out), "--json", timeout=300)
    st = json.loads(s.stdout)
    assert st["caps"]["run_usd"] == 0.05 and st["spend"]["cap_usd"] == 0.05
    assert st["spend"]["spent_usd"] >= spent_at_cap and st["spend"]["time_to_cap_sec"] == 0

    # the operator raises the cap: the resume reruns the voided attempt, every pair once
    r2 = run_marathon(
        "run", str(out), "--resume", "--max-spend", "1000", "--concurrency", "2", *common,
        timeout=900, **{KEY: "sk-caps-test-not-a-secret"},
    )  # fmt: skip
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-2000:]
    assert read_caps(out).run_usd == 1000.0 and read_caps(out).on_cap == "stop"  # the flag over .driver_env
    done = done_jobs(out)
    assert sorted(done) == sorted((TASK, a) for a in ARMS) and all(len(j) == 1 for j in done.values()), done
    assert len(events(out, "spend_cap")) == 1 and last_pause(out) is None


@pytest.mark.timeout(1800)
def test_an_arm_cap_under_finish_lets_running_attempts_finish_scored_and_holds_only_that_arm(
    docker_engine, out_tree, tmp_path
):
    """``--max-spend-arm`` with ``--on-cap finish``: each arm's first attempt passes its arm's cap with
    its first call and still finishes (scored: the gateway lets a started attempt go on); no second
    attempt of a capped arm starts; the run pauses when only capped arms' pairs are left, and a
    resume with a higher cap runs them, while the real console on the tree shows the spend move."""
    out = out_tree
    tasks = ("calc-partial", "two-stage")
    common = ["--ak", f"api_key_var={KEY}", "--plain", "--price", PRICE]
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", ",".join(tasks), "--arms", ",".join(ARMS),
        "--model", "scripted/solve", "--concurrency", "1", "--max-spend-arm", "0.05",
        *common, timeout=900, **{KEY: "sk-caps-test-not-a-secret"},
    )  # fmt: skip
    log = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == EXIT_PAUSED, log
    starts = events(out, "job_start")
    assert [(s["task"], s["arm"]) for s in starts] == [(tasks[0], a) for a in ARMS], log  # task-major
    caps = events(out, "spend_cap")
    assert [(c["scope"], c["arm"], c["on_cap"]) for c in caps] == [("arm", a, "finish") for a in ARMS]
    done = done_jobs(out)
    assert sorted(done) == [(tasks[0], a) for a in sorted(ARMS)], done  # finished and scored
    assert events(out, "void") == [] and read_caps(out).on_cap == "finish"
    (paused,) = events(out, "run_paused")
    assert paused["cause"] == "spend cap" and [c["arm"] for c in paused["caps"]] == list(ARMS), paused
    led = L.read_ledger(out, keep_calls=True)
    for s in starts:  # every call of the finishing attempts went through: none refused
        u = led.usage(s["task"], s["arm"], s["stamp"])
        assert u is not None and u.forwarded >= 2 and not u.refused, (s, u)

    # the resume, watched by the real console: its spend moves while the resumed trials stream
    # through the real gateway (the console opened first, its watcher set, then the runner started)
    log_path = tmp_path / "resume.log"
    seen: list[str] = []

    async def watch() -> None:
        from textual_screen import screen_text

        from console.app import make_app

        app = make_app(out, docker=False, offer_start=False)
        async with app.run_test(size=(200, 40)) as pilot:
            shown = time.time()
            await _until(pilot, lambda: (app.main.scanned_at or 0) > shown, 60, "the console's watcher")
            before = _total(app.main.summary)
            assert before is not None  # the first run's spend, on the ledger
            await _until(pilot, lambda: f"spend ${before:.2f}" in screen_text(app), 60, "the spend on screen")
            proc = start_marathon(
                "run", str(out), "--resume", "--max-spend-arm", "1000", *common, log=log_path,
                **{KEY: "sk-caps-test-not-a-secret"},
            )  # fmt: skip
            try:
                # the resumed run is the counting scope now: its first cell's spend appears while its
                # trial still streams (the runner is still running it)
                await _until(
                    pilot,
                    lambda: _spent(app.main.spend, tasks[1]) > 0 and _shows_arm(app, "plain"),
                    600,
                    "the new trial's spend on screen",
                )
                assert proc.poll() is None, log_path.read_text()[-2000:]
                seen.append(screen_text(app))
                await _until(pilot, lambda: proc.poll() is not None, 900, "the resumed run to end")
            finally:
                if proc.poll() is None:
                    proc.terminate()  # the runner this test started, by its handle
                    proc.wait(120)
            assert proc.returncode == 0, log_path.read_text()[-3000:]

    asyncio.run(watch())
    screen = seen[0]
    assert "spend $" in screen and "plain $" in screen, screen  # the top bar, per arm
    done = done_jobs(out)
    assert sorted(done) == sorted((t, a) for t in tasks for a in ARMS) and all(
        len(j) == 1 for j in done.values()
    )


def _shows_arm(app, arm: str) -> bool:
    """The screen shows ``arm``'s spend as the console's summary has it now (painted, not pending)."""
    from textual_screen import screen_text

    s = app.main.summary.get(arm)
    return (
        s is not None
        and s.ledger_spend_usd is not None
        and f"{arm} ${s.ledger_spend_usd:.2f}" in screen_text(app)
    )


def _spent(spend, task: str) -> float:
    """What the console shows ``task``'s cells cost on the ledger so far."""
    return sum(s.usd or 0.0 for (t, _a), s in spend.items() if t == task)


def _total(summary) -> float | None:
    """The console's run spend on the ledger (the arms' ledger spend summed), or None."""
    vals = [s.ledger_spend_usd for s in summary.values() if s.ledger_spend_usd is not None]
    return sum(vals) if vals else None


async def _until(pilot, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.2)
