"""The gateway's ledger read by the report: tokens from the wire, the receipts reconciled with them,
and the wire fairness audit. A copy of the hand-made tree (receipts written by modes.receipt) gets a
ledger written by the gateway's own writer (``runner.ops.gateway.server.LedgerWriter``), one call
per done cell; then one arm's calls are altered at a time."""

from __future__ import annotations

import shutil

import pytest
from handmade_tree import COST, STAMP, TASKS, write_receipts

from runner.ops.gateway.server import LedgerWriter
from runner.results import ledger as L
from runner.results.model import RunModel
from runner.results.report import build_report, render
from runner.results.tree import gateway_dir

USAGE = {"input": 1200, "cached": 200, "output": 300, "reasoning": 50}
PARAMS = {"model": "scripted/solve", "reasoning_effort": "high", "tools_sha256": "ab" * 32}


@pytest.fixture
def tree(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    return out


def _ledger(out, **changes: dict) -> None:
    """One forwarded call per done cell of the hand-made tree; ``changes={"heartbeat/t05": {...}}``
    alters that cell's row (its ``params`` or ``usage`` merged in), or adds calls after it
    (``extra``: the whole ``params`` of each, or ``(path, params)``)."""
    w = LedgerWriter(gateway_dir(out) / "ledger.jsonl")
    at = 1.7e9
    for task in TASKS:
        for arm in COST:
            ch = changes.get(f"{arm}/{task}", {})
            w.write({
                "kind": L.CALL, "v": L.SCHEMA, "at": at, "gateway": "g1", "host": None,
                "attempt": f"a-{arm}-{task}", "task": task, "arm": arm, "stamp": STAMP,
                "method": "POST", "path": "/v1/responses", "request_id": f"a-{arm}-{task}.1",
                "params": PARAMS | ch.get("params", {}), "model_time_sec": 0.0,
                "outcome": L.OK, "status": 200, "usage": USAGE | ch.get("usage", {}),
                "first_byte_ms": 12.5, "total_ms": 80.0,
            })  # fmt: skip
            at += 1
            for i, params in enumerate(ch.get("extra", ()), 2):
                path, params = params if isinstance(params, tuple) else ("/v1/responses", params)
                w.write({
                    "kind": L.CALL, "v": L.SCHEMA, "at": at, "gateway": "g1", "host": None,
                    "attempt": f"a-{arm}-{task}", "task": task, "arm": arm, "stamp": STAMP,
                    "method": "POST", "path": path, "request_id": f"a-{arm}-{task}.{i}",
                    "params": params, "model_time_sec": 1.0, "outcome": L.OK, "status": 200,
                    "usage": USAGE, "first_byte_ms": 12.5, "total_ms": 80.0,
                })  # fmt: skip
                at += 1
    w.close()


def _receipt_usage(**changes: dict) -> dict:
    usage = {
        "inputTokens": USAGE["input"],
        "cachedInputTokens": USAGE["cached"],
        "outputTokens": USAGE["output"],
    }
    return {f"{arm}/{task}": {"token_usage": dict(usage)} for task in TASKS for arm in COST} | changes


def _report(out):
    return build_report(RunModel.load(out))


def test_without_a_ledger_the_wire_audit_says_nothing_was_compared(tree):
    write_receipts(tree)
    rep = _report(tree)
    assert rep["audit"]["wire"]["compared"] == [] and (
        rep["reconciliation"]["compared"],
        rep["reconciliation"]["lines"],
    ) == (0, [])
    assert "no attempt went through the model gateway" in render(rep, "md")


def test_tokens_come_from_the_ledger_and_agree_with_the_receipts(tree):
    write_receipts(tree, **_receipt_usage())
    _ledger(tree)
    rep = _report(tree)
    cells = [c for per in rep["cells"].values() for c in per.values() if c["status"] == "done"]
    assert cells and all(c["tokens_source"] == "ledger" for c in cells)
    assert all((c["n_input_tokens"], c["n_output_tokens"]) == (1200, 300) for c in cells)
    assert (rep["reconciliation"]["compared"], rep["reconciliation"]["lines"]) == (len(cells), [])
    wire = rep["audit"]["wire"]
    assert wire["lines"] == [] and {"model", "reasoning effort", "tool list (sha256)"} <= set(
        wire["compared"]
    )
    assert "ALARM" not in render(rep, "md")


def test_an_arm_that_sent_another_reasoning_effort_is_a_red_line(tree):
    write_receipts(tree)
    _ledger(tree, **{"heartbeat/t05": {"params": {"reasoning_effort": "low"}}})
    rep = _report(tree)
    wire = rep["audit"]["wire"]
    assert wire["lines"] == [
        "arms sent the model different reasoning effort (plain, goal \u2260 heartbeat; task t05)"
    ]
    assert wire["arms_differing"] == ["heartbeat"] and "heartbeat" in rep["audit"]["arms_differing"]
    assert "- **ALARM** arms sent the model different reasoning effort" in render(rep, "md")


def test_a_parameter_only_one_arm_sent_is_a_red_line(tree):
    """Found by a probe: heartbeat alone sent ``temperature`` (0.2), the other arms sent none (the
    provider's default), and the audit compared temperature among the arms that sent it: no line."""
    write_receipts(tree)
    _ledger(tree, **{"heartbeat/t05": {"params": {"temperature": "0.2"}}})
    wire = _report(tree)["audit"]["wire"]
    assert wire["lines"] == [
        "arms sent the model different temperature (plain, goal \u2260 heartbeat; task t05)"
    ]
    (d,) = wire["differences"]
    assert d["values"] == {"plain": "(not sent)", "goal": "(not sent)", "heartbeat": "0.2"}


def test_a_setting_outside_the_named_parameters_is_a_red_line(tree):
    """Left over from a probe: fields outside the ledger's named parameters were never compared, so
    one arm's ``truncation: "auto"`` passed. They are one value now (``other_fields``, ``{}`` when
    a body has none). A ledger line without it is of a gateway before it (a run resumed across the
    upgrade): not recorded, never "(not sent)" (a review found that a red line)."""
    write_receipts(tree)
    none = {"other_fields": {}}
    _ledger(tree, **{f"{a}/t05": {"params": none} for a in ("plain", "goal")},
            **{"heartbeat/t05": {"params": {"other_fields": {"truncation": "auto"}}}})  # fmt: skip
    wire = _report(tree)["audit"]["wire"]
    assert wire["lines"] == [
        "arms sent the model different other request fields (plain, goal \u2260 heartbeat; task t05)"
    ]
    (d,) = wire["differences"]
    assert d["values"] == {"plain": "{}", "goal": "{}", "heartbeat": '{"truncation": "auto"}'}
    (gateway_dir(tree) / "ledger.jsonl").unlink()
    _ledger(tree, **{f"{a}/t05": {"params": none} for a in ("plain", "goal")})  # heartbeat's gateway: older
    assert _report(tree)["audit"]["wire"]["lines"] == []


def test_a_parameter_an_arm_sent_on_some_calls_only_is_a_red_line(tree):
    """Left over from a probe: an arm that sent its reasoning effort on its first call and not on
    the next (the provider's default there) had the value of the calls that carried it, equal to
    the other arms'. A call without a model (not a model call) is not one that left it out."""
    write_receipts(tree)
    bare = {"model": PARAMS["model"], "tools_sha256": PARAMS["tools_sha256"]}
    _ledger(tree, **{"heartbeat/t05": {"extra": [bare]}, "goal/t05": {"extra": [PARAMS, {}]}})
    wire = _report(tree)["audit"]["wire"]
    assert wire["lines"] == [
        "arms sent the model different reasoning effort (plain, goal \u2260 heartbeat; task t05)"
    ]
    (d,) = wire["differences"]
    assert d["values"] == {"plain": "high", "goal": "high", "heartbeat": "(not sent) | high"}


def test_a_compaction_call_is_priced_and_not_compared(tree):
    """Found by a review: codex's remote compaction (``POST /v1/responses/compact``) carries only the
    model, the input and the instructions, so one attempt that compacted read ``(not sent) |`` for
    its reasoning effort and tool list: a red line against every arm that never compacted. Its
    tokens are the attempt's like any call's; its parameters are not compared."""
    write_receipts(tree)
    compact = ("/v1/responses/compact", {"model": PARAMS["model"]})
    _ledger(tree, **{"heartbeat/t05": {"extra": [compact]}})
    rep = _report(tree)
    assert rep["audit"]["wire"]["lines"] == []
    led = L.read_ledger(tree)
    (key,) = [k for k in led.attempts if k[0] == "t05" and k[1] == "heartbeat"]
    u = led.attempts[key]
    assert u.with_usage == 2 and u.input == 2 * USAGE["input"] and u.model_calls == 1


def test_a_receipt_that_under_reports_its_tokens_is_flagged(tree):
    under = {"inputTokens": 1200, "cachedInputTokens": 200, "outputTokens": 250}
    write_receipts(tree, **_receipt_usage(**{"goal/t03": {"token_usage": under}}))
    _ledger(tree)
    rep = _report(tree)
    (line,) = rep["reconciliation"]["lines"]
    assert line.startswith("t03 × goal (") and "output tokens: receipt 250, ledger 300 (-50)" in line
    assert "- **FLAG** tokens differ: t03 × goal" in render(rep, "md")


def test_a_ledger_line_with_a_nonsense_count_has_no_usage(tree):
    write_receipts(tree)
    _ledger(tree, **{"plain/t01": {"usage": {"output": 10**400}}})
    led = L.read_ledger(tree, keep_calls=True)
    (c,) = [c for c in led.calls if c.key == ("t01", "plain", STAMP)]
    assert c.usage is None and c.forwarded
