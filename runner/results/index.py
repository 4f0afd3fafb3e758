"""The scan index: ``<out>/.marathon/index.sqlite``, what each finished attempt's files said last time.

Why: reading 10,000 trials' files costs about a second of CPU on every `marathon status`; asking the
file system whether those files changed costs a fraction of that. So the model keeps, per attempt
(``<task>/<arm dir>/<stamp>``), the records it read and the identity of every file and dir they were
read from (``st_mode``, ``st_ino``, ``st_size``, ``st_mtime_ns``, ``st_ctime_ns``). An entry is used
only when every one of those still ``lstat``s the same; anything else is read again. The index is
a cache: deleting or corrupting it, or two processes writing it at once, changes no figure.

Why an entry can never be stale:
- a file's content cannot change without its ctime changing, and no one can set a ctime back;
- a file that was missing (no receipt yet) is covered by its parent dir, whose ctime changes when
  an entry is created, removed or renamed in it;
- an entry is stored only when all its files are older than the scan's start by the file system's
  own clock (``RACY_NS``; a file written during the scan may have been read half-way, and its
  ctime may not differ from the one read within the file system's timestamp granularity);
- a symlink or a special file anywhere on the way, a record that is not clean (unreadable,
  refused, tampered, a running job) is never stored: those are read every time by the live rules;
- the entries carry a fingerprint of the code that made them (the readers and rules).

Trust: the index is used only when ``<out>/.marathon`` and the file are the current user's, the
tree's owner's, not group- or world-writable, and not symlinks. Agents write only inside their
trial dirs, so they cannot reach ``.marathon``. An index that is unreadable or of another user is
ignored (a plain scan) and never rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from collections.abc import Iterable
from typing import Any

from runner.results import records as results
from runner.results import tree
from runner.results.records import JobRecord, Metrics, Receipt, TrialRecord

#: a file changed less than this before the scan started (by the file system's clock) is not stored
RACY_NS = 2_000_000_000
#: how long a writer waits for another process's transaction before it skips storing (a cache)
BUSY_SEC = 0.5
_SCHEMA = "CREATE TABLE IF NOT EXISTS stamps (key TEXT PRIMARY KEY, deps TEXT NOT NULL, rec TEXT NOT NULL)"
_META = "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)"

Stamp = tuple[str, JobRecord, dict[str, TrialRecord]]
AttemptKey = tuple[str, str, str]


def fingerprint() -> str:
    """What the entries depend on besides the files: the source of the modules that read them."""
    from modes import safeio
    from runner.results import model, rules

    h = hashlib.sha256(b"marathon-index-1")
    for mod in (results, rules, safeio, tree, model):
        with open(mod.__file__, "rb") as fh:  # type: ignore[arg-type]
            h.update(fh.read())
    with open(__file__, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def _trusted(st: os.stat_result, owner: int, want_dir: bool) -> bool:
    kind = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == owner and not st.st_mode & 0o022


class ScanIndex:
    """The index of one output tree, opened for one scan: ``get`` validated entries, ``put`` new ones,
    ``save`` once at the end."""

    def __init__(self, conn: sqlite3.Connection, rows: dict[str, tuple[str, str]], fs_now: int) -> None:
        self._conn = conn
        self._rows = rows
        self._fs_now = fs_now
        self._new: list[tuple[str, str, str]] = []
        self._seen: set[str] = set()
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------------ opening

    @classmethod
    def open(cls, out: str) -> ScanIndex | None:
        """The tree's index, created when missing; None when it cannot be trusted or used."""
        euid = os.geteuid()
        try:
            if os.stat(out).st_uid != euid:
                return None  # only the tree's owner keeps its index
        except OSError:
            return None
        d = os.path.join(out, tree.INDEX_DIR)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
        path = os.path.join(d, tree.INDEX_FILE)
        try:
            if not _trusted(os.lstat(d), euid, want_dir=True):
                return None
            fs_now = _fs_clock(d)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                pass
            else:
                if not _trusted(st, euid, want_dir=False):
                    return None
        except OSError:
            return None
        for attempt in (1, 2):
            try:
                return cls._connect(path, fs_now)
            except sqlite3.DatabaseError:
                if attempt == 2:
                    return None
                try:  # ours and not a database (garbage, truncated): start it again
                    os.unlink(path)
                except OSError:
                    return None
        return None

    @classmethod
    def _connect(cls, path: str, fs_now: int) -> ScanIndex:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)  # created with our mode before sqlite opens it (its default would be 0o644)
        conn = sqlite3.connect(path, timeout=BUSY_SEC, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(_SCHEMA)
            conn.execute(_META)
            fp = fingerprint()
            got = conn.execute("SELECT v FROM meta WHERE k = 'fingerprint'").fetchone()
            rows: dict[str, tuple[str, str]] = {}
            if got is None or got[0] != fp:
                _write(
                    conn,
                    [
                        ("DELETE FROM stamps", ()),
                        ("INSERT OR REPLACE INTO meta VALUES ('fingerprint', ?)", (fp,)),
                    ],
                )
            else:
                rows = {k: (d, r) for k, d, r in conn.execute("SELECT key, deps, rec FROM stamps")}
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return cls(conn, rows, fs_now)

    # ------------------------------------------------------------------------ entries

    def get(self, key: AttemptKey, sdir: str) -> Stamp | None:
        """The attempt's records when every file they came from is unchanged; else None."""
        k = "/".join(key)
        self._seen.add(k)
        row = self._rows.get(k)
        if row is None:
            self.misses += 1
            return None
        try:
            deps = json.loads(row[0])
            for rel, *ident in deps:
                st = os.lstat(f"{sdir}/{rel}" if rel else sdir)
                if [st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] != ident:
                    raise LookupError(rel)
            got = _decode(json.loads(row[1]))
        except (OSError, LookupError, ValueError, TypeError, AttributeError):
            self.misses += 1
            return None
        self.hits += 1
        return got

    def put(self, key: AttemptKey, sdir: str, got: Stamp) -> None:
        """Remember a fresh read of one attempt, when it is clean and its files are settled."""
        k = "/".join(key)
        self._seen.add(k)
        deps = self._deps(sdir, key[1], got)
        if deps is not None:
            self._new.append(
                (k, json.dumps(deps, separators=(",", ":")), json.dumps(_encode(got), separators=(",", ":")))
            )

    def _deps(self, sdir: str, arm_dir: str, got: Stamp) -> list[list[Any]] | None:
        name, job, trials = got
        if not _clean(job, trials.values()):
            return None
        rels: list[str] = []
        if name != arm_dir:
            rels.append("")  # an <arm>-<pid> dir: which job dir name was taken
        rels.append(f"{name}/{results.RESULT_JSON}")
        if not all(t.from_summary for t in trials.values()):
            rels.append(name)  # the trials were found by listing the job dir
        for t in trials:
            for rel in tree.TRIAL_INPUTS:
                rels.append(_existing(sdir, f"{name}/{t}", rel))
        deps = []
        limit = self._fs_now - RACY_NS
        for rel in dict.fromkeys(rels):
            try:
                st = os.lstat(f"{sdir}/{rel}" if rel else sdir)
            except OSError:
                return None
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) or st.st_ctime_ns >= limit:
                return None
            deps.append([rel, st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
        return deps

    def save(self, scanned_all: bool) -> None:
        """Write the new entries (and, after a whole-tree scan, forget attempts that are gone)."""
        ops: list[tuple[str, Any]] = []
        if self._new:
            ops.append(("INSERT OR REPLACE INTO stamps VALUES (?, ?, ?)", self._new))
        if scanned_all:
            gone = [(k,) for k in self._rows if k not in self._seen]
            if gone:
                ops.append(("DELETE FROM stamps WHERE key = ?", gone))
        try:
            if ops:
                _write(self._conn, ops)
        except sqlite3.DatabaseError:
            pass  # another process holds it, or it broke under us: a cache, skip
        finally:
            self._conn.close()
        self._new = []


def _write(conn: sqlite3.Connection, ops: list[tuple[str, Any]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, args in ops:
            if args and isinstance(args, list):
                conn.executemany(sql, args)
            else:
                conn.execute(sql, args)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _fs_clock(d: str) -> int:
    """Now by the file system's clock (NFS servers' clocks differ from ours): touch a file, read its ctime."""
    path = os.path.join(d, "clock")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.utime(fd)
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)


def _existing(sdir: str, tdir: str, rel: str) -> str:
    """``tdir/rel`` when it exists, else its nearest existing parent (whose ctime changes when it appears)."""
    path = f"{tdir}/{rel}"
    while path != tdir and not os.path.lexists(f"{sdir}/{path}"):
        path = path.rsplit("/", 1)[0]
    return path


def _clean(job: JobRecord, trials: Iterable[TrialRecord]) -> bool:
    """Only settled, fully readable attempts are stored; everything else is read each time."""
    if job.state != results.OK or job.stale or job.finished_at is None:
        return False
    for t in trials:
        if t.state != results.OK or t.stale:
            return False
        if t.metrics.state not in (results.OK, results.MISSING, results.IN_PROGRESS):
            return False
        if t.receipt is not None and t.receipt.state != results.OK:
            return False
    return True


# ----------------------------------------------------------------------------- records <-> JSON


def _fields(obj: Any) -> list[Any]:
    return [getattr(obj, f) for f in obj.__slots__]


def _encode(got: Stamp) -> list[Any]:
    name, job, trials = got
    out = []
    for t in trials.values():
        row = _fields(t)
        row[t.__slots__.index("metrics")] = _fields(t.metrics)
        if t.receipt is not None:
            row[t.__slots__.index("receipt")] = _fields(t.receipt)
        out.append(row)
    return [name, _fields(job), out]


_I_METRICS = TrialRecord.__slots__.index("metrics")
_I_RECEIPT = TrialRecord.__slots__.index("receipt")
_I_SETUP = Receipt.__slots__.index("setup")
_I_EXC = JobRecord.__slots__.index("exception_types")


def _decode(v: list[Any]) -> Stamp:
    name, job_f, trials_f = v
    if not isinstance(name, str):
        raise TypeError("name")
    job_f[_I_EXC] = tuple(job_f[_I_EXC])
    trials = {}
    for row in trials_f:
        row[_I_METRICS] = Metrics(*row[_I_METRICS])
        r = row[_I_RECEIPT]
        if r is not None:
            r[_I_SETUP] = tuple(tuple(p) for p in r[_I_SETUP])
            row[_I_RECEIPT] = Receipt(*r)
        t = TrialRecord(*row)
        trials[t.name] = t
    return name, JobRecord(*job_f), trials
