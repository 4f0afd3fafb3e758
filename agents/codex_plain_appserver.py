"""Arm ``plain``: bare codex over app-server -- one thread, one turn with the task instruction, no goal.

It goes through app-server (not ``codex exec``) so that all arms share one transport; the Mode
discloses this substitution in every receipt.
"""

from __future__ import annotations

from agents.base_codex import CodexAppServerAgent
from agents.drive import Harness, PlainHarness


class CodexPlainAppServer(CodexAppServerAgent):
    ARM = "plain"

    @staticmethod
    def name() -> str:
        return "codex-plain-appserver"

    def harness(self) -> Harness:
        return PlainHarness(self.receipt)
