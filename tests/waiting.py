"""Waiting for a condition in a test: poll it, fail with what was awaited (never a guessed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for[T](pred: Callable[[], T], timeout: float, what: str, step: float = 0.5) -> T:
    """``pred()``'s first truthy value within ``timeout`` seconds, polled every ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
