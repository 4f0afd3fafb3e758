"""One run of a codex arm, whatever carries it: the receipt, cancellation, errors, a lost
environment and the finish, written once.

Why: every arm must end the same way under the same events -- harbor's cancellation (its agent
timeout or SIGTERM), a failed step, a sandbox that died under the agent, a normal end -- or the
comparison would differ by transport rather than by harness. What differs between transports is
how the conversation reaches codex and how the evidence comes back; that is a ``Carrier``:

- ``agents.docker_exec_run.DockerExecRun``: the host talks to ``codex app-server`` through
  ``docker exec -i`` (harbor's local Docker only; debugging);
- ``agents.sandbox_host.SandboxDriverRun``: the conversation runs inside the sandbox
  (``agents.sandbox_driver``), the host starts, watches and stops it (every harbor environment).

A carrier gets the arm (its public methods) and a ``RunContext``; the envelope owns the receipt's
``stop_reason`` and errors, the ``EnvironmentLost`` verdict (infrastructure, voided by the runner,
never the arm's failure), and the last steps every run takes: the host-side evidence (rollout scan,
ATIF trajectory), the token counts in harbor's context, and the receipt written.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agents.drive import Harness
from agents.session import ArmFailure
from agents.transport import EnvironmentLost
from modes.naming import ENVIRONMENT_LOST
from modes.receipt import Receipt

CANCELLED = "cancelled by harbor (agent timeout or SIGTERM)"


class Arm(Protocol):
    """What a carrier and the envelope use of an arm (``agents.base_codex.CodexAppServerAgent``):
    its settings, its receipt, and the steps that are the arm's whatever the transport."""

    ARM: str
    logs_dir: Path
    receipt: Receipt | None
    codex_bin: str
    codex_version: str
    codex_home: str
    goal_timeout_sec: float | None
    zero_token_limit: int
    conversation: Any  # agents.conversation.Conversation once a session is open (docker-exec)

    def trial_name(self) -> str: ...
    def harbor_sec(self) -> float | None: ...
    def credential(self) -> dict[str, str]: ...
    def harness(self) -> Harness: ...
    def appserver_env(self) -> dict[str, str]: ...
    def config_toml(self, workdir: str) -> str: ...
    def sandbox_evidence(self) -> list[tuple[str, str]]: ...
    def record_codex_sha256(self) -> None: ...
    async def prepare(self, transport: Any) -> None: ...
    async def open_session(
        self, transport: Any, *, deadline: float | None = None, context: Any = None
    ) -> Any: ...
    async def drive(self, session: Any, instruction: str) -> None: ...
    def save_evidence(self, transport: Any, receipt: Receipt) -> None: ...
    def usage_to_context(self, total: dict, context: Any) -> None: ...
    def begin_receipt(self) -> Receipt: ...
    def finish_evidence(self, receipt: Receipt, context: Any) -> ArmFailure | None: ...
    def finish_receipt(self, receipt: Receipt, t0: float) -> None: ...


@dataclass
class RunContext:
    """What a carrier needs of the run it carries: the task, harbor's environment and context, the
    receipt being written and when the run began."""

    instruction: str
    environment: Any  # harbor's BaseEnvironment
    harbor: Any  # harbor's AgentContext: token counts and cost
    receipt: Receipt
    t0: float  # monotonic

    @property
    def deadline(self) -> float | None:
        """The arm's own deadline (monotonic), from the receipt's budget."""
        sec = self.receipt.goal_timeout_sec
        return self.t0 + sec if sec else None


class Carrier(Protocol):
    """One transport's part of an arm's run (see the module docstring)."""

    async def run(self, run: RunContext) -> ArmFailure | None:
        """Connect, prepare and drive the conversation to its end; a failure the arm reported
        without raising (e.g. the in-sandbox driver's) is returned, raised after the evidence."""
        ...

    async def cancelled(self, run: RunContext) -> None:
        """harbor cancelled the run: stop what runs (bounded; it runs under cancellation)."""
        ...

    async def failed(self, run: RunContext, exc: BaseException) -> str | None:
        """A step raised: stop what runs, and say why the environment is gone (None: it is not)."""
        ...

    async def collect(self, run: RunContext) -> None:
        """The evidence back to the trial's agent dir, and the agent phase's leftover processes
        ended. A carrier whose arm kept a receipt of its own elsewhere (the in-sandbox driver's)
        merges it into ``run.receipt``, also when a step here was cut short."""
        ...


def _being_cancelled() -> bool:
    """This task has a cancellation pending (``Task.cancelling``): harbor is ending the run."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def run_arm(arm: Arm, carrier: Carrier, instruction: str, environment, context) -> None:
    """``CodexAppServerAgent.run``: the envelope around one carrier."""
    t0 = time.monotonic()
    run = RunContext(instruction, environment, context, arm.begin_receipt(), t0)
    arm.receipt = run.receipt
    failure: ArmFailure | None = None
    try:
        failure = await carrier.run(run)
    except (asyncio.CancelledError, KeyboardInterrupt):  # harbor's SIGTERM handler raises the latter
        run.receipt.stop_reason = "cancelled"
        run.receipt.errors.append(CANCELLED)
        await carrier.cancelled(run)
        raise
    except Exception as exc:
        if _being_cancelled():
            # harbor's cancellation reached a step first as that step's own error (its SIGTERM
            # handler raises KeyboardInterrupt out of the loop, which then cancels every task at
            # once: a stream's reader task may end before this one sees its CancelledError): the
            # run was cancelled, and the step's error is kept beside it
            run.receipt.stop_reason = "cancelled"
            run.receipt.errors += [CANCELLED, f"{type(exc).__name__}: {exc}"]
            await carrier.cancelled(run)
            raise
        run.receipt.stop_reason = "error"
        if str(exc) not in run.receipt.errors:
            run.receipt.errors.append(f"{type(exc).__name__}: {exc}")
        lost = await carrier.failed(run, exc)
        if lost is not None and not isinstance(exc, EnvironmentLost):
            # the sandbox failed under the agent: infrastructure, not the arm
            run.receipt.errors.append(f"{ENVIRONMENT_LOST}: {lost}")
            raise EnvironmentLost(f"{lost}; the step failed with {type(exc).__name__}: {exc}") from exc
        raise
    finally:
        # a second cancellation here (harbor shutting down) must not cost the evidence: every
        # carrier step is bounded; the receipt is written synchronously, last
        try:
            await carrier.collect(run)
        finally:
            receipt = arm.receipt = run.receipt
            deferred = arm.finish_evidence(receipt, context)
            if receipt.token_usage:
                arm.usage_to_context(receipt.token_usage, context)
            arm.finish_receipt(receipt, t0)
    if failure is not None:
        raise failure
    if deferred is not None:
        raise deferred
