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
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from modes.trial_files import SCORED_INPUTS
from runner.results import records as results
from runner.results import tree
from runner.results.records import JobRecord, Metrics, Receipt, TrialRecord

#: a file changed less than this before the scan started (by the file system's clock) is not stored
RACY_NS = 2_000_000_000
#: how long a writer waits for another process's transaction before it skips storing (a cache)
BUSY_SEC = 0.5
#: one row per attempt: ``entry`` is the JSON ``[key, rels, idents, records]`` (see ``_deps``)
_SCHEMA = "CREATE TABLE IF NOT EXISTS stamps (key TEXT PRIMARY KEY, entry TEXT NOT NULL)"
_META = "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)"
_INTERVALS = "CREATE TABLE IF NOT EXISTS intervals (key TEXT PRIMARY KEY, lo REAL NOT NULL, hi REAL NOT NULL)"
#: one row per task and arm dir (path relative to the tree): its identity and its subdirs' names
#: joined by "/" (the one character a name cannot hold)
_DIRS = "CREATE TABLE IF NOT EXISTS dirs (path TEXT PRIMARY KEY, ident TEXT NOT NULL, names TEXT NOT NULL)"
#: what other readers of the tree keep between processes, one JSON text each (``runner.results.ledger_memo``)
_MEMOS = "CREATE TABLE IF NOT EXISTS memos (k TEXT PRIMARY KEY, v TEXT NOT NULL)"
#: remembered bootstrap intervals kept (the newest); a live run makes a few new ones per change
KEEP_INTERVALS = 5000

Stamp = tuple[str, JobRecord, dict[str, TrialRecord]]
AttemptKey = tuple[str, str, str]


#: the readers above this module whose source the entries depend on, hashed by file (not imported:
#: the scan imports this index, and an import back would be a cycle): the scanner that reads and
#: merges the records, and the model's other parts that turn them into figures (one file until they
#: were split by job; a change to any of them must still void the entries)
_READER_FILES = ("model.py", "scan.py", "runs.py", "attempts.py", "cells.py", "matrix.py")


def fingerprint() -> str:
    """What the entries depend on besides the files: the source of the modules that read them."""
    from modes import receipt, safeio, values
    from runner.results import rules, stats

    h = hashlib.sha256(b"marathon-index-1")
    here = os.path.dirname(os.path.abspath(__file__))
    files = [m.__file__ for m in (results, rules, safeio, values, receipt, tree)]
    files += [os.path.join(here, name) for name in _READER_FILES] + [stats.__file__]
    for path in files:
        with open(path, "rb") as fh:  # type: ignore[arg-type]
            h.update(fh.read())
    with open(__file__, "rb") as fh:
        h.update(fh.read())
    # the readers' size cap (MARATHON_MAX_JSON_BYTES): under another cap a file may read otherwise
    # (a probe's cap of 1 byte read every cell unreadable cold, and done from a warm index)
    h.update(f"json-cap={safeio.JSON_CAP}".encode())
    return h.hexdigest()


def _trusted(st: os.stat_result, owner: int, want_dir: bool) -> bool:
    kind = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == owner and not st.st_mode & 0o022


class ScanIndex:
    """The index of one output tree, opened for one scan: ``get`` validated entries, ``put`` fresh
    reads, ``save`` once at the end."""

    def __init__(self, out: str, conn: sqlite3.Connection | None, rows: str | None) -> None:
        self._dir = os.path.join(out, tree.INDEX_DIR)
        self._conn = conn
        self._rows = rows  # every entry in one JSON array (``_rows``), None when there are none
        self._entries: dict[str, Any] | None = None  # the rows parsed, on the first get
        self._t0 = time.time_ns()  # the scan's start by our clock (see save for the file system's)
        self._fresh: list[tuple[str, str, str, Stamp]] = []
        self._seen: set[str] = set()
        self._dirs: dict[str, tuple[str, str]] | None = None  # path -> (ident, names), on first use
        self._dirs_fresh: list[tuple[str, str, str, int]] = []  # (path, ident, names, ctime_ns)
        self._dirs_seen: set[str] = set()
        self._dirs_served: set[str] = set()  # dirs whose listing came from the index (unchanged)
        self.hits = 0
        self.misses = 0
        self.unchecked = 0  # entries served without checking their files (``trusting``)
        #: serve entries without ``lstat``-ing their files when their arm dir's listing was served
        #: (the console's first paint, which says so and is followed at once by a checked scan:
        #: ``RunModel.load``); what it reads afresh is stored as by any scan
        self.trusting = False

    # ------------------------------------------------------------------------ opening

    @classmethod
    def open(cls, out: str, entries: bool = True) -> ScanIndex | None:
        """The tree's index (empty when there is none yet); None when it cannot be trusted.

        ``entries``: load the attempts' entries (not needed for the remembered intervals).
        """
        euid = os.geteuid()
        try:
            if os.stat(out).st_uid != euid:
                return None  # only the tree's owner keeps its index
            st = os.lstat(os.path.join(out, tree.INDEX_DIR))
        except FileNotFoundError:
            return cls(out, None, None)  # made by save() once the scan found results
        except OSError:
            return None
        if not _trusted(st, euid, want_dir=True):
            return None
        conn = _connect(os.path.join(out, tree.INDEX_DIR, tree.INDEX_FILE), euid)
        if conn is None:
            return None
        try:
            rows = _rows(conn) if entries else None
        except sqlite3.OperationalError:  # locked by a writer past BUSY_SEC: scan without it
            conn.close()
            return None
        except sqlite3.DatabaseError:  # malformed (truncated): ours, so start it again
            conn.close()
            try:
                os.unlink(os.path.join(out, tree.INDEX_DIR, tree.INDEX_FILE))
            except OSError:
                return None
            return cls(out, None, None)
        return cls(out, conn, rows)

    # ------------------------------------------------------------------------ dir listings

    def listing(self, rel: str, st: os.stat_result) -> list[str] | None:
        """The subdir names ``tree.list_dirs`` gave for the dir ``rel`` (relative to the tree), when
        the dir still ``lstat``s the same (``st``); None when it changed or was never stored.

        Why this holds: a dir's entries cannot be added, removed, renamed or replaced by another
        kind without its mtime and ctime changing; a dir changed within the racy window is never
        stored (``save``). A 2,010-task tree has 12,000 dirs to list before any result is read.
        """
        self._dirs_seen.add(rel)
        if self._dirs is None:
            self._dirs = {}
            if self._conn is not None:
                try:
                    self._dirs = {
                        p: (i, n) for p, i, n in self._conn.execute("SELECT path, ident, names FROM dirs")
                    }
                except sqlite3.Error:
                    pass
        row = self._dirs.get(rel)
        if row is None or not stat.S_ISDIR(st.st_mode) or row[0] != _listing_ident(rel, st, row[1]):
            return None
        self._dirs_served.add(rel)
        return row[1].split("/") if row[1] else []

    def put_listing(self, rel: str, st: os.stat_result, names: list[str]) -> None:
        """A fresh listing of ``rel``, stored by ``save`` when the dir is settled."""
        self._dirs_seen.add(rel)
        if stat.S_ISDIR(st.st_mode) and all("/" not in n for n in names):
            joined = "/".join(names)
            self._dirs_fresh.append((rel, _listing_ident(rel, st, joined), joined, st.st_ctime_ns))

    # ------------------------------------------------------------------------ entries

    def get(self, key: AttemptKey, sdir: str) -> Stamp | None:
        """The attempt's records when every file they came from is unchanged; else None."""
        k = "/".join(key)
        self._seen.add(k)
        entries = self._parsed()
        row = entries.get(k)
        if row is None:
            self.misses += 1
            return None
        # an entry serves once (``_decode`` builds the records in its lists): its key stays (for
        # ``save``'s forgetting), its lists go now, their memory reused for the records
        entries[k] = None
        try:
            key_in, rels, idents, rec = row
            if key_in != k:
                raise LookupError("another attempt's entry")
            if not rels:
                raise LookupError("no files")  # every entry names its files; this one is not ours
            # trusting: unchecked only under an arm dir the index listed (the same dir, by inode
            # and times: never a copy of the tree, nor an arm dir with a stamp added or removed)
            unchecked = self.trusting and f"{key[0]}/{key[1]}" in self._dirs_served
            if not unchecked and _idents(sdir, rels) != idents:
                raise LookupError("a file changed")
            got = _decode(rec)
        except (OSError, LookupError, ValueError, TypeError, AttributeError):
            self.misses += 1
            return None
        self.hits += 1
        self.unchecked += unchecked
        return got

    def _parsed(self) -> dict[str, Any]:
        if self._entries is None:
            self._entries = _parse_all(self._rows, self._conn)
            self._rows = None
        return self._entries

    def put(self, key: AttemptKey, sdir: str, got: Stamp) -> None:
        """A fresh read of one attempt, stored by ``save`` when it is clean and its files settled."""
        k = "/".join(key)
        self._seen.add(k)
        if _clean(got[1], got[2].values()):
            self._fresh.append((k, sdir, key[1], got))

    def save(self, scanned_all: bool, create: bool) -> None:
        """Store the settled fresh reads (and, after a whole-tree scan, forget attempts that are gone).

        ``create``: make the index when the tree has none (only for a tree with results, so that
        pointing `marathon status` at some other dir leaves nothing behind).
        """
        try:
            if self._conn is None:
                if not (create and self._fresh):
                    return
                self._conn = _create(self._dir)
                if self._conn is None:
                    return
            # The file system's clock (an NFS server's differs from ours) at the scan's start: a
            # file changed since then may have been read half-way, or its change may not show in
            # its times yet; such files are never stored.
            new = []
            dirs = []
            if self._fresh or self._dirs_fresh:  # (a warm scan writes nothing, not even the clock probe)
                limit = self._t0 + (_fs_clock(self._dir) - time.time_ns()) - RACY_NS
                for k, sdir, arm_dir, got in self._fresh:
                    deps = _deps(sdir, arm_dir, got, limit) if _utf8(k) else None
                    if deps is not None:
                        new.append((k, _dumps([k, *deps, _encode(got)])))
                dirs = [
                    (rel, ident, names)
                    for rel, ident, names, ctime in self._dirs_fresh
                    if ctime < limit and _utf8(rel, names)
                ]
            ops: list[tuple[str, Any]] = []
            if new:
                ops.append(("INSERT OR REPLACE INTO stamps VALUES (?, ?)", new))
            if dirs:
                ops.append(("INSERT OR REPLACE INTO dirs VALUES (?, ?, ?)", dirs))
            if scanned_all:
                gone = [(k,) for k in self._parsed() if k not in self._seen]
                if gone:
                    ops.append(("DELETE FROM stamps WHERE key = ?", gone))
                gone_dirs = [(p,) for p in (self._dirs or {}) if p not in self._dirs_seen]
                if gone_dirs:
                    ops.append(("DELETE FROM dirs WHERE path = ?", gone_dirs))
            if ops:
                _write(self._conn, ops)
        except (OSError, sqlite3.DatabaseError, UnicodeError):
            pass  # another process holds it, or it broke under us: it is a cache, skip
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._fresh = []


@contextmanager
def remembered_intervals(out: str | os.PathLike) -> Iterator[None]:
    """While inside, bootstrap intervals (``runner.results.stats``) computed before for the same
    inputs come from the tree's index, so `marathon status` on a warm index never imports numpy;
    new ones are stored at the end. Without a trusted index it does nothing."""
    from runner.results import stats

    ix = ScanIndex.open(os.fspath(out), entries=False)
    conn = ix._conn if ix is not None else None
    memo: dict[str, tuple[float, float]] = {}
    if conn is not None:
        try:
            memo = {k: (lo, hi) for k, lo, hi in conn.execute("SELECT key, lo, hi FROM intervals")}
        except sqlite3.DatabaseError:
            conn.close()
            conn = None
    before = set(memo)
    stats._remembered = memo
    try:
        yield
    finally:
        stats._remembered = None
        if conn is not None:
            new = [(k, *v) for k, v in memo.items() if k not in before]
            prune = "DELETE FROM intervals WHERE rowid <= (SELECT MAX(rowid) FROM intervals) - ?"
            try:
                if new:
                    _write(
                        conn,
                        [
                            ("INSERT OR REPLACE INTO intervals VALUES (?, ?, ?)", new),
                            (prune, (KEEP_INTERVALS,)),
                        ],
                    )
            except sqlite3.DatabaseError:
                pass
            finally:
                conn.close()


def read_memo(out: str | os.PathLike, key: str) -> str | None:
    """The text another process kept under ``key`` in the tree's index (None: none, or no index
    this process can trust)."""
    ix = ScanIndex.open(os.fspath(out), entries=False)
    conn = ix._conn if ix is not None else None
    if conn is None:
        return None
    try:
        got = conn.execute("SELECT v FROM memos WHERE k = ?", (key,)).fetchone()
    except sqlite3.DatabaseError:
        got = None
    finally:
        conn.close()
    return got[0] if got else None


def write_memo(out: str | os.PathLike, key: str, value: str) -> None:
    """Keep ``value`` under ``key`` in the tree's index (made when there is none yet); a cache: a
    busy or untrusted index keeps nothing."""
    ix = ScanIndex.open(os.fspath(out), entries=False)
    if ix is None:
        return
    conn = ix._conn if ix._conn is not None else _create(ix._dir)
    if conn is None:
        return
    try:
        _write(conn, [("INSERT OR REPLACE INTO memos VALUES (?, ?)", (key, value))])
    except sqlite3.DatabaseError:
        pass
    finally:
        conn.close()


def _parse_all(rows: str | None, conn: sqlite3.Connection | None) -> dict[str, Any]:
    """Every entry by its attempt key, from the one JSON array ``_rows`` read (a tenth of a warm
    scan's CPU went to 10,000 separate parses); row by row when one of them is not JSON (those map
    to None: misses, and gone from the index when their attempt is)."""
    if rows is None:
        return {}
    try:
        return {e[0]: e for e in json.loads(rows) if isinstance(e, list) and e and isinstance(e[0], str)}
    except (ValueError, RecursionError, TypeError):
        pass
    parsed: dict[str, Any] = {}
    try:
        got = conn.execute("SELECT key, entry FROM stamps").fetchall() if conn is not None else []
    except sqlite3.Error:
        return {}
    for k, text in got:
        try:
            parsed[k] = json.loads(text)
        except (ValueError, RecursionError, TypeError):
            parsed[k] = None
    return parsed


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def _connect(path: str, euid: int) -> sqlite3.Connection | None:
    """An open index of ours, its tables there; a file that is not a database is started again."""
    for attempt in (1, 2):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        except OSError:
            return None
        else:
            if not _trusted(st, euid, want_dir=False):
                return None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)  # created with our mode before sqlite opens it (its default is 0o644)
            conn = sqlite3.connect(path, timeout=BUSY_SEC, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error):
            return None
        try:
            conn.execute(_SCHEMA)
            conn.execute(_META)
            conn.execute(_INTERVALS)
            conn.execute(_DIRS)
            conn.execute(_MEMOS)
            fp = fingerprint()
            got = conn.execute("SELECT v FROM meta WHERE k = 'fingerprint'").fetchone()
            if got is None or got[0] != fp:  # made by other code: its entries mean nothing to this one
                _write(
                    conn,
                    [
                        ("DROP TABLE IF EXISTS stamps", ()),
                        ("DROP TABLE IF EXISTS intervals", ()),
                        ("DROP TABLE IF EXISTS dirs", ()),
                        ("DROP TABLE IF EXISTS memos", ()),
                        (_SCHEMA, ()),
                        (_INTERVALS, ()),
                        (_DIRS, ()),
                        (_MEMOS, ()),
                        ("INSERT OR REPLACE INTO meta VALUES ('fingerprint', ?)", (fp,)),
                    ],
                )
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc):
                return None  # another process is writing it: scan without it this time
            if attempt == 2:
                return None
        except sqlite3.DatabaseError:  # garbage, truncated: ours, so start it again
            conn.close()
            if attempt == 2:
                return None
        try:
            os.unlink(path)
        except OSError:
            return None
    return None


def _rows(conn: sqlite3.Connection) -> str | None:
    """Every entry as one JSON array, joined by SQLite (joining 10,000 strings in Python and the
    rows' tuples cost a twentieth of a warm scan)."""
    try:
        return conn.execute("SELECT '[' || group_concat(entry, ',') || ']' FROM stamps").fetchone()[0]
    except sqlite3.DataError:  # longer than SQLite's string limit (1 GB): join them here
        return "[" + ",".join(e for (e,) in conn.execute("SELECT entry FROM stamps")) + "]"


def _create(d: str) -> sqlite3.Connection | None:
    euid = os.geteuid()
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        if not _trusted(os.lstat(d), euid, want_dir=True):
            return None
    except OSError:
        return None
    return _connect(os.path.join(d, tree.INDEX_FILE), euid)


def _ident(st: os.stat_result) -> str:
    return f"{st.st_mode}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _listing_ident(rel: str, st: os.stat_result, names: str) -> str:
    """A listing's identity: its dir's, and a checksum of what it lists (a row edited or garbled
    in the table is not served)."""
    return f"{_ident(st)}#{zlib.crc32(f'{rel}/{names}'.encode('utf-8', 'surrogateescape')):x}"


def _idents(sdir: str, rels: list[str]) -> str:
    """The identities of the attempt's files now, as one string: compared in one step, and parsed
    from the index as one JSON string instead of five 19-digit integers per file (that parse was
    the largest part of reading a warm index)."""
    lstat = os.lstat
    # (``_ident`` inlined: 50,000 files on a 10,000-attempt tree, a call each was a tenth of this)
    return "|".join([
        f"{(st := lstat(f'{sdir}/{rel}' if rel else sdir)).st_mode}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        for rel in rels
    ])  # fmt: skip


def _deps(sdir: str, arm_dir: str, got: Stamp, limit: int) -> tuple[list[str], str] | None:
    """The files and dirs the attempt's records came from (relative to its stamp dir) and their
    identities (``_idents``); None when one is not settled (changed after ``limit``), a symlink or
    a special file."""
    name, _job, trials = got
    rels: list[str] = []
    if name != arm_dir:
        rels.append("")  # an <arm>-<pid> dir: which job dir name was taken
    rels.append(f"{name}/{results.RESULT_JSON}")
    if not all(t.from_summary for t in trials.values()):
        rels.append(name)  # the trials were found by listing the job dir
    for t in trials:
        for rel in SCORED_INPUTS:
            rels.append(_existing(sdir, f"{name}/{t}", rel))
    idents = []
    rels = list(dict.fromkeys(rels))
    for rel in rels:
        try:
            st = os.lstat(f"{sdir}/{rel}" if rel else sdir)
        except OSError:
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) or st.st_ctime_ns >= limit:
            return None
        idents.append(_ident(st))
    return rels, "|".join(idents)


def _write(conn: sqlite3.Connection, ops: list[tuple[str, Any]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, args in ops:
            if isinstance(args, list):
                conn.executemany(sql, args)
            else:
                conn.execute(sql, args)
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise


def _utf8(*texts: str) -> bool:
    """Whether sqlite can store these names: a dir name that is not UTF-8 (``calc\\xff``) comes
    back from the file system with a surrogate, which sqlite refuses (every `marathon status` of
    the tree failed, until its index was deleted). Such attempts are read every time instead."""
    try:
        for t in texts:
            t.encode()
    except UnicodeEncodeError:
        return False
    return True


def _fs_clock(d: str) -> int:
    """Now by the file system's clock (NFS servers' clocks differ from ours): touch a file, read its ctime.

    Opened without blocking and used only when it is a plain file: a FIFO put in its place would
    otherwise hold a read-only command in ``open`` until something read it (OSError: not stored)."""
    path = os.path.join(d, "clock")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a plain file")
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
        if t.state != results.OK or t.stale or t.bad:
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
_I_USAGE = Receipt.__slots__.index("token_usage")
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
            r[_I_USAGE] = tuple(r[_I_USAGE]) if r[_I_USAGE] is not None else None
            row[_I_RECEIPT] = Receipt(*r)
        t = TrialRecord(*row)
        trials[t.name] = t
    return name, JobRecord(*job_f), trials
