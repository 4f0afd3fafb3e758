"""The attempts the gateway serves: one record per attempt, written by whoever starts it (the runner's
launcher, a cluster host's job, a test that runs harbor itself), read by the gateway on every call.

Why records in the tree and not a control channel: the output tree is the only state the runner,
the gateway and any later reader share, so a restarted gateway (or runner) picks up exactly the
attempts that run. A record holds no secret: the token's sha256, never the token.

    <out>/.runner/gateway/attempts/<id>.json    id, token_sha256, task, arm, stamp, host, budget_sec,
                                                state (live | ended), ended_reason, harbor identity

The token itself goes to the attempt's harbor process only (in its environment, ``TOKEN_VAR``), and
from there into its sandbox: the only credential that enters a sandbox. The gateway accepts it only

- on the attempt's own unix socket (local Docker: one socket per attempt, its dir bind-mounted into
  that trial alone), so a token carried to another attempt is refused there;
- while the record says ``live`` and the attempt's harbor process (its recorded identity) runs, so a
  token of an attempt that ended, was voided, stopped or killed is refused;
- within the attempt's model budget from its first forwarded call (``modes.budget``).

Sockets live on the host's own disk (``socket_root``: a unix socket path must be short, and a cluster's
shared tree may be NFS), one dir per attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from modes import safeio, safetext
from modes.gateway import SANDBOX_SOCKET_DIR, SOCKET_NAME
from modes.values import SECONDS, Bad, number
from runner.ops.procs import ProcIdentity, alive, identity_from, identity_of
from runner.results.tree import gateway_dir

ATTEMPTS_DIR = "attempts"
LIVE = "live"
ENDED = "ended"


def attempts_dir(out: Path) -> Path:
    return gateway_dir(out) / ATTEMPTS_DIR


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def socket_root(out: Path) -> Path:
    """This host's socket dir of a tree: ``$XDG_RUNTIME_DIR`` (else ``/tmp``)
    ``/marathon-gw-<uid>/<sha256(out)[:12]>``. Short (a unix socket path has 108 bytes) and local."""
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    tree = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:12]
    return Path(base) / f"marathon-gw-{os.getuid()}" / tree


def ensure_socket_root(out: Path) -> Path:
    """Make the socket root, ours and not listable by others (a dir planted there by another user
    is refused, never used)."""
    root = socket_root(out)
    for d in (root.parent, root):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o711)
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(f"{d} is not a directory of this user; remove it")
        os.chmod(d, 0o711)
    return root


def socket_dir(out: Path, attempt_id: str) -> Path:
    return socket_root(out) / attempt_id


def socket_path(out: Path, attempt_id: str) -> Path:
    return socket_dir(out, attempt_id) / SOCKET_NAME


@dataclass(frozen=True)
class AttemptRecord:
    id: str
    token_sha256: str
    task: str
    arm: str
    stamp: str
    host: str | None = None  # the cluster node whose gateway serves it; None: this host
    budget_sec: float | None = None  # the wire budget from the first forwarded call (None: unbounded)
    created: float = 0.0
    state: str = LIVE
    ended_reason: str | None = None
    ended_at: float | None = None
    harbor: dict | None = None  # identity of the attempt's harbor process (pid, start_ticks, boot_id)
    issuer: dict | None = None  # identity of the process that issued it (the runner, a fleet job)

    @property
    def harbor_ident(self) -> ProcIdentity | None:
        return identity_from(self.harbor) if isinstance(self.harbor, dict) else None

    def gone(self) -> bool:
        """The attempt's harbor process was recorded and no longer runs (killed, crashed, ended),
        or none was recorded and its issuer no longer runs: harbor is held at a gate until its
        record names it (``runner.ops.held``), so an issuer killed before that left no harbor, and
        the record would otherwise stay live for good (health would call for a gateway nobody needs)."""
        ident = self.harbor_ident
        if ident is not None:
            return not alive(ident)
        issuer = identity_from(self.issuer) if isinstance(self.issuer, dict) else None
        return issuer is not None and not alive(issuer)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record_path(out: Path, attempt_id: str) -> Path:
    return attempts_dir(out) / f"{attempt_id}.json"


def _write(out: Path, rec: AttemptRecord) -> None:
    d = attempts_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    safeio.write_atomic(record_path(out, rec.id), safetext.dumps(rec.to_json(), pretty=True) + "\n")


def record_from_dict(d: Any) -> AttemptRecord | None:
    if not isinstance(d, dict):
        return None
    try:
        budget = number(d.get("budget_sec"), SECONDS, "budget_sec")
        created = number(d.get("created"), SECONDS, "created")
        ended_at = number(d.get("ended_at"), SECONDS, "ended_at")
        if any(isinstance(v, Bad) for v in (budget, created, ended_at)):
            return None
        return AttemptRecord(
            id=str(d["id"]),
            token_sha256=str(d["token_sha256"]),
            task=str(d["task"]),
            arm=str(d["arm"]),
            stamp=str(d["stamp"]),
            host=d.get("host") if isinstance(d.get("host"), str) else None,
            budget_sec=float(budget) if budget else None,
            created=float(created or 0.0),
            state=ENDED if d.get("state") == ENDED else LIVE,
            ended_reason=d.get("ended_reason") if isinstance(d.get("ended_reason"), str) else None,
            ended_at=float(ended_at) if ended_at is not None else None,
            harbor=d.get("harbor") if isinstance(d.get("harbor"), dict) else None,
            issuer=d.get("issuer") if isinstance(d.get("issuer"), dict) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def read_record(out: Path, attempt_id: str) -> AttemptRecord | None:
    d = safeio.load_own_json(record_path(out, attempt_id))  # a Refused is not a record
    return None if isinstance(d, safeio.Refused) else record_from_dict(d)


def list_records(out: Path, host: str | None = None, *, all_hosts: bool = False) -> list[AttemptRecord]:
    """The attempt records of one host (``host``), or of every host."""
    try:
        names = sorted(os.listdir(attempts_dir(out)))
    except OSError:
        return []
    recs = []
    for n in names:
        if not n.endswith(".json") or n.startswith("."):
            continue
        rec = read_record(out, n[: -len(".json")])
        if rec is not None and (all_hosts or rec.host == host):
            recs.append(rec)
    return recs


@dataclass(frozen=True)
class Issued:
    """An attempt registered with the gateway: its record, its token (for the attempt's harbor
    process only) and the mount that brings its socket into the trial."""

    record: AttemptRecord
    token: str
    socket_dir: Path

    @property
    def mount(self) -> dict[str, Any]:
        """harbor ``--mounts`` entry: the attempt's socket dir, read-only, at ``SANDBOX_SOCKET_DIR``."""
        return {
            "type": "bind",
            "source": str(self.socket_dir),
            "target": SANDBOX_SOCKET_DIR,
            "read_only": True,
        }


def issue(
    out: Path,
    task: str,
    arm: str,
    stamp: str,
    *,
    budget_sec: float | None,
    host: str | None = None,
    socket: bool = True,
) -> Issued:
    """A fresh attempt: a random token, its record (live), and its socket dir (the gateway binds the
    socket in it within a poll; the dir exists now, so harbor can mount it before the container
    starts). ``socket=False``: a remote sandbox's attempt, reached by token on the TLS listener."""
    token = secrets.token_urlsafe(32)
    issuer = identity_of(os.getpid())
    rec = AttemptRecord(
        id="a" + uuid.uuid4().hex[:15],
        token_sha256=token_sha256(token),
        task=task,
        arm=arm,
        stamp=stamp,
        host=host,
        budget_sec=float(budget_sec) if budget_sec else None,
        created=time.time(),
        issuer=asdict(issuer) if issuer is not None else None,
    )
    sdir = socket_dir(out, rec.id)
    if socket:
        ensure_socket_root(out)
        os.mkdir(sdir, 0o755)
        os.chmod(sdir, 0o755)  # the task user in the trial traverses it (the umask may have cut it)
    _write(out, rec)
    return Issued(rec, token, sdir)


def set_harbor(out: Path, attempt_id: str, pid: int) -> AttemptRecord | None:
    """Record the attempt's harbor process, so a killed attempt's token is refused at once."""
    rec = read_record(out, attempt_id)
    ident = identity_of(pid)
    if rec is None or ident is None:
        return rec
    rec = AttemptRecord(**{**rec.to_json(), "harbor": asdict(ident)})
    _write(out, rec)
    return rec


def end(out: Path, attempt_id: str, reason: str) -> None:
    """The attempt ended (finished, voided, stopped): its token is refused from now on."""
    rec = read_record(out, attempt_id)
    if rec is None or rec.state == ENDED:
        return
    _write(
        out,
        AttemptRecord(**{**rec.to_json(), "state": ENDED, "ended_reason": reason, "ended_at": time.time()}),
    )


def end_for_stamp(out: Path, task: str, arm: str, stamp: str, reason: str) -> None:
    """``end`` for the live record(s) of one attempt, found by its stamp (a voided attempt, a
    restarted runner's adopted one)."""
    for rec in list_records(out, all_hosts=True):
        if (rec.task, rec.arm, rec.stamp) == (task, arm, stamp) and rec.state == LIVE:
            end(out, rec.id, reason)
