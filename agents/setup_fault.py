"""A real setup failure on one pair's first attempt: how ``marathon demo`` shows a voided attempt.

Why a real one: the runner's voiding table (``runner.results.rules.VOIDING``) decides from what harbor
recorded -- an exception while the agent was being set up, before it ran -- and the demo must show
that path as it happens in a benchmark run (a dead registry, a missing mount), not a hand-written
receipt. The agent kwarg ``setup_fault_once=<task>/<arm>@<marker file>`` is given to every arm
alike (one run-wide ``--ak``, so nothing differs between arms); the agent whose trial is that pair
raises in ``setup()`` if it is the first to create the marker, so the rerun sets up normally.
"""

from __future__ import annotations

import os
from pathlib import Path


class InjectedSetupFault(RuntimeError):
    """The agent's setup failed on purpose (demo): harbor records it, the runner voids the attempt."""


def parse(spec: str) -> tuple[str, str, Path]:
    """``task/arm@marker`` -> (task, arm, marker path)."""
    pair, sep, marker = spec.partition("@")
    task, slash, arm = pair.partition("/")
    if not (sep and slash and task and arm and marker):
        raise ValueError(f"setup_fault_once must be <task>/<arm>@<marker file>, not {spec!r}")
    return task, arm, Path(marker)


def task_of_trial(trial_name: str) -> str:
    """harbor names a trial ``<task>__<random>``."""
    return trial_name.rsplit("__", 1)[0]


def maybe_fail(spec: str | None, arm: str, trial_name: str) -> None:
    """Raise once for the named pair: the first setup that creates the marker fails, later ones pass."""
    if not spec:
        return
    task, target_arm, marker = parse(spec)
    if (task, target_arm) != (task_of_trial(trial_name), arm):
        return
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    os.close(fd)
    raise InjectedSetupFault(
        f"injected setup failure for {task}/{arm} (setup_fault_once, first attempt only)"
    )
