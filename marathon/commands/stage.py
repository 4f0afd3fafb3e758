"""``marathon stage <what>``: fetch and check the agents' offline parts into the local cache.

The parts are ``runner.schedule.parts_cache.STAGERS``; ``--cluster`` stages on every Docker host of a Ray
cluster, each host into its own cache, through a task pinned to that host.
"""

from __future__ import annotations

import argparse
import json

from modes import safetext
from runner.schedule.parts_cache import STAGERS

HELP = "stage the agents' offline parts (codex, ...) into the local cache"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=sorted(STAGERS), help="what to stage")
    parser.add_argument("--version", help="version to stage (default: the pinned one)")
    parser.add_argument("--force", action="store_true", help="re-stage even if the cache has it")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--cluster",
        metavar="ADDR",
        help="stage on every Docker host of this Ray cluster, each into its own cache (a task pinned to each)",
    )


def run(args: argparse.Namespace) -> int:
    from runner.schedule.parts_cache import stage

    if args.cluster:
        return run_hosts(args)
    info = stage(args.what, args.version, args.force)
    if args.json:
        print(safetext.dumps(info, pretty=True))
    else:
        for key, value in info.items():
            if isinstance(value, dict):
                value = json.dumps(value)
            print(f"{key}: {value}")
    return 0


def run_hosts(args: argparse.Namespace) -> int:
    """Each Docker host stages into its own cache; every host answers (its part, or why not, or
    down). Exit 0 only when every host has the part."""
    from runner.schedule.fleet.probe import ask_hosts

    params = {"what": args.what, "version": args.version, "force": bool(args.force)}
    answers = ask_hosts(args.cluster, None, "stage", params).get("stage", [])
    if args.json:
        print(safetext.dumps([a.to_json() for a in answers], pretty=True))
    else:
        for a in answers:
            if a.ok:
                print(f"host {a.label}: staged {args.what}")
                for key, value in a.result.items():
                    print(f"  {key}: {json.dumps(value) if isinstance(value, dict) else value}")
            else:
                print(f"host {a.label}: NOT staged ({a.error or 'down'})")
    return 0 if answers and all(a.ok for a in answers) else 1
