"""``marathon health [OUT] [--fix] [--json]``: runner alive, stale claims, budgets, leaks, unvoided errors."""

from __future__ import annotations

import argparse
import os
import sys

from marathon.options import add_out, tree_out
from modes import safetext

HELP = "check a run (runner alive, stale claims, trials past budget, leaked networks, errors not voided)"
DESCRIPTION = (
    "Check an output tree: is its runner alive (by its PID registry, never by a process pattern), "
    "stale claims, trials past their budget, leaked containers/networks of ended trials, "
    "infrastructure-errored jobs not yet voided. --fix clears what is stale, voids, cleans up and "
    "restarts a dead runner from OUT/.driver_env, printing each fix. Exit 0 when healthy (or fixed), 1 otherwise."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    p.add_argument("--fix", action="store_true", help="fix what can be fixed, printing each fix")
    p.add_argument("--json", action="store_true", help="machine-readable report")


def run(args: argparse.Namespace) -> int:
    from runner.results import tree
    from runner.results.model import check_tree, open_tree
    from runner.schedule.health import check, fix

    out = check_tree(tree_out(args))  # not a tree (an empty dir): exit 2, as status says
    if not any(os.path.exists(out / n) for n in tree.MARKERS):
        # no marker of marathon's: a tree only if it holds results (a typo'd dir read "OK: nothing
        # to fix", a probe found), which its scan tells, as status's does
        open_tree(out)

    def shown(plan) -> None:  # what --fix acts on, before it acts (stderr under --json)
        fixing = [f for f in plan.findings if f.fixable]
        lines = ["health --fix acts on:"] + [f.line() for f in fixing]
        text = "\n".join(lines if fixing else ["health --fix: nothing to act on"])
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    rep = fix(out, shown) if args.fix else check(out)[0]
    print(safetext.dumps(rep.to_json(), pretty=True) if args.json else rep.render())
    if args.fix:
        unfixed = [f for f in rep.findings if not f.fixable]
        return 0 if not unfixed else 1
    return 0 if rep.ok else 1
