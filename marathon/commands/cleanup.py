"""``marathon cleanup``: remove this run's leftover compose containers and networks (plan first)."""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.options import add_out, plan_and_report, show_then_act, tree_out

HELP = "remove the run's leftover compose containers and networks (prints the plan; --yes acts)"
DESCRIPTION = (
    "Plan, and with --yes remove, the containers whose com.docker.compose.project label exactly "
    "equals the compose project of a trial of OUT (optionally one task, arm or trial), and the "
    "networks carrying that label. Without --yes nothing is changed. Nothing is selected by name. "
    "On a cluster run each Docker host's plan is made, shown and carried out on that host."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    p.add_argument("--task", help="only this task")
    p.add_argument("--arm", help="only this arm")
    p.add_argument("--trial", help="only this trial (its directory name)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dry-run", action="store_true", help="print the plan, change nothing (the default)")
    g.add_argument("--yes", action="store_true", help="act on the plan")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--cluster",
        metavar="ADDR",
        help="plan and act on every Docker host of this Ray cluster (default: the cluster OUT's run recorded)",
    )


def run(args: argparse.Namespace) -> int:
    from runner.schedule.actions import CLEANUP, plan_action

    out = tree_out(args)
    _check_scope(out, args.task, args.arm, args.trial)
    plan = plan_action(CLEANUP, out, cluster=args.cluster, task=args.task, arm=args.arm, trial=args.trial)
    note = engine_note(out)
    if note and not args.json:
        print(f"note: {note}")
    return show_then_act(plan, args, as_json=lambda p, r: plan_and_report(p, r) | {"note": note})


def engine_note(out: Path) -> str | None:
    """What cleanup cannot see: a run on another harbor environment than local Docker (the one
    recorded in OUT/.driver_env) has its sandboxes with that provider, not on this engine."""
    from runner.schedule.config import read_driver_env

    env = read_driver_env(out).get("MARATHON_ENV") or "docker"
    if env == "docker":
        return None
    return (
        f"{out}'s run used harbor environment {env!r}: cleanup sees this host's Docker engine only; "
        "sandboxes that environment keeps elsewhere are not listed (remove them with its own tools)"
    )


def _check_scope(out: Path, task: str | None, arm: str | None, trial: str | None = None) -> None:
    """``--task``, ``--arm`` and ``--trial`` name a task, an arm and a trial of the tree (or of its
    voided root: harbor makes a trial's dirs before its containers), or a one-line error: a typo
    printed an empty plan and exited 0 (a probe)."""
    from runner.errors import UserError
    from runner.results import tree

    if trial is not None:
        trials = {
            t.name for root in (out, tree.voided_root(out)) for *_, job in tree.iter_job_dirs(root)
            for t in tree.iter_trial_dirs(job)
        }  # fmt: skip
        if trial not in trials:
            raise UserError(f"--trial {trial!r}: no such trial in {out} or its voided attempts")

    tasks = tree.list_dirs(out)
    if task is not None and task not in tasks:
        raise UserError(f"--task {task!r}: no such task in {out}")
    if arm is not None:
        arms = {tree.arm_of_dir(a) for t in ([task] if task else tasks) for a in tree.list_dirs(out / t)}
        if arm not in arms:
            raise UserError(f"--arm {arm!r}: no such arm in {out}" + (f" for task {task!r}" if task else ""))
