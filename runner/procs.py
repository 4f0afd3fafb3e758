"""The processes of a run: a PID registry with create times, the protected set, plan/act stop.

Why: in the field, pattern-matched cleanup (``pkill -f``, ``case`` on /proc/cmdline) hit its own
shell five times. Here a process belongs to a run only if the runner registered its PID together
with its create time (or it descends from such a process, or its argv equals an expected argv as a
whole list). A PID whose create time no longer matches is a recycled PID and is never signalled.
The current process and all its ancestors are protected and never signalled, alone or by group.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from runner.secrets import redact_argv
from runner.tree import runner_dir

REGISTRY_FILE = "registry.json"
REGISTRY_LOCK = "registry.lock"
ROLE_RUNNER = "runner"
# harbor 0.25.0 needs ~12 s after TERM to cancel its trial and `compose down` (measured)
DEFAULT_GRACE_SEC = 30.0
# psutil derives create times from clock ticks (1/100 s); anything closer is the same process.
_SAME_START_SEC = 0.005


def registry_path(out: Path) -> Path:
    return runner_dir(out) / REGISTRY_FILE


def create_time_of(pid: int) -> float | None:
    """The create time of a live PID, or None when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def same_start(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) < _SAME_START_SEC


def alive(pid: int, create_time: float) -> bool:
    """The one liveness rule: this PID runs AND is the process that had this create time.

    A recycled PID (other create time) is not alive, and neither is a zombie: it has exited and only
    waits to be reaped (e.g. by a subreaper after a ``kill -9``). Locks, claims and the registry use it.
    """
    if not same_start(create_time_of(pid), create_time):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass(frozen=True)
class RegEntry:
    """One registered process: the PID is only meaningful together with its create time."""

    pid: int
    create_time: float
    role: str
    argv: list[str]
    task: str | None = None
    arm: str | None = None
    registered_at: float = 0.0

    def is_live(self) -> bool:
        """True when this PID is running AND is still the process that was registered."""
        return alive(self.pid, self.create_time)


class Registry:
    """``<out>/.runner/registry.json``: the runner and every harbor process it started.

    Read-modify-write under an flock; the file is replaced atomically (temp file + os.replace),
    so readers never see a half-written registry.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.path = registry_path(self.out)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / REGISTRY_LOCK, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read(self) -> list[RegEntry]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError):
            return []  # unreadable registry: nothing is selected from it (safe side)
        out: list[RegEntry] = []
        for item in data.get("processes", []):
            try:
                out.append(
                    RegEntry(
                        pid=int(item["pid"]),
                        create_time=float(item["create_time"]),
                        role=str(item["role"]),
                        argv=[str(a) for a in item["argv"]],
                        task=item.get("task"),
                        arm=item.get("arm"),
                        registered_at=float(item.get("registered_at", 0.0)),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def _write(self, entries: Sequence[RegEntry]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"processes": [asdict(e) for e in entries]}, indent=1) + "\n")
        os.replace(tmp, self.path)

    def register(
        self,
        pid: int,
        role: str,
        argv: Sequence[str],
        task: str | None = None,
        arm: str | None = None,
    ) -> RegEntry:
        """Record a live PID with its create time (read now), its argv redacted (``runner.secrets``).
        Raises ProcessLookupError if gone."""
        ct = create_time_of(pid)
        if ct is None:
            raise ProcessLookupError(f"no process {pid} to register")
        entry = RegEntry(pid, ct, role, redact_argv(argv), task, arm, time.time())
        with self._locked():
            entries = [e for e in self._read() if e.pid != pid]
            entries.append(entry)
            self._write(entries)
        return entry

    def unregister(self, pid: int) -> None:
        with self._locked():
            entries = self._read()
            kept = [e for e in entries if e.pid != pid]
            if len(kept) != len(entries):
                self._write(kept)

    def entries(self) -> list[RegEntry]:
        return self._read()

    def live_entries(self) -> list[RegEntry]:
        return [e for e in self._read() if e.is_live()]

    def runner_entry(self) -> RegEntry | None:
        """The live runner of this output tree (PID and create time both match), else None."""
        for e in self._read():
            if e.role == ROLE_RUNNER and e.is_live():
                return e
        return None

    def prune(self) -> list[RegEntry]:
        """Drop entries whose process is gone or whose PID was recycled; return what was dropped."""
        with self._locked():
            entries = self._read()
            live = [e for e in entries if e.is_live()]
            if len(live) != len(entries):
                self._write(live)
        return [e for e in entries if e not in live]


def protected_pids() -> set[int]:
    """The current process and every ancestor (shell, sshd, tmux server, init): never signalled."""
    me = psutil.Process()
    return {me.pid} | {p.pid for p in me.parents()}


# --- plan -------------------------------------------------------------------------------


@dataclass
class StopTarget:
    pid: int
    create_time: float
    pgid: int | None
    argv: list[str]
    why: str
    user: str = ""
    runner: bool = False  # the run's runner (or its descendant): signalled first, so it starts nothing new


@dataclass
class StopSkip:
    pid: int
    argv: list[str]
    why: str


@dataclass
class StopPlan:
    """What ``act_stop`` would signal, frozen at plan time (PID + create time per target)."""

    out: str
    targets: list[StopTarget] = field(default_factory=list)
    skipped: list[StopSkip] = field(default_factory=list)
    protected: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = [f"stop plan for {self.out}: {len(self.targets)} process(es)"]
        for t in self.targets:
            started = time.strftime("%H:%M:%S", time.localtime(t.create_time))
            lines.append(f"  pid {t.pid:>7}  pgid {t.pgid}  user {t.user}  started {started}  {t.why}")
            lines.append(f"      argv {json.dumps(t.argv)}")
        for s in self.skipped:
            lines.append(f"  skip {s.pid:>7}  {s.why}  argv {json.dumps(s.argv)}")
        if not self.targets:
            lines.append("  (nothing to stop)")
        lines.append(f"  protected (never signalled): {sorted(self.protected)}")
        return "\n".join(lines)


def _argv(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _descendants(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def plan_stop(
    out: Path,
    *,
    include_runner: bool = True,
    expected_argvs: Iterable[Sequence[str]] = (),
) -> StopPlan:
    """Select the run's processes: registered live PIDs (create time verified) and their
    descendants, plus processes whose argv equals an expected argv exactly (as a list) and their
    descendants. Protected processes are listed as skipped, never as targets."""
    out = Path(out)
    prot = protected_pids()
    plan = StopPlan(out=str(out), protected=sorted(prot))
    chosen: dict[int, StopTarget] = {}

    def add(p: psutil.Process, why: str, runner: bool = False) -> None:
        if p.pid in chosen:
            return
        argv = _argv(p)
        if p.pid in prot:
            if not any(s.pid == p.pid for s in plan.skipped):
                plan.skipped.append(StopSkip(p.pid, argv, f"protected (current process or ancestor); {why}"))
            return
        try:
            ct = p.create_time()
        except psutil.NoSuchProcess:
            return
        try:
            user = p.username()
        except (psutil.Error, KeyError):
            user = "?"
        chosen[p.pid] = StopTarget(p.pid, ct, _pgid(p.pid), argv, why, user, runner)

    def add_tree(p: psutil.Process, why: str, runner: bool = False) -> None:
        add(p, why, runner)
        if p.pid in prot:
            return  # an ancestor's other descendants (the caller's siblings) are not selected through it
        for d in _descendants(p):
            add(d, f"descendant of {p.pid} ({why})", runner)

    for e in Registry(out).entries():
        if e.role == ROLE_RUNNER and not include_runner:
            continue
        label = f"registered {e.role}" + (f" {e.task}/{e.arm}" if e.task or e.arm else "")
        try:
            p = psutil.Process(e.pid)
            ct = p.create_time()
        except psutil.NoSuchProcess:
            plan.skipped.append(StopSkip(e.pid, e.argv, f"{label}: exited"))
            continue
        except psutil.AccessDenied:
            plan.skipped.append(StopSkip(e.pid, e.argv, f"{label}: access denied"))
            continue
        if not same_start(ct, e.create_time):
            plan.skipped.append(
                StopSkip(
                    e.pid, _argv(p), f"{label}: PID reused (create time {ct} != registered {e.create_time})"
                )
            )
            continue
        add_tree(p, label, runner=e.role == ROLE_RUNNER)

    wanted = [list(a) for a in expected_argvs]
    if wanted:
        for p in psutil.process_iter():
            argv = _argv(p)
            if argv and argv in wanted:
                add_tree(p, "argv equals an expected argv")

    # tree order (each registered process, then its descendants), the runner's tree first
    plan.targets = sorted(chosen.values(), key=lambda t: not t.runner)
    return plan


# --- act --------------------------------------------------------------------------------


@dataclass
class Signalled:
    pid: int
    signal: str
    how: str  # "group" (killpg of the group this pid leads) or "process"


@dataclass
class StopReport:
    signalled: list[Signalled] = field(default_factory=list)
    exited: list[int] = field(default_factory=list)
    still_alive: list[int] = field(default_factory=list)
    skipped: list[StopSkip] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = []
        for s in self.signalled:
            what = f"process group {s.pid}" if s.how == "group" else f"pid {s.pid}"
            lines.append(f"  sent {s.signal} to {what}")
        for s in self.skipped:
            lines.append(f"  not signalled {s.pid}: {s.why}")
        lines.append(f"  exited: {sorted(self.exited) or 'none'}")
        if self.still_alive:
            lines.append(f"  STILL ALIVE: {sorted(self.still_alive)}")
        return "\n".join(lines)


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter():
        if _pgid(p.pid) == pgid:
            members.append(p)
    return members


def _verified(t: StopTarget) -> psutil.Process | None:
    """The planned process if it is still the same one (PID and create time), else None."""
    try:
        p = psutil.Process(t.pid)
        if same_start(p.create_time(), t.create_time) and p.status() != psutil.STATUS_ZOMBIE:
            return p
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return None


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited (zombies count as exited); return the survivors."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        alive = [p for p in alive if not _gone(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return alive


def _signal_all(
    targets: list[StopTarget], sig: signal.Signals, report: StopReport, prot: set[int], by_group: bool = True
) -> list[psutil.Process]:
    """Signal each still-verified target: by group when it leads a group with no protected
    member, else alone. Returns every process that was reached (for waiting)."""
    reached: dict[int, psutil.Process] = {}
    done_groups: set[int] = set()
    # group leaders first: their group signal reaches their members, which then need nothing alone
    for t in sorted(targets, key=lambda t: (not t.runner, t.pgid != t.pid)):
        if t.pid in prot:
            continue  # plan_stop never selects these; re-checked because the plan is data
        if t.pgid is not None and t.pgid in done_groups and t.pgid != t.pid:
            continue  # reached by its group's signal just now
        p = _verified(t)
        if p is None:
            if sig == signal.SIGTERM and not any(s.pid == t.pid for s in report.skipped):
                report.skipped.append(StopSkip(t.pid, t.argv, "already exited or PID reused before signal"))
            continue
        pgid = _pgid(t.pid)
        if by_group and pgid == t.pid and pgid not in done_groups:
            members = _group_members(pgid)
            if not any(m.pid in prot for m in members):
                # re-check identity right before the signal (PID reuse)
                if _verified(t) is None:
                    continue
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    continue
                done_groups.add(pgid)
                report.signalled.append(Signalled(pgid, sig.name, "group"))
                for m in members:
                    reached.setdefault(m.pid, m)
                continue
        if pgid in done_groups:
            reached.setdefault(p.pid, p)
            continue
        try:
            p.send_signal(sig)  # psutil re-checks PID + create time before signalling
        except psutil.NoSuchProcess:
            continue
        report.signalled.append(Signalled(p.pid, sig.name, "process"))
        reached.setdefault(p.pid, p)
    return list(reached.values())


def act_stop(plan: StopPlan, grace_sec: float = DEFAULT_GRACE_SEC, *, by_group: bool = True) -> StopReport:
    """TERM the planned processes (by group where safe; ``by_group=False``: each process alone,
    e.g. "the runner only"), wait ``grace_sec``, KILL what is left."""
    prot = protected_pids()
    report = StopReport()
    reached = _signal_all(plan.targets, signal.SIGTERM, report, prot, by_group)
    alive = _wait(reached, grace_sec)
    if alive:
        alive_pids = {p.pid for p in alive}
        leftovers = [t for t in plan.targets if t.pid in alive_pids]
        # group members not in the plan (orphans of a group we led) are reached via their leader
        reached += _signal_all(leftovers, signal.SIGKILL, report, prot, by_group)
        for p in alive:
            if p.pid not in {t.pid for t in leftovers} and p.pid not in prot and not _gone(p):
                try:
                    p.kill()
                    report.signalled.append(Signalled(p.pid, "SIGKILL", "process"))
                except psutil.NoSuchProcess:
                    pass
        alive = _wait(alive, 5.0)
    alive_pids = {p.pid for p in alive}
    report.exited = sorted({p.pid for p in reached} - alive_pids)
    report.still_alive = sorted(alive_pids)
    return report
