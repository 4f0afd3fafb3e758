"""Waiting for a condition in a test: poll it, fail with what was awaited (never a guessed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: how long a test waits for what another process does in its own time (a ledger line written after
#: the answer, a socket bound, a gateway gone): generous, since a wait ends as soon as its condition
#: holds and costs nothing then. Under a load of 17 (a fast tier beside CI's Docker tier) fsyncs and
#: process starts take seconds; a gateway test failed once there (not captured: its 5-10 s waits are
#: the likeliest cause).
SETTLE = 60.0


def wait_for[T](pred: Callable[[], T], timeout: float, what: str, step: float = 0.5) -> T:
    """``pred()``'s first truthy value within ``timeout`` seconds, polled every ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
