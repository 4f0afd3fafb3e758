"""The one safe way to read a file from the output tree, which the agents under test can write into.

The agents run as root in containers that share ``agent/``, ``verifier/`` and ``artifacts/`` with
the trial dirs, so every file there is adversarial input. Reading one must never block (a FIFO),
exhaust memory (a multi-GB file), or show a host file (a symlink to ``/etc/shadow``). The rules:

- never follow a symlink that leaves the trial dir (one inside it that resolves inside it is
  followed), checked on the opened file descriptor itself, so a swap between check and open fails;
- open with ``O_NONBLOCK | O_NOCTTY`` and ``fstat`` before reading: only regular files are read,
  a FIFO, socket or device is "not a regular file" and is never read;
- a size cap per kind: small JSON records are read whole up to ``MARATHON_MAX_JSON_BYTES``
  (default 4 MiB); logs and trajectories are never read whole (``open_tree_file`` hands back a
  descriptor for streamed, indexed reading).

Every refusal is a ``Refused`` with a reason a person can act on; it is never an exception to the
scanner, and a refused file is never a score.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from modes.values import depth_within

#: Kinds of tree file and what each may cost to read.
JSON = "json"  # result.json, metrics.json, goal_receipt.json: read whole, capped
TEXT = "text"  # reward.txt, exception.txt, README: read whole, capped small
STREAM = "stream"  # trajectories, logs, session JSONL: never read whole; no cap on the size

_DEFAULT_JSON_CAP = 4 << 20
_TEXT_CAP = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symlink",
}


def kind_name(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO", "a symlink"), from its mode."""
    return _KIND_NAMES.get(stat.S_IFMT(mode), "a special file")


CAP_ENV = "MARATHON_MAX_JSON_BYTES"


def _cap_from_env() -> int:
    raw = os.environ.get(CAP_ENV, "")
    try:
        v = int(raw)
    except ValueError:
        return _DEFAULT_JSON_CAP
    return v if v > 0 else _DEFAULT_JSON_CAP


def cap_env_problem() -> str | None:
    """What is wrong with a set ``MARATHON_MAX_JSON_BYTES`` (None: unset or a positive integer).
    The cap is read at import, where a bad value falls back to 4 MiB; a command says so instead of
    reading with a cap the operator did not ask for (a probe found ``abc`` taken silently)."""
    raw = os.environ.get(CAP_ENV)
    if not raw:  # unset or set empty: the default
        return None
    try:
        ok = int(raw) > 0
    except ValueError:
        ok = False
    return None if ok else f"{CAP_ENV}={raw!r}: expected a positive number of bytes"


#: The byte cap for one JSON record file: ``MARATHON_MAX_JSON_BYTES`` (read at start-up) or 4 MiB.
#: harbor's own trial ``result.json`` is a few KB; a file bigger than the cap is not something
#: harbor or a verifier wrote, so it is refused rather than parsed.
JSON_CAP = _cap_from_env()  # (a bad value: ``cap_env_problem``, checked by every command)


def cap_of(kind: str) -> int | None:
    if kind == JSON:
        return JSON_CAP
    if kind == TEXT:
        return _TEXT_CAP
    return None


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a tree file was not read: absent (``missing``), a rule it broke (``rule``), or an error.

    An error (permission, I/O) may pass; a broken rule is something in the tree, not transient.
    """

    reason: str
    missing: bool = False
    rule: bool = True


_MISSING = Refused("missing", missing=True, rule=False)


def _error(exc: OSError, prefix: str = "") -> Refused:
    return Refused(f"{prefix}{type(exc).__name__}: {exc.strerror or exc}", rule=False)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def open_tree_file(path: str | os.PathLike, trial_root: str | os.PathLike, kind: str = JSON) -> int | Refused:
    """An open read-only descriptor of a regular file inside ``trial_root``, or why not.

    The caller owns the descriptor (close it). ``kind`` sets the size cap (``STREAM``: none).
    A symlink is followed only when it resolves inside ``trial_root``; whatever path was taken,
    the file actually opened must lie inside the trial root's real path.
    """
    got = _open(path, trial_root, kind)
    return got if isinstance(got, Refused) else got[0]


def _open(path: str | os.PathLike, trial_root: str | os.PathLike, kind: str) -> tuple[int, int] | Refused:
    p = os.fspath(path)
    root = os.fspath(trial_root)
    if p[:1] != "/" or "/." in p or "//" in p:  # the scanner's paths are absolute and normal already
        p = os.path.abspath(p)
    if root[:1] != "/" or "/." in root or "//" in root:
        root = os.path.abspath(root)
    elif len(root) > 1 and root[-1] == "/":
        root = root.rstrip("/") or "/"
    if not p.startswith(root) or (len(p) > len(root) and p[len(root)] != "/" and root != "/"):
        return Refused("outside the trial dir")
    try:
        fd = os.open(p, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return _MISSING
    except OSError as exc:
        if exc.errno != 40:  # ELOOP: the last component is a symlink
            return _error(exc)
        return _open_symlinked(p, root, kind)
    return _checked(fd, p, root, kind, p.rfind("/") == len(root))


def _open_symlinked(p: str, root: str, kind: str) -> tuple[int, int] | Refused:
    """A symlink at ``p``: follow it only to a file inside the trial dir."""
    try:
        real = os.path.realpath(p, strict=True)
    except OSError as exc:
        if exc.errno == 40:
            return Refused("symlink loop")
        return Refused("dangling symlink")
    real_root = os.path.realpath(root)
    if not _within(real, real_root):
        return Refused("symlink out of the trial dir")
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        return _error(exc, "symlink: ")
    return _checked(fd, real, root, kind)


def _checked(fd: int, p: str, root: str, kind: str, top: bool = False) -> tuple[int, int] | Refused:
    """Keep ``fd`` only when it is a regular file within the cap whose real path is inside the root.

    ``top``: opened with O_NOFOLLOW directly inside the root, so no component below the root can
    be a link and the descriptor's path need not be checked.
    """
    try:
        st = os.fstat(fd)
        why = None
        if not stat.S_ISREG(st.st_mode):
            why = f"not a regular file ({_KIND_NAMES.get(stat.S_IFMT(st.st_mode), 'special file')})"
        else:
            cap = cap_of(kind)
            if cap is not None and st.st_size > cap:
                why = f"too large ({st.st_size} bytes > {cap})"
        if why is None and not top:
            got = _fd_path(fd)
            if got != p and (got is None or not _within(got, os.path.realpath(root))):
                # a symlinked dir on the way (``verifier -> /etc``) or a swap after the check
                why = "symlink out of the trial dir"
    except OSError as exc:
        os.close(fd)
        return _error(exc)
    if why is not None:
        os.close(fd)
        return Refused(why)
    return fd, st.st_size


def read_capped(path: str | os.PathLike, trial_root: str | os.PathLike, kind: str = JSON) -> bytes | Refused:
    """A whole small tree file (``JSON`` or ``TEXT``) in one read, or why not (``Refused``).

    Reads at most cap + 1 bytes, so a file that grows after the size check is still refused.
    """
    got = _open(path, trial_root, kind)
    if isinstance(got, Refused):
        return got
    fd, size = got
    cap = cap_of(kind) or _TEXT_CAP
    want = min(size, cap) + 1  # one read for the usual file; the +1 sees growth past fstat
    try:
        parts = []
        n = 0
        while n <= cap:
            ask = min(want, cap + 1 - n)
            chunk = os.read(fd, ask)
            parts.append(chunk)
            n += len(chunk)
            if len(chunk) < ask:  # a short read of a regular file is its end
                break
    except OSError as exc:
        return _error(exc)
    finally:
        os.close(fd)
    if n > cap:
        return Refused(f"too large (more than {cap} bytes)")
    if not parts:
        return b""
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ------------------------------------------------------------------------ the runner's own files
# The runner's files under OUT (``.runner/registry.json``, the lock, ``.claims/``, ``.driver_env``,
# ``host.json``, harbor's ``config.json``) are not the agents', but OUT may sit under a shared
# parent (/tmp) and a hand or another user's process can plant anything there. So they are read by
# the same rules: regular files only (a FIFO never blocks), never through a symlink at the name,
# size-capped, JSON depth-capped; and what decides a signal or a removal is trusted only when it is
# the runner's user's and nobody else can write it (``untrusted``).

#: a runner file is at most this (a registry of thousands of entries is well below)
OWN_CAP = 8 << 20
#: JSON nesting a runner file may have (theirs is at most 4 deep)
OWN_DEPTH = 32


def open_own(path: str | os.PathLike) -> tuple[int, os.stat_result] | Refused:
    """A runner file opened for reading by the rules above (a regular file, never through a symlink
    at the name, never blocking on a FIFO) with its ``fstat``; the caller owns (closes) the fd.
    For the readers that read a part (a log's tail, a ledger's new lines): ``read_own`` reads whole."""
    p = os.fspath(path)
    try:
        fd = os.open(p, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return _MISSING
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the name is a symlink
            return Refused("a symlink (not followed)")
        return _error(exc)
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        return _error(exc)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return Refused(f"not a regular file ({_KIND_NAMES.get(stat.S_IFMT(st.st_mode), 'special file')})")
    return fd, st


def read_own(path: str | os.PathLike, cap: int = OWN_CAP) -> bytes | Refused:
    """A whole runner file (see above) in one read, or why not: missing, not a regular file, a
    symlink at the name (``O_NOFOLLOW``), over ``cap``. Never blocks, never raises."""
    opened = open_own(path)
    if isinstance(opened, Refused):
        return opened
    fd, st = opened
    try:
        if st.st_size > cap:
            return Refused(f"too large ({st.st_size} bytes > {cap})")
        data = os.read(fd, cap + 1)
    except OSError as exc:
        return _error(exc)
    finally:
        os.close(fd)
    if len(data) > cap:
        return Refused(f"too large (more than {cap} bytes)")
    return data


def load_own_json(path: str | os.PathLike, cap: int = OWN_CAP, depth: int = OWN_DEPTH) -> Any:
    """A runner JSON file parsed (``read_own``), or a ``Refused`` saying why not: also when it is
    not UTF-8 JSON or nests deeper than ``depth``. The caller checks the types it needs."""
    raw = read_own(path, cap)
    if isinstance(raw, Refused):
        return raw
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return Refused(f"not JSON ({type(exc).__name__})")
    if not depth_within(data, depth):
        return Refused(f"nested deeper than {depth}")
    return data


def untrusted(path: str | os.PathLike, uid: int | None = None, others_may_write: bool = False) -> str:
    """Why ``path`` (looked at itself: a symlink is not followed) may not decide a signal or a
    removal: "" when it is ``uid``'s (default: this process's effective user, the runner's) and
    neither group- nor world-writable; else the reason, for the plan to name. A missing path is ""
    (nothing to trust). ``others_may_write``: a dir made writable by design (harbor makes every
    trial dir 0o777 for the container's user): only its owner is checked, and what is in it must
    pass on its own."""
    uid = os.geteuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not the runner's uid {uid}"
    if others_may_write and stat.S_ISDIR(st.st_mode):
        return ""
    if st.st_mode & 0o002 or st.st_mode & 0o020 and not _private_group(st.st_gid, uid):
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _private_group(gid: int, uid: int) -> bool:
    """Is ``gid`` the user's own group (a user-private group: its primary group, no other member)?
    Then group-writable is writable by that user alone (a umask of 002 makes everything so)."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and set(group.gr_mem) <= {user.pw_name}


def lstat_times(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(mtime_ns, ctime_ns)`` of the entry itself (a symlink is not followed), or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns


def trial_root_of(path: str | os.PathLike, depth: int) -> str:
    """The trial dir of a file ``depth`` components below it (``verifier/metrics.json``: 2)."""
    p = os.path.abspath(os.fspath(path))
    for _ in range(depth):
        p = os.path.dirname(p)
    return p


# -------------------------------------------------------------------------------------- writers
# The arms write into ``<trial>/agent`` (the agent's ``/logs/agent``) from the host. The agent may
# have planted a FIFO, a symlink or a dir at any name there, so a host write never opens an
# existing name: it writes a fresh temp file (O_EXCL: never a planted one) and renames it over.


def move_aside(path: str) -> None:
    """Move whatever is planted at ``path`` (a dir a rename cannot replace) out of the way, kept."""
    os.rename(path, f"{path}.planted-{os.urandom(4).hex()}")


def _move_aside_in(dir_fd: int, name: str) -> None:
    os.rename(name, f"{name}.planted-{os.urandom(4).hex()}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: how often a component planted again as soon as it was moved aside is moved aside once more
_PLANT_TRIES = 8


def _open_step(dir_fd: int, part: str) -> int:
    for _ in range(_PLANT_TRIES):
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=dir_fd)
        except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file, a FIFO
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            _move_aside_in(dir_fd, part)
    raise OSError(errno.ELOOP, f"{part!r}: planted again each time it was moved aside")


def open_dir_in(root: str | os.PathLike, rel: str | os.PathLike = "") -> int:
    """A descriptor of the real dir ``root/rel``, for ``write_in``: ``root`` (the host's own) opened
    as given, every component below it opened relative to the one before with ``O_NOFOLLOW``, made
    when missing, a symlink or file planted at it moved aside (kept).

    What is then written through the descriptor lands in that dir even if a component is swapped
    for a symlink after it was opened: an agent's process still running beside the shared agent
    dir cannot redirect the host's write between a check and the write (a probe's race script did,
    while paths were checked and then written by name). The caller closes the descriptor."""
    parts = [x for x in os.path.normpath(os.fspath(rel)).split(os.sep) if x not in ("", ".")]
    if os.path.isabs(os.fspath(rel)) or ".." in parts:
        raise ValueError(f"{os.fspath(rel)!r} is not a path inside {os.fspath(root)}")
    fd = os.open(os.fspath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            nxt = _open_step(fd, part)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def exists_in(dir_fd: int, name: str) -> bool:
    """Whether the open dir has an entry ``name`` (of any kind, a dangling symlink too)."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def write_in(dir_fd: int, name: str, data: bytes | str | BinaryIO, mode: int = 0o644) -> None:
    """Replace the entry ``name`` of the open dir ``dir_fd`` with ``data`` (bytes, text, or a binary
    file read to its end): a planted FIFO or symlink there neither blocks nor redirects.

    The temp file is created with ``O_CREAT | O_EXCL`` (which never follows a symlink) in the same
    dir and renamed over the name, so the entry is replaced, not opened. A planted dir at the name
    is moved aside (kept, renamed ``<name>.planted-<hex>``). ``mode``: the new file's permissions
    (before the umask, as ``open`` applies it)."""
    if not name or os.sep in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    if isinstance(data, str):
        data = data.encode("utf-8")
    while True:
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
            )
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, (bytes, bytearray, memoryview)):
                fh.write(data)
            else:
                shutil.copyfileobj(data, fh)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            try:
                planted = os.lstat(name, dir_fd=dir_fd)
            except OSError:
                planted = None
            if planted is None or not stat.S_ISDIR(planted.st_mode):
                raise
            _move_aside_in(dir_fd, name)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` (``write_in`` in the dir the path names): a planted FIFO or
    symlink there neither blocks nor redirects, a planted dir is moved aside (kept)."""
    d, name = os.path.split(os.fspath(path))
    dir_fd = os.open(d or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_in(dir_fd, name, data, mode)
    finally:
        os.close(dir_fd)


def open_append(path: str | os.PathLike) -> int:
    """A log the host appends to: opened once, never through a symlink, never a FIFO.

    A planted entry at the name (symlink, FIFO, dir) is moved aside first. The caller owns the fd.
    """
    p = os.fspath(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            move_aside(p)
        try:
            fd = os.open(p, flags, 0o644)
        except OSError as exc:
            if exc.errno in (40, 6, 21):  # ELOOP, ENXIO (FIFO without a reader), EISDIR: planted again
                continue
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
    raise OSError(f"{p}: something keeps being planted at this name")


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` or an ``OSError``: a write to a filling disk can be short before it fails, and
    a short write taken for a whole one leaves a line torn with nothing said."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def torn_end(path: str | os.PathLike, fd: int) -> bool:
    """The journal at ``path`` (open as ``fd``) does not end with a newline: a writer failed in the
    middle of a line, and whatever is appended next would be read as part of that torn line."""
    size = os.fstat(fd).st_size
    if size == 0:
        return False
    opened = open_own(os.fspath(path))
    if isinstance(opened, Refused):
        return False
    rfd, _st = opened
    try:
        return os.pread(rfd, 1, size - 1) != b"\n"
    finally:
        os.close(rfd)


def append_line(path: str | os.PathLike, line: bytes, *, sync: bool = True) -> None:
    """Append one whole line to a journal the host keeps (the runner's events, the caps' cuts, the
    gateway's outages), or raise ``OSError``: never a line silently lost or half written.

    One write on an ``O_APPEND`` descriptor (lines of concurrent writers do not interleave); a line
    torn by an earlier failure (a full disk) is ended first, in the same write, so this one is read.
    ``sync``: fsync'd before returning (a record others act on must survive a crash)."""
    fd = open_append(path)
    try:
        if torn_end(path, fd):
            line = b"\n" + line
        write_all(fd, line)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def held_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive flock on the side file ``path`` (created, never through a symlink) for the
    block: what serialises one read-check-write among the processes of a host (the registry,
    claims, the start of a tree's gateway)."""
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    fd = open_append(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def ensure_dir(path: str | os.PathLike, root: str | os.PathLike) -> None:
    """Make ``path`` a real dir inside ``root``, every component below ``root`` a real dir
    (``open_dir_in``).

    A symlink or file planted at a component is moved aside, so what is copied there stays in
    the trial dir (a planted ``loopx -> ~/.ssh`` would otherwise receive the evidence).
    """
    root_s = os.path.abspath(os.fspath(root))
    p = os.path.abspath(os.fspath(path))
    if not _within(p, root_s):
        raise ValueError(f"{p} is outside {root_s}")
    os.makedirs(root_s, exist_ok=True)
    os.close(open_dir_in(root_s, os.path.relpath(p, root_s)))


def set_aside_special(top: str | os.PathLike) -> list[str]:
    """Move every entry under ``top`` that is not a regular file or dir (a FIFO, a symlink) aside.

    For dirs a third-party reader walks (harbor's rollout converter reads every session file): a
    FIFO there would block it, a symlink would show it a host file. Returns the names moved.
    """
    moved = []
    for dirpath, dirnames, filenames in os.walk(os.fspath(top)):  # os.walk never follows links
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                try:
                    move_aside(p)
                    moved.append(os.path.relpath(p, os.fspath(top)))
                except OSError:
                    pass
    return moved
