"""One runner per output tree: ``<out>/.runner/lock`` holding PID, process identity and host.

Why: two drivers on one tree start the same (task, arm) twice and fight over claims. A second
start is refused with who holds the lock; a lock whose holder is gone (same host, PID dead or
recycled) is stale and taken over. PIDs are compared as process identities (runner.ops.procs: start
ticks since boot + boot id, no wall clock), so a recycled PID never looks like a live runner and
a clock step never makes a live one look dead. A lock written by an older marathon (create time
only) cannot be verified and counts as stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from modes import safeio
from runner.errors import Busy
from runner.ops.procs import ProcIdentity, create_time_of, identity_from, identity_of, pid_of, tree_inode
from runner.procid import record_live
from runner.results.events import utc_now
from runner.results.tree import runner_dir

LOCK_FILE = "lock"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock or claim: a PID only means something with its identity and host.

    ``create_time`` (wall clock) is for people reading the file; it is never compared.
    """

    pid: int
    create_time: float
    host: str
    since: str = ""
    run_id: str = ""
    start_ticks: int | None = None
    boot_id: str | None = None

    @property
    def ident(self) -> ProcIdentity | None:
        return identity_from(asdict(self))

    def same_process(self, other: Holder) -> bool:
        """The same holder process (identities equal); never true for an unverifiable record."""
        return self.ident is not None and self.ident == other.ident and self.host == other.host

    def is_live(self) -> bool:
        """Alive as far as this host can tell. Another host's holder is assumed alive."""
        return record_live(asdict(self), self.host)

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host} (since {self.since or '?'}, run {self.run_id or '?'})"


def holder_for(pid: int, run_id: str = "") -> Holder:
    """A holder record for a running PID of this host (its identity read now)."""
    ident = identity_of(pid)
    if ident is None:
        raise ProcessLookupError(f"no process {pid}")
    return Holder(
        pid, create_time_of(pid), socket.gethostname(), utc_now(), run_id, ident.start_ticks, ident.boot_id
    )


def me(run_id: str = "") -> Holder:
    return holder_for(os.getpid(), run_id)


#: a lock or claim file is a few hundred bytes
RECORD_CAP = 64 << 10


def read_record(path: Path) -> dict | None:
    """A lock or claim file as a JSON object, read by the rules of the runner's own files
    (``modes.safeio.load_own_json``: a FIFO never blocks, a symlink is not followed); None when
    missing, unreadable or not an object, or written for another tree (``procs.tree_inode``: a
    copy's lock and claims name the original's runner and harbor jobs; a review's `health --fix`
    of a copy adopted the original's live jobs, to end them when its runner stopped)."""
    d = safeio.load_own_json(path, RECORD_CAP)
    if not isinstance(d, dict):
        return None
    if "tree" in d and d["tree"] != tree_inode(_tree_of(path)):
        return None
    return d


def _tree_of(path: Path) -> Path:
    """The tree a lock (``<out>/.runner/``) or claim (``<out>/.claims/``) file belongs to."""
    return Path(path).parent.parent


def stamped(path: Path, payload: dict) -> dict:
    """A lock or claim record as written: ``payload`` and the tree it is for."""
    return {**payload, "tree": tree_inode(_tree_of(path))}


def holder_of(d: dict) -> Holder | None:
    """The holder a parsed lock/claim record names; None when a field makes no sense."""
    pid = pid_of(d.get("pid"))
    if pid is None:
        return None
    try:
        ident = identity_from(d)  # None for a file of an older marathon: unverifiable
        created = d.get("create_time") or 0.0
        return Holder(
            pid,
            float(created) if isinstance(created, (int, float)) and abs(created) < 1e12 else 0.0,
            str(d["host"])[:256],
            str(d.get("since", ""))[:64],
            str(d.get("run_id", ""))[:128],
            ident.start_ticks if ident else None,
            ident.boot_id if ident else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None


def read_holder(path: Path) -> Holder | None:
    """The holder recorded in a lock/claim file; None when missing or unreadable."""
    d = read_record(path)
    return holder_of(d) if d is not None else None


@contextlib.contextmanager
def dir_mutex(directory: Path) -> Iterator[None]:
    """Serialise take-overs of stale files in one directory (flock on a side file)."""
    with safeio.held_lock(directory / ".takeover.lock"):
        yield


def create_exclusive(path: Path, payload: dict) -> bool:
    """Create ``path`` holding ``payload`` only if it does not exist, whole or not at all: written
    under a temporary name, then hard-linked into place (``link`` fails when the name exists).

    Why not ``O_CREAT|O_EXCL`` and a write: between the two, the file exists empty, and a second
    process that reads it then finds no holder and takes it over (a probe put two runners on one
    tree that way, and two holders on one claim). A write that fails (a full disk) leaves nothing:
    an empty claim or lock reads as a pair running that nothing runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        try:
            safeio.write_all(fd, (json.dumps(stamped(path, payload)) + "\n").encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


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
            tmp.write_text(json.dumps(stamped(self.path, payload)) + "\n")
            os.replace(tmp, self.path)

    def release(self) -> None:
        with dir_mutex(self.path.parent):
            current = read_holder(self.path)
            if current is not None and current.same_process(self.holder):
                self.path.unlink(missing_ok=True)
