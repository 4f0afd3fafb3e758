"""The provider-errors alarm (runner.results.alarms): the gateway's ledger shows the provider's error
answers that codex retried unseen, per arm, and one arm hit significantly more often than the others
is an alarm (runbook pitfall 1: TPM limits and an HTTP 400 hit only ``plain``). On a copy of the
hand-made tree with a ledger written by the gateway's own writer; the test is checked against
scipy's Fisher test."""

from __future__ import annotations

import shutil
from pathlib import Path

from handmade_tree import STAMP, TASKS
from scipy.stats import fisher_exact

from marathon.status_view import render as render_status
from marathon.status_view import status_data
from runner.ops.gateway.server import LedgerWriter
from runner.results import ledger as L
from runner.results.model import RunModel
from runner.results.report import build_report, render
from runner.results.tree import gateway_dir, voided_root


def _tree(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    shutil.copytree(voided_root(handmade), voided_root(out), symlinks=True)
    return out


def _call(w: LedgerWriter, task: str, arm: str, outcome: str, status: int | None) -> None:
    w.write({
        "kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9, "gateway": "g1", "host": None, "attempt": f"{arm}-{task}",
        "task": task, "arm": arm, "stamp": STAMP, "method": "POST", "path": "/v1/responses",
        "params": {"model": "hand/model"}, "outcome": outcome, "status": status,
        "usage": {"input": 100, "cached": 0, "output": 10, "reasoning": 0} if outcome == L.OK else None,
    })  # fmt: skip


def test_an_arm_the_provider_refused_more_often_is_an_alarm_with_its_statuses(handmade, tmp_path):
    out = _tree(handmade, tmp_path)
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    for i, task in enumerate(TASKS):
        for arm in ("plain", "goal", "heartbeat"):
            _call(w, task, arm, L.OK, 200)
        if i < 8:  # plain: rate limited on 8 of its 15 attempts, three answers each
            for _ in range(3):
                _call(w, task, "plain", L.UPSTREAM_ERROR, 429)
        if i == 9:
            _call(w, task, "plain", L.UPSTREAM_ERROR, 400)
        if i == 3:
            _call(w, task, "goal", L.UPSTREAM_ERROR, None)  # no answer at all
        _call(w, task, "heartbeat", L.REFUSED, 401)  # the gateway's own refusal: not the provider's
    w.close()
    rep = build_report(RunModel.load(out))
    rows = {r["arm"]: r for r in rep["provider_errors"]}
    plain, goal, hb = rows["plain"], rows["goal"], rows["heartbeat"]
    assert (plain["attempts_with_errors"], plain["attempts"], plain["error_calls"]) == (9, 15, 25)
    assert plain["statuses"] == {"400": 1, "429": 24} and plain["calls"] == 15 + 25
    assert (goal["attempts_with_errors"], goal["statuses"]) == (1, {"no answer": 1})
    assert (hb["attempts_with_errors"], hb["calls"], hb["statuses"]) == (0, 15, {})
    assert plain["p_value"] == round(fisher_exact([[9, 6], [1, 29]])[1], 6)
    assert plain["alarm"] and not goal["alarm"] and not hb["alarm"]
    assert plain["message"] == (
        f"plain: the provider answered with an error in 9/15 attempts vs 1/30 for the others "
        f"(400 x1, 429 x24; Fisher p={fisher_exact([[9, 6], [1, 29]])[1]:.3g}): "
        "suspect infrastructure before capability"
    )
    md = render(rep, "md")
    assert f"- **ALARM** {plain['message']}" in md
    assert "| plain | 9 | 15 | 25 | 40 | 400 x1, 429 x24 |" in md
    html = render(rep, "html")
    assert "429 x24" in html and "ALARM: plain: the provider answered with an error" in html
    # a headless operator sees it too: marathon status, the same line
    d = status_data(RunModel.load(out), "all")
    assert d["alarms"] == [plain["message"]]
    assert f"ALARM {plain['message']}" in render_status(d).splitlines()


def test_without_a_ledger_there_is_no_provider_reading(handmade):
    rep = build_report(RunModel.load(handmade))
    assert rep["provider_errors"] == [] and status_data(RunModel.load(handmade), "all")["alarms"] == []
    assert "Provider errors at the wire" not in render(rep, "md")


def _at(
    w: LedgerWriter, task: str, arm: str, at: float, outcome: str, status: int | None, ms: float = 50.0
) -> None:
    w.write({
        "kind": L.CALL, "v": L.SCHEMA, "at": at, "gateway": "g1", "host": None, "attempt": f"{arm}-{task}",
        "task": task, "arm": arm, "stamp": STAMP, "method": "POST", "path": "/v1/responses",
        "params": {"model": "hand/model"}, "outcome": outcome, "status": status, "total_ms": ms,
        "usage": {"input": 100, "cached": 0, "output": 10, "reasoning": 0} if outcome == L.OK else None,
    })  # fmt: skip


def test_a_scored_attempt_the_provider_failed_for_a_minute_is_flagged_with_the_void_that_reruns_it(
    handmade, tmp_path
):
    """An outage hits whichever attempts are running, too few for any arm to stand out: each scored
    attempt the provider failed for PROVIDER_DOWN_SEC or more is its own flagged line (report, status,
    console), with the `marathon void` that runs it again; a request the harness got wrong (400) is
    the arm's, never an outage; the figures are unchanged."""
    from runner.results.alarms import PROVIDER_DOWN_SEC

    out = _tree(handmade, tmp_path)

    def scores(rep: dict) -> dict:
        return {(t, a): [c.get(k) for k in ("status", "reward", "partial", "pass_rate")]
                for t, row in rep["cells"].items() for a, c in row.items()}  # fmt: skip

    before = scores(build_report(RunModel.load(out, index=False)))
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    t = 1.78e9
    # t00 plain: answered, then 429s for 90 s (codex's retries, backing off), then answered again
    _at(w, "t00", "plain", t, L.OK, 200)
    for k in range(6):
        _at(w, "t00", "plain", t + 10 + 18 * k, L.UPSTREAM_ERROR, 429)
    _at(w, "t00", "plain", t + 100, L.OK, 200)
    # t00 goal: 400s for 200 s (its own bad requests): not the provider's
    _at(w, "t00", "goal", t, L.OK, 200)
    for k in range(5):
        _at(w, "t00", "goal", t + 10 + 50 * k, L.UPSTREAM_ERROR, 400)
    _at(w, "t00", "goal", t + 300, L.OK, 200)
    # t01 heartbeat: a 503 wall it never came back from: open until its last failed call ends (80 s)
    _at(w, "t01", "heartbeat", t, L.OK, 200)
    _at(w, "t01", "heartbeat", t + 20, L.UPSTREAM_ERROR, 503)
    _at(w, "t01", "heartbeat", t + 70, L.UPSTREAM_ERROR, None, ms=30_000.0)  # no answer: cut at 30 s
    # t02 plain: a 30 s blip (under the line)
    _at(w, "t02", "plain", t, L.OK, 200)
    _at(w, "t02", "plain", t + 5, L.UPSTREAM_ERROR, 502)
    _at(w, "t02", "plain", t + 35, L.OK, 200)
    w.close()

    model = RunModel.load(out)
    assert model.ledger.usage("t00", "plain", STAMP).provider_down_sec == 90.0
    assert model.ledger.usage("t00", "goal", STAMP).provider_down_sec == 0.0
    assert model.ledger.usage("t01", "heartbeat", STAMP).provider_down_sec == 80.0
    assert model.ledger.usage("t02", "plain", STAMP).provider_down_sec == 30.0 < PROVIDER_DOWN_SEC
    rep = build_report(model)
    got = [(r["task"], r["arm"], r["down_sec"], r["statuses"]) for r in rep["provider_outages"]]
    assert got == [("t00", "plain", 90.0, {"429": 6}), ("t01", "heartbeat", 80.0, {"503": 1, "no answer": 1})]
    first = rep["provider_outages"][0]
    assert first["message"].startswith(
        f"t00 × plain ({STAMP}): the provider failed its calls for 1 min 30 s (429 x6): "
        "model time lost to the provider, not to the harness; `marathon void "
    )
    assert first["message"].endswith(
        f"`marathon void {first['job_dir']} {out} --reason 'provider outage'` plans its rerun (--yes carries it out)"
    )
    # the hint is the command: run as given, it plans voiding that attempt of this tree, and only plans
    import shlex

    from marathon.cli import main as marathon_main

    hint = shlex.split(first["message"].split("`")[1])
    assert hint[:2] == ["marathon", "void"] and hint[-2:] == ["--reason", "provider outage"]
    assert marathon_main(hint[1:] + ["--json"]) == 0
    assert Path(first["job_dir"]).is_dir()  # planned, nothing moved
    assert scores(rep) == before  # a flag: no score changed
    from modes import safetext

    assert f"- **FLAG** {safetext.md(first['message'], None)}" in render(rep, "md")
    assert "FLAG: t01 × heartbeat" in render(rep, "html")
    d = status_data(RunModel.load(out), "all")
    assert d["flags"] == [r["message"] for r in rep["provider_outages"]]
    assert f"FLAG {first['message']}" in render_status(d).splitlines()
    # the sums the scan kept carry an outage still open, and the next process reads the same
    assert build_report(RunModel.load(out))["provider_outages"] == rep["provider_outages"]
