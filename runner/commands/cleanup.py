"""``marathon cleanup``: remove this run's leftover compose containers and networks (plan first)."""

from __future__ import annotations

import argparse
from pathlib import Path

from modes import safetext
from runner.results.tree import default_out

HELP = "remove the run's leftover compose containers and networks (prints the plan; --yes acts)"
DESCRIPTION = (
    "Plan, and with --yes remove, the containers whose com.docker.compose.project label exactly "
    "equals the compose project of a trial of OUT (optionally one task, arm or trial), and the "
    "networks carrying that label. Without --yes nothing is changed. Nothing is selected by name."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out", nargs="?", type=Path, default=None, help="output tree [$MARATHON_OUT; default ./marathon-out]"
    )
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
    from runner.ops.cleanup import act_cleanup, plan_cleanup
    from runner.schedule.fleet.probe import tree_cluster

    args.out = args.out or default_out()
    cluster = tree_cluster(args.out, args.cluster)
    if cluster:
        return run_hosts(args, cluster)
    plan = plan_cleanup(args.out, task=args.task, arm=args.arm, trial=args.trial)
    report = act_cleanup(plan) if args.yes else None
    note = engine_note(args.out)
    if args.json:
        doc = {"plan": plan.to_json(), "report": report.to_json() if report else None, "note": note}
        print(safetext.dumps(doc, pretty=True))
    else:
        if note:
            print(f"note: {note}")
        print(plan.render())
        if report is None:
            print("dry run: nothing changed (add --yes to remove the above)")
        else:
            print("done:")
            print(report.render())
    return 0 if report is None or report.ok else 1


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


def run_hosts(args: argparse.Namespace, cluster: str) -> int:
    """Each host's plan made on that host, the whole plan shown (every object with its host, every
    host down named), then -- with --yes -- the removals, each on its host, on exactly that plan
    (``runner.schedule.fleet.hostops``, as the console's Cleanup key). Exit 0 only when every host
    was listed and every removal succeeded."""
    from runner.errors import NotAnOutputTree
    from runner.schedule.fleet.hostops import (
        act_cleanup_hosts,
        cleanup_hosts_ok,
        plan_cleanup_hosts,
        render_cleanup_reports,
    )

    if not args.out.is_dir():
        raise NotAnOutputTree(f"{args.out} is not a directory (expected a marathon output tree)")
    plan = plan_cleanup_hosts(cluster, args.out, task=args.task, arm=args.arm, trial=args.trial)
    if not args.json:
        print(plan.render(), flush=True)
    if args.yes:
        act_cleanup_hosts(plan)
    if args.json:
        print(safetext.dumps(plan.to_json(), pretty=True))
    elif not args.yes:
        print("dry run: nothing changed (add --yes to remove the above)")
    else:
        print("done:")
        print(render_cleanup_reports(plan))
    return 0 if cleanup_hosts_ok(plan) else 1
