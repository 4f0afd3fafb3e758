"""Claims: ``<out>/.claims/<task>__<arm>.claim``, one per (task, arm) being worked on; with
``marathon run --repeats K`` one per repeat (repeat k >= 2: ``<task>__<arm>@r<k>.claim``), each
claimed, taken over and released on its own exactly as a pair is.

Why: a restart (or a second runner) must never start a second job for a pair that is running, and
must never lose a pair whose runner died. A claim names its holder (runner PID + process identity +
host) and, once started, the harbor job (PID + process identity + stamp); identities are compared
by runner.ops.procs.alive, never by wall-clock time. A claim written by an older marathon has no
identities: its holder and job count as gone, so its job is re-run, never adopted. It is created with
O_CREAT|O_EXCL, so two live holders are impossible. States:

- ``live``: the holder runner is alive;
- ``orphan``: the holder is gone but its harbor job still runs (a ``kill -9`` of the runner) --
  the next runner adopts the job and waits for it instead of starting a duplicate;
- ``stale``: holder and job are gone; the claim may be taken over.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from modes import safeio
from runner.ops.procs import ProcIdentity, create_time_of, identity_from, identity_of, pid_of
from runner.procid import record_live
from runner.results.tree import CLAIMS_DIR, claim_path, repeat_of, with_repeat
from runner.schedule.lock import Holder, create_exclusive, dir_mutex, holder_of, read_record, stamped

LIVE, ORPHAN, STALE = "live", "orphan", "stale"


@dataclass(frozen=True)
class JobRef:
    pid: int
    create_time: float  # wall clock, shown only
    stamp: str
    start_ticks: int | None = None
    boot_id: str | None = None

    @property
    def ident(self) -> ProcIdentity | None:
        return identity_from(asdict(self))

    def is_live(self, host: str) -> bool:
        return record_live(asdict(self), host)


def job_ref(pid: int, stamp: str) -> JobRef:
    """The record of a harbor job we just started (our unreaped child: its /proc entry exists)."""
    ident = identity_of(pid)
    return JobRef(
        pid,
        create_time_of(pid),
        stamp,
        ident.start_ticks if ident else None,
        ident.boot_id if ident else None,
    )


@dataclass(frozen=True)
class Claim:
    task: str
    arm: str
    holder: Holder
    job: JobRef | None = None
    repeat: int = 1  # which repeat of the pair (``marathon run --repeats``)

    @property
    def unit(self) -> tuple[str, str, int]:
        """(task, arm, repeat): what the claim holds."""
        return (self.task, self.arm, self.repeat)

    @property
    def label(self) -> str:
        """``task/arm`` (repeat k >= 2: ``task/arm@r<k>``), for messages."""
        return with_repeat(f"{self.task}/{self.arm}", self.repeat)

    @property
    def state(self) -> str:
        if self.holder.is_live():
            return LIVE
        if self.job is not None and self.job.is_live(self.holder.host):
            return ORPHAN
        return STALE

    def to_json(self) -> dict:
        return {
            "task": self.task,
            "arm": self.arm,
            **({"repeat": self.repeat} if self.repeat != 1 else {}),
            **asdict(self.holder),
            "job": asdict(self.job) if self.job else None,
        }


@dataclass(frozen=True)
class ClaimResult:
    acquired: bool
    claim: Claim | None  # ours when acquired, else the one that blocks us
    replaced: Claim | None = None  # the stale/orphan claim we took over


def read_claim(path: Path) -> Claim | None:
    """A claim file, read once by the rules of the runner's own files (``lock.read_record``); None
    when missing, unreadable, or a field makes no sense. A claim of another user, or one others may
    write, is not the run's to act on (``untrusted_claims``)."""
    d = read_record(path)
    holder = holder_of(d) if d is not None else None
    if d is None or holder is None:
        return None
    try:
        j = d.get("job")
        job = None
        if j:
            pid = pid_of(j.get("pid"))
            if pid is None:
                return None
            ident = identity_from(j)
            created = j.get("create_time") or 0.0
            job = JobRef(
                pid,
                float(created) if isinstance(created, (int, float)) and abs(created) < 1e12 else 0.0,
                str(j["stamp"])[:64],
                ident.start_ticks if ident else None,
                ident.boot_id if ident else None,
            )
        task, arm = d["task"], d["arm"]
        if not isinstance(task, str) or not isinstance(arm, str):
            return None
        repeat = d.get("repeat", 1)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat != repeat_of(path.stem):
            return None  # the file's name and its content must name the same repeat
        return Claim(task, arm, holder, job, repeat)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None


def _path(out: Path, claim: Claim) -> Path:
    return claim_path(out, claim.task, claim.arm, claim.repeat)


def _write(path: Path, claim: Claim) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stamped(path, claim.to_json())) + "\n")
    os.replace(tmp, path)


def try_claim(
    out: Path, task: str, arm: str, holder: Holder, *, adopt: bool = False, repeat: int = 1
) -> ClaimResult:
    """Claim (task, arm) -- its repeat ``repeat`` -- for ``holder``.

    A live claim of another holder blocks. A stale claim is taken over. An orphan claim (job still
    running) is taken over only with ``adopt=True`` -- the caller then owns waiting for that job --
    and otherwise blocks.
    """
    path = claim_path(out, task, arm, repeat)
    mine = Claim(task, arm, holder, repeat=repeat)
    if create_exclusive(path, mine.to_json()):
        return ClaimResult(True, mine)
    with dir_mutex(path.parent):
        current = read_claim(path)
        if current is None:  # unreadable or vanished: replace it
            _write(path, mine)
            return ClaimResult(True, mine)
        if current.holder.same_process(holder):
            return ClaimResult(True, current)
        state = current.state
        if state == LIVE or (state == ORPHAN and not adopt):
            return ClaimResult(False, current)
        took = Claim(task, arm, holder, current.job if state == ORPHAN else None, repeat)
        _write(path, took)
        return ClaimResult(True, took, replaced=current)


def set_job(out: Path, claim: Claim, job: JobRef) -> Claim:
    """Record the harbor job started under our claim."""
    new = Claim(claim.task, claim.arm, claim.holder, job, claim.repeat)
    path = _path(out, claim)
    with dir_mutex(path.parent):
        current = read_claim(path)
        if current is not None and current.holder != claim.holder:
            raise RuntimeError(f"claim {path} is no longer ours ({current.holder.describe()})")
        _write(path, new)
    return new


def release(out: Path, claim: Claim) -> bool:
    """Remove the claim file if it is still held by ``claim.holder``."""
    path = _path(out, claim)
    with dir_mutex(path.parent):
        current = read_claim(path)
        if current is None or current.holder != claim.holder:
            return False
        path.unlink(missing_ok=True)
        return True


def list_claims(out: Path) -> list[Claim]:
    """The tree's claims the run may act on: readable, and the runner's user's alone (a claim others
    could write is listed by ``untrusted_claims`` and left alone)."""
    d = Path(out) / CLAIMS_DIR
    if safeio.untrusted(d):
        return []
    try:
        files = sorted(p for p in d.iterdir() if p.suffix == ".claim")
    except OSError:
        return []
    return [c for p in files if not safeio.untrusted(p) and (c := read_claim(p)) is not None]


def running_job(out: Path, task: str, arm: str, stamp: str) -> Claim | None:
    """The claim whose harbor job runs the attempt ``stamp`` of (task, arm) and still lives (on
    another host: until its claim is released); None when no job of that attempt runs. harbor
    writes the trial's result.json a second or so before it exits: until then the attempt is not
    the operator's to void."""
    for c in list_claims(out):
        if (c.task, c.arm) == (task, arm) and c.job is not None and c.job.stamp == stamp:
            if c.job.is_live(c.holder.host):
                return c
    return None


def untrusted_claims(out: Path) -> list[str]:
    """Claim files (or the claims dir) that may not decide anything, each with why (for health)."""
    d = Path(out) / CLAIMS_DIR
    why = safeio.untrusted(d)
    if why:
        return [f"{d}: {why}"]
    try:
        files = sorted(p for p in d.iterdir() if p.suffix == ".claim")
    except OSError:
        return []
    return [f"{p}: {w}" for p in files if (w := safeio.untrusted(p))]


def remove_stale(out: Path, claim: Claim) -> bool:
    """Remove a claim only if it is still exactly this one and still stale (health --fix)."""
    path = _path(out, claim)
    with dir_mutex(path.parent):
        current = read_claim(path)
        if current != claim or current.state != STALE:
            return False
        path.unlink(missing_ok=True)
        return True
