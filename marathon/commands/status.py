"""``marathon status``: progress of the current run per arm, and the scores so far."""

from __future__ import annotations

import argparse

from marathon.options import add_out, tree_out

HELP = "per-arm progress of the current run (done/running/pending/errored/voided) and scores so far"
DESCRIPTION = (
    "Read an output tree (never changes its results; keeps a cache in OUT/.marathon) and print, per arm, the pairs done, running, pending, "
    "errored, voided, unreadable (a file refused: a FIFO, a symlink out of the trial dir, too "
    "large) and tampered (a verifier file changed after the verifier finished) in the current run "
    "(the last runner start in OUT/.runner/events.jsonl; --all for all time), the mean reward, "
    "partial score (with n = done and its 95 % bootstrap interval) and test pass rate over done pairs, build "
    "failures, and receipt events (continuations, unblocks, error events). A cell with a hole in "
    "what the agent can write (a file refused, made nonsense or tampered with) counts against its "
    "arm as a failure and is flagged: n counts it, flag says how many (--exclude-flagged prints the "
    "other reading, labelled). Excluded leftover dirs and unreadable files are listed, never "
    "silently skipped. Exit 0; 2 when OUT is not an output tree."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (one line)")
    p.add_argument("--pretty", action="store_true", help="with --json: indented for a human")
    p.add_argument("--all", action="store_true", help="count all runs, not only the current one")
    p.add_argument(
        "--exclude-flagged",
        action="store_true",
        help="the other reading: leave flagged cells out of the means instead of counting them as failures",
    )


def run(args: argparse.Namespace) -> int:
    from marathon.status_view import show

    return show(
        tree_out(args, must_exist=False),
        all_runs=args.all,
        as_json=args.json,
        pretty=args.pretty,
        exclude_flagged=args.exclude_flagged,
    )
