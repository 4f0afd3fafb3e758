"""``marathon view``: the whole run in harbor's own web viewer, for the operator only."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.results.tree import default_out

HELP = "the whole run in harbor's web viewer (jobs, trajectories), on loopback behind a token; read-only"
DESCRIPTION = (
    "Make a jobs folder under OUT/.marathon/view/ (one entry per pair: the attempt its cell shows, "
    "named <task>__<arm>__attempt-<n>; --all-attempts: every attempt, voided ones named so), keep it "
    "current while the run goes on, and serve harbor's own viewer over it on 127.0.0.1 (a free port) "
    "behind a random token printed once, read-only: harbor's run launcher, deletes, uploads, sign-in "
    "and anything else that writes or executes are refused. Prints the ssh -L line to reach it from a "
    "laptop. Ctrl+C (or SIGTERM) ends it and leaves nothing running. --detach starts it in the "
    "background (as the console's w key does); --stop ends it. See docs/console.md."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out", nargs="?", type=Path, default=None, help="output tree [$MARATHON_OUT; default ./marathon-out]"
    )
    p.add_argument(
        "--all-attempts", action="store_true", help="every attempt of all time, voided ones named so"
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    p.add_argument(
        "--poll",
        action="store_true",
        help="follow the tree by polling instead of inotify (NFS, as the console's)",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--detach",
        action="store_true",
        help="serve in the background (or show the running viewer); print how to reach it",
    )
    what.add_argument(
        "--stop", action="store_true", help="stop the tree's viewer (SIGTERM to its registered PID)"
    )
    # the detached viewer itself: its log gets the address without the token (access.json has it)
    what.add_argument("--serve-detached", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from modes import safetext
    from runner.errors import Busy, UserError
    from runner.ops import viewer
    from runner.results.model import open_tree

    out = Path(args.out or default_out()).resolve()
    if args.stop:
        print(viewer.stop(out))
        return 0
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: expected 0..65535")
    open_tree(out)  # a one-line error for anything that is not an output tree, before any process
    if args.detach:
        acc, started = viewer.start_or_show(
            out, all_attempts=args.all_attempts, port=args.port, poll=args.poll
        )
        print(("started " if started else "already running: ") + acc.render())
        return 0
    try:
        rc = viewer.serve(
            out, all_attempts=args.all_attempts, port=args.port, show_token=not args.serve_detached,
            poll=args.poll, say=lambda line: print(line, flush=True),
        )  # fmt: skip
    except Busy as exc:
        # Says how to reach the running viewer, its token included, as a start prints it: the
        # operator's own address, so not through the CLI's error redaction (which would cut the
        # token out of it); cleaned as every error is (``modes.safetext``).
        print(f"marathon: {safetext.clean(str(exc), 20_000, newlines=True)}", file=sys.stderr)
        return exc.exit_code
    # Everything of the viewer is undone (registry, access file, jobs folder, socket). A request
    # still running in a worker thread cannot be cancelled (harbor's /api/pricing imports LiteLLM:
    # 3-25 s here) and would hold the interpreter's exit until it finishes: leave now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
