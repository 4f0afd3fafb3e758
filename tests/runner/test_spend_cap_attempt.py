"""``marathon run --max-spend-attempt`` end to end: the five real arms (real harbor, Docker, the staged
codex, LoopX) at once on calc-partial, the scripted ``never-finish`` model as the run's gateway's
upstream, priced by ``--price`` ($1 per million tokens: a call costs about a hundredth of the cap).

The attempt's cap is a budget like the time budget: each arm's attempt keeps calling until the call
that passes its cap; the gateway counts that call while its answer streams, writes the attempt's cut
record and refuses whatever comes after; the agent's host side sees the record and ends the phase as
at the deadline (the stop file, the driver's wind-down). Every attempt is then scored by the verifier
(never voided, the run not paused), its receipt says ``spend_cap_attempt`` with the figures, the
report marks its cell, and the five attempts ended at the same spend within one call's cost. The
time budget (120 s) is far from reached: the cap ends each attempt after a few dozen seconds of calls.
"""

from __future__ import annotations

import json

import pytest
from runner_support import DEMO_TASKS, done_jobs, events, run_marathon

from modes.profiles import DEFAULT_ARMS
from runner.results import caps as C
from runner.results import ledger as L
from runner.results.tree import iter_job_dirs, voided_root

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = "calc-partial"
MODEL = "scripted/never-finish"
PRICE = f"{MODEL}=1,1,1"  # USD per million: a call of a few thousand tokens costs well under a cent
CAP = 0.05
KEY = "MARATHON_CAP_ATTEMPT_TEST_KEY"


def _cost(call: L.Call) -> float:
    """One call priced as the gateway prices it (the run's ``--price``)."""
    one = L.AttemptUsage()
    one.add(call)
    c = C.Caps(prices=(PRICE,), model=MODEL).pricer().cost(one)
    assert c is not None and c.usd is not None, call
    return c.usd


@pytest.mark.timeout(1800)
def test_an_attempts_own_cap_ends_all_five_arms_at_the_same_spend_scored_like_a_deadline(
    docker_engine, out_tree
):
    from agents.loopx_staging import stage_loopx
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    out = out_tree
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", TASK, "--arms", ",".join(DEFAULT_ARMS),
        "--model", MODEL, "--model-key-var", KEY, "--price", PRICE, "--max-spend-attempt", str(CAP),
        "--goal-timeout-sec", "120", "--concurrency", "5", "--plain",
        timeout=1500, **{KEY: "sk-cap-attempt-test-not-a-secret"},
    )  # fmt: skip
    log = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, log  # nothing paused: the attempt's cap is a budget, not the purse
    assert events(out, "spend_cap") == [] and events(out, "void") == [], log
    assert list(iter_job_dirs(voided_root(out))) == []
    done = done_jobs(out)
    assert sorted(done) == sorted((TASK, a) for a in DEFAULT_ARMS) and all(
        len(j) == 1 for j in done.values()
    ), log
    cuts = C.attempt_cuts(out)
    led = L.read_ledger(out, keep_calls=True)
    spent: dict[str, float] = {}
    one_call: list[float] = []
    for (_t, arm), (job,) in done.items():
        (trial,) = [p for p in job.iterdir() if (p / "agent" / "goal_receipt.json").is_file()]
        stamp = job.parent.name
        receipt = json.loads((trial / "agent" / "goal_receipt.json").read_text())
        # the receipt names the cap: the host ended the phase at it, not at the deadline
        assert receipt["stop_reason"] == "spend_cap_attempt" and receipt["deadline_hit"] is False, (
            arm,
            receipt,
        )
        assert receipt["extra"]["spend_cap"]["cap_usd"] == CAP, (arm, receipt["extra"])
        assert "spend cap of the attempt reached" in receipt["extra"]["spend_cap"]["text"]
        # the host stopped the driver at the gateway's record, or codex met the refusal first and
        # the driver's failure was read as the cut (the record was there before the refused call)
        stopped = any("spend cap of the attempt" in a for a in receipt["transport"]["host_actions"])
        at_end = receipt["extra"].get("errors_at_end", [])
        assert stopped or any(L.SPEND_CAP_ATTEMPT in e for e in at_end), receipt
        # the refusals codex met before it stopped are the cap, never the arm's error events (they
        # were 4, 2, 2, 4 and 0 for the five arms of one run, by when each harness stopped codex)
        assert receipt["errors"] == [], (arm, receipt["errors"])
        # scored like a deadline: the verifier ran on what exists, no exception
        result = json.loads((trial / "result.json").read_text())
        assert result.get("exception_info") is None and result.get("verifier_result"), (arm, result)
        # the wire: the gateway's cut record, and nothing forwarded after it
        cut = cuts[(TASK, arm, stamp)]
        assert cut["cap_usd"] == CAP and cut["spent_usd"] >= CAP, cut
        calls = sorted((c for c in led.calls if c.key == (TASK, arm, stamp)), key=lambda c: c.at)
        ok = [c for c in calls if c.outcome == L.OK]
        assert ok and all(c.at < cut["at"] for c in ok), (arm, [c.at for c in ok], cut["at"])
        assert {c.refused for c in calls if c.outcome == L.REFUSED} <= {L.SPEND_CAP_ATTEMPT, L.ENDED, L.GONE}
        spent[arm] = sum(_cost(c) for c in ok)
        one_call.append(max(_cost(c) for c in ok))
        # the last forwarded call passed the cap: without it the attempt was under
        assert spent[arm] >= CAP > spent[arm] - _cost(ok[-1]), (arm, spent[arm], _cost(ok[-1]))
        assert len(ok) >= 3, (arm, len(ok))  # the cap, not the first call, ended it
    # the five ended at the same spend, within one call's cost
    assert max(spent.values()) - min(spent.values()) <= max(one_call), spent
    rep = run_marathon("report", str(out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    cells = json.loads(rep.stdout)["cells"][TASK]
    assert all(cells[a]["spend_capped"] is True and cells[a]["status"] == "done" for a in DEFAULT_ARMS), cells
    assert all(cells[a]["partial"] is not None for a in DEFAULT_ARMS), cells
