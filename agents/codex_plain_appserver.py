"""Arm ``plain``: bare codex over app-server -- one thread, one turn with the task instruction, no goal.

It goes through app-server (not ``codex exec``) so that all arms share one transport; the Mode
discloses this substitution in every receipt.
"""

from __future__ import annotations

from agents.base_codex import CodexAppServerAgent
from agents.session import CodexSession


class CodexPlainAppServer(CodexAppServerAgent):
    ARM = "plain"

    @staticmethod
    def name() -> str:
        return "codex-plain-appserver"

    async def drive(self, session: CodexSession, instruction: str) -> None:
        await session.thread_start()
        turn_id = await session.turn_start(instruction)
        turn = await session.wait_turn_end(turn_id)
        self.receipt.stop_reason = f"turn_{turn.get('status')}"
