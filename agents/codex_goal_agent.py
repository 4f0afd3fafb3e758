"""Arm ``goal``: codex's native goal over app-server, codex owns continuation.

``thread/goal/set`` with the fixed objective from the Mode ("Finish the task."; codex caps
objectives at 4,000 characters, so the whole instruction goes into the turn), then ``turn/start``
with the instruction (it merges into the goal turn codex auto-starts). codex continues by itself
until the goal is no longer active (complete, blocked, paused, budget-limited) or the deadline.
"""

from __future__ import annotations

from agents.base_codex import CodexAppServerAgent
from agents.session import CodexSession

DEFAULT_OBJECTIVE = "Finish the task."


class CodexGoalAgent(CodexAppServerAgent):
    ARM = "goal"

    @staticmethod
    def name() -> str:
        return "codex-goal"

    async def drive(self, session: CodexSession, instruction: str) -> None:
        objective = (self.mode.goal_objective if self.mode else None) or DEFAULT_OBJECTIVE
        await session.thread_start()
        await session.goal_set(objective)
        await session.turn_start(instruction)
        status = await session.follow_goal()
        self.receipt.stop_reason = f"goal_{status}"
