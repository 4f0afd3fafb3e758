"""Small harbor agents for tests: real harbor trials that crash, time out, exit non-zero or half-solve.

Run them with ``harbor run -a tests.harbor_agents:<Class>`` from the repo root (or with the repo on
PYTHONPATH). They make the errored and partial trials that oracle and nop cannot, on the real engine.
"""

from __future__ import annotations

import asyncio
import json

from harbor.agents.base import BaseAgent
from harbor.agents.installed.base import NonZeroAgentExitCodeError
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext


class _TestAgent(BaseAgent):
    def version(self) -> str:
        return "0.1.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None


class CrashAgent(_TestAgent):
    """Raises a plain RuntimeError: harbor records it and skips the verifier (verifier_result null)."""

    @staticmethod
    def name() -> str:
        return "crash"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        context.n_input_tokens = 7  # set before the failure: harbor keeps it
        raise RuntimeError("boom: test agent crashed on purpose")


class SleepAgent(_TestAgent):
    """Sleeps past its timeout (run with ``--agent-timeout-multiplier``): AgentTimeoutError, verified."""

    @staticmethod
    def name() -> str:
        return "sleeper"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        await asyncio.sleep(600)


class ExitAgent(_TestAgent):
    """Exits non-zero the way installed agents do: NonZeroAgentExitCodeError, then verified."""

    @staticmethod
    def name() -> str:
        return "exit1"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        raise NonZeroAgentExitCodeError("agent command exited with code 1")


#: What PartialAgent writes as its receipt (the figures the results model reads).
PARTIAL_RECEIPT = {
    "schema": "marathon-test-receipt",
    "arm": "partial",
    "turns": 3,
    "continuations": 2,
    "unblocks": 1,
    "errors": [{"kind": "test", "message": "one error event"}],
    "final_goal_status": "complete",
}


class PartialAgent(_TestAgent):
    """Half-solves calc-partial (adds ``sub``: 2 of 5 checks), records tokens/cost and a goal receipt."""

    @staticmethod
    def name() -> str:
        return "partial"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        code = "\\n\\ndef sub(a, b):\\n    return a - b\\n"
        await environment.exec(f"test -f /app/calc.py && printf '{code}' >> /app/calc.py || true")
        context.n_input_tokens = 1200
        context.n_output_tokens = 300
        context.cost_usd = 0.0125
        (self.logs_dir / "goal_receipt.json").write_text(json.dumps(PARTIAL_RECEIPT))
