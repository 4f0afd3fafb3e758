"""``marathon demo``: the five arms on the bundled mini-benchmark, live in the console.

Everything is real except the model: harbor runs the four mini tasks in Docker, every arm drives the
staged codex binary over app-server, the LoopX arms install the real LoopX profile, and the model is
the scripted Responses-API server each mini-benchmark image carries (listening on 127.0.0.1 inside
the trial container). One model name, ``scripted/loopx``, for every arm: it runs any LoopX guard it
finds in the goal body, then solves the task from the plan the image ships; for plain and goal it
just solves. On a terminal the runner starts detached and the console opens on it (quit the console
and the run goes on); without one (or with ``--headless``) it runs in this process and prints
``marathon status`` at the end.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from modes.profiles import DEFAULT_ARMS

HELP = "run the five arms on the bundled mini-benchmark (scripted model) and watch it in the console"
DEFAULT_OUT = "marathon-demo-out"
DEMO_ARMS = ",".join(DEFAULT_ARMS)
DEMO_MODEL = "scripted/loopx"
#: the scripted model needs some credential to forward (by name); it records only a hash of it.
#: Not a secret: a fixed placeholder declared in runner.secrets.DECLARED_NON_SECRETS, carried in
#: .driver_env as a literal so that a restarted runner (health --fix, --resume, the console) has it.
DEMO_KEY_VAR = "MARATHON_DEMO_MODEL_KEY"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default=None, help=f"output dir (default ./{DEFAULT_OUT}, or a fresh sibling if used)"
    )
    p.add_argument("--arms", default=DEMO_ARMS, help=f"arms (default {DEMO_ARMS}; oracle,nop for stand-ins)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--agent-timeout-mult",
        type=float,
        default=None,
        help="harbor agent timeout = task budget x this (more time on a loaded machine; default 1)",
    )
    p.add_argument(
        "--headless", action="store_true", help="no console: run here and print the status at the end"
    )


def fresh_out(requested: str | None) -> Path:
    if requested:
        return Path(requested)
    out = Path(DEFAULT_OUT)
    if out.exists() and any(out.iterdir()):
        out = Path(f"{DEFAULT_OUT}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}")
    return out


def _prepare_real_arms(arms: list[str]) -> None:
    """Stage codex (and LoopX for its arms) and build the image carrying the scripted model."""
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex
    from modes.profiles import mode_for

    print("marathon demo: staging codex, LoopX and the demo image (cached after the first time)")
    stage_codex()
    if any((m := mode_for(a)) is not None and m.loopx for a in arms):
        from agents.loopx_staging import stage_loopx

        stage_loopx()
    ensure_demo_image()


def run(args: argparse.Namespace) -> int:
    from runner.cli import main as marathon
    from runner.schedule.config import resolve, write_driver_env
    from runner.schedule.driver import Driver
    from runner.schedule.progress import Progress
    from runner.secrets import DECLARED_NON_SECRETS

    tasks = Path(__file__).resolve().parents[1] / "demo" / "tasks"
    out = fresh_out(args.out)
    arms = [a for a in args.arms.split(",") if a]
    flags = {"tasks_dir": str(tasks), "arms": arms, "concurrency": args.concurrency, "max_passes": 2}
    flags["agent_timeout_mult"] = args.agent_timeout_mult
    if any(a in DEFAULT_ARMS for a in arms):
        _prepare_real_arms(arms)
        # The scripted model accepts any key: the declared placeholder, recorded in .driver_env.
        flags["model"] = DEMO_MODEL
        flags["agent_kwargs"] = [f"api_key_var={DEMO_KEY_VAR}"]
        flags["agent_env_literal"] = [f"{DEMO_KEY_VAR}={DECLARED_NON_SECRETS[DEMO_KEY_VAR]}"]
    cfg = resolve(out, flags, environ={})
    print(f"marathon demo: {', '.join(cfg.arms)} on the mini-benchmark ({tasks}) -> {cfg.out}")
    interactive = not args.headless and sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        from runner.schedule.preflight import RETRY_DEMO, require

        require(cfg, retry=RETRY_DEMO)  # before anything is written
        write_driver_env(cfg)
        # The runner ends up in its own session, adopted by init, never a child of the process that
        # then runs the console.
        from runner.schedule.start import act_start, plan_start

        pid = act_start(plan_start(cfg.out, retry=RETRY_DEMO))
        print(f"runner started in the background: PID {pid}; opening the console (q quits, the run goes on)")
        from console.app import run_console  # textual only here

        return run_console(cfg.out)
    from runner.schedule.preflight import RETRY_DEMO

    rc = Driver(cfg, listeners=[Progress()], retry=RETRY_DEMO).run()
    print()
    return rc or marathon(["status", str(cfg.out)])
