"""Spend caps (runner.results.caps) as pure logic over a ledger written by the gateway's own writer:
the tally equals a hand computation and follows the ledger incrementally; which cap is reached and
which call the gateway refuses under ``finish`` and ``stop``; a call counted from the moment its
usage is seen is not counted twice when its ledger line arrives; a caps record an agent could not
write but a person might break reads as no caps (never a zero cap); the flags' bad values and a cap
without a price are one-line errors before anything starts."""

from __future__ import annotations

import json
import math

import pytest

from runner.errors import UserError
from runner.ops.gateway.server import LedgerWriter
from runner.results import caps as C
from runner.results import ledger as L
from runner.results.prices import parse_price
from runner.results.tree import ledger_path
from runner.schedule.config import RunConfig, resolve

PRICE = "m=2,1,8"  # USD per million: input 2, cached 1, output 8
RATE = parse_price(PRICE).rates()


def usd(inp: int, cached: int, out: int) -> float:
    return (inp - cached) * RATE.input + cached * RATE.cached + out * RATE.output


def row(arm: str, stamp: str, n: int, inp: int, cached: int, out: int, host: str | None = None) -> dict:
    return {
        "kind": L.CALL, "v": L.SCHEMA, "at": 1000.0 + n, "attempt": f"a-{arm}-{stamp}", "task": "t1",
        "arm": arm, "stamp": stamp, "host": host, "outcome": L.OK, "status": 200,
        "request_id": f"a-{arm}-{stamp}.{n}", "params": {"model": "m"},
        "usage": {"input": inp, "cached": cached, "output": out, "reasoning": 0},
    }  # fmt: skip


def write(out, rows, host=None):
    w = LedgerWriter(ledger_path(out, host))
    for r in rows:
        w.write(r)
    w.close()


def test_the_tally_is_the_ledger_priced_per_arm_and_run_and_reads_only_new_lines(tmp_path):
    out = tmp_path
    caps = C.Caps(run_usd=1.0, arm_usd=0.6, prices=(PRICE,), model="m")
    write(out, [row("plain", "s1", 1, 100_000, 20_000, 10_000), row("goal", "s2", 2, 50_000, 0, 5_000)])
    # a second host's gateway writes its own file: both count
    write(out, [row("plain", "s3", 3, 30_000, 0, 1_000, host="node-b")], host="node-b")
    t = C.Tally(out, caps.pricer())
    t.update()
    plain = usd(100_000, 20_000, 10_000) + usd(30_000, 0, 1_000)
    goal = usd(50_000, 0, 5_000)
    assert math.isclose(t.arm("plain"), plain) and math.isclose(t.arm("goal"), goal)
    assert math.isclose(t.run, plain + goal)
    assert t.reached(caps, ["plain", "goal"]) == []  # $0.328 and $0.14: under both
    write(out, [row("plain", "s1", 4, 200_000, 0, 0)])  # +$0.40 for plain: $0.728
    t.update()
    (r,) = t.reached(caps, ["plain", "goal"])
    assert (r.scope, r.arm, r.cap, r.code) == (C.ARM, "plain", 0.6, L.SPEND_CAP_ARM)
    assert math.isclose(r.spent, plain + 0.4) and "arm plain" in r.text() and "cap $0.60" in r.text()
    write(out, [row("goal", "s2", 5, 250_000, 0, 0)])  # +$0.50 for goal ($0.64): the run passes $1
    t.update()
    scopes = [(x.scope, x.arm) for x in t.reached(caps, ["plain", "goal"])]
    assert scopes == [(C.RUN, None), (C.ARM, "plain"), (C.ARM, "goal")]


def test_which_call_is_refused_under_finish_and_stop(tmp_path):
    write(tmp_path, [row("plain", "s1", 1, 500_000, 0, 0)])  # $1.00
    t = C.Tally(tmp_path, C.Caps(prices=(PRICE,), model="m").pricer())
    t.update()
    finish = C.Caps(run_usd=1.0, prices=(PRICE,), model="m")
    stop = C.Caps(run_usd=1.0, on_cap=C.STOP, prices=(PRICE,), model="m")
    assert t.refusal(finish, ("t1", "plain", "s1"), started=True) is None  # a started attempt finishes
    assert (
        t.refusal(finish, ("t1", "goal", "s2"), started=False) == L.SPEND_CAP_RUN
    )  # a new one does not start
    assert t.refusal(stop, ("t1", "plain", "s1"), started=True) == L.SPEND_CAP_RUN
    arm_only = C.Caps(arm_usd=1.0, on_cap=C.STOP, prices=(PRICE,), model="m")
    assert t.refusal(arm_only, ("t1", "plain", "s1"), started=True) == L.SPEND_CAP_ARM
    assert t.refusal(arm_only, ("t1", "goal", "s2"), started=True) is None  # another arm's purse
    assert t.refusal(C.Caps(run_usd=1.01, on_cap=C.STOP), ("t1", "plain", "s1"), started=True) is None
    assert t.refusal(C.Caps(), ("t1", "plain", "s1"), started=False) is None


def test_an_attempts_own_cap_refuses_only_that_attempt_whatever_on_cap_says(tmp_path):
    """``--max-spend-attempt`` is a budget: the attempt that spent it is refused (started or not,
    ``finish`` or ``stop``), another attempt of the same arm is not, and the run's purse is untouched."""
    write(
        tmp_path, [row("plain", "s1", 1, 250_000, 0, 0), row("plain", "s9", 2, 100_000, 0, 0)]
    )  # $0.50, $0.20
    t = C.Tally(tmp_path, C.Caps(prices=(PRICE,), model="m").pricer())
    t.update()
    caps = C.Caps(attempt_usd=0.5, prices=(PRICE,), model="m")
    assert caps.any and not caps.purse and t.reached(caps, ["plain"]) == []
    assert t.refusal(caps, ("t1", "plain", "s1"), started=True) == L.SPEND_CAP_ATTEMPT
    assert t.refusal(caps, ("t1", "plain", "s9"), started=True) is None  # $0.20 of its $0.50
    r = t.attempt_reached(caps, ("t1", "plain", "s1"))
    assert r is not None and (r.scope, r.arm, r.code) == (C.ATTEMPT, "plain", L.SPEND_CAP_ATTEMPT)
    assert "spend cap of the attempt reached: $0.50 spent, cap $0.50" == r.text()
    t.note(row("plain", "s9", 3, 150_000, 0, 0))  # +$0.30 seen going by: s9 reaches its cap now
    assert t.refusal(caps, ("t1", "plain", "s9"), started=True) == L.SPEND_CAP_ATTEMPT
    # the cut record the gateway writes, and the report's reading of it
    C.write_attempt_cut(tmp_path, "a-plain-s1", ("t1", "plain", "s1"), r)
    first = C.attempt_cut_path(tmp_path, "a-plain-s1").read_text()
    C.write_attempt_cut(
        tmp_path, "a-plain-s1", ("t1", "plain", "s1"), C.Reached(C.ATTEMPT, "plain", 0.9, 0.5)
    )
    assert C.attempt_cut_path(tmp_path, "a-plain-s1").read_text() == first  # the first cut stays
    (path_row,) = C.attempt_cuts(tmp_path).items()
    assert path_row[0] == ("t1", "plain", "s1") and path_row[1]["cap_usd"] == 0.5
    C.attempt_cut_path(tmp_path, "bad").write_text('{"task": 1}')  # not a cut: skipped
    assert list(C.attempt_cuts(tmp_path)) == [("t1", "plain", "s1")]


def test_a_call_noted_when_its_usage_passes_is_counted_once(tmp_path):
    t = C.Tally(tmp_path, C.Caps(prices=(PRICE,), model="m").pricer())
    r = row("plain", "s1", 1, 100_000, 0, 0)  # $0.20
    t.note(r)  # the gateway saw the usage go by; the ledger line is not written yet
    t.update()
    assert math.isclose(t.run, 0.2) and math.isclose(t.arm("plain"), 0.2)
    write(tmp_path, [r])
    t.update()  # the line arrives: the note gives way to it
    assert t.noted == {} and math.isclose(t.run, 0.2)
    t.note({**r, "usage": None})  # no usage, nothing to count
    t.note({**r, "request_id": None})
    assert t.noted == {}


@pytest.mark.parametrize(
    "raw",
    [
        {"run_usd": 0, "arm_usd": -1},
        {"run_usd": float("nan"), "arm_usd": "5"},
        {"run_usd": True, "arm_usd": None},
        {"run_usd": [5]},
        ["not", "a", "dict"],
        "garbage",
    ],
)
def test_a_broken_caps_record_is_no_cap_never_a_zero_cap(tmp_path, raw):
    c = C.caps_from_dict(raw)
    assert c.run_usd is None and c.arm_usd is None and not c.any and c.on_cap == C.FINISH


def test_the_caps_record_round_trips_and_an_unreadable_one_is_none(tmp_path):
    caps = C.Caps(run_usd=250.0, arm_usd=60.5, on_cap=C.STOP, prices=(PRICE,), model="m", attempt_usd=4.5)
    C.write_caps(tmp_path, caps)
    assert C.read_caps(tmp_path) == caps
    C.caps_path(tmp_path).write_text("{not json")
    assert C.read_caps(tmp_path) == C.Caps()
    C.caps_path(tmp_path).unlink()
    C.caps_path(tmp_path).symlink_to("/etc/hostname")  # never followed
    assert C.read_caps(tmp_path) == C.Caps()


def test_a_cut_is_found_by_its_attempt_only_and_a_torn_line_is_skipped(tmp_path):
    C.write_cut(tmp_path, C.Reached(C.ARM, "goal", 61.0, 60.0), [("t1", "goal", "s1")])
    with open(C.cuts_path(tmp_path), "a") as fh:
        fh.write('{"attempts": [{"task": "t1", "arm": "goal", "stamp": "s2"}')  # torn
    assert C.cut_of(tmp_path, "t1", "goal", "s1") == (
        "stopped at the spend cap of arm goal ($61.00 spent, cap $60.00; --on-cap stop)"
    )
    assert C.cut_of(tmp_path, "t1", "goal", "s2") == "" and C.cut_of(tmp_path, "t1", "plain", "s1") == ""
    assert json.loads(C.cuts_path(tmp_path).read_text().splitlines()[0])["spent_usd"] == 61.0


def _tasks(tmp_path):
    tasks = tmp_path / "tasks"
    (tasks / "t1").mkdir(parents=True)
    (tasks / "t1" / "task.toml").write_text("")
    return tasks


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"max_spend": "0"}, "--max-spend"),
        ({"max_spend": "-5"}, "--max-spend"),
        ({"max_spend": "nan"}, "--max-spend"),
        ({"max_spend": "inf"}, "--max-spend"),
        ({"max_spend_arm": "ten"}, "--max-spend-arm"),
        ({"max_spend_attempt": "0"}, "--max-spend-attempt"),
        ({"max_spend_attempt": "inf"}, "--max-spend-attempt"),
        ({"on_cap": "pause"}, "--on-cap must be finish or stop"),
    ],
)
def test_bad_cap_flags_are_one_line_errors(tmp_path, flags, message):
    with pytest.raises(UserError) as e:
        resolve(tmp_path / "out", {"tasks_dir": str(_tasks(tmp_path)), **flags}, environ={})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_cap_needs_a_priced_model_and_the_gateway(tmp_path):
    from runner.schedule.gateway import caps_of
    from runner.schedule.preflight import check_caps

    base = RunConfig(out=tmp_path, arms=("plain",), model="gpt-5.5", max_spend=100.0)
    assert check_caps(base) == []  # LiteLLM's map prices it
    (p,) = check_caps(RunConfig(out=tmp_path, arms=("plain",), model="private-model-x", max_spend=100.0))
    assert p.check == "spend" and "no price for private-model-x" in p.what and "--price" in p.todo
    priced = RunConfig(out=tmp_path, arms=("plain",), model="private-model-x", max_spend_arm=9.0,
                       prices=("private-model-x=1,0.5,4",))  # fmt: skip
    assert check_caps(priced) == [] and caps_of(priced).arm_usd == 9.0
    (p,) = check_caps(
        RunConfig(out=tmp_path, arms=("plain",), model="private-model-x", max_spend_attempt=2.0)
    )
    assert "no price for private-model-x" in p.what  # the attempt's cap is priced like the others
    assert caps_of(RunConfig(out=tmp_path, arms=("plain",), max_spend_attempt=2.0)).attempt_usd == 2.0
    (p,) = check_caps(RunConfig(out=tmp_path, arms=("plain",), model="gpt-5.5", max_spend=1.0, gateway=False))
    assert "no gateway" in p.what
    assert check_caps(RunConfig(out=tmp_path, arms=("plain",), model="gpt-5.5")) == []  # no cap, no check


def test_a_call_under_a_model_without_a_price_leaves_the_rest_counted(tmp_path):
    """Found by a probe: one call of an attempt under a model the prices lack made the attempt's
    whole cost unknown, and the attempt left every cap's sum: its priced calls after it spent past
    the attempt's, the arm's and the run's caps unrefused. The priced calls count (a lower bound; the
    report still says the cost is unpriced)."""
    out = tmp_path
    caps = C.Caps(attempt_usd=0.3, run_usd=0.7, prices=(PRICE,), model="m", on_cap=C.STOP)
    odd = row("plain", "s1", 1, 100_000, 0, 0)
    odd["params"] = {"model": "m-2026-12-01"}  # no price for this name
    write(out, [odd, row("plain", "s1", 2, 100_000, 0, 0), row("plain", "s1", 3, 100_000, 0, 0)])
    t = C.Tally(out, caps.pricer())
    t.update()
    assert math.isclose(t.attempt(("t1", "plain", "s1")), 2 * usd(100_000, 0, 0))  # $0.40
    assert t.refusal(caps, ("t1", "plain", "s1"), started=True) == L.SPEND_CAP_ATTEMPT
    assert math.isclose(t.run, 0.4)
