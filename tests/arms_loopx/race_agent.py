"""A LoopX arm whose instruction reaches codex only after the goal turn codex auto-started has ended.

This pins, by waiting on app-server events (never on time), the ordering a fresh fast machine produced
once: the scripted model blocked the goal and ended that goal turn before codex handled the harness's
turn/start, so the instruction ran as a turn of its own on the blocked goal, the model completed the
goal inside it, and the harness never saw ``blocked`` at a quiet moment. The product code is unchanged
but for one step: the goal is set alone, the instruction's ``turn/start`` waits for the goal turn's
end, and returns once its own turn is running (the product writes the two requests back to back,
which makes this ordering rarer, not impossible: it is codex's).
"""

from __future__ import annotations

from agents.codex_loopx_agent import CodexLoopxAgent
from agents.session import CodexSession


class InstructionAfterGoalTurnAgent(CodexLoopxAgent):
    async def open_session(self, transport, **kwargs) -> CodexSession:
        session = await super().open_session(transport, **kwargs)

        async def goal_set_and_turn_start(objective: str, text: str) -> str:
            await session.goal_set(objective)
            while not session.completed:  # the auto-started goal turn has ended
                await session._next()
            tid = await session.turn_start(text)
            while session.active_turn != tid:  # our turn is running when the harness first looks
                await session._next()
            return tid

        session.goal_set_and_turn_start = goal_set_and_turn_start
        return session
