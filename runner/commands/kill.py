"""``marathon kill``: stop this run's processes, then remove its containers and networks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runner.tree import default_out

HELP = "stop the run's processes (registered PIDs + descendants), then clean up its containers/networks"
DESCRIPTION = (
    "Plan, and with --yes carry out: TERM to the runner's registered processes (PID and create time "
    "verified) and their descendants, by process group where no protected process shares it; wait "
    "--grace seconds; KILL what is left; then remove the run's compose containers and networks. "
    "This command's own process and all its ancestors are never signalled. Without --yes nothing "
    "is changed."
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
        help="seconds between TERM and KILL (default 30: harbor needs ~12 s to take its trial down)",
    )
    p.add_argument(
        "--argv",
        action="append",
        default=[],
        metavar="JSON",
        help='also stop processes whose argv equals this JSON list exactly, e.g. \'["harbor","run"]\'',
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
    from runner.cleanup import act_cleanup, plan_cleanup
    from runner.errors import NotAnOutputTree, Unavailable, UserError
    from runner.procs import DEFAULT_GRACE_SEC, act_stop, plan_stop

    args.out = args.out or default_out()
    if not args.out.is_dir():
        raise NotAnOutputTree(f"{args.out} is not a directory (expected a marathon output tree)")
    if args.grace is None:
        args.grace = DEFAULT_GRACE_SEC
    if args.grace < 0:
        raise UserError("--grace must not be negative")
    stop_plan = plan_stop(args.out, expected_argvs=_argvs(args.argv))
    docker_error = None
    try:
        clean_plan = plan_cleanup(args.out)
    except Unavailable as exc:
        clean_plan, docker_error = None, str(exc)
    result: dict = {
        "stop_plan": stop_plan.to_json(),
        "cleanup_plan": clean_plan.to_json() if clean_plan else None,
    }
    if not args.json:
        print(stop_plan.render())
        print(clean_plan.render() if clean_plan else f"cleanup: {docker_error}")
    if not args.yes:
        if args.json:
            print(json.dumps(result | {"docker_error": docker_error}, indent=1))
        else:
            print("dry run: nothing changed (add --yes to act)")
        return 0
    stop_report = act_stop(stop_plan, grace_sec=args.grace)
    result["stop_report"] = stop_report.to_json()
    if not args.json:
        print("stopped:")
        print(stop_report.render())
    clean_report = None
    try:
        # re-plan: harbor's own `compose down` may have run on TERM; what is left now is the leak
        clean_plan = plan_cleanup(args.out)
        clean_report = act_cleanup(clean_plan)
        result["cleanup_plan_after_stop"] = clean_plan.to_json()
        result["cleanup_report"] = clean_report.to_json()
    except Unavailable as exc:
        docker_error = str(exc)
    if args.json:
        print(json.dumps(result | {"docker_error": docker_error}, indent=1))
    else:
        print("cleanup:" if clean_report else f"cleanup: {docker_error}")
        if clean_report:
            print(clean_report.render())
    ok = not stop_report.still_alive and clean_report is not None and clean_report.ok
    return 0 if ok else 1
