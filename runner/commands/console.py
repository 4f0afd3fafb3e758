"""``marathon console``: the operator console (Textual), attached to the runner of OUT."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.results.tree import default_out

HELP = "the operator console: live task x arm grid, drill-down, one-key stop/kill/cleanup/void"
DESCRIPTION = (
    "Watch an output tree live and act on its runner. Attaches to the runner of OUT when one is alive, "
    "or offers to start one (detached: it keeps running when the console quits or ssh drops). Every "
    "destructive key shows the exact plan first, with Cancel as the default. --readonly disables them."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "out", nargs="?", type=Path, default=None, help="output tree [$MARATHON_OUT; default ./marathon-out]"
    )
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
        type=float,
        default=300.0,
        metavar="SEC",
        help="full rescan every SEC s, a safety net (default 300)",
    )


def run(args: argparse.Namespace) -> int:
    import sys

    from runner.errors import NotAnOutputTree, UserError

    out = Path(args.out or default_out()).resolve()
    if not out.is_dir():
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("marathon console needs a terminal; use `marathon status` for scripts")
    from console.app import run_console  # textual is imported only here

    return run_console(out, readonly=args.readonly, poll=args.poll, rescan_sec=args.rescan)
