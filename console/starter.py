"""Starting a runner from the console without making it the console's child.

The console runs ``marathon run OUT --resume --detach`` as a short-lived launcher in its own
session; the launcher starts the runner in yet another session (``runner.driver.start_detached``)
and exits once the runner holds the lock. The runner is then an orphan adopted by init, so it
keeps running when the console quits, is killed, or loses its ssh session.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LAUNCH_TIMEOUT_SEC = 120.0


def plan_start(out: Path) -> tuple[list[str] | None, str]:
    """The launcher argv, or None and why starting is not possible now."""
    from runner.config import read_driver_env
    from runner.procs import Registry

    out = Path(out).resolve()
    entry = Registry(out).runner_entry()
    if entry is not None:
        return None, f"A runner of this tree is already alive: PID {entry.pid} {entry.argv}"
    if not read_driver_env(out):
        return None, (
            f"{out}/.driver_env is missing: start the first run from a shell with\n"
            f"  marathon run {out} --tasks-dir DIR [--arms ...]"
        )
    argv = [sys.executable, "-m", "runner.cli", "run", str(out), "--resume", "--detach"]
    return argv, f"configuration: {out}/.driver_env; log: {out}/.runner/runner.log"


def start_detached(argv: list[str], out: Path) -> int:
    """Run the launcher (own session), wait for it, return the runner's PID it reports."""
    from runner.driver import PROJECT_ROOT
    from runner.errors import UserError

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
