"""The console's actions as plan -> act pairs over ``runner``'s operations (one implementation with the CLI).

Planning freezes exactly what will be touched (PIDs with create times and argv; containers and
networks by id and exact compose label) so the confirmation dialog can show it; acting re-checks
each object just before touching it (that is done inside ``runner.procs``/``runner.cleanup``).
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

#: how long a graceful stop waits for the runner to wind down (it stops its harbor jobs and cleans up)
GRACEFUL_WAIT_SEC = 180.0
KILL_GRACE_SEC = 10.0


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
        from runner.procs import Registry, plan_stop

        entry = Registry(out).runner_entry()
        if entry is None:
            return Planned(
                kind, str(out), "No runner of this tree is alive (by its registry).", possible=False
            )
        plan = _runner_only(plan_stop(out), entry.pid)
        text = (
            f"Send SIGTERM to the runner only; it stops starting trials, stops its harbor jobs, cleans up\n"
            f"this run's containers and networks, releases its claims and exits.\n\n{plan.render()}"
        )
        return Planned(kind, str(out), text, {"stop": plan}, possible=bool(plan.targets))
    if kind == KILL:
        from runner.cleanup import plan_cleanup
        from runner.procs import plan_stop

        stop = plan_stop(out)
        try:
            clean = plan_cleanup(out)
            clean_text = clean.render()
        except Exception as exc:  # noqa: BLE001 - Docker down: still allow stopping processes
            clean, clean_text = None, f"cleanup not possible: {exc}"
        text = f"1. {stop.render()}\n\n2. then {clean_text}"
        possible = bool(stop.targets) or (clean is not None and not clean.empty)
        return Planned(kind, str(out), text, {"stop": stop, "cleanup": clean}, possible=possible)
    if kind == CLEANUP:
        from runner.cleanup import plan_cleanup

        clean = plan_cleanup(out)
        return Planned(kind, str(out), clean.render(), {"cleanup": clean}, possible=not clean.empty)
    if kind == VOID:
        from runner.void import plan_void

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
        from runner.procs import act_stop

        report = act_stop(planned.parts["stop"], grace_sec=GRACEFUL_WAIT_SEC)
        return not report.still_alive, report.render()
    if kind == KILL:
        from runner.procs import act_stop

        lines = []
        report = act_stop(planned.parts["stop"], grace_sec=KILL_GRACE_SEC)
        lines.append("processes:\n" + report.render())
        ok = not report.still_alive
        clean = planned.parts.get("cleanup")
        if clean is not None:
            from runner.cleanup import act_cleanup, plan_cleanup

            rep = act_cleanup(clean)
            lines.append("docker:\n" + rep.render())
            ok = ok and rep.ok
            # objects created between the plan and the stop (a trial that was starting): same exact rule
            late = plan_cleanup(out)
            if not late.empty:
                rep2 = act_cleanup(late)
                lines.append("created after the plan, removed by the same label rule:\n" + rep2.render())
                ok = ok and rep2.ok
        return ok, "\n".join(lines)
    if kind == CLEANUP:
        from runner.cleanup import act_cleanup

        rep = act_cleanup(planned.parts["cleanup"])
        return rep.ok, rep.render()
    if kind == VOID:
        from runner.events import last_run_id
        from runner.void import act_void

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
