"""``marathon void``: move one trial aside (never deleted) so the runner runs its pair again."""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.options import add_out, add_plan_flags, is_dir, show_then_act, tree_out

HELP = "void one trial (move it aside with a README, never delete it); the runner reruns the pair"
DESCRIPTION = (
    "Plan, and with --yes carry out: move TRIAL (a trial dir, or an attempt's job dir, of OUT) under "
    "OUT's voided root with a README giving the reason, and void.json; when the attempt holds only that "
    "trial the whole attempt moves. The pair is then not done and the runner runs it again in its next "
    "pass. The console's V does the same. A trial still running (no result.json) is refused."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial", type=Path, help="the trial dir (or the attempt's job dir) to void")
    add_out(p)
    p.add_argument("--reason", default="", help="why (shown in the README; default: voided by the operator)")
    add_plan_flags(p)


def run(args: argparse.Namespace) -> int:
    from runner.errors import UserError
    from runner.schedule.actions import VOID, plan_action

    out = tree_out(args)
    if not is_dir(args.trial):
        raise UserError(f"{args.trial} is not a directory (expected a trial dir of {out})")
    try:
        plan = plan_action(VOID, out, trial=str(args.trial), reason=args.reason)
    except ValueError as exc:  # not a trial of OUT, or still running
        raise UserError(f"{args.trial}: {exc}") from None
    return show_then_act(plan, args)
