"""``marathon stop``: stop the runner alone, gracefully (it winds its trials down itself)."""

from __future__ import annotations

import argparse

from marathon.options import add_out, add_plan_flags, show_then_act, tree_out

HELP = "stop the runner gracefully: SIGTERM to it alone; it stops its trials and cleans up (prints the plan; --yes acts)"
DESCRIPTION = (
    "Plan, and with --yes carry out: SIGTERM to the tree's live runner alone (by its registry entry and "
    "process identity, never its process group); the runner stops starting trials, stops its harbor "
    "jobs, removes this run's containers and networks, voids the cancelled attempts, releases its "
    "claims and exits; if it is still running after its wind-down it gets SIGKILL. The console's T "
    "does the same. To stop the runner and its trials at once, see `marathon kill`."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    add_plan_flags(p)


def run(args: argparse.Namespace) -> int:
    from runner.schedule.actions import STOP, plan_action

    return show_then_act(plan_action(STOP, tree_out(args)), args)
