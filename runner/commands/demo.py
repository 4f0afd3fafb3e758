"""``marathon demo``: the runner on the bundled mini-benchmark, headless, then ``marathon status``.

By default the codex arms ``plain`` and ``goal`` run against the scripted model that every
mini-benchmark image carries (``-m scripted/solve``, a placeholder credential forwarded by name);
``--arms oracle,nop`` runs harbor's stand-ins instead.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

HELP = "run the bundled mini-benchmark headless (codex arms, scripted model), then show the status"
DEFAULT_OUT = "marathon-demo-out"
DEMO_ARMS = "plain,goal"
#: the scripted model needs some credential to forward (by name); it records only a hash of it
DEMO_KEY_VAR = "MARATHON_DEMO_MODEL_KEY"


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
    if any(a in ("plain", "goal", "ssh-goal", "codex-cli", "heartbeat") for a in flags["arms"]):
        import os

        from agents.scripted_model.image import ensure_demo_image
        from agents.staging import stage_codex

        stage_codex()
        ensure_demo_image()
        os.environ.setdefault(DEMO_KEY_VAR, "scripted-demo-placeholder")
        flags["model"] = "scripted/solve"
        flags["agent_kwargs"] = [f"api_key_var={DEMO_KEY_VAR}"]
    cfg = resolve(out, flags, environ={})
    print(f"marathon demo: {', '.join(cfg.arms)} on the mini-benchmark ({tasks}) -> {cfg.out}")
    rc = Driver(cfg, listeners=[Progress()]).run()
    print()
    return rc or marathon(["status", str(cfg.out)])
