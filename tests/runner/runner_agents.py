"""Harbor agents the runner tests use as arms (real harbor trials, real Docker).

Importable as ``tests.runner.runner_agents:<Class>`` with the repo root on PYTHONPATH (the runner
puts it there for its harbor jobs).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

#: env var naming a marker file: the first FlakySetupAgent setup that finds it absent creates it and fails
FAIL_ONCE_ENV = "MARATHON_TEST_FAIL_ONCE"
#: env var naming a file: GatedAgent works until it exists (the test opens the gate)
GATE_ENV = "MARATHON_TEST_GATE"
#: the longest a GatedAgent waits for its gate, when ``sleep_sec`` does not say
GATE_MAX_SEC = 900.0


class _Base(BaseAgent):
    def __init__(self, *args, goal_timeout_sec: int | None = None, sleep_sec: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.goal_timeout_sec = goal_timeout_sec
        self.sleep_sec = float(sleep_sec)

    def version(self) -> str:
        return "0.1.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        return None


class FlakySetupAgent(_Base):
    """Fails its setup once (an infrastructure-like failure before the agent runs), then acts like nop."""

    @staticmethod
    def name() -> str:
        return "flaky-setup"

    async def setup(self, environment: BaseEnvironment) -> None:
        marker = os.environ.get(FAIL_ONCE_ENV)
        if marker:
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return None
            os.close(fd)
            raise RuntimeError("simulated agent setup failure (test marker)")
        return None


class GoalSleeperAgent(_Base):
    """Works until its goal deadline (``goal_timeout_sec``, or ``sleep_sec`` if shorter) and then
    returns normally, as the arms do when their budget is exhausted: the verifier scores it."""

    @staticmethod
    def name() -> str:
        return "goal-sleeper"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        budget = self.goal_timeout_sec if self.goal_timeout_sec is not None else self.sleep_sec
        wait = min(x for x in (budget, self.sleep_sec or budget) if x is not None)
        await environment.exec(f"echo working until the deadline: {wait}s > /logs/agent/sleeper.txt")
        await asyncio.sleep(wait)
        Path(self.logs_dir / "deadline.txt").write_text(f"budget exhausted after {wait}s\n")


class GatedAgent(_Base):
    """Works until the file ``$MARATHON_TEST_GATE`` names exists (at most ``sleep_sec``, else
    ``GATE_MAX_SEC``), then returns normally and the verifier scores it: a test decides when its
    trials may end, so the state it kills the runner in cannot move on meanwhile."""

    @staticmethod
    def name() -> str:
        return "gated"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        gate = os.environ.get(GATE_ENV)
        deadline = time.monotonic() + (self.sleep_sec or GATE_MAX_SEC)
        while gate and not os.path.exists(gate) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        Path(self.logs_dir / "gate.txt").write_text(
            f"gate {gate} open: {bool(gate and os.path.exists(gate))}\n"
        )
