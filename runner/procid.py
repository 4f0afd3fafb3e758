"""Which process a PID means: its identity (PID, start ticks since boot, boot id) and the one
liveness rule, for every record that names a process (the registry, the runner lock, claims).

Why a module of its own, at the bottom of the runner: the readers of results (a cell is running
while its claim's holder or job lives) and the operations (kill, cleanup, health) apply the same
rule; ``runner.ops.procs`` holds what acts on processes.

No wall-clock time takes part: a create time in seconds since the epoch (what psutil reports)
moves when the clock is stepped (NTP, a VM resume), and a live runner would then look recycled --
or a recycled PID live. Records written before identities existed carry only a create time; they
are unverifiable and count as not alive (never signalled, never adopted).
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modes import values

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class ProcIdentity:
    """Which process a PID meant: the PID, its start in clock ticks since boot, and the boot.

    Equal identities are the same process; nothing here depends on the wall clock.
    """

    pid: int
    start_ticks: int
    boot_id: str


@functools.cache
def boot_id() -> str:
    """This boot's id (a reboot restarts tick counting and PIDs, so identities never cross it)."""
    return BOOT_ID_PATH.read_text().strip()


def parse_stat(text: str) -> tuple[str, int]:
    """(state, start ticks) from a ``/proc/<pid>/stat`` line.

    The comm field (2) is in parentheses and may itself hold spaces and ``)``: the fields after it
    start after the LAST ``)``. State is field 3, start time field 22. ValueError when malformed.
    """
    close = text.rfind(")")
    if close < 0:
        raise ValueError("no comm field in stat")
    rest = text[close + 1 :].split()
    if len(rest) < 20:
        raise ValueError("stat has too few fields")
    return rest[0], int(rest[19])


def _stat(pid: int) -> tuple[str, int] | None:
    # os.open/os.read, not pathlib: a quarter of the time (9 us against 39), and the gateway asks
    # twice per model call, the console and the scan once per running claim
    try:
        fd = os.open(f"/proc/{int(pid)}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        raw = b""
        while chunk := os.read(fd, 4096):  # one line of a few hundred bytes: one read in practice
            raw += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return parse_stat(raw.decode("latin-1"))
    except ValueError:
        return None


def identity_of(pid: int) -> ProcIdentity | None:
    """The identity of a running (or zombie) PID now, or None when there is no such process."""
    st = _stat(pid)
    return None if st is None else ProcIdentity(int(pid), st[1], boot_id())


def alive(ident: ProcIdentity | None) -> bool:
    """The one liveness rule: this PID runs AND is the process of this identity.

    A recycled PID (other start ticks), another boot, or no identity at all (an old record) is not
    alive, and neither is a zombie: it has exited and only waits to be reaped (e.g. by a subreaper
    after a ``kill -9``). The registry, locks, claims, health and kill all use it.
    """
    if ident is None or ident.boot_id != boot_id():
        return False
    st = _stat(ident.pid)
    return st is not None and st[0] not in ("Z", "X", "x") and st[1] == ident.start_ticks


#: a PID as a record may name one (Linux's pid_max is at most 2**22)
PID_RANGE = values.Range(1, 1 << 22, integer=True)


def pid_of(v: object) -> int | None:
    """A recorded PID (``modes.values``): a whole number in ``PID_RANGE``, else None (never 0 or
    negative: ``kill(0)``/``kill(-1)`` would reach a whole group or every process)."""
    got = values.number(v, PID_RANGE, "pid")
    return got if isinstance(got, int) else None


def identity_from(d: Mapping) -> ProcIdentity | None:
    """The identity stored in a record (``pid``, ``start_ticks``, ``boot_id``); None if it has none."""
    try:
        ticks, boot = d.get("start_ticks"), d.get("boot_id")
        if isinstance(ticks, bool) or not isinstance(ticks, int) or not isinstance(boot, str) or not boot:
            return None
        pid = pid_of(d.get("pid"))
        return None if pid is None or not 0 <= ticks < 1 << 63 else ProcIdentity(pid, ticks, boot)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def record_live(record: Mapping, host: str) -> bool:
    """A record's process (``pid``, ``start_ticks``, ``boot_id``) runs, as far as this host can
    tell: another host's is assumed to (only that host may look at its PIDs)."""
    return host != socket.gethostname() or alive(identity_from(record))
