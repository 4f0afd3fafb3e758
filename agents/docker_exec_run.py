"""The ``docker-exec`` carrier of an arm's run (``--ak transport=docker-exec``): the host's
app-server client reaches codex through ``docker exec -i`` (agents.transport), on harbor's local
Docker environment only.

The run itself -- the receipt, cancellation, errors, a lost environment, the finish -- is the one
envelope every arm shares (agents.envelope); here is only what this transport does: connect to
the trial's main container, record its image, prepare the arm, open the session and drive it; on a
failure stop codex before asking the engine whether the container is still there; at the end copy
the evidence out (synchronous, safe under cancellation) and end what the agent phase left running.
"""

from __future__ import annotations

from agents import leftovers
from agents.conversation import Conversation
from agents.envelope import Arm, RunContext
from agents.session import ArmFailure
from agents.transport import Transport, transport_for
from modes.receipt import Receipt


def processes_now(transport: Transport) -> frozenset[str] | None:
    """The container's processes as the arm begins (agents.leftovers); None if not listable."""
    try:
        r = transport.run(["sh", "-c", leftovers.list_command()], user="0", timeout=60)
    except Exception:  # noqa: BLE001 - then no sweep, and the receipt says so (leftovers.UNLISTED)
        return None
    return leftovers.parse_listing(r.stdout.decode(errors="replace")) or None


def end_leftovers(transport: Transport, before: frozenset[str] | None, receipt: Receipt) -> None:
    """Synchronous (safe under cancellation): the agent phase's processes end before the verifier."""
    if before is None:
        leftovers.record(receipt, leftovers.UNLISTED)
        return
    try:
        r = transport.run(["sh", "-c", leftovers.sweep_command(before)], user="0", timeout=60)
        rec = leftovers.sweep_record(r.returncode, r.stdout.decode(errors="replace"))
    except Exception as exc:  # noqa: BLE001 - recorded, never silent
        rec = {"rule": leftovers.RULE, "ended": 0, "incomplete": f"{type(exc).__name__}: {exc}"}
    leftovers.record(receipt, rec)


class DockerExecRun:
    """An ``agents.envelope.Carrier`` over ``docker exec -i``."""

    def __init__(self, arm: Arm) -> None:
        self.arm = arm
        self.transport: Transport | None = None
        self.conv: Conversation | None = None
        self.before: frozenset[str] | None = None

    async def run(self, run: RunContext) -> ArmFailure | None:
        arm, receipt = self.arm, run.receipt
        if getattr(arm, "gateway", None):
            raise ArmFailure(
                f"--ak gateway={arm.gateway} needs the in-sandbox driver (it runs the relay to the "
                "gateway): drop --ak transport=docker-exec, or run without the gateway (--no-gateway)"
            )
        t = self.transport = transport_for(run.environment, arm.trial_name())
        receipt.transport = t.describe()
        self.before = processes_now(t)
        image = t.image()
        if image is not None:
            receipt.image_digest = image["content_sha256"]
            receipt.extra["image_id"] = image["id"]
        await arm.prepare(t)
        await arm.open_session(t, deadline=run.deadline, context=run.harbor)
        self.conv = arm.conversation
        assert self.conv is not None
        self.conv.start_budget(run.t0, arm.goal_timeout_sec, arm.harbor_sec())
        await self.conv.drive(arm.drive, run.instruction)
        return None

    async def cancelled(self, run: RunContext) -> None:
        pass  # collect() ends the conversation, synchronously

    async def failed(self, run: RunContext, exc: BaseException) -> str | None:
        if self.conv is not None:  # stop codex first: asking the engine takes time it would fill with turns
            self.conv.finish()
        return self.transport.lost() if self.transport is not None else None

    async def collect(self, run: RunContext) -> None:
        if self.conv is not None:
            self.conv.finish()
        if self.transport is None:
            return
        self.arm.save_evidence(self.transport, run.receipt)
        end_leftovers(self.transport, self.before, run.receipt)
