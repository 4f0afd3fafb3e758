"""``marathon console``: the operator console (Textual), attached to the runner of OUT."""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.options import add_out, seconds, tree_out

HELP = "the operator console: live task x arm grid, drill-down, one-key stop/kill/cleanup/void"
DESCRIPTION = (
    "Watch an output tree live and act on its runner. Attaches to the runner of OUT when one is alive, "
    "or offers to start one (detached: it keeps running when the console quits or ssh drops). Every "
    "destructive key shows the exact plan first, with Cancel as the default. --readonly disables them."
)


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    p.add_argument(
        "--readonly", action="store_true", help="disable every action (stop, kill, cleanup, void, start)"
    )
    p.add_argument(
        "--poll",
        action="store_true",
        help="poll the tree instead of inotify (NFS: other hosts' writes are invisible to inotify)",
    )
    p.add_argument(
        "--rescan",
        type=seconds,
        default=300.0,
        metavar="SEC",
        help="full rescan every SEC s, a safety net (default 300)",
    )
    p.add_argument(
        "--screenshot",
        type=Path,
        default=None,
        metavar="FILE.svg",
        help="no terminal needed: save the grid as SVG once it is populated, then exit (read-only)",
    )
    p.add_argument(
        "--size", default="130x40", metavar="COLSxROWS", help="--screenshot: the screen size (default 130x40)"
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from runner.errors import UserError

    out = tree_out(args).resolve()
    if args.screenshot is not None:
        cols, _, rows = str(args.size).partition("x")
        if not (cols.isdigit() and rows.isdigit()):
            raise UserError(f"--size {args.size}: expected COLSxROWS, e.g. 130x40")
        from console.app import screenshot_console  # textual is imported only here

        rc = screenshot_console(out, args.screenshot, (int(cols), int(rows)))
        print(f"screenshot: {args.screenshot.resolve()}")
        return rc
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("marathon console needs a terminal; use `marathon status` for scripts")
    from console.app import run_console  # textual is imported only here

    return run_console(out, readonly=args.readonly, poll=args.poll, rescan_sec=args.rescan)
