"""``marathon demo``: the runner on the bundled mini-benchmark, headless, then ``marathon status``.

Stand-in arms (harbor's ``oracle`` and ``nop``) until the five arms and the console take over.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

HELP = "run the bundled mini-benchmark headless with stand-in arms, then show the status"
DEFAULT_OUT = "marathon-demo-out"
DEMO_ARMS = "oracle,nop"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default=None, help=f"output dir (default ./{DEFAULT_OUT}, or a fresh sibling if used)"
    )
    p.add_argument("--arms", default=DEMO_ARMS, help=f"arms (default {DEMO_ARMS})")
    p.add_argument("--concurrency", type=int, default=4)


def fresh_out(requested: str | None) -> Path:
    if requested:
        return Path(requested)
    out = Path(DEFAULT_OUT)
    if out.exists() and any(out.iterdir()):
        out = Path(f"{DEFAULT_OUT}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}")
    return out


def run(args: argparse.Namespace) -> int:
    from runner.cli import main as marathon
    from runner.config import resolve
    from runner.driver import Driver
    from runner.progress import Progress

    tasks = Path(__file__).resolve().parents[1] / "demo" / "tasks"
    out = fresh_out(args.out)
    flags = {
        "tasks_dir": str(tasks),
        "arms": args.arms.split(","),
        "concurrency": args.concurrency,
        "max_passes": 2,
    }
    cfg = resolve(out, flags, environ={})
    print(f"marathon demo: {', '.join(cfg.arms)} on the mini-benchmark ({tasks}) -> {cfg.out}")
    rc = Driver(cfg, listeners=[Progress()]).run()
    print()
    return rc or marathon(["status", str(cfg.out)])
