"""``marathon kill``: stop this run's processes, then remove its containers and networks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
            print(json.dumps(result, indent=1))
        else:
            print("dry run: nothing changed (add --yes to act)")
        return 0
    report = act_kill(plan, grace_sec=args.grace)
    result |= report.to_json()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("stopped:")
        print(report.render())
    return 0 if report.ok else 1


def run_hosts(args: argparse.Namespace, cluster: str) -> int:
    """A cluster run's kill: first this host's part (the runner and what it registered here; it
    stops its Ray jobs itself when it can), then each Docker host's own plan -- the harbor
    processes its jobs registered and the tree's objects on its engine -- made and carried out by a
    task pinned to that host, every plan shown before it is acted on, every host down named. Then
    the tree's Ray jobs still pending or running are stopped through the job API and each host's
    cleanup runs once more (what a job started between the plans and the stop). Exit 0 only when
    every host was reached and nothing is left alive or unremoved."""
    from runner.ops.cleanup import CleanupReport
    from runner.ops.kill import KillPlan, KillReport
    from runner.ops.procs import act_stop, plan_stop
    from runner.schedule.fleet.cluster import Fleet
    from runner.schedule.fleet.probe import ask_hosts

    here = plan_stop(args.out, expected_argvs=_argvs(args.argv))
    result: dict = {"cluster": cluster, "here": {"stop_plan": here.to_json()}, "hosts": []}
    ok = True
    if not args.json:
        print("this host (the runner's):")
        print(here.render())
    if args.yes:  # the runner first, so that it starts nothing while the hosts stop their trials
        rep = act_stop(here, grace_sec=args.grace)
        result["here"]["stop_report"] = rep.to_json()
        ok = not rep.still_alive
        if not args.json:
            print("stopped here:")
            print(rep.render())

    def show(stage, answers) -> None:
        if stage != "plan" or args.json:
            return
        print(f"cluster {cluster}: {len(answers)} Docker host(s)")
        for a in answers:
            if a.ok:
                print(f"host {a.label}:")
                print(KillPlan.from_json(a.result).render())
            else:
                print(f"host {a.label}: its processes and objects were not listed ({a.error or 'down'})")
        if not args.yes:
            print("dry run: nothing changed (add --yes to act)")
        sys.stdout.flush()

    stages = ask_hosts(cluster, args.out, "kill", {"act": bool(args.yes), "grace": args.grace}, on_stage=show)
    acts = {a.node_id: a for a in stages.get("act", [])}
    for a in stages.get("plan", []):
        host: dict = {"host": a.label, "plan": a.result if a.ok else None, "error": a.error}
        ok = ok and a.ok
        act = acts.get(a.node_id)
        if act is not None:
            host["report"], host["error"] = (act.result if act.ok else None), act.error
            report = KillReport.from_json(act.result) if act.ok else None
            ok = ok and report is not None and report.ok
            if not args.json:
                print(f"host {a.label}:")
                print(report.render() if report is not None else f"  FAILED: {act.error}")
        result["hosts"].append(host)
    ok = ok and bool(stages.get("plan"))
    if args.yes:
        fleet = Fleet.connect(cluster)
        left = [j.submission_id for j in fleet.ours(args.out) if j.active]
        for sid in left:
            fleet.stop(sid)
        late = ask_hosts(cluster, args.out, "cleanup", {"act": True}).get("act", [])
        result["ray_jobs_stopped"] = left
        result["late_cleanup"] = [{"host": a.label, "report": a.result, "error": a.error} for a in late]
        ok = ok and all(a.ok for a in late)
        if not args.json:
            print(f"Ray jobs of the tree still pending or running, stopped: {left or 'none'}")
            for a in late:
                print(f"host {a.label}, removed after the stop:")
                print(CleanupReport.from_json(a.result).render() if a.ok else f"  FAILED: {a.error}")
    result["ok"] = ok
    if args.json:
        print(json.dumps(result, indent=1))
    return 0 if ok else 1
