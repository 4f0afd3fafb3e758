"""The one shape of every operator action: plan -> show -> act -> report.

Why: an action that changes the machine (stop the runner, kill a run, remove its Docker objects,
void a trial, start a runner) must show exactly what it will touch before it touches anything,
and then touch exactly that. So every action is a ``Plan``, made without changing anything
(frozen: PIDs with their identities, Docker objects by id and exact label), that renders for a
person, serialises for ``--json`` and says when there is nothing to do; ``act()`` carries out that
plan (each object re-checked just before it is touched) and returns a ``Report``. The CLI and the
console both get their plans from one entry point, ``runner.schedule.actions.plan_action``, and
neither knows which action it holds.
"""

from __future__ import annotations

from typing import Protocol


class Report(Protocol):
    """What acting on a plan did."""

    @property
    def ok(self) -> bool:
        """Everything the plan named was done (nothing left alive, nothing failed to go)."""
        ...

    def render(self) -> str: ...

    def to_json(self) -> dict: ...


class Plan(Protocol):
    """What an action would do, frozen; nothing has been changed yet."""

    @property
    def empty(self) -> bool:
        """Nothing to do (``render`` says why)."""
        ...

    @property
    def listed(self) -> bool:
        """Everything the action covers was seen (False: e.g. a cluster host that did not answer)."""
        ...

    def render(self) -> str:
        """The exact plan, for the person who confirms it."""
        ...

    def to_json(self) -> dict: ...

    def act(self) -> Report:
        """Carry out exactly this plan."""
        ...
