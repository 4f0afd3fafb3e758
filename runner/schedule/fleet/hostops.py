"""Cleanup and kill of a cluster run, host by host: plan, show, act on exactly what was shown.

Why: a host's containers, networks and harbor processes are seen and touched only from that host
(``runner.schedule.fleet.probe``). Each host's plan is made there by a pinned task and carried back
whole; the operator sees every host's plan (every object led by its host, every host that could not
be listed named); acting sends each host its own frozen plan back, and a task on that host carries
it out (labels and identities re-checked there just before each removal or signal). This is the one
implementation behind ``marathon cleanup|kill`` of a cluster tree and the console's Cleanup and
Kill keys (``console.actions``), as ``runner.ops.cleanup`` / ``runner.ops.kill`` are on one host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runner.ops.cleanup import CleanupPlan, CleanupReport, HostPlan, render_host_plans, render_host_reports
from runner.ops.kill import KillPlan, KillReport
from runner.ops.procs import DEFAULT_GRACE_SEC, StopPlan, StopReport, act_stop, plan_stop
from runner.schedule.fleet.probe import HostAnswer, ask_hosts


def _frozen(hosts: list[tuple[str, str, dict]]) -> list[dict]:
    """The probe job's ``plans`` parameter: each host's own plan, by its node."""
    return [{"node_id": node, "host": label, "plan": plan} for label, node, plan in hosts]


# --- cleanup -----------------------------------------------------------------------------------


@dataclass
class HostsCleanupPlan:
    """Every host's cleanup plan of a cluster tree, each made on its host (a ``runner.ops.plan.Plan``)."""

    cluster: str
    out: str
    hosts: list[HostPlan]

    @property
    def empty(self) -> bool:
        return all(h.plan is None or h.plan.empty for h in self.hosts)

    @property
    def listed(self) -> bool:
        return bool(self.hosts) and all(h.listed for h in self.hosts)

    def render(self) -> str:
        return f"cluster {self.cluster}: {len(self.hosts)} Docker host(s)\n{render_host_plans(self.hosts)}"

    def to_json(self) -> dict:
        return {"cluster": self.cluster, "hosts": [_host_json(h) for h in self.hosts]}

    def act(self) -> HostsCleanupReport:
        return HostsCleanupReport(act_cleanup_hosts(self))


@dataclass
class HostsCleanupReport:
    """The hosts' removals: each host's report beside its plan."""

    plan: HostsCleanupPlan

    @property
    def ok(self) -> bool:
        return cleanup_hosts_ok(self.plan)

    def render(self) -> str:
        return render_cleanup_reports(self.plan)

    def to_json(self) -> dict:
        return self.plan.to_json() | {"ok": self.ok}


def _host_json(h: HostPlan) -> dict:
    return {"host": h.host, "plan": h.plan.to_json() if h.plan else None, "error": h.error,
            "report": h.report.to_json() if h.report else None}  # fmt: skip


def _host_plans(answers: list[HostAnswer]) -> list[HostPlan]:
    return [
        HostPlan(a.label, CleanupPlan.from_json(a.result) if a.ok else None, a.error, node_id=a.node_id)
        for a in answers
    ]


def plan_cleanup_hosts(
    cluster: str, out: Path, task: str | None = None, arm: str | None = None, trial: str | None = None
) -> HostsCleanupPlan:
    """Each host's plan (``runner.ops.cleanup.plan_cleanup`` there); nothing is removed."""
    params = {"task": task, "arm": arm, "trial": trial, "act": False}
    answers = ask_hosts(cluster, out, "cleanup", params).get("plan", [])
    return HostsCleanupPlan(cluster, str(out), _host_plans(answers))


def act_cleanup_hosts(plan: HostsCleanupPlan) -> HostsCleanupPlan:
    """Each non-empty host plan carried out on its host; the hosts with their reports filled in."""
    todo = [
        (h.host, h.node_id, h.plan.to_json()) for h in plan.hosts if h.plan is not None and not h.plan.empty
    ]
    if todo:
        acts = ask_hosts(plan.cluster, Path(plan.out), "cleanup", {"plans": _frozen(todo)}).get("act", [])
        by_node = {a.node_id: a for a in acts}
        for h in plan.hosts:
            a = by_node.get(h.node_id)
            if a is not None:
                h.report, h.error = (CleanupReport.from_json(a.result) if a.ok else None), a.error
    return plan


def cleanup_hosts_ok(plan: HostsCleanupPlan) -> bool:
    """Every host listed and every removal done."""
    return plan.listed and all(not h.error and (h.report is None or h.report.ok) for h in plan.hosts)


def render_cleanup_reports(plan: HostsCleanupPlan) -> str:
    return render_host_reports(plan.hosts) or "  nothing to remove"


# --- kill --------------------------------------------------------------------------------------


@dataclass
class HostKill:
    """One host's kill plan (its registered harbor processes and the tree's objects on its engine),
    made on that host; None when it was down or its plan could not be made."""

    host: str
    node_id: str
    plan: KillPlan | None
    error: str = ""
    report: KillReport | None = None


@dataclass
class HostsKillPlan:
    """A cluster run's kill: the runner here, then every host's own plan (a ``runner.ops.plan.Plan``)."""

    cluster: str
    out: str
    here: StopPlan
    hosts: list[HostKill]
    grace_sec: float = DEFAULT_GRACE_SEC

    @property
    def empty(self) -> bool:
        return not self.here.targets and all(h.plan is None or h.plan.empty for h in self.hosts)

    @property
    def listed(self) -> bool:
        return bool(self.hosts) and all(h.plan is not None for h in self.hosts)

    def to_json(self) -> dict:
        return kill_plan_json(self)

    def act(self) -> HostsKillReport:
        return act_kill_hosts(self, self.grace_sec)

    def render(self) -> str:
        lines = [
            "The runner here, then each host's own plan on that host (SIGTERM, "
            f"{self.grace_sec:.0f} s grace, SIGKILL; then its removals), then the tree's Ray jobs stopped "
            "and each host cleaned once more.",
            "this host (the runner's):",
            self.here.render(),
            f"cluster {self.cluster}: {len(self.hosts)} Docker host(s)",
        ]
        for h in self.hosts:
            if h.plan is not None:
                lines += [f"host {h.host}:", h.plan.render()]
            else:
                lines.append(
                    f"host {h.host}: its processes and objects were not listed ({h.error or 'down'})"
                )
        return "\n".join(lines)


@dataclass
class HostsKillReport:
    plan: HostsKillPlan
    here: StopReport
    ray_jobs_stopped: list[str] = field(default_factory=list)
    late: list[HostAnswer] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing left alive here, every host listed, every host's acted plan done, every late
        cleanup done."""
        hosts = self.plan.hosts
        if self.here.still_alive or not hosts or any(h.plan is None for h in hosts):
            return False
        acted = [h for h in hosts if h.plan is not None and not h.plan.empty]
        return all(h.report is not None and h.report.ok for h in acted) and all(a.ok for a in self.late)

    def render(self) -> str:
        lines = ["stopped here:", self.here.render()]
        for h in self.plan.hosts:
            if h.report is not None:
                lines += [f"host {h.host}:", h.report.render()]
            elif h.plan is not None and not h.plan.empty:
                lines.append(f"host {h.host}:\n  FAILED: {h.error}")
        lines.append(
            f"Ray jobs of the tree still pending or running, stopped: {self.ray_jobs_stopped or 'none'}"
        )
        for a in self.late:
            lines.append(f"host {a.label}, removed after the stop:")
            lines.append(CleanupReport.from_json(a.result).render() if a.ok else f"  FAILED: {a.error}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return kill_report_json(self)


def kill_plan_json(plan: HostsKillPlan) -> dict:
    return {
        "cluster": plan.cluster,
        "here": {"stop_plan": plan.here.to_json()},
        "hosts": [
            {"host": h.host, "plan": h.plan.to_json() if h.plan else None, "error": h.error}
            for h in plan.hosts
        ],
    }


def kill_report_json(report: HostsKillReport) -> dict:
    d = kill_plan_json(report.plan)
    d["here"]["stop_report"] = report.here.to_json()
    for hj, h in zip(d["hosts"], report.plan.hosts, strict=True):
        if h.report is not None or (h.plan is not None and not h.plan.empty):
            hj["report"], hj["error"] = (h.report.to_json() if h.report else None), h.error
    d["ray_jobs_stopped"] = report.ray_jobs_stopped
    d["late_cleanup"] = [{"host": a.label, "report": a.result, "error": a.error} for a in report.late]
    d["ok"] = report.ok
    return d


def plan_kill_hosts(
    cluster: str,
    out: Path,
    expected_argvs: list[list[str]] | None = None,
    grace_sec: float = DEFAULT_GRACE_SEC,
) -> HostsKillPlan:
    """The runner here (``plan_stop``) and every host's kill plan (``plan_kill`` there); nothing is signalled."""
    here = plan_stop(out, expected_argvs=expected_argvs or [])
    answers = ask_hosts(cluster, out, "kill", {"act": False}).get("plan", [])
    hosts = [
        HostKill(a.label, a.node_id, KillPlan.from_json(a.result) if a.ok else None, a.error) for a in answers
    ]
    return HostsKillPlan(cluster, str(out), here, hosts, grace_sec)


def act_kill_hosts(plan: HostsKillPlan, grace_sec: float) -> HostsKillReport:
    """The runner first (so it starts nothing more), then each host's frozen plan on that host, then
    the tree's Ray jobs still pending or running stopped through the job API and each host's
    cleanup run once more (what a job started between the plan and the stop)."""
    from runner.schedule.fleet.cluster import Fleet

    out = Path(plan.out)
    here = act_stop(plan.here, grace_sec=grace_sec)
    todo = [
        (h.host, h.node_id, h.plan.to_json()) for h in plan.hosts if h.plan is not None and not h.plan.empty
    ]
    if todo:
        params = {"plans": _frozen(todo), "grace": grace_sec}
        by_node = {a.node_id: a for a in ask_hosts(plan.cluster, out, "kill", params).get("act", [])}
        for h in plan.hosts:
            a = by_node.get(h.node_id)
            if a is not None:
                h.report, h.error = (KillReport.from_json(a.result) if a.ok else None), a.error
    fleet = Fleet.connect(plan.cluster)
    left = [j.submission_id for j in fleet.ours(out) if j.active]
    for sid in left:
        fleet.stop(sid)
    late = ask_hosts(plan.cluster, out, "cleanup", {"act": True}).get("act", [])
    return HostsKillReport(plan, here, left, late)
