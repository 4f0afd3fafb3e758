"""Arm ``goal``: codex's native goal over app-server, codex owns continuation.

``thread/goal/set`` with the fixed objective from the Mode ("Finish the task."; codex caps
objectives at 4,000 characters, so the whole instruction goes into the turn), then ``turn/start``
with the instruction (it merges into the goal turn codex auto-starts). codex continues by itself
until the goal is no longer active (complete, blocked, paused, budget-limited) or the deadline.
"""

from __future__ import annotations

from agents.base_codex import CodexAppServerAgent
from agents.drive import DEFAULT_OBJECTIVE, GoalHarness, Harness


class CodexGoalAgent(CodexAppServerAgent):
    ARM = "goal"

    @staticmethod
    def name() -> str:
        return "codex-goal"

    def harness(self) -> Harness:
        return GoalHarness(
            self.receipt, (self.mode.goal_objective if self.mode else None) or DEFAULT_OBJECTIVE
        )
