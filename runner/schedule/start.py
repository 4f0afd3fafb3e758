"""Starting a runner that outlives whoever asked for it: one implementation for ``marathon run
--detach``, ``marathon demo``, ``marathon health --fix`` and the console's Start.

The runner must survive the terminal, the ssh session and the console that started it, so it runs
in a session of its own (a hang-up of ours cannot reach it) with stdin from /dev/null and its output
appended to ``<out>/.runner/runner.log``. And it must never be the caller's child: a console that
quits or is killed would otherwise take its child's wait status with it, and a long-lived caller
would keep a zombie. So a short-lived launcher (this module run as ``python -m``) starts it and
exits at once; the runner is adopted by init, and the caller waits for it to hold the tree's lock.

Starting lives with the scheduler, not in ``runner.ops``: deciding whether a runner may start needs
its configuration, lock and preflight, which are the scheduler's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from modes import safeio, safetext
from runner.errors import Busy, UserError
from runner.ops.procs import ROLE_RUNNER, Registry, alive, identity_of
from runner.results.tree import driver_env_path, runner_dir
from runner.schedule.config import PROJECT_ROOT, project_pythonpath
from runner.schedule.lock import lock_holder

RUNNER_LOG = "runner.log"
#: how long a start waits for the runner to hold its lock (it reads its config and checks the
#: dataset first); after that the PID is returned anyway and the runner's log says the rest
START_WAIT_SEC = 15.0
#: the launcher only starts a process and prints its PID
LAUNCHER_TIMEOUT_SEC = 60.0


def runner_argv(out: Path) -> list[str]:
    """What a started runner runs: the tree's own configuration (``--resume``), timestamped lines."""
    return [sys.executable, "-m", "marathon.cli", "run", str(Path(out).resolve()), "--resume", "--plain"]


def log_tail(path: Path, lines: int, cap: int = 64 << 10) -> list[str]:
    """The last ``lines`` lines of a log, from at most its last ``cap`` bytes, cleaned for a
    one-line error (never read whole: a runaway log can be gigabytes; never blocks on a FIFO)."""
    opened = safeio.open_own(path)
    if isinstance(opened, safeio.Refused):
        return []
    fd, st = opened
    try:
        data = os.pread(fd, cap, max(0, st.st_size - cap))
    except OSError:
        return []
    finally:
        os.close(fd)
    return [safetext.clean(x, 300) for x in data.decode("utf-8", "replace").splitlines()[-lines:]]


def log_path(out: Path) -> Path:
    return runner_dir(Path(out).resolve()) / RUNNER_LOG


@dataclass(frozen=True)
class StartPlan:
    """Whether a runner of ``out`` can start now, and what it would run (argv is None: it cannot);
    a ``runner.ops.plan.Plan``."""

    out: str
    argv: tuple[str, ...] | None
    why: str  # why not; or the configuration, the log and the preflight's notes
    listed = True

    @property
    def possible(self) -> bool:
        return self.argv is not None

    @property
    def empty(self) -> bool:
        return not self.possible

    def to_json(self) -> dict:
        return {"out": self.out, "argv": list(self.argv) if self.argv else None, "why": self.why}

    def act(self) -> StartReport:
        return StartReport(act_start(self))

    def render(self) -> str:
        if self.argv is None:
            return self.why
        return (
            "Start, detached (own session; survives this console and the ssh session):\n"
            f"  argv {list(self.argv)}\n{self.why}"
        )


@dataclass(frozen=True)
class StartReport:
    pid: int
    ok = True

    def render(self) -> str:
        return f"runner started, PID {self.pid} (detached; it keeps running when this console or shell ends)"

    def to_json(self) -> dict:
        return {"pid": self.pid, "ok": True}


def plan_start(out: Path, *, retry: str | None = None) -> StartPlan:
    """Can a runner of ``out`` start now: no live runner, a configuration (``.driver_env``) and a
    clean preflight (``runner.schedule.preflight``, the same lines ``marathon run --resume`` and
    ``health --fix`` print). The caller's environment is the one the runner inherits, so that is the
    environment checked."""
    from runner.schedule.config import read_driver_env, resolve
    from runner.schedule.preflight import RETRY_CONSOLE, PreflightFailed, render, require

    out = Path(out).resolve()
    entry = Registry(out).runner_entry()
    if entry is not None:
        return StartPlan(
            str(out), None, f"A runner of this tree is already alive: PID {entry.pid} {entry.argv}"
        )
    if not read_driver_env(out):
        return StartPlan(
            str(out),
            None,
            f"{driver_env_path(out)} is missing: start the first run from a shell with\n"
            f"  marathon run {out} --tasks-dir DIR [--arms ...]",
        )
    try:
        notes = require(resolve(out, {}, resume=True), retry=retry or RETRY_CONSOLE)
    except PreflightFailed as exc:
        return StartPlan(str(out), None, str(exc))
    except UserError as exc:
        return StartPlan(str(out), None, f"cannot start the runner of {out}: {exc}")
    why = f"configuration: {driver_env_path(out)}; log: {log_path(out)}"
    if notes:
        why += "\n" + render(notes, out=out)
    return StartPlan(str(out), tuple(runner_argv(out)), why)


def act_start(plan: StartPlan, *, wait_sec: float = START_WAIT_SEC) -> int:
    """Start the planned runner; returns its PID."""
    if plan.argv is None:
        raise UserError(plan.why)
    return start_detached(Path(plan.out), wait_sec=wait_sec)


def refuse_if_running(out: Path) -> None:
    """``Busy`` when a runner holds the tree's lock. Asked before a start writes the run's
    ``.driver_env``: written first, a refused ``run --detach`` had rewritten the live runner's
    settings, which its next restart (``--resume``, ``health --fix``) took up (a probe)."""
    held = lock_holder(Path(out).resolve())
    if held is not None:
        raise Busy(f"{Path(out).resolve()} already has a runner: {held.describe()}")


def start_detached(out: Path, *, wait_sec: float = START_WAIT_SEC) -> int:
    """Start the runner of ``out`` from its ``.driver_env`` (see the module docstring); returns its
    PID once it holds the lock (or after ``wait_sec``). Raises Busy when a runner holds the lock and
    UserError when the runner exits at once (with the end of its log)."""
    out = Path(out).resolve()
    refuse_if_running(out)
    log = log_path(out)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ) | {"PYTHONPATH": project_pythonpath(os.environ)}
    launched = subprocess.run(
        [sys.executable, "-m", "runner.schedule.start", str(out)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=str(PROJECT_ROOT), env=env,
        timeout=LAUNCHER_TIMEOUT_SEC,
    )  # fmt: skip
    word = (launched.stdout or "").strip()
    if launched.returncode != 0 or not word.isdigit():
        tail = " | ".join(((launched.stdout or "") + (launched.stderr or "")).strip().splitlines()[-3:])
        raise UserError(f"the runner did not start (launcher exit {launched.returncode}): {tail}")
    pid = int(word)
    ident = identity_of(pid)
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        h = lock_holder(out)
        if h is not None and h.pid == pid:
            return pid
        if not alive(ident):
            other = lock_holder(out)
            if other is not None:  # another start won the tree meanwhile: that is the runner now
                raise Busy(f"{out} already has a runner: {other.describe()}")
            raise UserError(f"the runner exited at once: {' | '.join(log_tail(log, 5))}")
        time.sleep(0.1)
    return pid


def _launch(out: Path) -> int:
    """The launcher's one job: start the runner in its own session, register it, print its PID.

    Registered here, before it runs a line: the runner registers itself only once it holds the
    lock, after its preflight (a second or more), and a ``kill`` or ``stop`` in between found no
    runner, said so, and the run started all the same (found by a probe). A runner that then exits
    (its preflight refused, another holds the lock) leaves an entry of a dead process, which no
    reader takes for a live one."""
    argv = runner_argv(out)
    with open(log_path(out), "ab") as fh:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=str(PROJECT_ROOT), close_fds=True,
        )  # fmt: skip
    with contextlib.suppress(ProcessLookupError):  # gone already: nothing to find
        Registry(out).register(proc.pid, ROLE_RUNNER, argv)
    print(proc.pid, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_launch(Path(sys.argv[1])))
