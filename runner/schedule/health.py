"""``marathon health``: is the run healthy, and ``--fix`` what is not.

Why: in the field the health check scanned the wrong directory and reported "OK" all night while
three arms were down. Every check here reads the same files the runner writes, through the same
functions: the runner by its registry/lock (PID + create time, never a process pattern), claims
through ``runner.schedule.claims``, done through ``runner.results.rules.is_done``, infrastructure through the one
classifier in ``runner.ops.void``, ours-or-not through ``runner.ops.docker_pool``/``runner.ops.cleanup``.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from modes import safetext
from modes.budget import harbor_timeout_needed_sec
from modes.naming import compose_project
from modes.trial_files import TrialFiles
from runner.errors import NotAnOutputTree, Unavailable, UserError
from runner.ops.procs import Registry
from runner.ops.void import act_void, classify_job, plan_void
from runner.results.records import OK, read_job
from runner.results.tree import claim_path, driver_env_path, iter_job_dirs, iter_trial_dirs
from runner.schedule import claims as claimsmod
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
    kind: str  # runner_dead, run_paused, stale_claim, orphan_job, past_budget, leak, errored_not_voided, untrusted
    what: str
    fixable: bool = False
    data: dict = field(default_factory=dict)


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

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return asdict(self) | {"ok": self.ok}

    def render(self) -> str:
        pid = f" (PID {self.runner_pid})" if self.runner_pid else ""
        lines = [
            f"health of {self.out}",
            f"  runner: {self.runner}{pid}",
            f"  pairs:  {self.pairs_done}/{self.pairs_total} done, {self.running_trials} trial(s) running",
        ]
        if not self.findings:
            lines.append("  OK: nothing to fix")
        for f in self.findings:
            lines.append(f"  {f.kind:<19} {safetext.clean(f.what, None)}")
        for fx in self.fixes:
            lines.append(f"  FIXED: {fx}")
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


def check(out: Path) -> tuple[HealthReport, RunConfig | None]:
    out = Path(out).resolve()
    if not out.is_dir():
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    cfg: RunConfig | None = None
    if read_driver_env(out):
        try:
            cfg = resolve(out, {}, resume=True, environ={})
        except UserError:
            cfg = None
    runner = Registry(out).runner_entry()
    if runner is not None and not runner.is_live():
        runner = None  # a zombie (killed, not yet reaped) is not a runner
    holder = lock_holder(out)
    if runner is not None:
        state, pid = "alive", runner.pid
    elif holder is not None:
        state, pid = "alive", holder.pid
    else:
        state, pid = ("not running" if driver_env_path(out).exists() else "never started"), None
    claims = claimsmod.list_claims(out)
    # what could decide a signal or a removal but is not the runner's user's alone: named, left alone
    untrusted = [f"{u}: left alone" for u in claimsmod.untrusted_claims(out)]
    why = Registry(out).untrusted()
    if why:
        untrusted.append(f"registry {why}: nothing is signalled from it")
    on_cluster = _cluster_pairs(out, cfg)
    live_pairs = {(c.task, c.arm) for c in claims if c.state != claimsmod.STALE} | on_cluster

    tasks = list(cfg.tasks) if cfg and cfg.tasks else []
    if cfg and not tasks and cfg.tasks_dir:
        from runner.schedule.config import list_tasks

        tasks = list_tasks(cfg.tasks_dir)
    arms = [s.name for s in cfg.arm_specs()] if cfg else []
    done_pairs: set[tuple[str, str]] = set()
    findings: list[Finding] = []
    running = 0
    finished_trials: set[str] = set()
    running_trials: set[str] = set()
    unclaimed_running: set[str] = set()  # unfinished trials of pairs nobody (runner or orphan job) holds
    for task, arm, _adir, stamp, job in iter_job_dirs(out):
        rec = read_job(job)
        if rec.done:
            done_pairs.add((task, arm))
        trials = list(iter_trial_dirs(job))
        for t in trials:
            (finished_trials if (t / TrialFiles.RESULT).exists() else running_trials).add(t.name)
            if not (t / TrialFiles.RESULT).exists() and (task, arm) not in live_pairs:
                unclaimed_running.add(t.name)
        unfinished = [t for t in trials if not (t / TrialFiles.RESULT).exists()]
        if unfinished and (task, arm) in live_pairs:
            running += len(unfinished)
            age = _stamp_age_sec(stamp)
            if cfg and age is not None and age > _task_budget_sec(cfg, task):
                findings.append(
                    Finding(
                        "past_budget",
                        f"{task}/{arm} stamp {stamp}: running {age / 60:.0f} min",
                        False,
                        {"task": task, "arm": arm, "stamp": stamp, "age_sec": round(age)},
                    )  # fmt: skip
                )
        elif rec.state == OK and not rec.done and rec.n_errored > 0 and not unfinished:
            v = classify_job(job)
            if v.kind == "infra" and (task, arm) not in live_pairs:
                findings.append(
                    Finding(
                        "errored_not_voided",
                        f"{task}/{arm} stamp {stamp}: {v.reason}",
                        True,
                        {"job": str(job), "reason": v.reason, "evidence": v.evidence},
                    )  # fmt: skip
                )
    for c in claims:
        st = c.state
        if (c.task, c.arm) in on_cluster:
            if state != "alive":
                findings.append(
                    Finding(
                        "orphan_job",
                        f"{c.task}/{c.arm}: its Ray job runs without a runner (a restarted runner re-attaches)",
                        True,
                        {"claim": c.to_json()},
                    )  # fmt: skip
                )
        elif st == claimsmod.STALE:
            findings.append(
                Finding(
                    "stale_claim",
                    f"{c.task}/{c.arm} held by dead {c.holder.describe()}",
                    True,
                    {"claim": c.to_json()},
                )  # fmt: skip
            )
        elif st == claimsmod.ORPHAN and state != "alive":
            findings.append(
                Finding(
                    "orphan_job",
                    f"{c.task}/{c.arm}: harbor PID {c.job.pid if c.job else '?'} runs without a "
                    "runner (a restarted runner adopts it)",
                    True,
                    {"claim": c.to_json()},
                )  # fmt: skip
            )
    # leaked compose projects: containers/networks of trials that are finished (harbor tears down
    # before it writes result.json) or unfinished with no live claim (a dead harness)
    # an unfinished trial is dead only when no live runner and no live harbor job holds its pair
    dead_trials = unclaimed_running if state != "alive" else set()
    leak_trials = finished_trials | dead_trials
    if leak_trials and (cfg is None or cfg.env == "docker"):
        try:
            plan = _leak_plan(out, leak_trials)
        except Unavailable as exc:  # the rest of the report is still worth having (an engine restart)
            plan = None
            findings.append(Finding("engine_unreachable", f"leaks not checked: {exc}"))
        if plan is not None and plan.left_alone:
            findings += [Finding("untrusted", f"{w}: left alone") for w in plan.left_alone]
        if plan is not None and not plan.empty:
            names = [c.name for c in plan.containers] + [n.name for n in plan.networks]
            findings.append(
                Finding(
                    "leak",
                    f"{len(plan.containers)} container(s), {len(plan.networks)} network(s) of "
                    f"ended trials: {', '.join(names[:6])}",
                    True,
                    {"plan": plan.to_json()},
                )  # fmt: skip
            )
    total = len(tasks) * len(arms)
    done = sum(1 for t in tasks for a in arms if (t, a) in done_pairs)
    if state != "alive" and cfg is not None and done < total:
        from runner.schedule.breaker import last_pause

        paused = last_pause(out)
        if paused is not None:
            # the cause needs a person: restarting would only rerun the wall of failures
            what = f"the circuit breaker paused the run: {paused}; then `marathon run {out} --resume`"
            findings.insert(0, Finding("run_paused", what, False))
        else:
            findings.insert(
                0, Finding("runner_dead", f"no live runner and {total - done} pair(s) not done", True)
            )
    findings += [Finding("untrusted", u) for u in untrusted]
    rep = HealthReport(str(out), state, pid, total, done, running, findings)
    return rep, cfg


def _cluster_pairs(out: Path, cfg: RunConfig | None) -> set[tuple[str, str]]:
    """Pairs of a cluster run whose Ray job is pending or running: alive, whatever their claim says
    (the claim's holder may be a runner killed with -9). A cluster that does not answer makes every
    claimed pair count as alive: nothing of it is cleaned up or taken over on a guess."""
    if cfg is None or not cfg.cluster:
        return set()
    from runner.schedule.fleet.cluster import Fleet
    from runner.schedule.fleet.launch import active_pairs

    try:
        return set(active_pairs(Fleet.connect(cfg.cluster), out))
    except Exception:  # noqa: BLE001 - the head is away: be conservative
        return {(c.task, c.arm) for c in claimsmod.list_claims(out)}


def _leak_plan(out: Path, trials: set[str]):
    from runner.ops.cleanup import plan_cleanup

    return plan_cleanup(out, trials=trials)


def fix(out: Path) -> HealthReport:
    """Fix what ``check`` found, printing each fix in the report; the runner is restarted last."""
    rep, cfg = check(out)
    out = Path(rep.out)
    if cfg is not None and any(f.kind == "runner_dead" for f in rep.findings):
        from runner.schedule.preflight import require, retry_health

        # before any fix: a runner that cannot work is not restarted, and nothing is touched
        require(cfg, retry=retry_health(out))
    for f in rep.findings:
        if f.kind == "stale_claim":
            c = claimsmod.read_claim(claim_path(out, f.data["claim"]["task"], f.data["claim"]["arm"]))
            if c is not None and claimsmod.remove_stale(out, c):
                rep.fixes.append(f"removed stale claim {c.task}/{c.arm} ({c.holder.describe()})")
        elif f.kind == "leak":
            from runner.ops.cleanup import act_cleanup

            plan = _leak_plan(out, _trials_of_plan(f.data["plan"]))
            if not plan.empty:
                r = act_cleanup(plan)
                rep.fixes.append(
                    f"removed {len(r.removed_containers)} container(s), {len(r.removed_networks)} network(s) of ended trials"
                )
        elif f.kind == "errored_not_voided":
            dest = act_void(plan_void(out, Path(f.data["job"]), f.data["reason"], f.data["evidence"]))
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
