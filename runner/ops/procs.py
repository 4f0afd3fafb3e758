"""The processes of a run: a PID registry with process identities, the protected set, plan/act stop.

Why: in the field, pattern-matched cleanup (``pkill -f``, ``case`` on /proc/cmdline) hit its own
shell five times. Here a process belongs to a run only if the runner registered its identity (or
it descends from such a process, or its argv equals an expected argv as a whole list and it runs
as the same user). A PID whose identity no longer matches is a recycled PID and is never signalled.
The current process and all its ancestors are protected and never signalled, alone or by group.

Identity (``ProcIdentity``, ``runner.procid``): PID + start time in clock ticks since boot
(``/proc/<pid>/stat`` field 22) + the boot id, no wall-clock time; the rules live there, below every
reader, and are named here for the operations that use them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from modes import safeio, safetext
from runner.procid import (  # noqa: F401 - the identity rules, named here for the ops that use them
    BOOT_ID_PATH,
    PID_RANGE,
    ProcIdentity,
    alive,
    boot_id,
    identity_from,
    identity_of,
    parse_stat,
    pid_of,
)
from runner.results.tree import runner_dir
from runner.secrets import redact_argv

REGISTRY_FILE = "registry.json"
REGISTRY_LOCK = "registry.lock"
ROLE_RUNNER = "runner"
#: Seconds between TERM and KILL, for `marathon kill`, the console's Kill and the runner's own stop
#: of its harbor jobs. harbor 0.25.0 took 14.9-21.0 s (median 20.2 s) from SIGTERM mid-trial to exit,
#: its compose project gone, at load average ~70 (benchmarks/bench_harbor_sigterm.py, docs/safety.md);
#: the rest is headroom. A KILL after it only skips harbor's own teardown: the cleanup removes the rest.
DEFAULT_GRACE_SEC = 30.0


def registry_path(out: Path) -> Path:
    return runner_dir(out) / REGISTRY_FILE


def create_time_of(pid: int) -> float:
    """Wall-clock start of a PID, for display only (never compared); 0.0 when unknown."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


@dataclass(frozen=True)
class RegEntry:
    """One registered process: the PID is only meaningful together with its identity.

    ``create_time`` (wall clock) is shown to people and never compared.
    """

    pid: int
    create_time: float
    role: str
    argv: list[str]
    task: str | None = None
    arm: str | None = None
    registered_at: float = 0.0
    start_ticks: int | None = None
    boot_id: str | None = None
    #: the Ray node of the host whose process this is (a cluster run's job registers its harbor);
    #: None for the runner's own host. PIDs are per host: only that host may look at or signal it.
    node: str | None = None

    @property
    def ident(self) -> ProcIdentity | None:
        return identity_from(asdict(self))

    def is_live(self) -> bool:
        """True when this PID is running AND is still the process that was registered."""
        return alive(self.ident)


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
        with safeio.held_lock(self.path.parent / REGISTRY_LOCK):
            yield

    def _tree(self) -> int | None:
        return tree_inode(self.out)

    def _read(self) -> list[RegEntry]:
        data = safeio.load_own_json(self.path)
        if isinstance(data, safeio.Refused):
            return []  # missing or unreadable registry: nothing is selected from it (safe side)
        if isinstance(data, dict) and "tree" in data and data["tree"] != self._tree():
            # a copy of another tree (``cp -a`` of a live run): its processes are that tree's; a
            # probe's ``kill`` and ``cleanup`` of such a copy stopped the original's run
            return []
        items = data.get("processes") if isinstance(data, dict) else None
        out: list[RegEntry] = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("argv"), list):
                continue
            pid = pid_of(item.get("pid"))
            if pid is None:
                continue
            try:
                ident = identity_from(item)  # None for a record of an older marathon: unverifiable
                out.append(
                    RegEntry(
                        pid=pid,
                        create_time=float(item.get("create_time") or 0.0),
                        role=str(item["role"]),
                        argv=[str(a) for a in item["argv"]],
                        task=item.get("task") if isinstance(item.get("task"), str) else None,
                        arm=item.get("arm") if isinstance(item.get("arm"), str) else None,
                        registered_at=float(item.get("registered_at", 0.0)),
                        start_ticks=ident.start_ticks if ident else None,
                        boot_id=ident.boot_id if ident else None,
                        node=item.get("node") if isinstance(item.get("node"), str) else None,
                    )
                )
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                continue
        return out

    def untrusted(self) -> str:
        """Why this registry may not decide a signal ("" when it may): it and its dir must be the
        runner's user's and writable by nobody else (``modes.safeio.untrusted``); anyone who can
        write it could name any PID, and a PID's identity (start ticks, boot id) is world-readable."""
        for p in (self.path.parent, self.path):
            why = safeio.untrusted(p)
            if why:
                return f"{p}: {why}"
        got = safeio.read_own(self.path)
        if isinstance(got, safeio.Refused) and not got.missing:
            return f"{self.path}: {got.reason}"
        return ""

    def _write(self, entries: Sequence[RegEntry]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        doc = {"tree": self._tree(), "processes": [asdict(e) for e in entries]}
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, self.path)

    def register(
        self,
        pid: int,
        role: str,
        argv: Sequence[str],
        task: str | None = None,
        arm: str | None = None,
        node: str | None = None,
    ) -> RegEntry:
        """Record a live PID with its identity (read now), its argv redacted (``runner.secrets``);
        ``node``: the Ray node of this host in a cluster run (see ``RegEntry.node``). Raises
        ProcessLookupError if gone."""
        ident = identity_of(pid)
        if ident is None:
            raise ProcessLookupError(f"no process {pid} to register")
        entry = RegEntry(
            pid,
            create_time_of(pid),
            role,
            redact_argv(argv),
            task,
            arm,
            time.time(),
            ident.start_ticks,
            ident.boot_id,
            node,
        )
        with self._locked():
            entries = [e for e in self._read() if (e.pid, e.node) != (pid, node)]
            entries.append(entry)
            self._write(entries)
        return entry

    def unregister(self, pid: int, node: str | None = None) -> None:
        with self._locked():
            entries = self._read()
            kept = [e for e in entries if (e.pid, e.node) != (pid, node)]
            if len(kept) != len(entries):
                self._write(kept)

    def entries(self) -> list[RegEntry]:
        return self._read()

    def live_entries(self, node: str | None = None) -> list[RegEntry]:
        """This host's (``node``, see ``RegEntry.node``) entries whose process runs."""
        return [e for e in self._read() if e.node == node and e.is_live()]

    def runner_entry(self) -> RegEntry | None:
        """The live runner of this output tree (its identity matches), else None."""
        for e in self._read():
            if e.role == ROLE_RUNNER and e.node is None and e.is_live():
                return e
        return None

    def prune(self, node: str | None = None) -> list[RegEntry]:
        """Drop this host's entries (``node``) whose process is gone or whose PID was recycled;
        return what was dropped. Other hosts' entries are theirs to judge."""
        with self._locked():
            entries = self._read()
            live = [e for e in entries if e.node != node or e.is_live()]
            if len(live) != len(entries):
                self._write(live)
        return [e for e in entries if e not in live]


def tree_inode(out: Path) -> int | None:
    """The output tree's identity (its dir's inode), which the registry, the runner lock and the
    claims record: a copy of a tree (``cp -a`` of a live run) has another, so what those files of
    the copy name (processes, a runner, harbor jobs) are the original's, never the copy's to signal
    or adopt. The inode alone, not the device: a tree shared over NFS has one inode on every host,
    a device number per mount."""
    try:
        return os.stat(out).st_ino
    except OSError:
        return None


def protected_pids() -> set[int]:
    """The current process and every ancestor (shell, sshd, tmux server, init): never signalled."""
    me = psutil.Process()
    return {me.pid} | {p.pid for p in me.parents()}


# --- plan -------------------------------------------------------------------------------


@dataclass
class StopTarget:
    pid: int
    create_time: float  # wall clock, shown only
    pgid: int | None
    argv: list[str]
    why: str
    user: str = ""
    runner: bool = False  # the run's runner (or its descendant): signalled first, so it starts nothing new
    start_ticks: int | None = None
    boot_id: str | None = None
    #: the registry role of a registered process (``runner``, ``gateway``, ...); "" for a descendant
    #: or a process chosen by its argv
    role: str = ""

    @property
    def ident(self) -> ProcIdentity | None:
        return identity_from(asdict(self))


@dataclass
class StopSkip:
    pid: int
    argv: list[str]
    why: str


@dataclass
class StopPlan:
    """What ``act_stop`` would signal, frozen at plan time (PID + identity per target)."""

    out: str
    targets: list[StopTarget] = field(default_factory=list)
    skipped: list[StopSkip] = field(default_factory=list)
    protected: list[int] = field(default_factory=list)
    #: records that could have decided a signal but are not trusted (``Registry.untrusted``): named
    #: here, nothing selected from them
    untrusted: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> StopPlan:
        """The plan another process made (a cluster host's, sent back to act on it there)."""
        return cls(
            out=str(d["out"]),
            targets=[StopTarget(**t) for t in d.get("targets", [])],
            skipped=[StopSkip(**x) for x in d.get("skipped", [])],
            protected=[int(p) for p in d.get("protected", [])],
            untrusted=[str(u) for u in d.get("untrusted", [])],
        )

    def render(self) -> str:
        lines = [f"stop plan for {self.out}: {len(self.targets)} process(es)"]
        for t in self.targets:
            started = time.strftime("%H:%M:%S", time.localtime(t.create_time))
            lines.append(f"  pid {t.pid:>7}  pgid {t.pgid}  user {t.user}  started {started}  {t.why}")
            lines.append(f"      argv {json.dumps(t.argv)}")
        for s in self.skipped:
            lines.append(f"  skip {s.pid:>7}  {s.why}  argv {json.dumps(s.argv)}")
        for u in self.untrusted:
            lines.append(f"  left alone (not trusted to decide a signal): {safetext.clean(u)}")
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


def _same_user(p: psutil.Process) -> bool:
    """Runs as the caller's user (real and effective uid): the only processes ``--argv`` may pick."""
    try:
        uids = p.uids()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return uids.real == os.getuid() and uids.effective == os.getuid()


def plan_stop(
    out: Path,
    *,
    include_runner: bool = True,
    expected_argvs: Iterable[Sequence[str]] = (),
    node: str | None = None,
) -> StopPlan:
    """Select the run's processes: registered live PIDs (identity verified) and their
    descendants, plus processes of the caller's own user whose argv equals an expected argv exactly
    (as a list) and their descendants of that user. Protected processes are listed as skipped,
    never as targets. ``node``: the host asking (its Ray node in a cluster run; None for the
    runner's host): only the entries that host registered are its to select."""
    out = Path(out)
    prot = protected_pids()
    plan = StopPlan(out=str(out), protected=sorted(prot))
    chosen: dict[int, StopTarget] = {}

    def add(p: psutil.Process, why: str, runner: bool = False, role: str = "") -> None:
        if p.pid in chosen:
            return
        argv = _argv(p)
        if p.pid in prot:
            if not any(s.pid == p.pid for s in plan.skipped):
                plan.skipped.append(StopSkip(p.pid, argv, f"protected (current process or ancestor); {why}"))
            return
        ident = identity_of(p.pid)
        if ident is None:
            return  # exited meanwhile
        try:
            user = p.username()
        except (psutil.Error, KeyError):
            user = "?"
        chosen[p.pid] = StopTarget(
            p.pid,
            create_time_of(p.pid),
            _pgid(p.pid),
            argv,
            why,
            user,
            runner,
            ident.start_ticks,
            ident.boot_id,
            role,
        )

    def add_tree(
        p: psutil.Process, why: str, runner: bool = False, same_user: bool = False, role: str = ""
    ) -> None:
        add(p, why, runner, role)
        if p.pid in prot:
            return  # an ancestor's other descendants (the caller's siblings) are not selected through it
        for d in _descendants(p):
            if same_user and not _same_user(d):
                plan.skipped.append(StopSkip(d.pid, _argv(d), f"descendant of {p.pid} runs as another user"))
                continue
            add(d, f"descendant of {p.pid} ({why})", runner)

    registry = Registry(out)
    why = registry.untrusted()
    if why:
        plan.untrusted.append(f"registry {why}")
    for e in registry.entries() if not why else []:
        if e.node != node or (e.role == ROLE_RUNNER and not include_runner):
            continue
        label = f"registered {e.role}" + (f" {e.task}/{e.arm}" if e.task or e.arm else "")
        ident = e.ident
        if ident is None:
            plan.skipped.append(
                StopSkip(
                    e.pid,
                    e.argv,
                    f"{label}: recorded without a process identity (older marathon): unverifiable",
                )
            )
            continue
        now = identity_of(e.pid)
        if now is None or not alive(now):
            plan.skipped.append(StopSkip(e.pid, e.argv, f"{label}: exited"))
            continue
        if now != ident:
            try:
                argv = _argv(psutil.Process(e.pid))
            except psutil.NoSuchProcess:
                argv = []
            plan.skipped.append(
                StopSkip(
                    e.pid,
                    argv,
                    f"{label}: PID reused (start ticks {now.start_ticks} != registered {ident.start_ticks}"
                    + (", another boot)" if now.boot_id != ident.boot_id else ")"),
                )
            )
            continue
        try:
            p = psutil.Process(e.pid)
        except psutil.NoSuchProcess:
            plan.skipped.append(StopSkip(e.pid, e.argv, f"{label}: exited"))
            continue
        add_tree(p, label, runner=e.role == ROLE_RUNNER, role=e.role)

    wanted = [list(a) for a in expected_argvs]
    if wanted:
        for p in psutil.process_iter():
            argv = _argv(p)
            if argv and argv in wanted:
                if not _same_user(p):
                    plan.skipped.append(
                        StopSkip(p.pid, argv, "argv equals an expected argv, but another user's")
                    )
                    continue
                add_tree(p, "argv equals an expected argv", same_user=True)

    # a group a target leads is signalled as one (``act_stop``): its other members are in the plan,
    # shown, not reached unseen (a review: `marathon run OUT | tee log` put tee in the runner's group)
    for t in [t for t in chosen.values() if t.pgid == t.pid]:
        for m in _group_members(t.pid):
            if m.pid in chosen or m.pid in prot:
                continue
            try:
                mp = psutil.Process(m.pid)
            except psutil.NoSuchProcess:
                continue
            if not _same_user(mp):
                plan.skipped.append(
                    StopSkip(m.pid, _argv(mp), f"in the process group of {t.pid}, another user's")
                )
                continue
            add(mp, f"in the process group of {t.pid} ({t.why})", t.runner)

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

    @property
    def ok(self) -> bool:
        """Every process the plan named has exited."""
        return not self.still_alive

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> StopReport:
        return cls(
            [Signalled(**x) for x in d.get("signalled", [])],
            [int(p) for p in d.get("exited", [])],
            [int(p) for p in d.get("still_alive", [])],
            [StopSkip(**x) for x in d.get("skipped", [])],
        )

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


def _group_members(pgid: int) -> list[ProcIdentity]:
    members = []
    for pid in psutil.pids():
        if _pgid(pid) == pgid:
            ident = identity_of(pid)
            if ident is not None:
                members.append(ident)
    return members


def signal_process(ident: ProcIdentity, sig: signal.Signals) -> bool:
    """Signal exactly the process of ``ident``: a pidfd pins the process, then its identity is
    checked, so a PID recycled in between can never receive the signal. False when it is gone."""
    try:
        fd = os.pidfd_open(ident.pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        if not alive(ident):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def terminate(ident: ProcIdentity, what: str, wait_sec: float = 10.0) -> str:
    """SIGTERM to one service of a run (the viewer, the gateway: by its registered identity) and
    wait for it to exit; one line saying what happened (``UserError`` if it outlives ``wait_sec``)."""
    from runner.errors import UserError

    if not signal_process(ident, signal.SIGTERM):
        return f"the {what} (PID {ident.pid}) had already exited"
    deadline = time.monotonic() + wait_sec
    while alive(ident) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(ident):
        raise UserError(f"the {what} (PID {ident.pid}) is still running {wait_sec:.0f} s after SIGTERM")
    return f"stopped the {what} (PID {ident.pid})"


def _wait(procs: list[ProcIdentity], timeout: float) -> list[ProcIdentity]:
    """Wait until every process has exited (zombies count as exited); return the survivors."""
    deadline = time.monotonic() + timeout
    left = list(procs)
    while left:
        left = [p for p in left if alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return left


def _signal_all(
    targets: list[StopTarget], sig: signal.Signals, report: StopReport, prot: set[int], by_group: bool = True
) -> list[ProcIdentity]:
    """Signal each still-verified target: by group when it leads a group with no protected
    member, else alone. Returns every process that was reached (for waiting)."""
    reached: dict[int, ProcIdentity] = {}
    done_groups: set[int] = set()
    planned = {t.ident for t in targets if t.ident is not None}
    # group leaders first: their group signal reaches their members, which then need nothing alone
    for t in sorted(targets, key=lambda t: (not t.runner, t.pgid != t.pid)):
        if t.pid in prot:
            continue  # plan_stop never selects these; re-checked because the plan is data
        if t.pgid is not None and t.pgid in done_groups and t.pgid != t.pid:
            continue  # reached by its group's signal just now
        ident = t.ident
        if not alive(ident):
            if sig == signal.SIGTERM and not any(s.pid == t.pid for s in report.skipped):
                report.skipped.append(StopSkip(t.pid, t.argv, "already exited or PID reused before signal"))
            continue
        pgid = _pgid(t.pid)
        if by_group and pgid == t.pid and pgid not in done_groups:
            members = _group_members(pgid)
            # as one only when the group is what the plan showed: no protected member, and none but
            # the planned processes and their descendants (the plan's "and its descendants": a
            # harbor job starts docker commands all the time)
            if not any(m.pid in prot for m in members) and _within(members, planned, targets):
                # re-check identity right before the signal (PID reuse)
                if not alive(ident):
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
            reached.setdefault(t.pid, ident)
            continue
        if not signal_process(ident, sig):
            continue
        report.signalled.append(Signalled(t.pid, sig.name, "process"))
        reached.setdefault(t.pid, ident)
    return list(reached.values())


def _within(members: list[ProcIdentity], planned: set[ProcIdentity], targets: list[StopTarget]) -> bool:
    """Every member is a planned process or, now, a descendant of one that is still itself."""
    rest = [m for m in members if m not in planned]
    if not rest:
        return True
    below: set[int] = set()
    for t in targets:
        ident = t.ident
        if ident is not None and alive(ident):
            try:
                below |= {d.pid for d in _descendants(psutil.Process(t.pid))}
            except psutil.NoSuchProcess:
                continue
    return all(m.pid in below and alive(m) for m in rest)


def act_stop(plan: StopPlan, grace_sec: float = DEFAULT_GRACE_SEC, *, by_group: bool = True) -> StopReport:
    """TERM the planned processes (by group where safe; ``by_group=False``: each process alone,
    e.g. "the runner only"), wait ``grace_sec``, KILL what is left."""
    prot = protected_pids()
    report = StopReport()
    reached = _signal_all(plan.targets, signal.SIGTERM, report, prot, by_group)
    left = _wait(reached, grace_sec)
    if left:
        left_pids = {p.pid for p in left}
        leftovers = [t for t in plan.targets if t.pid in left_pids]
        # group members not in the plan (orphans of a group we led) are reached via their leader
        reached += _signal_all(leftovers, signal.SIGKILL, report, prot, by_group)
        for p in left:
            if p.pid not in {t.pid for t in leftovers} and p.pid not in prot and alive(p):
                if signal_process(p, signal.SIGKILL):
                    report.signalled.append(Signalled(p.pid, "SIGKILL", "process"))
        left = _wait(left, 5.0)
    left_pids = {p.pid for p in left}
    report.exited = sorted({p.pid for p in reached} - left_pids)
    report.still_alive = sorted(left_pids)
    return report
