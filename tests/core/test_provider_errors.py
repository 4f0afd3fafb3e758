"""The provider-errors alarm (runner.results.alarms): the gateway's ledger shows the provider's error
answers that codex retried unseen, per arm, and one arm hit significantly more often than the others
is an alarm (runbook pitfall 1: TPM limits and an HTTP 400 hit only ``plain``). On a copy of the
hand-made tree with a ledger written by the gateway's own writer; the test is checked against
scipy's Fisher test."""

from __future__ import annotations

import shutil

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
