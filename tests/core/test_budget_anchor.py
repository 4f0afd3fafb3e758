"""The budget starts at the arm's first model request, where the gateway starts the wire's.

The in-sandbox relay (``agents.relay``) calls the driver back when the first request's bytes of the
budget pass towards the gateway; ``Conversation.anchor_budget`` moves the harness's budget there,
and a wait that began under the earlier deadline waits on to the moved one (``CodexSession._next``).
Real sockets and a real gateway process for the relay (tests/gateway has the rest of it); a real
child process stands in for app-server's pipes, whose notifications play no part here.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.appserver import AppServerClient
from agents.conversation import Conversation
from agents.session import DEADLINE_MESSAGE, CodexSession
from modes.gateway import WIRE_ENDS, names_wire_end
from modes.receipt import Receipt


def _receipt() -> Receipt:
    return Receipt(
        arm="plain", mode=None, disclosures=[], agent="x", codex_version="0", model="m", provider={}
    )


async def _quiet_session(tmp_path, *argv: str) -> tuple[Conversation, AppServerClient]:
    proc = await asyncio.create_subprocess_exec(
        *(argv or ("sleep", "60")), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    client = AppServerClient(proc, tmp_path / "appserver.stdout.jsonl")
    await client.start()
    receipt = _receipt()
    conv = Conversation(receipt, tmp_path, str(tmp_path))
    conv.session = CodexSession(client, receipt, str(tmp_path))
    return conv, client


def test_a_wait_under_the_first_deadline_ends_at_the_moved_one(tmp_path):
    async def scenario() -> tuple[float, float, Conversation]:
        conv, client = await _quiet_session(tmp_path)
        try:
            t0 = time.monotonic()
            conv.start_budget(t0, 1.0, None)  # a 1 s budget from now
            first_deadline = conv.session.deadline
            waiter = asyncio.create_task(conv.session._next())  # waits under the first deadline
            await asyncio.sleep(0.4)
            t_first = time.monotonic()
            conv.anchor_budget(t_first, time.time())  # codex's first request, 0.4 s in
            assert conv.session.deadline == pytest.approx(t_first + 1.0)
            assert conv.session.deadline > first_deadline
            with pytest.raises(RuntimeError, match=DEADLINE_MESSAGE):
                await waiter
            return t_first, time.monotonic(), conv
        finally:
            await client.close(grace=0.1)

    t_first, ended, conv = asyncio.run(scenario())
    assert ended >= t_first + 1.0  # not at the first deadline, 0.4 s earlier
    r = conv.receipt
    assert r.extra["budget_anchor"] == "first model request"
    assert r.extra["first_request_after_sec"] >= 0.4
    assert r.budget_sec == 1.0 and r.extra["budget_source"] == "GOAL_TIMEOUT_SEC"
    assert conv.budget_t0 == t_first


def test_the_budget_moves_once_and_never_after_its_deadline_or_backwards(tmp_path):
    async def scenario() -> None:
        conv, client = await _quiet_session(tmp_path)
        try:
            conv.anchor_budget(time.monotonic(), time.time())  # no budget started: nothing moves
            assert conv.session.deadline is None and "budget_anchor" not in conv.receipt.extra
            t0 = time.monotonic()
            conv.start_budget(t0, 30.0, None)
            start = conv.budget_t0
            conv.anchor_budget(start - 1.0, time.time() - 1.0)  # a request before the budget: kept
            assert conv.budget_t0 == start and "budget_anchor" not in conv.receipt.extra
            conv.anchor_budget(conv.session.deadline + 0.1, time.time() + 30)  # after the deadline
            assert conv.budget_t0 == start
            # harbor's agent timeout clamps the moved budget as it clamps the first one
            conv.anchor_budget(start + 5.0, time.time() + 5.0)
            assert conv.budget_t0 == start + 5.0
            assert conv.receipt.extra["first_request_after_sec"] == 5.0
        finally:
            await client.close(grace=0.1)

    asyncio.run(scenario())


def test_the_clamp_of_harbors_timeout_counts_the_time_to_the_first_request(tmp_path):
    async def scenario() -> Conversation:
        conv, client = await _quiet_session(tmp_path)
        try:
            t0 = time.monotonic()
            # harbor's 100 s less its 5 s margin leaves 95 s: a 90 s budget fits from t0, not from 10 s later
            conv.start_budget(t0, 90.0, 100.0)
            assert conv.receipt.budget_sec == 90.0
            conv.anchor_budget(conv.budget_t0 + 10.0, time.time() + 10.0)
            return conv
        finally:
            await client.close(grace=0.1)

    conv = asyncio.run(scenario())
    assert conv.receipt.budget_sec == pytest.approx(85.0, abs=0.01)
    assert conv.receipt.extra["budget_source"].startswith("harbor agent timeout")


def test_an_error_after_the_deadline_is_the_budgets_end_not_an_error_of_the_arm(tmp_path):
    """Between the deadline and our interrupt reaching codex, a call codex still makes is refused by
    the wire's budget (which starts on the same request, so ends no earlier) and codex reports
    "Reconnecting... 1/2": kept apart from the arm's error events (CI saw it fail the deadline test
    when a tick's call fell in that gap). ``cat`` stands in for app-server: what we write comes back."""

    async def scenario() -> Conversation:
        conv, client = await _quiet_session(tmp_path, "cat")
        try:
            conv.start_budget(time.monotonic(), 0.5, None)
            before = {"error": {"message": "stream disconnected before completion"}, "willRetry": True}
            await client.notify("error", before)
            assert (await client.next_notification(time.monotonic() + 10)).method == "error"
            await asyncio.sleep(max(0.0, conv.session.deadline - time.monotonic()) + 0.05)
            await client.notify("error", {"error": {"message": "Reconnecting... 1/2"}, "willRetry": True})
            assert (await client.next_notification(time.monotonic() + 10)).method == "error"
            return conv
        finally:
            await client.close(grace=0.1)

    r = asyncio.run(scenario()).receipt
    assert r.errors == ["error notification (willRetry=True): stream disconnected before completion"]
    assert r.extra["errors_at_end"] == ["error notification (willRetry=True): Reconnecting... 1/2"]


#: what codex 0.171 reported when the gateway refused an attempt past its own spend cap (recorded from
#: a real `marathon run --max-spend-attempt` of the five arms on 2026-12-06)
CAP_DETAILS = (
    "unexpected status 402 Payment Required: spend_cap_attempt: this attempt's spend cap "
    "(marathon run --max-spend-attempt) is spent, url: http://127.0.0.1:18791/v1/responses"
)


def test_the_wires_refusal_of_a_spent_cap_ends_the_work_as_the_deadline_does(tmp_path):
    """At the attempt's own spend cap the gateway refuses every call (402) until the host stops the
    driver; codex retries ("Reconnecting... 1/2", "2/2") and fails the turn. Counted as the arm's
    errors, the five arms of one capped run got 4, 2, 2, 4 and 0 error events; and the failed turn
    raised the arm's failure. They are the end: kept apart, and the turn's failure winds down as
    the deadline does. The budget's refusal (401, ``budget_exhausted:``) is the same rule."""

    async def scenario() -> Conversation:
        conv, client = await _quiet_session(tmp_path, "cat")
        try:
            conv.start_budget(time.monotonic(), 60.0, None)
            s = conv.session
            for n in (1, 2):
                err = {"message": f"Reconnecting... {n}/2", "additionalDetails": CAP_DETAILS}
                await client.notify("error", {"error": err, "willRetry": True})
            failed = {"id": "t1", "status": "failed", "error": {"message": CAP_DETAILS}}
            await client.notify("turn/started", {"turn": {"id": "t1"}})
            await client.notify("turn/completed", {"turn": failed})
            with pytest.raises(RuntimeError, match=DEADLINE_MESSAGE):  # the deadline, not ArmFailure
                await s.wait_turn_end("t1")
            return conv
        finally:
            await client.close(grace=0.1)

    conv = asyncio.run(scenario())
    r = conv.receipt
    assert r.errors == []
    assert r.extra["errors_at_end"] == [
        "error notification (willRetry=True): Reconnecting... 1/2",
        "error notification (willRetry=True): Reconnecting... 2/2",
        f"turn t1 failed: {CAP_DETAILS}",
    ]
    assert conv.session.fatal is None and conv.session.deadline <= time.monotonic()


def test_the_gateways_refusals_that_end_an_attempt_name_their_code_first():
    """The harness knows the end only from codex's error text, which carries the refusal's message."""
    from runner.ops.gateway.server import REFUSAL_TEXT

    for code in WIRE_ENDS:
        assert REFUSAL_TEXT[code].startswith(f"{code}:") and names_wire_end(f"x: {REFUSAL_TEXT[code]}")
    assert not names_wire_end("unexpected status 401 Unauthorized: invalid_api_key")
