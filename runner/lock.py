"""One runner per output tree: ``<out>/.runner/lock`` holding PID, create time and host.

Why: two drivers on one tree start the same (task, arm) twice and fight over claims. A second
start is refused with who holds the lock; a lock whose holder is gone (same host, PID dead or
recycled) is stale and taken over. PIDs are compared together with their create time, so a
recycled PID never looks like a live runner.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from runner.errors import Busy
from runner.events import utc_now
from runner.procs import alive, create_time_of, same_start
from runner.tree import runner_dir

LOCK_FILE = "lock"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock or claim: a PID only means something with its create time and host."""

    pid: int
    create_time: float
    host: str
    since: str = ""
    run_id: str = ""

    def is_live(self) -> bool:
        """Alive as far as this host can tell. Another host's holder is assumed alive."""
        if self.host != socket.gethostname():
            return True
        return alive(self.pid, self.create_time)

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host} (since {self.since or '?'}, run {self.run_id or '?'})"


def me(run_id: str = "") -> Holder:
    pid = os.getpid()
    return Holder(pid, create_time_of(pid) or 0.0, socket.gethostname(), utc_now(), run_id)


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in a lock/claim file; None when missing or unreadable."""
    try:
        d = json.loads(path.read_text())
        return Holder(
            int(d["pid"]), float(d["create_time"]), str(d["host"]), d.get("since", ""), d.get("run_id", "")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def dir_mutex(directory: Path) -> Iterator[None]:
    """Serialise take-overs of stale files in one directory (flock on a side file)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".takeover.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def create_exclusive(path: Path, payload: dict) -> bool:
    """Create ``path`` with ``payload`` only if it does not exist (O_CREAT|O_EXCL)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(payload) + "\n")
    return True


def lock_path(out: Path) -> Path:
    return runner_dir(out) / LOCK_FILE


def lock_holder(out: Path) -> Holder | None:
    """The live holder of the tree's runner lock, else None (stale or absent)."""
    h = read_holder(lock_path(out))
    return h if h is not None and h.is_live() else None


class RunnerLock:
    """Acquire with ``acquire()``; ``release()`` removes the file only while it is still ours."""

    def __init__(self, out: Path, run_id: str) -> None:
        self.out = Path(out)
        self.path = lock_path(self.out)
        self.holder = me(run_id)
        self.took_over: Holder | None = None

    def acquire(self) -> None:
        payload = asdict(self.holder)
        if create_exclusive(self.path, payload):
            return
        with dir_mutex(self.path.parent):
            current = read_holder(self.path)
            if current is not None and current.is_live() and current.pid != self.holder.pid:
                raise Busy(
                    f"{self.out} already has a runner: {current.describe()}; "
                    f"watch it with `marathon status {self.out}` or stop it with `marathon kill {self.out}`"
                )
            self.took_over = current
            tmp = self.path.with_name(f".{LOCK_FILE}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload) + "\n")
            os.replace(tmp, self.path)

    def release(self) -> None:
        with dir_mutex(self.path.parent):
            current = read_holder(self.path)
            if (
                current is not None
                and current.pid == self.holder.pid
                and same_start(current.create_time, self.holder.create_time)
            ):
                self.path.unlink(missing_ok=True)
