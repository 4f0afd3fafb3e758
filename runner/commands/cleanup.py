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
        print(json.dumps({"plan": plan.to_json(), "report": report.to_json() if report else None, "note": note},
                         indent=1))  # fmt: skip
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
    host down named), then -- with --yes -- the removals, each on its host. Exit 0 only when every
    host was listed and every removal succeeded."""
    from runner.errors import NotAnOutputTree
    from runner.ops.cleanup import (
        CleanupPlan,
        CleanupReport,
        HostPlan,
        render_host_plans,
        render_host_reports,
    )
    from runner.schedule.fleet.probe import ask_hosts

    if not args.out.is_dir():
        raise NotAnOutputTree(f"{args.out} is not a directory (expected a marathon output tree)")

    def host_plans(answers) -> list[HostPlan]:
        return [
            HostPlan(a.label, CleanupPlan.from_json(a.result) if a.ok else None, a.error) for a in answers
        ]

    def show(stage, answers) -> None:
        if stage == "plan" and not args.json:
            print(f"cluster {cluster}: {len(answers)} Docker host(s)")
            print(render_host_plans(host_plans(answers)), flush=True)

    params = {"task": args.task, "arm": args.arm, "trial": args.trial, "act": bool(args.yes)}
    stages = ask_hosts(cluster, args.out, "cleanup", params, on_stage=show)
    hosts = host_plans(stages.get("plan", []))
    for a in stages.get("act", []):
        for h in hosts:
            if h.host == a.label:
                h.report, h.error = (CleanupReport.from_json(a.result) if a.ok else None), a.error
    if args.json:
        print(json.dumps({"cluster": cluster, "hosts": [
            {"host": h.host, "plan": h.plan.to_json() if h.plan else None, "error": h.error,
             "report": h.report.to_json() if h.report else None} for h in hosts]}, indent=1))  # fmt: skip
    elif not args.yes:
        print("dry run: nothing changed (add --yes to remove the above)")
    else:
        print("done:")
        print(render_host_reports(hosts) or "  nothing to remove")
    listed = bool(hosts) and all(h.listed for h in hosts)
    acted = all(not h.error and (h.report is None or h.report.ok) for h in hosts)
    return 0 if listed and acted else 1
