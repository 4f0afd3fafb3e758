"""The console's actions: the runner's plans (``runner.schedule.actions``), titled for the dialog.

Each key asks the one entry point the CLI also asks (``plan_action``): start, stop the runner
alone, kill, cleanup and void, on one host or, for a cluster run, host by host. Planning freezes
exactly what will be touched (PIDs with create times and argv; containers and networks by id and
exact compose label) so the confirmation dialog can show it; acting re-checks each object just
before touching it. Nothing here decides what to touch, and nothing here knows which action it
holds beyond its title. No textual import: the same functions are testable without a screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.ops.plan import Plan
from runner.schedule import actions
from runner.schedule.actions import CLEANUP, KILL, START, STOP, VOID

__all__ = ["CLEANUP", "KILL", "START", "STOP", "VOID", "TITLES", "Planned", "plan_action", "act"]

TITLES = {
    STOP: "Stop the runner gracefully",
    KILL: "Kill: stop the runner and its trials, then remove this run's containers and networks",
    CLEANUP: "Cleanup only: remove this run's containers and compose networks",
    VOID: "Void this trial and rerun the pair",
    START: "Start the runner (detached)",
}


@dataclass
class Planned:
    kind: str
    out: str
    plan: Plan

    @property
    def title(self) -> str:
        return TITLES[self.kind]

    @property
    def text(self) -> str:
        """The exact plan, as shown in the dialog."""
        return self.plan.render()

    @property
    def possible(self) -> bool:
        """False: nothing to do (the dialog says why and offers only Cancel)."""
        return not self.plan.empty


def plan_action(kind: str, out: Path, *, trial_path: str | None = None) -> Planned:
    """Freeze what ``kind`` would do to ``out`` right now (a trial's void: ``trial_path``)."""
    options = {"trial": trial_path, "reason": "voided by the operator from the console"} if trial_path else {}
    return Planned(kind, str(out), actions.plan_action(kind, Path(out), **options))


def act(planned: Planned) -> tuple[bool, str]:
    """Carry out a frozen plan; returns (ok, report text)."""
    report = planned.plan.act()
    return report.ok, report.render()
