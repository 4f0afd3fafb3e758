"""Every operator action, one entry point: ``plan_action(kind, out, ...)`` -> a ``runner.ops.plan.Plan``.

Why: the CLI (``marathon kill|cleanup|void|stop``) and the console's keys must do the same thing to
the same tree, so both ask here and act on what they get without knowing which action it is. The
one decision that differs between a one-host tree and a cluster tree (``run --cluster``: each
Docker host's part planned and acted on that host, ``runner.schedule.fleet.hostops``) is taken here,
once, from the tree's own record (``tree_cluster``).

A new action is one ``Plan`` (``empty``, ``listed``, ``render``, ``to_json``, ``act`` -> a report
with ``ok``, ``render``, ``to_json``) and one row of ``ACTIONS``; the console adds its key and title.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import NotAnOutputTree
from runner.ops.plan import Plan

STOP = "stop"
KILL = "kill"
CLEANUP = "cleanup"
VOID = "void"
START = "start"


def _stop(out: Path) -> Plan:
    from runner.ops.stop import plan_stop_runner

    return plan_stop_runner(out)


def _kill(
    out: Path, *, expected_argvs: list[list[str]] | None = None, grace_sec: float | None = None
) -> Plan:
    from runner.ops.kill import plan_kill
    from runner.ops.procs import DEFAULT_GRACE_SEC

    return plan_kill(out, expected_argvs=expected_argvs or [], grace_sec=_grace(grace_sec, DEFAULT_GRACE_SEC))


def _kill_hosts(
    cluster: str, out: Path, *, expected_argvs: list[list[str]] | None = None, grace_sec: float | None = None
) -> Plan:
    from runner.ops.procs import DEFAULT_GRACE_SEC
    from runner.schedule.fleet.hostops import plan_kill_hosts

    return plan_kill_hosts(cluster, out, expected_argvs or [], _grace(grace_sec, DEFAULT_GRACE_SEC))


def _grace(value: float | None, default: float) -> float:
    return default if value is None else value


def _cleanup(out: Path, *, task: str | None = None, arm: str | None = None, trial: str | None = None) -> Plan:
    from runner.ops.cleanup import plan_cleanup

    return plan_cleanup(out, task=task, arm=arm, trial=trial)


def _cleanup_hosts(
    cluster: str, out: Path, *, task: str | None = None, arm: str | None = None, trial: str | None = None
) -> Plan:
    from runner.schedule.fleet.hostops import plan_cleanup_hosts

    return plan_cleanup_hosts(cluster, out, task=task, arm=arm, trial=trial)


def _void(out: Path, *, trial: str, reason: str = "") -> Plan:
    from runner.ops.void import DIED_HINT, plan_void
    from runner.results.tree import arm_of_dir
    from runner.schedule.claims import running_job

    plan = plan_void(out, Path(trial), reason or "voided by the operator")
    if plan.trial is None:  # a job dir: its trials as the trial dir's rule (a probe voided a running one)
        from modes.trial_files import TrialFiles
        from runner.results.tree import iter_trial_dirs

        job = Path(out).resolve() / plan.task / plan.arm / plan.stamp / Path(trial).name
        running = [t.name for t in iter_trial_dirs(job) if not (t / TrialFiles.RESULT).exists()]
        if running or not (job / TrialFiles.RESULT).exists():
            raise ValueError(
                f"{job} is still running (no result.json{' in ' + ', '.join(running) if running else ''}): "
                f"stop it before voiding{DIED_HINT}"
            )
    held = running_job(Path(out), plan.task, arm_of_dir(plan.arm), plan.stamp)
    if held is not None and held.job is not None:
        # found by a probe: voided in the second between harbor's result.json and its exit, the
        # attempt moved from under its runner, which then journalled a false reason for it
        raise ValueError(
            f"its harbor (PID {held.job.pid}) is still running: wait for it to end, or stop the run first"
        )
    return plan


def _start(out: Path, *, retry: str | None = None) -> Plan:
    from runner.schedule.start import plan_start

    return plan_start(out, retry=retry)


@dataclass(frozen=True)
class Action:
    """How to plan one kind of action: on this host, and (where a cluster tree differs) on every
    Docker host of its cluster."""

    kind: str
    here: Callable[..., Plan]
    hosts: Callable[..., Plan] | None = None  # (cluster, out, **options); None: the same on a cluster


ACTIONS: dict[str, Action] = {
    a.kind: a
    for a in (
        Action(STOP, _stop),  # the runner runs here, on a cluster too
        Action(KILL, _kill, _kill_hosts),
        Action(CLEANUP, _cleanup, _cleanup_hosts),
        Action(VOID, _void),  # the tree is shared: a move here is a move everywhere
        Action(START, _start),
    )
}


def plan_action(kind: str, out: Path, *, cluster: str | None = None, **options: Any) -> Plan:
    """Freeze what ``kind`` would do to ``out`` now (nothing changes). ``cluster``: the Ray cluster to
    plan on (``--cluster``), else the one the tree's run recorded (a one-host tree has none)."""
    from runner.schedule.fleet.probe import tree_cluster

    try:
        action = ACTIONS[kind]
    except KeyError:
        raise ValueError(f"unknown action {kind!r}") from None
    out = Path(out)
    if action.hosts is not None:
        hosts = tree_cluster(out, cluster)
        if hosts:
            if not out.is_dir():
                raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
            return action.hosts(hosts, out, **options)
    return action.here(out, **options)
