"""Starting a runner from the console without making it the console's child.

The console runs ``marathon run OUT --resume --detach`` as a short-lived launcher in its own
session; the launcher starts the runner in yet another session (``runner.schedule.driver.start_detached``)
and exits once the runner holds the lock. The runner is then an orphan adopted by init, so it
keeps running when the console quits, is killed, or loses its ssh session.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LAUNCH_TIMEOUT_SEC = 120.0


def plan_start(out: Path, *, retry: str | None = None) -> tuple[list[str] | None, str]:
    """The launcher argv, or None and why starting is not possible now: a live runner, no
    configuration, or the preflight's problems (``runner.schedule.preflight``, one line each, the same
    lines ``marathon run --resume`` and ``health --fix`` print). The console's environment is the
    one the runner will inherit, so that is the environment checked."""
    from runner.errors import UserError
    from runner.ops.procs import Registry
    from runner.schedule.config import read_driver_env, resolve
    from runner.schedule.preflight import RETRY_CONSOLE, PreflightFailed, render, require

    out = Path(out).resolve()
    entry = Registry(out).runner_entry()
    if entry is not None:
        return None, f"A runner of this tree is already alive: PID {entry.pid} {entry.argv}"
    if not read_driver_env(out):
        return None, (
            f"{out}/.driver_env is missing: start the first run from a shell with\n"
            f"  marathon run {out} --tasks-dir DIR [--arms ...]"
        )
    try:
        notes = require(resolve(out, {}, resume=True), retry=retry or RETRY_CONSOLE)
    except PreflightFailed as exc:
        return None, str(exc)
    except UserError as exc:
        return None, f"cannot start the runner of {out}: {exc}"
    argv = [sys.executable, "-m", "runner.cli", "run", str(out), "--resume", "--detach"]
    why = f"configuration: {out}/.driver_env; log: {out}/.runner/runner.log"
    if notes:
        why += "\n" + render(notes, out=out)
    return argv, why


def start_detached(argv: list[str], out: Path) -> int:
    """Run the launcher (own session), wait for it, return the runner's PID it reports."""
    from runner.errors import UserError
    from runner.schedule.driver import PROJECT_ROOT

    proc = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=str(PROJECT_ROOT),
        timeout=LAUNCH_TIMEOUT_SEC,
        text=True,
    )
    m = re.search(r"PID (\d+)", proc.stdout or "")
    if proc.returncode != 0 or m is None:
        tail = " | ".join((proc.stdout or "").strip().splitlines()[-3:])
        raise UserError(f"the runner did not start (exit {proc.returncode}): {tail}")
    return int(m.group(1))
