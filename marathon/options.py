"""What several subcommands share: the output-tree argument, and showing a plan before acting on it.

Every command that changes the machine runs the same few lines (``show_then_act``): print the exact
plan (``runner.ops.plan.Plan``), act only with ``--yes``, print what was done, and exit 0 only when
everything was listed and done -- so ``marathon kill``, ``cleanup``, ``void`` and ``stop`` cannot
drift apart, and neither can they from the console's keys, which act on the same plans.
"""

from __future__ import annotations

import argparse
import math
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from modes import safetext
from runner.errors import NotAnOutputTree
from runner.ops.plan import Plan, Report
from runner.results.tree import DEFAULT_OUT, default_out

OUT_HELP = f"output tree [$MARATHON_OUT; default ./{DEFAULT_OUT}]"


def seconds(text: str) -> float:
    """An argparse ``type`` for a duration in seconds: a finite number, not negative (argparse's
    ``float`` takes ``nan`` and ``inf``: ``kill --grace nan`` planned a wait that never ended and
    never sent its KILL, a probe found)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(v) or v < 0 or v > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 0 to {MAX_SECONDS:.0f} (got {text})"
        )
    return v


#: the longest wait a flag may ask for (a day): ``--grace 1e300`` was a TERM wait without end too
MAX_SECONDS = 86400.0


def add_out(p: argparse.ArgumentParser, help: str = OUT_HELP) -> None:
    """The positional output tree (``tree_out`` reads it)."""
    p.add_argument("out", nargs="?", type=Path, default=None, help=help)


def tree_out(args: argparse.Namespace, *, must_exist: bool = True) -> Path:
    """The output tree the command names (``$MARATHON_OUT``, else ./marathon-out when none is given);
    ``must_exist``: a missing directory is a one-line error."""
    out = Path(args.out) if args.out else default_out()
    if must_exist and not is_dir(out):
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    return out


def is_dir(p: Path) -> bool:
    """``p`` is a directory (through links); False, never an error, for a name too long or a link
    loop (``Path.is_dir`` raises on the first)."""
    try:
        return stat.S_ISDIR(os.stat(p).st_mode)
    except (OSError, ValueError):
        return False


def add_plan_flags(p: argparse.ArgumentParser) -> None:
    """``--yes`` (act on the plan shown) and ``--json``."""
    p.add_argument("--yes", action="store_true", help="act on the plan (without it nothing is changed)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def plan_and_report(plan: Plan, report: Report | None) -> dict:
    """The ``--json`` of a plan and what acting on it did."""
    return {"plan": plan.to_json(), "report": report.to_json() if report else None}


def show_then_act(
    plan: Plan,
    args: argparse.Namespace,
    *,
    as_json: Callable[[Plan, Report | None], dict] = plan_and_report,
) -> int:
    """Print the plan; with ``--yes`` act on exactly it and print the report. Exit 0 when everything
    was listed (a dry run) or done (``--yes``), 1 otherwise."""
    # a plan names trial dirs, projects, argvs and reasons from the tree: shown through the one
    # sanitizer (``modes.safetext``), its lines kept; the JSON through the one strict encoder
    if not args.json:
        print(safetext.clean(plan.render(), None, newlines=True), flush=True)
    elif args.yes:  # shown before acting, as without --json; stdout keeps its one JSON document
        print(safetext.clean(plan.render(), None, newlines=True), file=sys.stderr, flush=True)
    report = plan.act() if args.yes else None
    if args.json:
        print(safetext.dumps(as_json(plan, report), pretty=True))
    elif report is None:
        print("dry run: nothing changed (add --yes to act on the plan above)")
    else:
        print("done:")
        print(safetext.clean(report.render(), None, newlines=True))
    if report is None:
        return 0 if plan.listed else 1
    return 0 if report.ok else 1
