"""``marathon cleanup``: remove this run's leftover compose containers and networks (plan first)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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


def run(args: argparse.Namespace) -> int:
    from runner.ops.cleanup import act_cleanup, plan_cleanup

    args.out = args.out or default_out()
    plan = plan_cleanup(args.out, task=args.task, arm=args.arm, trial=args.trial)
    report = act_cleanup(plan) if args.yes else None
    if args.json:
        print(json.dumps({"plan": plan.to_json(), "report": report.to_json() if report else None}, indent=1))
    else:
        print(plan.render())
        if report is None:
            print("dry run: nothing changed (add --yes to remove the above)")
        else:
            print("done:")
            print(report.render())
    return 0 if report is None or report.ok else 1
