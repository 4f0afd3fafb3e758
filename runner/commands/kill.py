"""``marathon kill``: stop this run's processes, then remove its containers and networks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from modes import safetext
from runner.ops.procs import DEFAULT_GRACE_SEC
from runner.results.tree import default_out

HELP = "stop the run's processes (registered PIDs + descendants), then clean up its containers/networks"
DESCRIPTION = (
    "Plan, and with --yes carry out: TERM to the runner's registered processes (process identity "
    "verified) and their descendants, by process group where no protected process shares it; wait "
    "--grace seconds; KILL what is left; then remove the run's compose containers and networks. "
    "--argv selects only processes of your own user. This command's own process and all its "
    "ancestors are never signalled. Without --yes nothing is changed. The console's Kill does the same."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out", nargs="?", type=Path, default=None, help="output tree [$MARATHON_OUT; default ./marathon-out]"
    )
    p.add_argument("--yes", action="store_true", help="act on the plan")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--grace",
        type=float,
        default=None,
        metavar="SEC",
        help=f"seconds between TERM and KILL (default {DEFAULT_GRACE_SEC:.0f}; see docs/safety.md)",
    )
    p.add_argument(
        "--argv",
        action="append",
        default=[],
        metavar="JSON",
        help="also stop processes of your own user whose argv equals this JSON list exactly, "
        'e.g. \'["harbor","run"]\'',
    )
    p.add_argument(
        "--cluster",
        metavar="ADDR",
        help="also plan and act on every Docker host of this Ray cluster (default: the cluster OUT's run recorded)",
    )


def _argvs(raw: list[str]) -> list[list[str]]:
    from runner.errors import UserError

    out = []
    for r in raw:
        try:
            val = json.loads(r)
        except ValueError:
            val = None
        if not (isinstance(val, list) and val and all(isinstance(a, str) for a in val)):
            raise UserError(f"--argv {r!r}: expected a JSON list of strings")
        out.append(val)
    return out


def run(args: argparse.Namespace) -> int:
    from runner.errors import NotAnOutputTree, UserError
    from runner.ops.kill import act_kill, plan_kill
    from runner.schedule.fleet.probe import tree_cluster

    args.out = args.out or default_out()
    if not args.out.is_dir():
        raise NotAnOutputTree(f"{args.out} is not a directory (expected a marathon output tree)")
    if args.grace is None:
        args.grace = DEFAULT_GRACE_SEC
    if args.grace < 0:
        raise UserError("--grace must not be negative")
    cluster = tree_cluster(args.out, args.cluster)
    if cluster:
        return run_hosts(args, cluster)
    plan = plan_kill(args.out, expected_argvs=_argvs(args.argv))
    result: dict = plan.to_json()
    if not args.json:
        print(plan.stop.render())
        print(plan.cleanup.render() if plan.cleanup else f"cleanup: {plan.docker_error}")
    if not args.yes:
        if args.json:
            print(safetext.dumps(result, pretty=True))
        else:
            print("dry run: nothing changed (add --yes to act)")
        return 0
    report = act_kill(plan, grace_sec=args.grace)
    result |= report.to_json()
    if args.json:
        print(safetext.dumps(result, pretty=True))
    else:
        print("stopped:")
        print(report.render())
    return 0 if report.ok else 1


def run_hosts(args: argparse.Namespace, cluster: str) -> int:
    """A cluster run's kill (``runner.schedule.fleet.hostops``, as the console's Kill key): the plan
    -- this host's part (the runner and what it registered here) and each Docker host's own (the
    harbor processes its jobs registered and the tree's objects on its engine), every host down
    named -- shown first; with --yes the runner is stopped, each host carries out its own plan, the
    tree's Ray jobs still pending or running are stopped through the job API and each host's cleanup
    runs once more. Exit 0 only when every host was reached and nothing is left alive or unremoved."""
    from runner.schedule.fleet.hostops import (
        act_kill_hosts,
        kill_plan_json,
        kill_report_json,
        plan_kill_hosts,
    )

    plan = plan_kill_hosts(cluster, args.out, expected_argvs=_argvs(args.argv))
    if not args.json:
        print(plan.render(), flush=True)
    if not args.yes:
        if args.json:
            print(safetext.dumps(kill_plan_json(plan), pretty=True))
        else:
            print("dry run: nothing changed (add --yes to act)")
        return 0 if all(h.plan is not None for h in plan.hosts) and plan.hosts else 1
    report = act_kill_hosts(plan, args.grace)
    if args.json:
        print(safetext.dumps(kill_report_json(report), pretty=True))
    else:
        print(report.render())
    return 0 if report.ok else 1
