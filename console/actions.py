"""The console's actions as plan -> act pairs over ``runner``'s operations (one implementation with the CLI).

Planning freezes exactly what will be touched (PIDs with create times and argv; containers and
networks by id and exact compose label) so the confirmation dialog can show it; acting re-checks
each object just before touching it (that is done inside ``runner.ops.procs``/``runner.ops.cleanup``).
No textual import: the same functions are testable without a screen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STOP = "stop"
KILL = "kill"
CLEANUP = "cleanup"
VOID = "void"
START = "start"

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
    text: str  # the exact plan, as shown in the dialog
    parts: dict[str, Any] = field(default_factory=dict)
    possible: bool = True  # False: nothing to do (the dialog says why and offers only Cancel)

    @property
    def title(self) -> str:
        return TITLES[self.kind]


def _runner_only(plan: Any, runner_pid: int) -> Any:
    plan.targets = [t for t in plan.targets if t.pid == runner_pid]
    return plan


def plan_action(kind: str, out: Path, *, trial_path: str | None = None, reason: str = "") -> Planned:
    """Freeze what ``kind`` would do to ``out`` right now."""
    out = Path(out)
    if kind == STOP:
        from runner.ops.procs import Registry, plan_stop

        entry = Registry(out).runner_entry()
        if entry is None:
            return Planned(
                kind, str(out), "No runner of this tree is alive (by its registry).", possible=False
            )
        from runner.ops.procs import RUNNER_WIND_DOWN_SEC

        plan = _runner_only(plan_stop(out), entry.pid)
        text = (
            f"Send SIGTERM to the runner process alone (not its process group); it stops starting trials,\n"
            f"stops its harbor jobs, cleans up this run's containers and networks, releases its claims and\n"
            f"exits. If it is still running after {RUNNER_WIND_DOWN_SEC:.0f} s it gets SIGKILL (alone too).\n\n"
            f"{plan.render()}"
        )
        return Planned(kind, str(out), text, {"stop": plan}, possible=bool(plan.targets))
    if kind == KILL:
        from runner.ops.kill import plan_kill
        from runner.ops.procs import DEFAULT_GRACE_SEC

        plan = plan_kill(out)
        text = (
            f"The same sequence as `marathon kill --yes`: SIGTERM (by process group where safe), "
            f"{DEFAULT_GRACE_SEC:.0f} s grace, SIGKILL.\n{plan.render()}"
        )
        return Planned(kind, str(out), text, {"kill": plan}, possible=not plan.empty)
    if kind == CLEANUP:
        from runner.ops.cleanup import plan_cleanup

        clean = plan_cleanup(out)
        return Planned(kind, str(out), clean.render(), {"cleanup": clean}, possible=not clean.empty)
    if kind == VOID:
        from runner.ops.void import plan_void

        if not trial_path:
            return Planned(kind, str(out), "Select a trial in the drill-down first.", possible=False)
        plan = plan_void(out, Path(trial_path), reason or "voided by the operator from the console")
        text = (
            plan.render()
            + "\n\nThe trial is moved (never deleted) with a README; the runner reruns the pair in its next pass."
        )
        return Planned(kind, str(out), text, {"void": plan})
    if kind == START:
        from console.starter import plan_start

        argv, why = plan_start(out)
        if argv is None:
            return Planned(kind, str(out), why, possible=False)
        text = f"Start, detached (own session; survives this console and the ssh session):\n  argv {json.dumps(argv)}\n{why}"
        return Planned(kind, str(out), text, {"argv": argv})
    raise ValueError(f"unknown action {kind!r}")


def act(planned: Planned) -> tuple[bool, str]:
    """Carry out a frozen plan; returns (ok, report text)."""
    kind, out = planned.kind, Path(planned.out)
    if kind == STOP:
        from runner.ops.procs import RUNNER_WIND_DOWN_SEC, act_stop

        # the runner alone: its process group may hold helpers it is still using to wind down
        report = act_stop(planned.parts["stop"], grace_sec=RUNNER_WIND_DOWN_SEC, by_group=False)
        return not report.still_alive, report.render()
    if kind == KILL:
        from runner.ops.kill import act_kill
        from runner.ops.procs import DEFAULT_GRACE_SEC

        report = act_kill(planned.parts["kill"], grace_sec=DEFAULT_GRACE_SEC)
        return report.ok, report.render()
    if kind == CLEANUP:
        from runner.ops.cleanup import act_cleanup

        rep = act_cleanup(planned.parts["cleanup"])
        return rep.ok, rep.render()
    if kind == VOID:
        from runner.ops.void import act_void
        from runner.results.events import last_run_id

        dest = act_void(planned.parts["void"], run_id=last_run_id(out))
        return (
            True,
            f"moved to {dest}\nthe runner reruns the pair in its next pass (R starts it if it is not running)",
        )
    if kind == START:
        from console.starter import start_detached

        pid = start_detached(planned.parts["argv"], out)
        return True, f"runner started, PID {pid} (detached; it keeps running when this console quits)"
    raise ValueError(f"unknown action {kind!r}")
