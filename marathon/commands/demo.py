"""``marathon demo``: the five arms on the bundled mini-benchmark, live in the console.

Everything is real except the model: harbor runs the four mini tasks in Docker, every arm drives the
staged codex binary over app-server, the LoopX arms install the real LoopX profile, and the model is
the scripted Responses-API server on the host, the upstream of the run's model gateway (every call
goes sandbox -> relay -> the attempt's socket -> gateway -> scripted model, as a real run's do). One model name for every arm. By default ``scripted/demo``: it runs any LoopX
guard it finds in the goal body, then plays the scenario the task's plan assigns to the harness it
sees (``runner/demo/tasks/*/environment/plan.json``, ``"demo"``), so the 20 pairs show partial
scores, a deadline, a build failure, an unblock and, through ``setup_fault_once``, one voided and
rerun attempt (docs/arms.md, "The demo's scenarios"). ``--simple`` is the all-solve run
(``scripted/loopx``). On a terminal the runner starts detached and the console opens on it (quit the
console and the run goes on); without one (or with ``--headless``) it runs in this process and
prints ``marathon status`` at the end.
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
DEMO_MODEL = "scripted/loopx"  # --simple: every arm solves every task
VARIED_MODEL = "scripted/demo"  # the default: the task plans' per-harness scenarios
#: the demo's --price for its stand-in model: gpt-5.5's list price (USD per million in, cached, out)
DEMO_PRICE = "5,0.5,30"
#: the varied demo's deadline, the same for every arm: the never-finish pair hits it, the others end
#: well before it. harbor's agent timeout is doubled so that no arm's LoopX preparation, slow on a
#: loaded machine, clamps its budget below this (the audit would see unequal budgets).
VARIED_GOAL_TIMEOUT_SEC = 60
VARIED_AGENT_TIMEOUT_MULT = 2.0
#: the pair whose first attempt fails in agent setup (a real harbor setup exception the runner voids)
SETUP_FAULT_PAIR = "two-stage/plain"
SETUP_FAULT_MARKER = "demo-setup-fault.once"  # under OUT/.runner: created by the failing setup
#: the scripted model needs some credential to forward (by name); it records only a hash of it.
#: Not a secret: a fixed placeholder declared in runner.secrets.DECLARED_NON_SECRETS, carried in
#: .driver_env as a literal so that a restarted runner (health --fix, --resume, the console) has it.
DEMO_KEY_VAR = "MARATHON_DEMO_MODEL_KEY"
#: the model budget of every demo arm: the mini tasks' own agent timeout (their task.toml); the
#: runner raises harbor's agent timeout to hold it plus the preparation (modes.budget)
DEMO_GOAL_TIMEOUT_SEC = 120


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", default=None, help=f"output dir (default ./{DEFAULT_OUT}, or a fresh sibling if used)"
    )
    p.add_argument("--arms", default=DEMO_ARMS, help=f"arms (default {DEMO_ARMS}; oracle,nop for stand-ins)")
    p.add_argument(
        "--tasks",
        default=None,
        help="comma list of the mini tasks to run (default: all four; a shorter demo, or a test's)",
    )
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--agent-timeout-mult",
        type=float,
        default=None,
        help="harbor agent timeout = task budget x this (more time on a loaded machine; default 2, --simple 1)",
    )
    p.add_argument(
        "--headless", action="store_true", help="no console: run here and print the status at the end"
    )
    p.add_argument(
        "--simple",
        action="store_true",
        help="every arm solves every task (no partial scores, deadline, build failure, unblock or void)",
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
    from runner.ops.dockerapi import connect

    connect().close()  # an engine that does not answer: its one line (exit 3) before any staging
    print("marathon demo: staging codex, LoopX and the demo image (cached after the first time)")
    stage_codex()
    if any((m := mode_for(a)) is not None and m.loopx for a in arms):
        from agents.loopx_staging import stage_loopx

        stage_loopx()
    ensure_demo_image()


def varied_flags(out: Path, agent_timeout_mult: float | None) -> dict:
    """The varied demo's settings, each given to every arm alike (run-wide, in .driver_env)."""
    marker = out.resolve() / ".runner" / SETUP_FAULT_MARKER
    return {
        "model": VARIED_MODEL,
        "goal_timeout_sec": VARIED_GOAL_TIMEOUT_SEC,
        "agent_timeout_mult": agent_timeout_mult or VARIED_AGENT_TIMEOUT_MULT,
        "agent_kwargs": [f"api_key_var={DEMO_KEY_VAR}", f"setup_fault_once={SETUP_FAULT_PAIR}@{marker}"],
    }


def run(args: argparse.Namespace) -> int:
    from marathon.status_view import show
    from runner.schedule.config import DEMO_TASKS, chosen_tasks, resolve, write_driver_env
    from runner.schedule.display import Progress
    from runner.schedule.driver import Driver

    tasks = DEMO_TASKS
    out = fresh_out(args.out)
    arms = [a for a in args.arms.split(",") if a]
    flags = {"tasks_dir": str(tasks), "arms": arms, "concurrency": args.concurrency, "max_passes": 2}
    if args.tasks is not None:  # checked before any staging: an unknown name costs nothing
        flags["tasks"] = chosen_tasks(tasks, [t.strip() for t in args.tasks.split(",") if t.strip()])
    flags["min_free_gb"] = 1  # the mini-benchmark's trials are small (runner.ops.disk)
    flags["agent_timeout_mult"] = args.agent_timeout_mult
    flags["goal_timeout_sec"] = DEMO_GOAL_TIMEOUT_SEC
    if any(a in DEFAULT_ARMS for a in arms):
        _prepare_real_arms(arms)
        # The scripted model accepts any key: the declared placeholder, which the run's gateway holds
        # (runner.secrets.DECLARED_NON_SECRETS); the arms get per-attempt tokens (docs/gateway.md).
        flags["model"] = DEMO_MODEL
        flags["agent_kwargs"] = [f"api_key_var={DEMO_KEY_VAR}"]
        if not args.simple:
            flags.update(varied_flags(out, args.agent_timeout_mult))
        # The stand-in is in no price table, so its calls would be unpriced; the demo shows money
        # as a real run does, at a real model's list price, recorded as an operator override in
        # every report and status line (runner.results.prices), so it never passes for a real bill.
        flags["prices"] = [f"{flags['model']}={DEMO_PRICE}"]
    cfg = resolve(out, flags, environ={})
    print(f"marathon demo: {', '.join(cfg.arms)} on the mini-benchmark ({tasks}) -> {cfg.out}")
    interactive = not args.headless and sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        from runner.schedule.preflight import RETRY_DEMO, require
        from runner.schedule.start import refuse_if_running

        require(cfg, retry=RETRY_DEMO)  # before anything is written
        refuse_if_running(cfg.out)
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
    return rc or show(cfg.out)
