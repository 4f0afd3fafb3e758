"""How the arm envelope (agents.envelope.run_arm) names the end of a run when harbor cancels it.

harbor's SIGTERM handler raises KeyboardInterrupt out of its loop, which then cancels every task at
once; a step of the arm may see its own stream fail (a pipe to a process already gone) before its
task sees the CancelledError. That run was cancelled, not an error of the arm: the receipt says
"cancelled" and keeps the step's error beside it. A step that fails with no cancellation pending
stays an error. The carrier here is a real child process (``cat``) read and written through
asyncio's pipes; the arm is the real goal arm writing its real receipt.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from harbor.models.agent.context import AgentContext

from agents.codex_goal_agent import CodexGoalAgent
from agents.envelope import CANCELLED, run_arm
from modes.receipt import RECEIPT_NAME


class PipeCarrier:
    """Reads a child's stdout until cancelled; on the way out writes to the child it has killed, so
    the cleanup of the step fails with the pipe's own error (as a stream to a dead app-server does)."""

    def __init__(self, fail_on_cleanup: bool) -> None:
        self.fail_on_cleanup = fail_on_cleanup
        self.reading = asyncio.Event()
        self.cancelled_called = False

    async def run(self, run):
        proc = await asyncio.create_subprocess_exec(
            "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        try:
            self.reading.set()
            await proc.stdout.read()
        finally:
            proc.kill()
            await proc.wait()
            if self.fail_on_cleanup:
                proc.stdin.write(b"the app-server is gone\n" * 20_000)
                await proc.stdin.drain()  # BrokenPipeError / ConnectionResetError: a real pipe's
        return None

    async def cancelled(self, run) -> None:
        self.cancelled_called = True

    async def failed(self, run, exc) -> str | None:
        return None

    async def collect(self, run) -> None:
        return None


async def _cancel_while_reading(agent: CodexGoalAgent, carrier: PipeCarrier) -> BaseException | None:
    task = asyncio.create_task(run_arm(agent, carrier, "solve it", None, AgentContext()))
    await carrier.reading.wait()
    await asyncio.sleep(0)  # the read is pending
    task.cancel()
    try:
        await task
    except BaseException as exc:  # noqa: BLE001 - what the envelope let out is the subject
        return exc
    return None


def _receipt(agent: CodexGoalAgent) -> dict:
    return json.loads((agent.logs_dir / RECEIPT_NAME).read_text())


@pytest.fixture
def agent(tmp_path) -> CodexGoalAgent:
    return CodexGoalAgent(logs_dir=tmp_path / "agent", model_name="scripted/solve", api_key_var="K")


def test_a_step_failing_while_harbor_cancels_is_recorded_as_the_cancellation(agent):
    carrier = PipeCarrier(fail_on_cleanup=True)
    exc = asyncio.run(_cancel_while_reading(agent, carrier))
    assert isinstance(exc, OSError), exc  # the step's own error left the envelope
    rec = _receipt(agent)
    assert rec["stop_reason"] == "cancelled", rec["errors"]
    assert rec["errors"][0] == CANCELLED and type(exc).__name__ in rec["errors"][1]
    assert carrier.cancelled_called


def test_a_plain_cancellation_is_the_cancellation(agent):
    carrier = PipeCarrier(fail_on_cleanup=False)
    exc = asyncio.run(_cancel_while_reading(agent, carrier))
    assert isinstance(exc, asyncio.CancelledError), exc
    rec = _receipt(agent)
    assert (rec["stop_reason"], rec["errors"]) == ("cancelled", [CANCELLED])


def test_a_step_failing_with_no_cancellation_is_an_error(agent):
    class Failing(PipeCarrier):
        async def run(self, run):
            proc = await asyncio.create_subprocess_exec("cat", stdin=asyncio.subprocess.PIPE)
            proc.kill()
            await proc.wait()
            proc.stdin.write(b"x" * 1_000_000)
            await proc.stdin.drain()

    carrier = Failing(fail_on_cleanup=True)

    async def go():
        return await run_arm(agent, carrier, "solve it", None, AgentContext())

    with pytest.raises(OSError):
        asyncio.run(go())
    rec = _receipt(agent)
    assert rec["stop_reason"] == "error" and CANCELLED not in rec["errors"], rec["errors"]
    assert not carrier.cancelled_called


def test_harbors_cancellation_wins_over_the_drivers_error_on_the_way_down():
    """The in-sandbox driver's receipt merged into the host's: when harbor cancelled the run, the host
    stopped the driver, whose app-server then closed under it (``AppServerClosed``, an error in the
    driver's receipt): the attempt was cancelled (CI: ``stop_reason`` 'error' once in 150)."""
    from agents.sandbox_host import merged_stop_reason

    assert merged_stop_reason("cancelled", "error") == "cancelled"
    assert merged_stop_reason("cancelled", "done") == "cancelled"
    assert merged_stop_reason("error", "done") == "error"
    assert merged_stop_reason(None, "deadline") == "deadline"
    assert merged_stop_reason("done", "error") == "error"
