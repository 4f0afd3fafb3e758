"""The model gateway on the shared five-arm run (tests/runner/five_arm_run.py: the five real arms at
once on calc-partial, the scripted ``never-finish`` model as the gateway's upstream, a 30 s
GOAL_TIMEOUT_SEC): every model call of every arm went over the wire through the gateway, and the
wire shows what the receipts claim.

- the ledger equals the scripted model's own log, attempt by attempt and call by call (the gateway's
  ``x-client-request-id`` joins them): the same calls, the same tokens;
- the receipts' self-reported usage agrees with the ledger, or is short of it by the answers codex
  did not count (the last one, which the deadline stopped codex from reading; a goal turn's first
  one, dropped when the instruction merged into it), and then the report flags it
  (``runner.results.ledger.reconcile``);
- the budget at the wire: no call was forwarded after an attempt's first forwarded call plus the
  budget, and each harness's clock started at that request (the relay's mark), so the five arms
  were cut at the same model time on the wire, within 1 s;
- a token read from one sandbox was refused on every other attempt's socket (the prober);
- ``status`` and ``report`` take their tokens from the ledger, and the wire fairness audit finds
  the five arms sent the same behaviour parameters (``runner.results.audit.wire_audit``).
"""

from __future__ import annotations

import itertools
import json

import pytest
from five_arm_run import BUDGET, TASK
from runner_support import done_jobs, run_marathon

from modes.profiles import DEFAULT_ARMS
from runner.results import ledger as L

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def wire(five_arm_run):
    run = five_arm_run
    assert run.rc == 0, run.console[-3000:]
    assert set(run.receipts) == set(DEFAULT_ARMS), run.console[-3000:]
    led = L.read_ledger(run.out, keep_calls=True)
    log = run.out / ".runner" / "gateway" / "scripted" / "requests.jsonl"
    model = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    # the done attempt of each arm (the receipts are theirs): its stamp
    stamps = {arm: jobs[0].parent.name for (task, arm), jobs in done_jobs(run.out).items() if task == TASK}
    return run, led, model, stamps


def test_every_arm_went_through_the_gateway(wire):
    run, led, _model, stamps = wire
    for arm, r in run.receipts.items():
        assert r["provider"]["gateway"] == "local", arm
        assert r["provider"]["api_key_var"] == "MARATHON_GATEWAY_TOKEN", arm  # the token, never the key
        assert r["extra"]["relay"]["connections"] > 0 and r["extra"]["relay"]["unreachable"] == 0, arm
        u = led.usage(TASK, arm, stamps[arm])
        assert u is not None and u.forwarded > 0, arm


def test_the_ledger_equals_the_scripted_models_own_count_per_attempt(wire):
    run, led, model, stamps = wire
    for arm in DEFAULT_ARMS:
        calls = [c for c in led.calls if c.key == (TASK, arm, stamps[arm]) and c.forwarded]
        (aid,) = {c.attempt for c in calls}
        seen = {m["request_id"]: m for m in model if m.get("attempt") == aid}
        # the one call the model may not have seen: the attempt's last, cut when its client went away
        # at the deadline before the request reached the model (the explanation that fits ci43's
        # ssh-goal, whose 26th call the model never logged); the ledger rightly has it, with no answer
        # from the model at all (the scripted model logs a request before it sends its status line,
        # so a call it answered is in its log)
        last = max(calls, key=lambda c: int(c.request_id.rsplit(".", 1)[1]))
        if (
            last.request_id not in seen
            and last.outcome in CUT_SHORT
            and last.status is None
            and last.usage is None
        ):
            calls.remove(last)
        assert {c.request_id for c in calls} == set(seen), arm  # the same calls, no more, no fewer
        assert len(calls) == len(seen) > 0, arm
        for c in calls:
            m = seen[c.request_id]
            if c.usage is None:  # the answer was cut before its usage passed: say by whom
                assert c.outcome in CUT_SHORT, (arm, c)
                continue
            u = m["usage"]
            assert c.usage == (
                u["input_tokens"],
                u["input_tokens_details"]["cached_tokens"],
                u["output_tokens"],
                u["output_tokens_details"]["reasoning_tokens"],
            ), (arm, c.request_id)
        usage = led.usage(TASK, arm, stamps[arm])
        with_usage = [seen[c.request_id]["usage"] for c in calls if c.usage is not None]
        assert usage.input == sum(u["input_tokens"] for u in with_usage)
        assert usage.output == sum(u["output_tokens"] for u in with_usage)


#: who may cut the answer of a call in flight at the deadline: the client (codex winding down) or
#: the gateway, at the attempt's budget end (``cut``, since 2026-12-07); which one comes first is
#: the two processes' timing (ci74 saw heartbeat's last call cut by the gateway at 29.99 s of 30)
CUT_SHORT = (L.CLIENT_CLOSED, L.CUT)


def _dropped_by_codex(model: list[dict], attempt: str) -> set[str]:
    """The request ids of the answers codex read and then dropped, for one attempt. ``thread/goal/set``
    starts a goal turn by itself; when its first request leaves before our ``turn/start`` (the
    instruction, written together with the goal: only codex's own timing can make it late), codex
    merges the instruction into that turn by waiting for the answer, dropping it, and asking again
    with the instruction: the dropped
    answer is on the wire (a provider bills it) and in no codex count. Told by the next request: an
    answer codex kept adds two items to its history (the call and its output); after a dropped one the
    next request is the same history plus the instruction. Any other dropped answer fails: codex
    would then lose usage in a way nobody has explained."""
    mine = sorted((m for m in model if m.get("attempt") == attempt and m.get("usage")), key=lambda m: m["n"])
    dropped = set()
    for m, nxt in itertools.pairwise(mine):
        if nxt["n_input_items"] < m["n_input_items"] + 2:
            assert m is mine[0] and m["goal_turn"] and m.get("task") is None and nxt.get("task"), (m, nxt)
            dropped.add(m["request_id"])
    return dropped


def _short_arms(run, led, model, stamps) -> set[str]:
    """The arms whose receipt is short of the ledger, which the report must flag. codex adds each answer's
    usage as it reads it, so its count (the receipt) misses the answers it never read or dropped: the
    last one when the deadline stopped codex as the gateway delivered it (the under-report on timed-out
    trials the ledger exists for), and a goal turn's first answer dropped when the instruction merged
    into it (``_dropped_by_codex``). Anything else than the ledger's sum of the answers codex kept,
    with or without the last one, fails."""
    short = set()
    for arm, r in run.receipts.items():
        calls = sorted(
            (c for c in led.calls if c.key == (TASK, arm, stamps[arm]) and c.usage is not None),
            key=lambda c: c.at,
        )
        (aid,) = {c.attempt for c in calls}
        kept = [c for c in calls if c.request_id not in _dropped_by_codex(model, aid)]
        said = tuple(r["token_usage"].get(k, 0) for k in ("inputTokens", "cachedInputTokens", "outputTokens"))
        whole, but_last = (
            tuple(sum(c.usage[i] for c in kept[:n]) for i in (0, 1, 2)) for n in (len(kept), len(kept) - 1)
        )
        assert said in (whole, but_last), (arm, said, whole, but_last, len(calls) - len(kept))
        if len(kept) < len(calls) or said != whole:
            short.add(arm)
    return short


def test_the_receipts_usage_is_the_ledgers_or_one_answer_short_and_flagged(wire):
    run, led, model, stamps = wire
    short = _short_arms(run, led, model, stamps)
    for arm, r in run.receipts.items():
        lines = L.reconcile(led.usage(TASK, arm, stamps[arm]), r["token_usage"])
        assert bool(lines) == (arm in short), (arm, lines)


def test_the_five_arms_are_cut_at_the_same_model_time_on_the_wire(wire):
    """The wire's rule (``modes.budget``: the budget from the first model request) for every arm, and
    the harness's clock started at that same request (the relay's mark: ``Conversation.anchor_budget``),
    so each harness's deadline falls where the gateway's does: all five arms cut at the budget's
    model time on the wire, within 1 s of each other, none later than the gateway allows."""
    run, led, _model, stamps = wire
    cut = {}
    for arm, r in run.receipts.items():
        u = led.usage(TASK, arm, stamps[arm])
        calls = [c for c in led.calls if c.key == (TASK, arm, stamps[arm]) and c.forwarded]
        # nothing was forwarded past the budget at the wire: the gateway would have refused it
        assert max(c.model_time_sec for c in calls) <= BUDGET, arm
        assert min(c.at for c in calls) == u.first_at and u.last_accepted_model_sec <= BUDGET, arm
        # the harness's budget started at the request that started the wire's (the relay's hop apart)
        assert r["extra"]["budget_anchor"] == "first model request", (arm, r["extra"])
        lag = u.first_at - r["extra"]["budget_start_epoch"]
        assert -0.05 <= lag < 1.0, (arm, lag)
        assert r["stop_reason"] == "deadline" and r["deadline_hit"], (arm, r["stop_reason"])
        cut[arm] = round(r["extra"]["deadline_after_sec"] - lag, 3)  # the harness's stop, wire model time
    assert all(BUDGET - 1.0 <= v <= BUDGET + 1.0 for v in cut.values()), cut
    assert max(cut.values()) - min(cut.values()) <= 1.0, cut


def test_a_token_from_one_sandbox_is_refused_on_every_other_attempt(wire):
    run, led, _model, _stamps = wire
    tokens = {t for ts in run.procs.captured.values() for t in ts}
    assert len(tokens) >= len(DEFAULT_ARMS), "the sampler did not read each arm's token in its sandbox"
    assert run.probes, "no cross-attempt probe ran while two attempts were live"
    assert {(s, c) for _a, _b, s, c in run.probes} == {(401, L.OTHER_ATTEMPT)}, run.probes
    refused = [c for c in led.calls if c.refused == L.OTHER_ATTEMPT]
    assert len(refused) == len(run.probes)  # each refusal is on the ledger, with the socket's attempt
    assert {c.attempt for c in refused} == {b for _a, b, _s, _c in run.probes}


def test_status_and_report_take_tokens_from_the_ledger_and_the_wire_audit_is_clean(wire):
    run, led, model, stamps = wire
    rep = run_marathon("report", str(run.out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    for arm in DEFAULT_ARMS:
        cell = data["cells"][TASK][arm]
        u = led.usage(TASK, arm, stamps[arm])
        assert cell["n_input_tokens"] == u.input and cell["n_output_tokens"] == u.output, (arm, cell)
        assert cell["tokens_source"] == "ledger", cell
    rec = data["reconciliation"]
    assert rec["compared"] == len(DEFAULT_ARMS), rec
    # a receipt one answer short of the wire is a flagged line, naming its arm; the others agree
    assert {ln.split(" × ", 1)[1].split(" (", 1)[0] for ln in rec["lines"]} == _short_arms(
        run, led, model, stamps
    ), rec
    wire_audit = data["audit"]["wire"]
    assert wire_audit["lines"] == [], wire_audit
    assert {"model", "tool list (sha256)"} <= set(wire_audit["compared"]), wire_audit
    text = run_marathon("report", str(run.out)).stdout
    assert "ALARM" not in text, text
