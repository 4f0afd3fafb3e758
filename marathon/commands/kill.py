"""``marathon kill``: stop this run's processes, then remove its containers and networks."""

from __future__ import annotations

import argparse
import json

from marathon.options import add_out, add_plan_flags, seconds, show_then_act, tree_out
from runner.ops.procs import DEFAULT_GRACE_SEC

HELP = "stop the run's processes (registered PIDs + descendants), then clean up its containers/networks"
DESCRIPTION = (
    "Plan, and with --yes carry out: TERM to the runner's registered processes (process identity "
    "verified) and their descendants, by process group where no protected process shares it; wait "
    "--grace seconds; KILL what is left; then remove the run's compose containers and networks. "
    "--argv selects only processes of your own user. This command's own process and all its "
    "ancestors are never signalled. Without --yes nothing is changed. The console's Kill does the same. "
    "On a cluster run (--cluster, or the one OUT's run recorded) the runner here is stopped, then each "
    "Docker host carries out its own plan, the tree's Ray jobs are stopped and each host is cleaned once more."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    add_plan_flags(p)
    p.add_argument(
        "--grace",
        type=seconds,
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
    from runner.schedule.actions import KILL, plan_action

    out = tree_out(args)
    grace = DEFAULT_GRACE_SEC if args.grace is None else args.grace
    plan = plan_action(KILL, out, cluster=args.cluster, expected_argvs=_argvs(args.argv), grace_sec=grace)
    # the kill's JSON: the plan's fields, and (with --yes) the report's beside them
    return show_then_act(plan, args, as_json=lambda p, r: p.to_json() | (r.to_json() if r else {}))
