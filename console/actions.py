"""The console's actions: the runner's plan -> act operations, named and worded for the dialog.

Each action is one runner operation, the same one the CLI runs: start (``runner.schedule.start``),
stop the runner alone (``runner.ops.stop``), kill (``runner.ops.kill``), cleanup
(``runner.ops.cleanup``) and void (``runner.ops.void``); kill and cleanup of a cluster run
(``run --cluster``) plan and act host by host (``runner.schedule.fleet.hostops``). Planning freezes exactly what will be
touched (PIDs with create times and argv; containers and networks by id and exact compose label) so
the confirmation dialog can show it; acting re-checks each object just before touching it. Nothing
here decides what to touch. No textual import: the same functions are testable without a screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.ops.cleanup import CleanupPlan
    from runner.ops.kill import KillPlan
    from runner.ops.stop import RunnerStopPlan
    from runner.ops.void import VoidPlan
    from runner.schedule.fleet.hostops import HostsCleanupPlan, HostsKillPlan
    from runner.schedule.start import StartPlan

    #: the runner's own plan of one action, exactly what the dialog shows and ``act`` carries out
    Plan = RunnerStopPlan | KillPlan | CleanupPlan | VoidPlan | StartPlan | HostsKillPlan | HostsCleanupPlan

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
    plan: Plan | None = None  # None: nothing to act on (``possible`` is False)
    possible: bool = True  # False: nothing to do (the dialog says why and offers only Cancel)

    @property
    def title(self) -> str:
        return TITLES[self.kind]


def plan_action(kind: str, out: Path, *, trial_path: str | None = None, reason: str = "") -> Planned:
    """Freeze what ``kind`` would do to ``out`` right now."""
    out = Path(out)
    if kind == STOP:
        from runner.ops.stop import plan_stop_runner

        plan = plan_stop_runner(out)
        return Planned(kind, str(out), plan.render(), plan, possible=plan.possible)
    if kind in (KILL, CLEANUP):
        from runner.schedule.fleet.probe import tree_cluster

        cluster = tree_cluster(out)
        if cluster:
            return _plan_on_hosts(kind, out, cluster)
    if kind == KILL:
        from runner.ops.kill import plan_kill
        from runner.ops.procs import DEFAULT_GRACE_SEC

        plan = plan_kill(out)
        text = (
            f"The same sequence as `marathon kill --yes`: SIGTERM (by process group where safe), "
            f"{DEFAULT_GRACE_SEC:.0f} s grace, SIGKILL.\n{plan.render()}"
        )
        return Planned(kind, str(out), text, plan, possible=not plan.empty)
    if kind == CLEANUP:
        from runner.ops.cleanup import plan_cleanup

        clean = plan_cleanup(out)
        return Planned(kind, str(out), clean.render(), clean, possible=not clean.empty)
    if kind == VOID:
        from runner.ops.void import plan_void

        if not trial_path:
            return Planned(kind, str(out), "Select a trial in the drill-down first.", possible=False)
        plan = plan_void(out, Path(trial_path), reason or "voided by the operator from the console")
        text = (
            plan.render()
            + "\n\nThe trial is moved (never deleted) with a README; the runner reruns the pair in its next pass."
        )
        return Planned(kind, str(out), text, plan)
    if kind == START:
        from runner.schedule.start import plan_start

        plan = plan_start(out)
        return Planned(kind, str(out), plan.render(), plan, possible=plan.possible)
    raise ValueError(f"unknown action {kind!r}")


def _plan_on_hosts(kind: str, out: Path, cluster: str) -> Planned:
    """A cluster run's kill or cleanup: each host's plan made on that host (``runner.schedule.fleet.hostops``,
    what ``marathon kill|cleanup`` of the tree runs), every object led by its host."""
    from runner.ops.procs import DEFAULT_GRACE_SEC
    from runner.schedule.fleet import hostops

    if kind == KILL:
        plan = hostops.plan_kill_hosts(cluster, out)
        text = (
            f"The same sequence as `marathon kill --yes` of a cluster run: the runner here, then each host's "
            f"own plan on that host (SIGTERM, {DEFAULT_GRACE_SEC:.0f} s grace, SIGKILL; then its removals), "
            f"then the tree's Ray jobs stopped and each host cleaned once more.\n{plan.render()}"
        )
        return Planned(kind, str(out), text, plan, possible=not plan.empty)
    clean = hostops.plan_cleanup_hosts(cluster, out)
    return Planned(kind, str(out), clean.render(), clean, possible=not clean.empty)


def act(planned: Planned) -> tuple[bool, str]:
    """Carry out a frozen plan; returns (ok, report text)."""
    kind, out = planned.kind, Path(planned.out)
    from runner.schedule.fleet import hostops

    if isinstance(planned.plan, hostops.HostsKillPlan):
        from runner.ops.procs import DEFAULT_GRACE_SEC

        report = hostops.act_kill_hosts(planned.plan, DEFAULT_GRACE_SEC)
        return report.ok, report.render()
    if isinstance(planned.plan, hostops.HostsCleanupPlan):
        done = hostops.act_cleanup_hosts(planned.plan)
        return hostops.cleanup_hosts_ok(done), hostops.render_cleanup_reports(done)
    if kind == STOP:
        from runner.ops.stop import act_stop_runner

        report = act_stop_runner(planned.plan)
        return not report.still_alive, report.render()
    if kind == KILL:
        from runner.ops.kill import act_kill
        from runner.ops.procs import DEFAULT_GRACE_SEC

        report = act_kill(planned.plan, grace_sec=DEFAULT_GRACE_SEC)
        return report.ok, report.render()
    if kind == CLEANUP:
        from runner.ops.cleanup import act_cleanup

        rep = act_cleanup(planned.plan)
        return rep.ok, rep.render()
    if kind == VOID:
        from runner.ops.void import act_void
        from runner.results.events import last_run_id

        dest = act_void(planned.plan, run_id=last_run_id(out))
        return (
            True,
            f"moved to {dest}\nthe runner reruns the pair in its next pass (R starts it if it is not running)",
        )
    if kind == START:
        from runner.schedule.start import act_start

        pid = act_start(planned.plan)
        return True, f"runner started, PID {pid} (detached; it keeps running when this console quits)"
    raise ValueError(f"unknown action {kind!r}")
