"""``marathon verify-envs [--arms ...]``: install-only check of every arm's environment, no tokens.

Why: the field's failures were silent (exit 0, clean logs) -- a missing sidecar, a config written in
two appends, LoopX without Node or skills. This runs each arm's *own* agent code on a mini task's
image, up to the point where a model would be asked: staged codex (sidecar, ``--version``) and the
one-piece config (strict), the app-server handshake, and for the LoopX arms the staged parts, the
profile install and the three gates, plus the body render. It never starts a thread or a turn, so no
token is spent. One line per arm and check; the first failing check of an arm names what is wrong
and the rest of that arm is skipped. Exit 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from modes import safetext
from runner.errors import EXIT_FAILED, EXIT_OK, UserError
from runner.schedule.envcheck import MINI_TASK, Check, checks_here

HELP = "check every arm's environment on a mini task (install-only, no tokens)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arms", help="comma-separated arms (default: all five)")
    parser.add_argument("--task", type=Path, default=MINI_TASK, help="a harbor task dir whose image to use")
    parser.add_argument("--codex-root", type=Path, help="a staged codex tree (default: the cache)")
    parser.add_argument("--loopx-parts", type=Path, help="staged LoopX parts (default: the cache)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON lines")
    parser.add_argument(
        "--cluster",
        help="check on every Docker host of this Ray cluster (a task pinned to each: its own cache and engine)",
    )
    parser.add_argument(
        "--env", default="docker",
        help="the harbor environment the run will use (a type or module:Class): its credentials "
        "are checked first, by harbor's own preflight; the arms' checks run on the local engine",
    )  # fmt: skip


def _arms(value: str | None) -> list[str]:
    from modes.profiles import ARMS, DEFAULT_ARMS

    names = [a.strip() for a in value.split(",") if a.strip()] if value else list(DEFAULT_ARMS)
    unknown = [a for a in names if a not in ARMS]
    if unknown:
        raise UserError(f"unknown arm(s): {', '.join(unknown)} (known: {', '.join(ARMS)})")
    return names


def run(args: argparse.Namespace) -> int:
    import logging

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # harbor imports litellm: stay offline
    logging.getLogger("harbor").setLevel(logging.WARNING)

    arms = _arms(args.arms)
    pre: list[Check] = []
    if args.env != "docker":  # the run's environment, by the runner's own preflight check of it
        from runner.schedule.config import resolve
        from runner.schedule.preflight import check_environment

        with tempfile.TemporaryDirectory() as tmp:
            cfg = resolve(Path(tmp), {"tasks_dir": str(MINI_TASK.parent), "env": args.env}, environ={})
            problems = check_environment(cfg, os.environ)
        if problems:
            pre.append(Check("*", "environment", "FAIL", problems[0].line()))
            return _print(pre, args.json)
        pre.append(Check("*", "environment", "ok", f"harbor's preflight of --env {args.env} passed"))
    if args.cluster:
        return run_hosts(args, arms, pre)
    return _print(pre + checks_here(arms, args.task, args.codex_root, args.loopx_parts), args.json)


def run_hosts(args: argparse.Namespace, arms: list[str], pre: list[Check]) -> int:
    """``checks_here`` on every Docker host of the cluster (``runner.schedule.fleet.probe``); each
    host's lines led by its host, a host down or failing named. Exit 0 only when every host
    answered and every check passed. ``--task`` must be at the same path on every host (the
    default, the repo's mini task, is)."""
    from runner.schedule.fleet.probe import ask_hosts

    if args.codex_root or args.loopx_parts:
        raise UserError(
            "--codex-root/--loopx-parts name this host's trees; with --cluster each host uses its own cache"
        )
    params = {"arms": arms, "task": str(Path(args.task).resolve())}
    answers = ask_hosts(args.cluster, None, "verify-envs", params).get("verify-envs", [])
    ok = _print(pre, args.json) == EXIT_OK and bool(answers)
    for a in answers:
        checks = [Check(**c) for c in a.result["checks"]] if a.ok else []
        for c in checks:
            if args.json:
                print(safetext.dumps({"host": a.label, **asdict(c)}), flush=True)
            else:
                print(f"{safetext.clean(a.label):<24} {c.line()}", flush=True)
        if not a.ok:
            why = a.error or "down"
            print(
                safetext.dumps({"host": a.label, "error": why})
                if args.json
                else f"{safetext.clean(a.label):<24} NOT checked ({safetext.clean(why, None)})"
            )
        ok = ok and a.ok and bool(checks) and all(c.status == "ok" for c in checks)
    return EXIT_OK if ok else EXIT_FAILED


def _print(checks: list[Check], as_json: bool) -> int:
    for c in checks:
        print(safetext.dumps(asdict(c)) if as_json else c.line(), flush=True)
    return EXIT_OK if all(c.status == "ok" for c in checks) else EXIT_FAILED
