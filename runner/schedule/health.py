"""``marathon health``: is the run healthy, and ``--fix`` what is not.

Why: in the field the health check scanned the wrong directory and reported "OK" all night while
three arms were down. Every check here reads the same files the runner writes, through the same
functions: the runner by its registry/lock (PID + create time, never a process pattern), claims
through ``runner.schedule.claims``, done through ``runner.results.rules.is_done``, infrastructure through the one
classifier in ``runner.ops.void``, ours-or-not through ``runner.ops.docker_pool``/``runner.ops.cleanup``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modes import safetext
from modes.budget import harbor_timeout_needed_sec
from modes.naming import compose_project
from modes.trial_files import TrialFiles
from runner.errors import NotAnOutputTree, Unavailable, UserError
from runner.ops.gateway.process import status_line as gateway_status
from runner.ops.procs import Registry
from runner.ops.viewer import status_line as viewer_status
from runner.ops.void import act_void, classify_job, plan_void
from runner.results.ledger import outage_of
from runner.results.records import OK, read_job
from runner.results.tree import (
    DRIVER_ENV,
    claim_path,
    driver_env_path,
    iter_job_dirs,
    iter_trial_dirs,
    repeat_of,
    with_repeat,
)
from runner.schedule import claims as claimsmod
from runner.schedule.attempt import Unit
from runner.schedule.config import (
    RunConfig,
    agent_timeout_mult,
    read_driver_env,
    resolve,
    task_agent_timeout_sec,
)
from runner.schedule.lock import lock_holder

SLACK_SEC = 600  # build, setup and teardown on top of the agent and verifier budgets


@dataclass
class Finding:
    kind: str  # config_unusable, runner_dead, run_paused, stale_claim, orphan_job, past_budget, leak, errored_not_voided, disk_low, untrusted
    what: str
    fixable: bool = False
    data: dict = field(default_factory=dict)

    def line(self) -> str:
        """The finding as a report line (its words name tree paths: escaped, one line)."""
        return f"  {self.kind:<19} {safetext.clean(self.what, None)}"


@dataclass
class HealthReport:
    out: str
    runner: str  # "alive" | "not running" | "never started"
    runner_pid: int | None
    pairs_total: int
    pairs_done: int
    running_trials: int
    findings: list[Finding] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    viewer: str | None = None  # `marathon view` of this tree, when one serves (runner.ops.viewer)
    gateway: str | None = None  # the run's model gateway on this host, when one serves
    repeats: int = 1  # the run's --repeats: pairs_total and pairs_done then count repeats

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return asdict(self) | {"ok": self.ok}

    def render(self) -> str:
        pid = f" (PID {self.runner_pid})" if self.runner_pid else ""
        lines = [
            f"health of {safetext.clean(self.out, None)}",
            f"  runner: {self.runner}{pid}",
            # the runner's count (what it will not run again): a flagged pair is finished here and
            # flagged in `status`, which said "18/20 done" where this said "19/20 done" (a probe)
            f"  {'pairs: ' if self.repeats == 1 else 'repeats:'} {self.pairs_done}/{self.pairs_total} finished"
            + (f" ({self.repeats} per pair)" if self.repeats > 1 else "")
            + f", {self.running_trials} trial(s) running",
        ]
        if self.gateway:
            lines.append(f"  gateway: {self.gateway}")
        if self.viewer:
            lines.append(f"  viewer: {safetext.clean(self.viewer, None)}")
        if not self.findings:
            lines.append("  OK: nothing to fix")
        lines += [f.line() for f in self.findings]
        lines += [f"  FIXED: {safetext.clean(fx, None)}" for fx in self.fixes]
        return "\n".join(lines)


def _task_budget_sec(cfg: RunConfig, task: str) -> float:
    """Longest a healthy trial of ``task`` can take: harbor's agent timeout (as the runner set it,
    the longest over the run's arms; else the budget and its allowance) + verifier + slack."""
    assert cfg.tasks_dir is not None
    try:
        t = tomllib.loads((cfg.tasks_dir / task / "task.toml").read_text())
    except (OSError, ValueError):
        t = {}
    agent = task_agent_timeout_sec(cfg.tasks_dir, task)
    agent_budget = (
        agent * max(agent_timeout_mult(cfg, task, a) for a in cfg.arm_specs())
        if agent and cfg.arms
        else harbor_timeout_needed_sec(cfg.goal_timeout_sec)
    )
    verifier = float((t.get("verifier") or {}).get("timeout_sec") or 600) * cfg.verifier_mult
    return agent_budget + verifier + SLACK_SEC


def _stamp_age_sec(stamp: str) -> float | None:
    """The runner's stamps are UTC start times (never file mtimes: NFS clocks lag)."""
    try:
        t = datetime.strptime(stamp[:20], "%Y-%m-%d__%H-%M-%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (datetime.now(UTC) - t).total_seconds()


@dataclass
class JobSeen:
    """One harbor job of the tree as health reads it."""

    task: str
    arm: str
    stamp: str
    job: Path
    rec: Any  # runner.results.records.JobRecord
    unfinished: list[Path]  # its trials without a result.json

    @property
    def unit(self) -> Unit:
        """(task, arm, repeat): the repeat its stamp names."""
        return (self.task, self.arm, repeat_of(self.stamp))

    @property
    def label(self) -> str:
        return with_repeat(f"{self.task}/{self.arm}", repeat_of(self.stamp))


@dataclass
class Seen:
    """What health reads of a tree, once; every check below reads only this."""

    out: Path
    cfg: RunConfig | None
    state: str  # "alive" | "not running" | "never started"
    pid: int | None
    claims: list[claimsmod.Claim]
    on_cluster: set[Unit]  # repeats of pairs whose Ray job is pending or running
    live_units: set[Unit]  # repeats of pairs a live runner, harbor job or Ray job holds
    tasks: list[str]
    arms: list[str]
    repeats: int = 1  # the run's --repeats
    jobs: list[JobSeen] = field(default_factory=list)
    done_units: set[Unit] = field(default_factory=set)
    finished_trials: set[str] = field(default_factory=set)
    unclaimed_running: set[str] = field(default_factory=set)  # unfinished, their repeat held by nobody
    untrusted: list[str] = field(default_factory=list)  # what may not decide a signal or removal, and why
    config_error: str = ""  # why the tree's .driver_env cannot be resumed from ("" when it can, or has none)

    @property
    def alive(self) -> bool:
        return self.state == "alive"

    @property
    def running(self) -> int:
        return sum(len(j.unfinished) for j in self.jobs if j.unit in self.live_units)

    @property
    def total(self) -> int:
        return len(self.tasks) * len(self.arms) * self.repeats

    @property
    def done(self) -> int:
        return sum(
            1
            for t in self.tasks
            for a in self.arms
            for r in range(1, self.repeats + 1)
            if (t, a, r) in self.done_units
        )


def _runner_state(out: Path) -> tuple[str, int | None]:
    """The runner by its registry entry, else by the lock (PID + identity, never a process pattern)."""
    runner = Registry(out).runner_entry()
    if runner is not None and not runner.is_live():
        runner = None  # a zombie (killed, not yet reaped) is not a runner
    holder = lock_holder(out)
    if runner is not None:
        return "alive", runner.pid
    if holder is not None:
        return "alive", holder.pid
    return ("not running" if driver_env_path(out).exists() else "never started"), None


def look(out: Path) -> Seen:
    """Read the tree: its configuration, runner, claims, cluster jobs and every job dir."""
    out = Path(out).resolve()
    if not out.is_dir():
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    cfg: RunConfig | None = None
    config_error = ""
    if read_driver_env(out):
        try:
            cfg = resolve(out, {}, resume=True, environ={})
        except UserError as exc:  # said (a probe's tree read "pairs: 0/0 ... OK: nothing to fix")
            config_error = str(exc)
    state, pid = _runner_state(out)
    claims = claimsmod.list_claims(out)
    # what could decide a signal or a removal but is not the runner's user's alone: named, left alone
    untrusted = [f"{u}: left alone" for u in claimsmod.untrusted_claims(out)]
    why = Registry(out).untrusted()
    if why:
        untrusted.append(f"registry {why}: nothing is signalled from it")
    on_cluster = _cluster_units(out, cfg)
    live_units = {c.unit for c in claims if c.state != claimsmod.STALE} | on_cluster
    tasks = list(cfg.tasks) if cfg and cfg.tasks else []
    if cfg and not tasks and cfg.tasks_dir:
        from runner.schedule.config import list_tasks

        tasks = list_tasks(cfg.tasks_dir)
    arms = [s.name for s in cfg.arm_specs()] if cfg else []
    seen = Seen(out, cfg, state, pid, claims, on_cluster, live_units, tasks, arms, cfg.repeats if cfg else 1,
                untrusted=untrusted, config_error=config_error)  # fmt: skip
    for task, arm, _adir, stamp, job in iter_job_dirs(out):
        rec = read_job(job)
        seen_job = JobSeen(task, arm, stamp, job, rec, [])
        if rec.done:
            seen.done_units.add(seen_job.unit)
        trials = list(iter_trial_dirs(job))
        seen_job.unfinished = [t for t in trials if not (t / TrialFiles.RESULT).exists()]
        seen.finished_trials |= {t.name for t in trials if t not in seen_job.unfinished}
        if seen_job.unit not in live_units:
            seen.unclaimed_running |= {t.name for t in seen_job.unfinished}
        seen.jobs.append(seen_job)
    return seen


def _check_jobs(seen: Seen) -> list[Finding]:
    """Trials past their budget (by the runner's UTC stamps), and infrastructure-errored jobs that
    nothing voided (the one classifier, ``runner.ops.void``)."""
    found = []
    for j in seen.jobs:
        live = j.unit in seen.live_units
        if j.unfinished and live:
            age = _stamp_age_sec(j.stamp)
            if seen.cfg and age is not None and age > _task_budget_sec(seen.cfg, j.task):
                found.append(Finding("past_budget", f"{j.label} stamp {j.stamp}: running {age / 60:.0f} min",
                                     False, {"task": j.task, "arm": j.arm, "stamp": j.stamp, "age_sec": round(age)}))  # fmt: skip
        elif (
            j.rec.state == OK
            and j.rec.done
            and not j.unfinished
            and not live
            and outage_of(seen.out, j.task, j.arm, j.stamp)
        ):
            v = classify_job(j.job)  # done, but its gateway died under it: the table's gateway_failed row
            if v.kind == "infra":
                found.append(Finding("errored_not_voided", f"{j.task}/{j.arm} stamp {j.stamp}: {v.reason}", True,
                                     {"job": str(j.job), "reason": v.reason, "evidence": v.evidence}))  # fmt: skip
        elif j.rec.state == OK and not j.rec.done and j.rec.n_errored > 0 and not j.unfinished:
            v = classify_job(j.job)
            if v.kind == "infra" and not live:
                found.append(Finding("errored_not_voided", f"{j.label} stamp {j.stamp}: {v.reason}", True,
                                     {"job": str(j.job), "reason": v.reason, "evidence": v.evidence}))  # fmt: skip
    return found


def _check_claims(seen: Seen) -> list[Finding]:
    """Claims whose holder is dead (stale), and jobs that run without a runner (orphans; a restarted
    runner adopts them, or re-attaches to a cluster's Ray job)."""
    found = []
    for c in seen.claims:
        if c.unit in seen.on_cluster:
            if not seen.alive:
                found.append(Finding("orphan_job", f"{c.label}: its Ray job runs without a runner "
                                     "(a restarted runner re-attaches)", True, {"claim": c.to_json()}))  # fmt: skip
        elif c.state == claimsmod.STALE:
            found.append(Finding("stale_claim", f"{c.label} held by dead {c.holder.describe()}", True,
                                 {"claim": c.to_json()}))  # fmt: skip
        elif c.state == claimsmod.ORPHAN and not seen.alive:
            found.append(Finding("orphan_job", f"{c.label}: harbor PID {c.job.pid if c.job else '?'} runs "
                                 "without a runner (a restarted runner adopts it)", True, {"claim": c.to_json()}))  # fmt: skip
    return found


def _check_leaks(seen: Seen) -> list[Finding]:
    """Containers and networks of ended trials: finished ones (harbor tears down before it writes
    result.json), and unfinished ones whose pair no live runner or harbor job holds."""
    leak_trials = seen.finished_trials | (seen.unclaimed_running if not seen.alive else set())
    if not leak_trials or (seen.cfg is not None and seen.cfg.env != "docker"):
        return []
    try:
        plan = _leak_plan(seen.out, leak_trials)
    except Unavailable as exc:  # the rest of the report is still worth having (an engine restart)
        return [Finding("engine_unreachable", f"leaks not checked: {exc}")]
    if plan is None:
        return []
    found = [Finding("untrusted", f"{w}: left alone") for w in plan.left_alone]
    if plan.empty:
        return found
    names = [c.name for c in plan.containers] + [n.name for n in plan.networks]
    what = (f"{len(plan.containers)} container(s), {len(plan.networks)} network(s) of ended trials: "
            f"{', '.join(names[:6])}")  # fmt: skip
    return [*found, Finding("leak", what, True, {"plan": plan.to_json()})]


def _check_runner(seen: Seen) -> list[Finding]:
    """No live runner while pairs are not done: restart it (``--fix``), unless the circuit breaker
    paused the run (the cause needs a person: restarting would rerun the same wall of failures)."""
    if seen.alive or seen.cfg is None or seen.done >= seen.total:
        return []
    from runner.schedule.breaker import last_pause

    paused = last_pause(seen.out)
    if paused is not None:
        what = f"the circuit breaker paused the run: {paused}; then `marathon run {seen.out} --resume`"
        return [Finding("run_paused", what, False)]
    left = seen.total - seen.done
    what = f"{left} pair(s)" if seen.repeats == 1 else f"{left} repeat(s) of pairs"
    return [Finding("runner_dead", f"no live runner and {what} not done", True)]


def _check_gateway(seen: Seen) -> list[Finding]:
    """The run's model gateway on this host, while something needs it: a live runner, or attempts
    whose harbor still runs (``--fix`` restarts it; the attempts it failed are voided when they end)."""
    if seen.cfg is None or seen.cfg.cluster:
        return []
    from runner.ops.gateway.attempts import LIVE, list_records
    from runner.ops.gateway.process import running
    from runner.schedule.gateway import gateway_on

    if not gateway_on(seen.cfg) or running(seen.out) is not None:
        return []
    live = [r for r in list_records(seen.out) if r.state == LIVE and not r.gone()]
    if not seen.alive and not live:
        return []
    what = (
        f"the run's model gateway is not running ({len(live)} live attempt(s) reach their model through it)"
    )
    return [Finding("gateway_dead", what, True, {"attempts": [r.id for r in live]})]


def _check_disk(seen: Seen) -> list[Finding]:
    """A disk of the run with less than ``--min-free-gb`` free: no new attempt starts until there is
    room (``runner.ops.disk``); a person must free it, so nothing to fix here."""
    if seen.cfg is None or not seen.cfg.min_free_gb:
        return []
    from runner.ops import disk

    v = disk.check(seen.out, seen.cfg.min_free_gb, engine=seen.cfg.env == "docker")
    return [] if v.ok else [Finding("disk_low", v.reason)]


def _check_trust(seen: Seen) -> list[Finding]:
    """What could decide a signal or a removal but is not the runner's user's alone (claims, the
    registry: ``modes.safeio.untrusted``): named; nothing is signalled or removed because of it."""
    return [Finding("untrusted", u) for u in seen.untrusted]


#: The checks, in the order their findings are reported.
def _check_config(seen: Seen) -> list[Finding]:
    """A .driver_env the runner could not resume from: its pairs are not counted, and no runner can
    start from it until it is fixed (the line the runner itself would print)."""
    if not seen.config_error:
        return []
    return [
        Finding(
            "config_unusable",
            f"{DRIVER_ENV}: {seen.config_error} (pairs not counted; a resume would stop here)",
        )
    ]


CHECKS: tuple[tuple[str, Callable[[Seen], list[Finding]]], ...] = (
    ("config", _check_config),
    ("runner", _check_runner),
    ("gateway", _check_gateway),
    ("jobs", _check_jobs),
    ("claims", _check_claims),
    ("leaks", _check_leaks),
    ("disk", _check_disk),
    ("trust", _check_trust),
)


def check(out: Path) -> tuple[HealthReport, RunConfig | None]:
    """Every check of ``CHECKS`` on what ``look`` read; nothing is changed."""
    seen = look(out)
    findings = [f for _name, one in CHECKS for f in one(seen)]
    rep = HealthReport(
        str(seen.out), seen.state, seen.pid, seen.total, seen.done, seen.running, findings,
        viewer=viewer_status(seen.out), gateway=gateway_status(seen.out), repeats=seen.repeats,
    )  # fmt: skip
    return rep, seen.cfg


def _cluster_units(out: Path, cfg: RunConfig | None) -> set[Unit]:
    """Repeats of pairs of a cluster run whose Ray job is pending or running: alive, whatever their
    claim says (the claim's holder may be a runner killed with -9). A cluster that does not answer
    makes every claimed one count as alive: nothing of it is cleaned up or taken over on a guess."""
    if cfg is None or not cfg.cluster:
        return set()
    from runner.schedule.fleet.cluster import Fleet
    from runner.schedule.fleet.launch import active_units

    try:
        return set(active_units(Fleet.connect(cfg.cluster), out))
    except Exception:  # noqa: BLE001 - the head is away: be conservative
        return {c.unit for c in claimsmod.list_claims(out)}


def _leak_plan(out: Path, trials: set[str]):
    from runner.ops.cleanup import plan_cleanup

    return plan_cleanup(out, trials=trials)


def fix(out: Path, shown: Callable[[HealthReport], None] | None = None) -> HealthReport:
    """Fix what ``check`` found, printing each fix in the report; the runner is restarted last.
    ``shown``: called with what ``check`` found, the plan, before anything is changed (the CLI
    prints it: the exact plan before any destructive action; a review found it only after)."""
    rep, cfg = check(out)
    out = Path(rep.out)
    if cfg is not None and any(f.kind == "runner_dead" for f in rep.findings):
        from runner.schedule.preflight import require, retry_health

        # before any fix: a runner that cannot work is not restarted, and nothing is touched
        require(cfg, retry=retry_health(out))
    if shown is not None:
        shown(rep)
    for f in rep.findings:
        if f.kind == "stale_claim":
            held = f.data["claim"]
            c = claimsmod.read_claim(claim_path(out, held["task"], held["arm"], held.get("repeat", 1)))
            if c is not None and claimsmod.remove_stale(out, c):
                rep.fixes.append(f"removed stale claim {c.label} ({c.holder.describe()})")
        elif f.kind == "leak":
            from runner.ops.cleanup import act_cleanup

            plan = _leak_plan(out, _trials_of_plan(f.data["plan"]))
            if not plan.empty:
                r = act_cleanup(plan)
                rep.fixes.append(
                    f"removed {len(r.removed_containers)} container(s), {len(r.removed_networks)} network(s) of ended trials"
                )
        elif f.kind == "gateway_dead" and cfg is not None:
            from runner.ops.gateway.process import ensure
            from runner.schedule.gateway import settings_for

            st, _ = ensure(out, settings_for(cfg), by="health --fix")
            rep.fixes.append(f"restarted the model gateway: {st.describe()}")
        elif f.kind == "errored_not_voided":
            plan = plan_void(out, Path(f.data["job"]), f.data["reason"], f.data["evidence"])
            dest = act_void(plan, by="health --fix")  # journalled as health's (the runner journals its own)
            rep.fixes.append(f"voided {f.what.split(':')[0]} -> {dest}")
    if any(f.kind == "runner_dead" for f in rep.findings):
        from runner.schedule.start import start_detached

        pid = start_detached(out)
        rep.fixes.append(f"restarted the runner from {driver_env_path(out)}: PID {pid}")
        n_orphans = sum(1 for f in rep.findings if f.kind == "orphan_job")
        if n_orphans:
            rep.fixes.append(f"the restarted runner adopts the {n_orphans} harbor job(s) still running")
    return rep


def _trials_of_plan(plan: dict) -> set[str]:
    """Trial names whose compose projects a serialised leak plan named (re-planned before acting)."""
    wanted = set(plan.get("projects") or [])
    out = Path(plan["out"])
    names = set()
    for *_, job in iter_job_dirs(out):
        names |= {t.name for t in iter_trial_dirs(job) if compose_project(t.name) in wanted}
    return names
