"""The kill sequence of a run, as plan -> act: stop its processes, then remove its Docker objects.

One implementation for ``marathon kill`` and the console's Kill action, so both wait the same
grace (``runner.ops.procs.DEFAULT_GRACE_SEC``) and remove the same objects:

1. TERM the run's processes (registered identities and their descendants; by process group where
   no protected process shares it), wait the grace, KILL what is left (runner.ops.procs);
2. remove the frozen plan's containers, networks and images (runner.ops.cleanup, each re-checked by its
   exact compose label just before removal);
3. plan once more by the same label rule and remove what appeared between the plan and the stop
   (a trial that was starting its compose project).

Without Docker the processes are still stopped and the report says why nothing was cleaned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.errors import Unavailable
from runner.ops.cleanup import CleanupPlan, CleanupReport, act_cleanup, plan_cleanup
from runner.ops.procs import DEFAULT_GRACE_SEC, StopPlan, StopReport, act_stop, plan_stop


@dataclass
class KillPlan:
    """One host's kill, frozen (a ``runner.ops.plan.Plan``): the processes to stop, then the
    Docker objects to remove."""

    out: str
    stop: StopPlan
    cleanup: CleanupPlan | None
    docker_error: str | None = None
    grace_sec: float = DEFAULT_GRACE_SEC
    listed = True

    @property
    def empty(self) -> bool:
        return not self.stop.targets and (self.cleanup is None or self.cleanup.empty)

    def render(self) -> str:
        clean = self.cleanup.render() if self.cleanup else f"cleanup not possible: {self.docker_error}"
        return (
            f"SIGTERM (by process group where safe), {self.grace_sec:.0f} s grace, SIGKILL; then the removals.\n"
            f"1. {self.stop.render()}\n\n2. then {clean}"
        )

    def act(self) -> KillReport:
        return act_kill(self)

    def to_json(self) -> dict:
        return {
            "out": self.out,
            "stop_plan": self.stop.to_json(),
            "cleanup_plan": self.cleanup.to_json() if self.cleanup else None,
            "docker_error": self.docker_error,
        }

    @classmethod
    def from_json(cls, d: dict) -> KillPlan:
        """The plan a cluster host made, sent back to that host to act on (``runner.schedule.fleet.probe``)."""
        cleanup = d.get("cleanup_plan")
        return cls(
            str(d["out"]),
            StopPlan.from_json(d["stop_plan"]),
            CleanupPlan.from_json(cleanup) if cleanup is not None else None,
            d.get("docker_error"),
        )


@dataclass
class KillReport:
    stop: StopReport
    cleanup: CleanupReport | None = None
    late_plan: CleanupPlan | None = None
    late: CleanupReport | None = None
    docker_error: str | None = None

    @property
    def ok(self) -> bool:
        """Nothing left alive, and the Docker cleanup ran and removed all it had to."""
        if self.stop.still_alive or self.docker_error is not None:
            return False
        return all(r.ok for r in (self.cleanup, self.late) if r is not None)

    def render(self) -> str:
        lines = ["processes:", self.stop.render()]
        if self.cleanup is not None:
            lines += ["docker:", self.cleanup.render()]
        if self.late is not None:
            lines += ["created after the plan, removed by the same label rule:", self.late.render()]
        if self.docker_error:
            lines.append(f"cleanup: {self.docker_error}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "stop_report": self.stop.to_json(),
            "cleanup_report": self.cleanup.to_json() if self.cleanup else None,
            "cleanup_plan_after_stop": self.late_plan.to_json() if self.late_plan else None,
            "late_cleanup_report": self.late.to_json() if self.late else None,
            "docker_error": self.docker_error,
            "ok": self.ok,
        }

    @classmethod
    def from_json(cls, d: dict) -> KillReport:
        """The report a cluster host sent back (``runner.schedule.fleet.probe``)."""

        def rep(k: str) -> CleanupReport | None:
            return CleanupReport.from_json(d[k]) if d.get(k) is not None else None

        late = d.get("cleanup_plan_after_stop")
        return cls(
            StopReport.from_json(d["stop_report"]),
            rep("cleanup_report"),
            CleanupPlan.from_json(late) if late is not None else None,
            rep("late_cleanup_report"),
            d.get("docker_error"),
        )


def plan_kill(
    out: Path,
    *,
    expected_argvs: Iterable[Sequence[str]] = (),
    node: str | None = None,
    grace_sec: float = DEFAULT_GRACE_SEC,
) -> KillPlan:
    """Freeze what a kill of ``out`` would touch now on this host (nothing is changed); ``node``:
    this host's Ray node in a cluster run (the processes its jobs registered, ``plan_stop``)."""
    stop = plan_stop(out, expected_argvs=expected_argvs, node=node)
    try:
        return KillPlan(str(out), stop, plan_cleanup(out), grace_sec=grace_sec)
    except Unavailable as exc:
        return KillPlan(str(out), stop, None, str(exc), grace_sec=grace_sec)


def act_kill(plan: KillPlan, grace_sec: float | None = None) -> KillReport:
    """Carry out a kill plan: stop (TERM, the grace, KILL), then the Docker cleanup."""
    from runner.ops.gateway.process import ROLE_GATEWAY, mark_stopping

    grace = plan.grace_sec if grace_sec is None else grace_sec
    out = Path(plan.out)
    for t in plan.stop.targets:
        if t.role == ROLE_GATEWAY:  # stopped on purpose even if the grace ends it with SIGKILL
            mark_stopping(out, t.ident)
    report = KillReport(act_stop(plan.stop, grace_sec=grace))
    try:
        if plan.cleanup is not None:
            report.cleanup = act_cleanup(plan.cleanup)
        report.late_plan = plan_cleanup(out)
        if not report.late_plan.empty:
            report.late = act_cleanup(report.late_plan)
    except Unavailable as exc:
        report.docker_error = str(exc)
    return report
