"""The jobs folder harbor's web viewer reads: one real directory per attempt, named for what it is.

Why: marathon's layout is ``<task>/<arm>/<stamp>/<arm>/``, one harbor job per attempt, so
``harbor view OUT`` finds nothing and a stamp dir shows one job. The viewer wants a folder of
jobs. Symlinks to the attempts do not do: harbor 0.25.0's viewer resolves each job and trial dir
and answers 400 for one outside its jobs folder. So every entry here is a real directory holding
the job's own files and its trial dirs, their regular files hard-linked (the same bytes, no disk
used; copied once when a link is not allowed: another filesystem, ``fs.protected_hardlinks``).
A trial's ``result.json``, ``verifier/`` files and receipt, and the job's ``result.json``, are
always copied, never linked: a link, and its removal when the viewer ends, renews the file's ctime,
and the tamper rule (``runner.results.records``) reads a verifier file changed after result.json by
their ctimes (a review: viewing a run once marked a trial "tampered" and changed its score), as the
scan index knows each of them by it.

The folder lives in ``<out>/.marathon/view/jobs`` (``runner.results.tree.view_dir``), where no
container mount reaches, and it is where the hostile-tree rules apply before harbor reads a byte
(harbor's own endpoints follow symlinks and read FIFOs and whole files):

- only directories and regular files are mirrored; a symlink, FIFO, socket or device is left out,
  and so is a file over ``MAX_FILE_BYTES``, mostly holes (``MIN_DENSITY``), past
  ``MAX_TRIAL_BYTES`` of its trial or beyond ``MAX_DEPTH`` / ``MAX_FILES`` per trial (harbor reads
  what it serves whole, at many times its size in memory), and a name that is not UTF-8 or holds a
  control or bidi character; what was left out is named in the trial's ``MARATHON-VIEW.txt``,
  which the viewer lists;
- a trial's subdirectories (``agent/``, ``verifier/``, ``artifacts/``: the container's mounts) are
  mirrored only once its ``result.json`` exists (harbor writes it after the container is gone), so
  nothing an agent still runs can grow or swap a file after it was checked;
- every walk goes through directory descriptors opened with ``O_NOFOLLOW`` and every link is made
  with ``linkat`` without following, then checked to be the regular file that was inspected.

Entries (``plan_entries``): by default the attempt each pair's cell shows in the current run
(its scoring attempt; while it has none, its latest attempt that is not voided; with repeats, that
attempt of each repeat), so the folder follows the run; ``all_attempts`` adds every attempt of all time, voided ones named so. Names say
task, arm and attempt: ``<task>__<arm>__attempt-<n>[__voided]``, ``n`` counting the pair's attempts
in start order, so a name never changes when a later attempt starts.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from modes import safeio, safetext
from modes.trial_files import SCORED_INPUTS, TrialFiles
from runner.results.attempts import VOIDED, Attempt
from runner.results.cells import Cell
from runner.results.model import RunModel
from runner.results.tree import INDEX_DIR, JOB_FILES, view_dir, voided_root

JOBS = "jobs"
#: named in every mirrored trial that had something left out (the viewer's Files tab lists it)
NOTE_FILE = "MARATHON-VIEW.txt"
#: the largest file mirrored: harbor's viewer reads a trajectory, a log or a test output whole (no
#: cap of its own) and its parse and JSON answer cost about 26 times the file in memory (a probe,
#: 2026-12-06: one 250 MiB trajectory took the viewer to 6.6 GB)
MAX_FILE_BYTES = 64 << 20
#: the most of a trial mirrored in all: harbor's agent-logs answer joins every command's output.
#: A file under ``SMALL_FILE`` is always mirrored (result.json, metrics, reward: what the trial is
#: judged by), and harbor's own files and ``verifier/`` come before the agent's dirs, so filling
#: ``agent/`` or ``artifacts/`` never hides them
MAX_TRIAL_BYTES = 128 << 20
SMALL_FILE = 64 << 10
#: the trial's dirs whose files the agent writes freely: mirrored last
LAST = ("agent", "artifacts")
#: the verifier's files a trial is judged by: shown whatever the trial's other files took
ALWAYS_SHOWN = frozenset(
    {TrialFiles.METRICS, TrialFiles.REWARD_TXT, TrialFiles.REWARD_JSON, TrialFiles.TEST_STDOUT}
)
#: a file whose disk blocks hold less than this share of its size is mostly holes: left out (100 MiB
#: of NULs cost an agent 20 KB of disk and the viewer 6 times its size as \u0000 escapes)
MIN_DENSITY = 0.5
MAX_DEPTH = 24
MAX_FILES = 20_000  # files and dirs per trial (100,000 empty dirs took a sync 10 s and 271 MiB)
#: lines of one trial's note (and of a sync's report): 100,000 symlinks made a 221 MiB note, which
#: harbor refuses to show (over 1 MiB), and 969 MiB of the viewer's memory
MAX_NOTES = 200
#: a full rescan as a safety net under the watcher (as the console's)
RESCAN_SEC = 300.0
#: while the watch keeps failing (``follow``): rescan this often, watch again after this pause, and
#: say so once in this long
ERROR_RESCAN_SEC = 5.0
ERROR_WAIT_SEC = 1.0
SAY_EVERY_SEC = 60.0

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def jobs_folder(out: Path) -> Path:
    return view_dir(Path(out)) / JOBS


# ----------------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class TrialSource:
    name: str
    path: str


@dataclass(frozen=True, slots=True)
class Entry:
    """One job of the viewer: one attempt of a pair."""

    name: str
    task: str
    arm: str
    attempt: int  # 1-based, the pair's attempts in start order
    stamp: str
    status: str
    job_dir: str | None  # the attempt's harbor job dir (its job-level files)
    trials: tuple[TrialSource, ...]
    about: tuple[str, ...] = ()  # said first in each trial's note (why it was voided, and where)

    @property
    def voided(self) -> bool:
        return self.status == VOIDED


def entry_name(task: str, arm: str, attempt: int, voided: bool = False) -> str:
    return f"{task}__{arm}__attempt-{attempt}" + ("__voided" if voided else "")


def shown_attempt(cell: Cell) -> Attempt | None:
    """The attempt a pair's cell shows: the scoring one, else the latest one not voided."""
    if cell.scored_by is not None:
        scoring = [a for a in cell.attempts if a.stamp == cell.scored_by and not a.voided]
        if scoring:
            return scoring[-1]
    live = [a for a in cell.attempts if not a.voided]
    return live[-1] if live else None


def plan_entries(model: RunModel, all_attempts: bool = False) -> list[Entry]:
    """The viewer's jobs for ``model``: see the module docstring. Sorted by name."""
    out: list[Entry] = []
    keys = model.cells if all_attempts else model.scoped("run")
    for key in sorted(keys):
        history = model.cells.get(key)
        if history is None:
            continue
        order = sorted(history.attempts, key=lambda a: (a.stamp, a.arm_dir))
        number = {a.key: i for i, a in enumerate(order, 1)}
        if all_attempts:
            chosen = order
        else:  # the attempt each repeat shows (one for a pair without repeats)
            chosen = [a for part in model.scoped("run")[key].parts if (a := shown_attempt(part)) is not None]
        for a in chosen:
            out.append(_entry(a, number[a.key]))
    out.sort(key=lambda e: e.name)
    return out


def _entry(a: Attempt, n: int) -> Entry:
    trials = [TrialSource(name, f"{a.job_dir}/{name}") for name in sorted(a.trials)] if a.job_dir else []
    voided = [v for _, v in sorted(a.voided_trials.items()) if v.name not in a.trials]
    trials += [TrialSource(v.name, v.path) for v in voided]
    # a voided attempt's job moved with its trial (runner.ops.void): its job files are beside it
    job_dir = a.job_dir or (os.path.dirname(voided[0].path) if voided else None)
    about = tuple(f"voided: {v.reason} (moved to {v.path}, with its README)" for v in voided)
    return Entry(
        name=entry_name(a.task, a.arm, n, a.voided),
        task=a.task,
        arm=a.arm,
        attempt=n,
        stamp=a.stamp,
        status=a.status,
        job_dir=job_dir,
        trials=tuple(trials),
        about=about if a.voided else (),
    )


# -------------------------------------------------------------------------------- mirroring


@dataclass
class SyncReport:
    entries: int = 0
    linked: int = 0
    copied: int = 0
    removed: int = 0
    left_out: list[str] = field(default_factory=list)  # "<entry>/<trial>/<path>: why" (at most MAX_NOTES)
    left_out_more: int = 0  # left out past those


class _Trial:
    """The walk of one trial dir: its count, and what was left out (its note)."""

    def __init__(self, report: SyncReport, where: str, tmp: Path, about: tuple[str, ...] = ()) -> None:
        self.report = report
        self.where = where
        self.tmp = tmp  # where a file is made before it is renamed into place (never a mirrored name)
        self.about = about
        self.files = 0
        self.bytes = 0
        self.notes: list[str] = []
        self.more = 0  # left out past MAX_NOTES

    def leave_out(self, rel: str, why: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(f"{rel}: {why}")
        else:
            self.more += 1
        if len(self.report.left_out) < MAX_NOTES:
            self.report.left_out.append(f"{self.where}/{rel}: {why}")
        else:
            self.report.left_out_more += 1


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _remove(path: Path) -> None:
    """Remove a mirror path (only dirs and files this module made live there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _prune(dst: Path, keep: set[str]) -> int:
    n = 0
    try:
        names = os.listdir(dst)
    except OSError:
        return 0
    for name in names:
        if name not in keep:
            _remove(dst / name)
            n += 1
    return n


def _copy(dir_fd: int, name: str, st: os.stat_result, tmp: Path) -> bool:
    """Copy a regular file (when a hard link is not allowed), never more than the cap."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_ino, fst.st_dev) != (st.st_ino, st.st_dev):
            return False
        left = MAX_FILE_BYTES + 1
        with open(tmp, "xb") as dst:
            while left > 0:
                chunk = os.read(fd, min(1 << 20, left))
                if not chunk:
                    break
                dst.write(chunk)
                left -= len(chunk)
        if left <= 0:
            tmp.unlink(missing_ok=True)
            return False
        os.utime(tmp, ns=(fst.st_atime_ns, fst.st_mtime_ns))
        return True
    finally:
        os.close(fd)


def _judged_by(rel: str) -> bool:
    """A trial file the tamper rule dates by its ctime, or one the scan index knows by its ctime
    (``SCORED_INPUTS``: a renewed one is read again by the next scan and the console): copied, never
    linked (the module's docstring)."""
    return rel in SCORED_INPUTS or rel.startswith(f"{TrialFiles.VERIFIER_DIR}/")


def _put(
    dir_fd: int, name: str, st: os.stat_result, dst: Path, walk: _Trial, rel: str, link: bool = True
) -> bool:
    """Make ``dst`` the regular file ``name`` of ``dir_fd`` (inspected as ``st``): a hard link, or a
    copy (``link`` False, or a link not allowed)."""
    try:
        have = os.lstat(dst)
    except OSError:
        have = None
    if have is not None and stat.S_ISREG(have.st_mode):
        if (have.st_ino, have.st_dev) == (st.st_ino, st.st_dev) and link:
            return True  # the same file already
        # (a link to a file that is copied now, left by a viewer before that rule or one that was
        # killed: replaced by a copy here, or its removal at the end would renew the file's ctime)
        if (
            have.st_nlink == 1
            and (have.st_size, have.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
            and st.st_ctime_ns <= have.st_ctime_ns
        ):
            # our copy of it, unchanged: the source's inode not changed since the copy was made
            # (a rewrite that keeps the size and sets the mtime back renews its ctime; a review)
            return True
    tmp = walk.tmp
    _remove(tmp)
    how = "linked"
    try:
        if not link:
            raise OSError(errno.EPERM, "a copy")
        os.link(name, tmp, src_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
            walk.leave_out(rel, f"not mirrored ({exc.strerror or exc})")
            return False
        how = "copied"
        if not _copy(dir_fd, name, st, tmp):
            _remove(tmp)
            walk.leave_out(rel, "not mirrored (changed while being copied, or unreadable)")
            return False
    if how == "linked":
        got = os.lstat(tmp)
        if not stat.S_ISREG(got.st_mode) or (got.st_ino, got.st_dev) != (st.st_ino, st.st_dev):
            _remove(tmp)  # swapped between the check and the link
            walk.leave_out(rel, "changed while being mirrored")
            return False
    try:
        os.replace(tmp, dst)
    except OSError as exc:  # a path past the system's limit (the source is walked by descriptors)
        _remove(tmp)
        walk.leave_out(rel, f"not mirrored ({exc.strerror or exc})")
        return False
    if how == "linked":
        walk.report.linked += 1
    else:
        walk.report.copied += 1
    return True


def _mirror_dir(dir_fd: int, dst: Path, rel: str, depth: int, subdirs: bool, walk: _Trial) -> None:
    """Mirror the directory open as ``dir_fd`` into ``dst`` (``rel``: its path in the trial)."""
    try:
        dst.mkdir(exist_ok=True)
    except OSError as exc:  # 17 names of 250 characters: past the system's path limit
        walk.leave_out(rel or ".", f"not mirrored ({exc.strerror or exc})")
        return
    keep: set[str] = set()
    try:
        with os.scandir(dir_fd) as it:
            names = sorted((e.name for e in it), key=lambda n: (rel == "" and n in LAST, n))
    except OSError as exc:
        walk.leave_out(rel or ".", f"cannot list it ({exc.strerror or exc})")
        names = []
    held_back = []
    for name in names:
        if rel == "" and name == NOTE_FILE:
            continue
        sub = f"{rel}/{name}" if rel else name
        if safetext.clean(name, None) != name:
            # not UTF-8 (harbor's file list answered 500 for the whole trial), or a control or bidi
            # character that would make the name read as another
            walk.leave_out(safetext.clean(sub, None), "a name the viewer cannot show as it is")
            continue
        st = _lstat_at(dir_fd, name)
        if st is None:
            continue  # gone meanwhile
        if stat.S_ISDIR(st.st_mode):
            if not subdirs:
                held_back.append(name)
                continue
            if depth >= MAX_DEPTH:
                walk.leave_out(sub, f"deeper than {MAX_DEPTH} levels")
                continue
            if walk.files >= MAX_FILES:
                walk.leave_out(sub, f"over {MAX_FILES} files and dirs in this trial")
                continue
            walk.files += 1
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                walk.leave_out(sub, f"cannot open it ({exc.strerror or exc})")
                continue
            try:
                if (os.fstat(child).st_ino, os.fstat(child).st_dev) != (st.st_ino, st.st_dev):
                    walk.leave_out(sub, "changed while being mirrored")
                    continue
                keep.add(name)
                _mirror_dir(child, dst / name, sub, depth + 1, True, walk)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            if st.st_size > MAX_FILE_BYTES:
                walk.leave_out(
                    sub, f"{st.st_size / (1 << 20):.0f} MiB, over the viewer's {MAX_FILE_BYTES >> 20} MiB cap"
                )
                continue
            if walk.files >= MAX_FILES:
                walk.leave_out(sub, f"over {MAX_FILES} files and dirs in this trial")
                continue
            if st.st_size > (1 << 20) and st.st_blocks * 512 < st.st_size * MIN_DENSITY:
                walk.leave_out(sub, f"{st.st_size / (1 << 20):.0f} MiB, mostly holes (a sparse file)")
                continue
            # a small file of harbor's (the trial dir's own) or one the verifier is known by is always
            # shown; every other file counts, the verifier dir's others too, which the agent can write
            # (one 64 KiB output hard-linked 20,000 times took the viewer to 3.8 GB; 20,000 files
            # under 64 KiB in verifier/ were 1.25 GiB copied, a probe)
            exempt = st.st_size < SMALL_FILE and ("/" not in sub or sub in ALWAYS_SHOWN)
            if not exempt and walk.bytes + st.st_size > MAX_TRIAL_BYTES:
                walk.leave_out(sub, f"over the viewer's {MAX_TRIAL_BYTES >> 20} MiB for one trial")
                continue
            if _put(dir_fd, name, st, dst / name, walk, sub, link=not _judged_by(sub)):
                walk.files += 1
                walk.bytes += st.st_size
                keep.add(name)
        else:
            walk.leave_out(sub, f"{safeio.kind_name(st.st_mode)}: never followed or read by the viewer")
    if held_back:
        dirs = ", ".join(f"{n}/" for n in sorted(held_back))
        walk.notes.append(
            f"{dirs}: shown once the trial has finished (its result.json), never while the agent runs"
        )
    if rel == "" and (walk.notes or walk.about):
        keep.add(NOTE_FILE)
    walk.report.removed += _prune(dst, keep)


def _write_note(dst: Path, walk: _Trial) -> None:
    path = dst / NOTE_FILE
    if not (walk.about or walk.notes):
        path.unlink(missing_ok=True)
        return
    # names and reasons from the tree: one line each, no control or bidi character (modes.safetext)
    text = "".join(f"{safetext.clean(n, None)}\n" for n in walk.about)
    if walk.notes:
        text += "marathon view left these out of this trial's mirror (the files in the output tree are unchanged):\n"
        text += "".join(f"  {safetext.clean(n, None)}\n" for n in walk.notes)
    if walk.more:
        text += f"  and {walk.more:,} more left out\n"
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    walk.tmp.write_text(text)
    os.replace(walk.tmp, path)


def _mirror_trial(src: str, dst: Path, walk: _Trial) -> bool:
    try:
        fd = os.open(src, _DIR_FLAGS)
    except OSError:
        return False  # gone (voided meanwhile) or not a dir: the next update says where it went
    try:
        result = _lstat_at(fd, TrialFiles.RESULT)
        finished = result is not None and stat.S_ISREG(result.st_mode)
        _mirror_dir(fd, dst, "", 0, finished, walk)
    finally:
        os.close(fd)
    _write_note(dst, walk)
    return True


class JobsFolder:
    """``<out>/.marathon/view/jobs``: made and kept to a list of entries (``sync``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tmp_dir = self.root.with_name(f".{self.root.name}-tmp")  # same filesystem, beside it
        self._tmp = self._tmp_dir / "next"

    def sync(
        self, entries: Iterable[Entry], only: set[str] | None = None, stop: threading.Event | None = None
    ) -> SyncReport:
        """Make the folder hold exactly ``entries``; ``only``: (re)mirror just these names (the
        others are kept as they are). Entries no longer listed are removed. ``stop``: once set,
        no further entry is mirrored (a viewer stopped while it builds its folder)."""
        entries = list(entries)
        rep = SyncReport(entries=len(entries))
        self.root.mkdir(parents=True, exist_ok=True)
        self._tmp_dir.mkdir(exist_ok=True)
        for e in entries:
            if stop is not None and stop.is_set():
                return rep
            if only is None or e.name in only or not (self.root / e.name).is_dir():
                self._sync_entry(e, rep)
        rep.removed += _prune(self.root, {e.name for e in entries})
        return rep

    def _sync_entry(self, e: Entry, rep: SyncReport) -> None:
        dst = self.root / e.name
        dst.mkdir(exist_ok=True)
        keep: set[str] = set()
        job = _Trial(rep, e.name, self._tmp)
        if e.job_dir is not None:
            try:
                fd = os.open(e.job_dir, _DIR_FLAGS)
            except OSError:
                fd = None
            if fd is not None:
                try:
                    for name in sorted(JOB_FILES):
                        st = _lstat_at(fd, name)
                        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
                            # the job's result.json (named as a trial's) is in every attempt's index entry, by its ctime
                            if _put(fd, name, st, dst / name, job, name, link=not _judged_by(name)):
                                keep.add(name)
                finally:
                    os.close(fd)
        for t in e.trials:
            if _mirror_trial(t.path, dst / t.name, _Trial(rep, f"{e.name}/{t.name}", self._tmp, e.about)):
                keep.add(t.name)
        rep.removed += _prune(dst, keep)

    def remove(self) -> None:
        _remove(self.root)
        _remove(self._tmp_dir)


# ------------------------------------------------------------------------------ kept current


class LiveJobsFolder:
    """The jobs folder of one output tree, kept current from the tree (watchfiles) while it runs."""

    def __init__(self, out: Path, all_attempts: bool = False) -> None:
        self.out = Path(out).resolve()
        self.all_attempts = all_attempts
        self.folder = JobsFolder(jobs_folder(self.out))
        self.model = RunModel.load(self.out)
        self.entries: dict[str, Entry] = {}
        self.last = SyncReport()

    @property
    def root(self) -> Path:
        return self.folder.root

    def sync_all(self, stop: threading.Event | None = None) -> SyncReport:
        plan = plan_entries(self.model, self.all_attempts)
        self.last = self.folder.sync(plan, stop=stop)
        self.entries = {e.name: e for e in plan}
        return self.last

    def update(self, paths: Iterable[str | Path]) -> SyncReport | None:
        """Re-read what ``paths`` touch and re-mirror the entries of the pairs that changed."""
        return self._resync(self.model.update(paths))

    def refresh(self) -> SyncReport | None:
        """Re-scan the whole tree (the watcher's safety net); re-mirror the pairs that changed."""
        return self._resync(self.model.refresh())

    def _resync(self, changed: set) -> SyncReport | None:
        plan = plan_entries(self.model, self.all_attempts)
        todo = {e.name for e in plan if (e.task, e.arm) in changed or self.entries.get(e.name) != e}
        if not todo and set(self.entries) == {e.name for e in plan}:
            return None
        self.last = self.folder.sync(plan, only=todo)
        self.entries = {e.name: e for e in plan}
        return self.last

    def _roots(self) -> list[str]:
        roots = [str(self.out)]
        vr = voided_root(self.out)
        if vr.is_dir():
            roots.append(str(vr))
        return roots

    def follow(
        self,
        stop: threading.Event,
        rescan_sec: float = RESCAN_SEC,
        poll: bool = False,
        say: Callable[[str], None] = print,
    ) -> None:
        """Keep the folder current until ``stop`` is set (a thread of ``marathon view``). ``poll``:
        stat the tree instead of inotify (NFS; and the fallback when inotify runs out of watches)."""
        from watchfiles import watch

        ours = str(self.out / INDEX_DIR)

        def not_ours(_change, path: str) -> bool:
            return not (path == ours or path.startswith(ours + os.sep))

        last_full = time.monotonic()
        last_said = -SAY_EVERY_SEC
        mirror_said = -SAY_EVERY_SEC

        def mirrored(fn: Callable[..., object], *args: object) -> bool:
            """``fn`` (refresh, update) done; an OSError of the mirror's own (a full disk) said
            once a minute and False (the caller rescans again soon), never taken for the watch's."""
            nonlocal mirror_said
            try:
                fn(*args)
                return True
            except OSError as err:
                now = time.monotonic()
                if now - mirror_said >= SAY_EVERY_SEC:
                    say(
                        f"marathon view: the jobs folder could not be updated ({safetext.clean(err)}); trying again"
                    )
                    mirror_said = now
                return False

        while not stop.is_set():
            roots = self._roots()
            first = True
            try:
                for changes in watch(
                    *roots,
                    watch_filter=not_ours,
                    debounce=500,
                    step=100,
                    stop_event=stop,
                    rust_timeout=2000,
                    yield_on_timeout=True,
                    ignore_permission_denied=True,
                    raise_interrupt=False,
                    force_polling=poll or None,
                    poll_delay_ms=2000,
                ):
                    if first or time.monotonic() - last_full >= rescan_sec:
                        # first: the watch is set up now; what changed before it is read by a rescan
                        first = False
                        ok = mirrored(self.refresh)
                        # failed: again in ERROR_RESCAN_SEC (a full rescan every 2 s would keep
                        # the cores busy for as long as the disk is full)
                        last_full = time.monotonic() - (0 if ok else rescan_sec - ERROR_RESCAN_SEC)
                    elif changes and not mirrored(self.update, [p for _, p in changes]):
                        # what it missed is read by a rescan in ERROR_RESCAN_SEC
                        last_full = min(last_full, time.monotonic() - rescan_sec + ERROR_RESCAN_SEC)
                    if self._roots() != roots:
                        break  # the voided root appeared: watch it too (and rescan once watching)
            except RuntimeError as exc:
                # watchfiles could not report a change (a file name that is not UTF-8: an agent can
                # make one): watch again, and rescan now. An agent that keeps touching such a name
                # fails every watch before its first report, so the rescan cannot wait for one (the
                # folder stopped following the run), and the line is said once a minute, not 5 a second
                now = time.monotonic()
                if now - last_said >= SAY_EVERY_SEC:
                    say(f"marathon view: a change could not be read ({type(exc).__name__}); rescanning")
                    last_said = now
                if now - last_full >= ERROR_RESCAN_SEC:
                    mirrored(self.refresh)  # (the mirror's disk: said, and tried again next time)
                    last_full = time.monotonic()
                stop.wait(ERROR_WAIT_SEC)
            except OSError as exc:  # e.g. the inotify watch limit: poll instead, and say so
                if poll:  # polling failed too: said, never a thread ending in a traceback
                    say(
                        f"marathon view: following the tree stopped ({safetext.clean(exc)}); "
                        "the jobs folder shows the run as it was, restart the viewer to follow it again"
                    )
                    return
                print(
                    f"marathon view: watching the tree failed ({safetext.clean(exc)}); polling it every 2 s instead",
                    flush=True,
                )
                poll = True
            if stop.wait(0.05):
                break
