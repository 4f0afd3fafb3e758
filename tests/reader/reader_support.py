"""Helpers shared by the reader's Pilot tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def run_async(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


async def wait_for(
    pilot, predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Let the app process messages until ``predicate()`` holds (a generous timeout, never a speed target)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.1)
