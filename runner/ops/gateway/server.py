"""The gateway process: per-attempt sockets in, the provider out, every call on the ledger.

One process per (output tree, host), ``marathon gateway OUT`` (started and registered by the
runner; ``runner.ops.gateway.process``). It holds the real key, read by NAME from its own
environment at start-up and kept in memory only; nothing it writes or logs carries it.

Per call: the attempt is the one whose socket the call came in on (local Docker), or whose token it
carries (the TLS listener for remote sandboxes); the token is checked against the attempt's record
(``runner.ops.gateway.attempts``) and refused ``401`` -- logged on the ledger with the attempt --
when it is missing or another attempt's, when the attempt ended, its harbor process is gone, or its
model budget (from its first forwarded call, ``modes.budget``'s rule) is spent; refused ``402`` when
the run's or the arm's spend cap is reached (``runner.results.caps``: every call under ``--on-cap
stop``, an attempt's first call under ``finish``), and every call of an attempt that has spent its
own cap (``--max-spend-attempt``; the gateway writes that attempt's cut record the moment a call's
usage passes it, so the agent's host side ends the phase even if no call follows). Otherwise the request
goes upstream as it came (the body untouched, the token replaced by the real key, an
``x-client-request-id`` added), and the answer comes back as it arrives: SSE chunks are written on
as they are read, never buffered whole. A client that goes away cancels the handler (aiohttp's
``handler_cancellation``), which closes the upstream request.

Why aiohttp: one maintained library for the server (many unix sites and a TLS site in one loop,
handler cancellation on disconnect) and the client (streamed reads, unix and TCP connectors, TLS);
it is already installed (Ray depends on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import queue
import socket
import ssl
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from modes import safeio, safetext
from modes.gateway import REQUEST_ID_HEADER, request_id
from runner.ops.gateway import attempts as att
from runner.ops.gateway import conns, parsing, wire
from runner.ops.gateway.wire import KeyMask, UsageScanner
from runner.results import caps as C
from runner.results import ledger as L
from runner.results.tree import ledger_path

POLL_SEC = 0.25
#: once the attempts' dir changed, it is listed on every poll this long: a filesystem whose times
#: move in coarse ticks (a jiffy before Linux 6.13, seconds on some network disks) leaves the dir's
#: mtime as the first of two records renamed into it within one tick set it
DIR_SETTLE_SEC = 2.0
HEARTBEAT_SEC = 2.0
#: how long a stopping gateway lets its handlers end (the calls in flight are cut first, the queued
#: ones refused): aiohttp waits this long, cancels what is left and waits as long again. A call whose
#: body never finished kept one stopping for twice aiohttp's 60 s (found by a probe)
SHUTDOWN_SEC = 2.0
#: an ended attempt's socket stays bound this long (its calls refused ``attempt_ended`` and logged:
#: a process the agent left running still finds the socket), then it and its dir are removed
ENDED_GRACE_SEC = 600.0
MAX_BODY = 64 * 1024 * 1024
#: why a call in flight was cut when the gateway stopped (its ``cut`` on the ledger)
STOPPED = "gateway_stopped"
#: request headers never forwarded: hop-by-hop, ours to set, and what would bill, route or identify
#: the call otherwise with the operator's key (a probe as the agent sent its own organization,
#: project, cookies and forwarding headers through), as does any header the request's
#: ``Connection`` names
DROP_REQUEST = frozenset(
    {
        "host", "connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te",
        "trailer", "transfer-encoding", "upgrade", "content-length", "authorization",
        "accept-encoding", REQUEST_ID_HEADER, "proxy-connection", "expect", "http2-settings",
        "openai-organization", "openai-project", "api-key", "chatgpt-account-id", "cookie",
        "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
        "x-real-ip",
    }
)  # fmt: skip
#: response headers never passed back: hop-by-hop, and what the provider says of the operator's
#: account (its organization and project, the key's rate-limit counts every arm shares, a cookie)
DROP_RESPONSE = frozenset(
    {
        "connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "upgrade",
        "trailer", "set-cookie", "openai-organization", "openai-project",
    }
)  # fmt: skip
DROP_RESPONSE_PREFIXES = ("x-ratelimit-",)


def forwarded_request_headers(headers: Any) -> dict[str, str]:
    """The agent's request headers the provider gets (``DROP_REQUEST`` and what ``Connection``
    names left out)."""
    named = {h.strip().lower() for v in headers.getall("Connection", ()) for h in v.split(",")}
    return {k: v for k, v in headers.items() if k.lower() not in DROP_REQUEST and k.lower() not in named}


def passed_response_headers(headers: Any, mask: Any) -> dict[str, str]:
    """The provider's response headers the agent gets (masked of the key)."""
    return {
        mask.text(k): mask.text(v)
        for k, v in headers.items()
        if k.lower() not in DROP_RESPONSE and not k.lower().startswith(DROP_RESPONSE_PREFIXES)
    }


def _json_error(status: int, code: str, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.Response(status=status, text=safetext.dumps(body), content_type="application/json")


#: the gateway's exit status when its ledger cannot be written (a full disk, a file-size limit)
EXIT_LEDGER = 75


def _refusal(
    request: web.BaseRequest, status: int, code: str, message: str, kind: str = "invalid_request_error"
) -> web.Response:
    """A call the gateway refuses. On the TLS route its connection goes with it: a connection is
    counted for an attempt only while it carries the attempt's calls (``conns``), and one kept open
    by refused calls would stay unnamed for its whole 30 s (found by a probe)."""
    resp = _json_error(status, code, message, kind)
    if not isinstance(request.transport.get_extra_info("sockname") if request.transport else "", str):
        resp.force_close()
    return resp


class LedgerWriter:
    """Append-only, fsync'd, from a thread of its own (the event loop never waits on the disk).

    A write that fails (the disk full, a file-size limit) is never dropped quietly: the writer stops
    and calls ``on_fail`` (the gateway exits on it: a call the ledger does not hold would escape the
    caps, the budgets and the bill). A line torn by such a failure stays a line of its own: the next
    writer ends it before its first row."""

    def __init__(self, path: Path, on_fail: Any = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = safeio.open_append(path)
        self.failed: OSError | None = None
        self.on_fail = on_fail
        if safeio.torn_end(path, self.fd):
            safeio.write_all(self.fd, b"\n")
        self.q: queue.Queue[bytes | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="ledger", daemon=True)
        self.thread.start()

    def write(self, row: dict[str, Any]) -> None:
        """Queue one row; never raises for what the row holds (a call the provider answered is on the
        ledger whatever its client sent): a row that does not encode is written without its params."""
        try:
            line = safetext.dumps(row, default=str, nonfinite_as_null=True)
        except (ValueError, TypeError, RecursionError):
            line = safetext.dumps(
                {**row, "params": {"unparsed": "not encodable"}}, default=str, nonfinite_as_null=True
            )
        self.q.put((line + "\n").encode())

    def _run(self) -> None:
        while True:
            line = self.q.get()
            batch = [line]
            while True:  # whatever queued meanwhile goes in the same fsync
                try:
                    batch.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = None in batch
            data = b"".join(b for b in batch if b is not None)
            if data:
                try:
                    safeio.write_all(self.fd, data)
                    os.fsync(self.fd)
                except OSError as exc:
                    self.failed = exc
                    if self.on_fail is not None:
                        self.on_fail(exc)
                    return
            if stop:
                return

    def close(self) -> None:
        self.q.put(None)
        self.thread.join(10)
        os.close(self.fd)


#: the calls of one attempt in flight at once (codex makes one at a time): 16 held-open 60 MB bodies
#: took the gateway to 1 GB; with this, one attempt holds at most MAX_CALLS x MAX_BODY
MAX_CALLS = 8


@dataclass
class Live:
    """One attempt as this gateway serves it."""

    record: att.AttemptRecord
    version: tuple[int, int, int]  # its record file's (``_version``)
    site: web.UnixSite | None = None
    sock: str | None = None
    bound: str | None = None  # the name the socket was bound to (``_bind``), which its calls carry
    first_at: float | None = None
    n: int = 0
    cut: bool = False  # its own spend cap is spent and its cut record written
    #: its calls in flight at once (``MAX_CALLS``): a call holds its body, up to MAX_BODY, until it
    #: ends; more wait their turn (unread, their bodies stay in the socket's buffers)
    calls: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_CALLS))
    #: one of its large bodies at a time at the parser (``parsing``): another attempt's body waits
    #: behind at most one of this attempt's, however many it sends
    parsing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: under a spend cap its calls go upstream one at a time (``Gateway.handle``)
    one: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: its calls forwarded and not ended: cut when its budget runs out or it ends (``Gateway._cut``)
    inflight: set[asyncio.Task] = field(default_factory=set)


def _version(path: Path) -> tuple[int, int, int]:
    """Which version of a record (or of the caps) is on disk: each is written by a rename, a new
    inode every time, so two versions written within one tick of a coarse clock (the same mtime)
    are still told apart."""
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _key(a: Live) -> tuple[str, str, str]:
    return (a.record.task, a.record.arm, a.record.stamp)


@dataclass
class Upstream:
    """Where calls go: ``https://host/v1``, ``http://127.0.0.1:PORT/v1`` or ``unix:/path.sock`` (its
    base path ``/v1``)."""

    base: str
    unix: str | None = None

    @classmethod
    def parse(cls, url: str) -> Upstream:
        if url.startswith("unix:"):
            return cls("http://localhost/v1", unix=url[len("unix:") :])
        parts = urlsplit(url)
        # the URL itself is never echoed: a credential in it (``user:key@``, ``?key=``) would land
        # on the screen and in gateway.log, past a screen that stops at a space or at hex
        if "@" in parts.netloc:
            raise ValueError(
                "model base URL must not carry credentials (user:password@host): give the key by name"
            )
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise ValueError(
                "model base URL must have no query or fragment (?... / #...): http(s)://host[:port]/path"
            )
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("model base URL must be http(s)://host[:port]/path or unix:/path.sock")
        return cls(url.rstrip("/"))

    def url_for(self, path: str) -> str:
        """``/v1/responses`` under our base -> the same path under the upstream's base (never a
        query: a call with one is refused)."""
        rest = path[len("/v1") :] if path == "/v1" or path.startswith("/v1/") else path
        return self.base + rest


@dataclass
class Gateway:
    out: Path
    key: str = field(repr=False)  # (a repr of the gateway, or of a route bound to it, shows no key)
    upstream: Upstream
    host: str | None = None
    tcp: tuple[str, int] | None = None
    tls: ssl.SSLContext | None = None
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    say: Any = print
    upstream_label: str = ""  # how the state file shows the upstream (never with credentials)
    key_var: str = ""  # the NAME the key was read from (shown; the value never)
    on_beat: Any = None  # called every HEARTBEAT_SEC

    def __post_init__(self) -> None:
        self.live: dict[str, Live] = {}
        self.by_sock: dict[str, str] = {}  # the socket's bound name (``Live.bound``) -> attempt id
        self.by_token: dict[str, str] = {}  # token sha256 -> attempt id
        self.ledger = LedgerWriter(ledger_path(self.out, self.host), on_fail=self._ledger_failed)
        self.stop_event = asyncio.Event()
        self.served = 0
        self.tcp_port: int | None = None
        self.tcp_site: conns.TcpSite | None = None  # the TLS route's listener (``run``)
        self._first: dict[str, float] = {}  # attempt id -> its first forwarded call (the budget's start)
        self.started_at = time.time()
        self._dir_mtime: int | None = None
        self._dir_changed = 0.0  # (monotonic) when a poll last found the attempts' dir changed
        # the run's spend caps (runner.results.caps), re-read when the runner rewrites them
        self.caps = C.Caps()
        self._caps_version: tuple[int, int, int] | None = None
        self.tally: C.Tally | None = None
        self.upstream_label = self.upstream_label or self.upstream.base
        self.parser = parsing.BodyParser(self.key_var)  # large bodies' parameters, off the loop
        self._cuts: dict[asyncio.Task, str] = {}  # calls cut in flight, and why (``_cut``)
        self.stopping = False  # ``close`` began: no call goes upstream any more
        #: when this gateway first saw the run's cap (or an arm's) reached: the attempts issued
        #: before it were running at the cap (``_cap_refusal``)
        self._cap_seen: dict[str, float] = {}
        said = self.say
        # a line names what an agent sent (a path aiohttp percent-decoded: ``%1b`` is an escape, on
        # the terminal of a foreground gateway and in gateway.log): one line, control characters
        # shown as their escapes
        self.say = lambda text: said(safetext.clean(text, None))

    def _ledger_failed(self, exc: OSError) -> None:
        """The ledger cannot be written: exit at once (from the writer's thread), serving no call the
        ledger would not hold. The runner's tender finds a gateway that died unasked for, records
        the outage and starts another; the attempts live meanwhile are voided (``gateway_failed``)."""
        with contextlib.suppress(Exception):
            self.say(f"gateway: the ledger cannot be written ({exc.strerror or exc}): exiting, so that no "
                     "call goes unrecorded")  # fmt: skip
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(EXIT_LEDGER)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, ready: Any = None) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, auto_decompress=False, max_field_size=65536,
            shutdown_timeout=SHUTDOWN_SEC,
        )  # fmt: skip
        await self.runner.setup()
        conn: aiohttp.BaseConnector
        if self.upstream.unix:
            conn = aiohttp.UnixConnector(path=self.upstream.unix, limit=0)
        else:
            conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self.client = aiohttp.ClientSession(
            connector=conn, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)
        )
        self._restore_first_calls()
        if self.tcp is not None:
            self.tcp_site = conns.TcpSite(self.runner, self.tcp[0], self.tcp[1], ssl_context=self.tls)
            await self.tcp_site.start()
            self.tcp_port = self.tcp_site.port
        self.ledger.write({"kind": L.GATEWAY_START, "at": time.time(), "gateway": self.instance,
                           "pid": os.getpid(), "host": self.host, "upstream": self.upstream_label})  # fmt: skip
        await self.sync()
        if ready is not None:
            ready()
        beat = asyncio.ensure_future(self._beat())
        try:
            while not self.stop_event.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_event.wait(), POLL_SEC)
                await self.sync()
        finally:
            beat.cancel()
            await self.close()

    async def close(self) -> None:
        # the calls in flight end now, each on the ledger (``cut``): a stream held open kept a stopped
        # gateway serving (``gateway --stop`` gave up after 10 s; found by a probe). The ones queued
        # behind them are refused (``_closed``): freed by the cut, they went upstream, and nothing
        # cut them (a review)
        self.stopping = True
        for a in list(self.live.values()):
            for task in list(a.inflight):
                self._cut(a, task, STOPPED)
        for a in list(self.live.values()):
            await self._unbind(a)
        await self.runner.cleanup()
        await self.client.close()
        await self.parser.close()
        self.ledger.write(
            {"kind": L.GATEWAY_STOP, "at": time.time(), "gateway": self.instance, "host": self.host}
        )
        self.ledger.close()

    async def _beat(self) -> None:
        """The heartbeat (``on_beat``: the state file ``runner.ops.gateway.process`` keeps)."""
        while True:
            if self.on_beat is not None:
                with contextlib.suppress(OSError):
                    self.on_beat()
            await asyncio.sleep(HEARTBEAT_SEC)

    def _restore_first_calls(self) -> None:
        """A restarted gateway keeps each attempt's budget start: its first forwarded call, from the
        ledger this host's gateways wrote."""
        for row in L.LedgerReader(self.out).iter_new():
            c = L.call_from_dict(row)
            if c is None or not c.attempt or not c.forwarded or c.host != self.host:
                continue
            self._first.setdefault(c.attempt, c.at)
            self._first[c.attempt] = min(self._first[c.attempt], c.at)

    # ------------------------------------------------------------------ attempts

    async def sync(self) -> None:
        """The attempts of this host from their records: bind a socket for each live one, close the
        socket of each that ended (or whose record is gone)."""
        seen = set()
        try:
            # a record is written by a rename in this dir: a dir unchanged for a while has no new or
            # changed record (then only the ended attempts' grace is looked at)
            now = time.monotonic()
            dir_mtime = os.stat(att.attempts_dir(self.out)).st_mtime_ns
            if dir_mtime != self._dir_mtime:
                self._dir_changed = now
            elif now > self._dir_changed + DIR_SETTLE_SEC and not self._ending():
                return
            names = os.listdir(att.attempts_dir(self.out))
            self._dir_mtime = dir_mtime
        except OSError:
            names = []
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            aid = name[: -len(".json")]
            try:
                version = _version(att.record_path(self.out, aid))
            except OSError:
                continue
            cur = self.live.get(aid)
            if cur is None or cur.version != version:
                rec = att.read_record(self.out, aid)
                if rec is None or rec.host != self.host:
                    continue
                if cur is None:
                    cur = self.live[aid] = Live(rec, version, first_at=self._first.get(aid))
                    self.by_token[rec.token_sha256] = aid
                else:
                    cur.record, cur.version = rec, version
                if rec.state == att.ENDED:  # ended (finished, voided, stopped): its calls end with it
                    for task in list(cur.inflight):
                        self._cut(cur, task, L.ENDED)
                    if self.tcp_site is not None:  # and its connections on the TLS route
                        self.tcp_site.close_attempt(aid)
            seen.add(aid)
            rec = cur.record
            over = rec.state == att.ENDED and time.time() > (rec.ended_at or 0) + ENDED_GRACE_SEC
            if over and cur.sock is not None:
                await self._unbind(cur, remove_dir=True)
            elif not over and cur.site is None and rec.state == att.LIVE:
                await self._bind(cur)
        for aid in set(self.live) - seen:
            a = self.live.pop(aid)
            self.by_token.pop(a.record.token_sha256, None)
            if self.tcp_site is not None:
                self.tcp_site.close_attempt(aid)
            await self._unbind(a, remove_dir=True)

    def _read_caps(self) -> None:
        """The run's caps as the runner last wrote them (a resume with a higher cap rewrites them)."""
        try:
            version: tuple[int, int, int] | None = _version(C.caps_path(self.out))
        except OSError:
            version = None
        if version == self._caps_version:
            return
        self._caps_version = version
        caps = C.read_caps(self.out) if version is not None else C.Caps()
        if caps.prices != self.caps.prices or caps.model != self.caps.model or self.tally is None:
            self.tally = C.Tally(self.out, caps.pricer()) if caps.any else None
        self.caps = caps

    def _cap_refusal(self, a: Live) -> str | None:
        """The spend cap this call is over (``runner.results.caps``), from the caps and the ledger as
        they are now (a stat per call: a cap the runner just wrote counts from the next call)."""
        self._read_caps()
        if not self.caps.any:
            return None
        if self.tally is None:
            self.tally = C.Tally(self.out, self.caps.pricer())
        self.tally.update()
        started = a.first_at is not None
        reached = self.tally.purse_reached(self.caps, a.record.arm)
        if reached is not None:
            # under ``finish`` an attempt running when the cap was reached goes on, called the model
            # or not (one still in its harness's preparation was refused its first call and errored:
            # the arms with long preparations were the ones caught; found by a probe); one issued
            # after the gateway first saw the cap (on any call) has not started
            scope = reached if reached == L.SPEND_CAP_RUN else f"{reached}:{a.record.arm}"
            started = started or a.record.created < self._cap_seen.setdefault(scope, time.time())
        reason = self.tally.refusal(self.caps, _key(a), started=started)
        if reason == L.SPEND_CAP_ATTEMPT:
            self._cut_attempt(a)
        return reason

    def _cut_attempt(self, a: Live) -> None:
        """The attempt has spent its own cap: its cut record, written once (``runner.results.caps``)."""
        if a.cut or self.tally is None:
            return
        reached = self.tally.attempt_reached(self.caps, _key(a))
        if reached is not None:
            C.write_attempt_cut(self.out, a.record.id, _key(a), reached)
            a.cut = True
            self.say(f"gateway: attempt {a.record.id} ({reached.text()}): cut")

    def _ending(self) -> bool:
        """An ended attempt's socket still bound, its grace over: the next sync removes it."""
        now = time.time()
        return any(
            a.sock is not None
            and a.record.state == att.ENDED
            and now > (a.record.ended_at or 0) + ENDED_GRACE_SEC
            for a in self.live.values()
        )

    async def _bind(self, a: Live) -> None:
        d = att.socket_dir(self.out, a.record.id)
        if not d.is_dir():
            return  # issued on another host, or removed: nothing to bind here
        path = str(att.socket_path(self.out, a.record.id))
        # bound under another name and renamed once it listens: whoever finds the socket can connect
        # (between bind and listen a connect is refused, and a loaded host can pause the gateway
        # there); the rename takes a dead gateway's socket's place in the same dir
        bound = f"{path}.{os.urandom(4).hex()}"
        site = conns.UnixSite(self.runner, bound)
        try:
            await site.start()
            os.chmod(bound, 0o666)  # the trial's task user connects through the mount
            os.replace(bound, path)
        except OSError as exc:
            self.say(f"gateway: cannot bind the socket of attempt {a.record.id}: {exc}")
            with contextlib.suppress(Exception):
                await site.stop()
            with contextlib.suppress(OSError):
                os.unlink(bound)
            return
        a.site, a.sock, a.bound = site, path, bound
        self.by_sock[bound] = a.record.id

    async def _unbind(self, a: Live, remove_dir: bool = False) -> None:
        """Stop serving an attempt's socket; ``remove_dir`` once it ended (a live attempt's dir stays:
        it is bind-mounted into its trial, and the next gateway binds its socket there again)."""
        if a.site is not None:
            with contextlib.suppress(Exception):
                await a.site.stop()
        if a.sock is not None:
            self.by_sock.pop(a.bound or "", None)
            with contextlib.suppress(OSError):
                os.unlink(a.sock)
            if remove_dir:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.dirname(a.sock))
        a.site, a.sock, a.bound = None, None, None

    def _fresh(self, aid: str) -> Live | None:
        """The attempt with its record as it is on disk now (ended or killed a moment ago counts)."""
        a = self.live.get(aid)
        if a is None:
            return None
        try:
            version = _version(att.record_path(self.out, aid))
        except OSError:
            return None  # the record is gone: no attempt to serve
        if version != a.version:
            rec = att.read_record(self.out, aid)
            if rec is not None:
                a.record, a.version = rec, version
        return a

    # ------------------------------------------------------------------ calls

    def authorize(
        self, sock_attempt: str | None, token: str | None, now: float
    ) -> tuple[str | None, Live | None]:
        """(refusal reason or None, the attempt the call counts for)."""
        sha = att.token_sha256(token) if token else None
        owner = self.by_token.get(sha) if sha else None
        if sock_attempt is not None:
            a = self._fresh(sock_attempt)
            if a is None:
                return L.ENDED, None
            if sha is None or not hmac.compare_digest(sha, a.record.token_sha256):
                return (L.OTHER_ATTEMPT if owner else L.NO_TOKEN), a
        else:  # the TCP listener: the token names the attempt
            a = self._fresh(owner) if owner else None
            if a is None:
                return L.NO_TOKEN, None
        return self._closed(a, now), a

    def _closed(self, a: Live, now: float) -> str | None:
        """Why the attempt takes no call now (ended, gone, its budget spent, a spend cap), or None.
        Asked when a call's headers arrive and again just before it goes upstream: a call that
        waited its turn behind the attempt's others, or sent its body slowly, is judged at the time
        it would be forwarded (a probe's calls queued before the deadline reached the provider
        seconds after it)."""
        rec = a.record
        if self.stopping:
            return L.STOPPING
        if rec.state == att.ENDED:
            return L.ENDED
        if rec.gone():
            return L.GONE
        if rec.budget_sec and a.first_at is not None and now > a.first_at + rec.budget_sec:
            return L.BUDGET
        return self._cap_refusal(a)

    def _unmeterable(self, params: dict[str, Any]) -> tuple[str, str] | None:
        """(refusal code, why) for a call the ledger could not meter or the audit not read, or None
        (``unmeterable_body``; and under spend caps, a model the prices lack: it counted $0 to every
        cap, found by a probe as the agent)."""
        got = unmeterable_body(params)
        if got is not None:
            return got
        self._read_caps()
        if self.caps.any:
            if self.tally is None:
                self.tally = C.Tally(self.out, self.caps.pricer())
            model, tier = params.get("model"), params.get("service_tier")
            rates = self.tally.pricer.rates(
                model if isinstance(model, str) else None, tier if isinstance(tier, str) else None
            )
            if isinstance(rates, str):
                return L.UNPRICED, f"spend caps are set and this call's model has no price: {rates}"
        return None

    def _cut(self, a: Live, task: asyncio.Task, reason: str) -> None:
        """Cut a call in flight: its budget ran out, or its attempt ended (``CUT`` on the ledger)."""
        if task in a.inflight and task not in self._cuts:
            self._cuts[task] = reason
            task.cancel()

    def _row(self, a: Live | None, request: web.BaseRequest, now: float) -> dict[str, Any]:
        rec = a.record if a is not None else None
        return {
            "kind": L.CALL, "v": L.SCHEMA, "at": now, "gateway": self.instance, "host": self.host,
            "attempt": rec.id if rec else None, "task": rec.task if rec else None,
            "arm": rec.arm if rec else None, "stamp": rec.stamp if rec else None,
            "method": request.method, "path": request.path,
        }  # fmt: skip

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        now, t0 = time.time(), time.monotonic()
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        unix = self.by_sock.get(sockname) if isinstance(sockname, str) else None
        if isinstance(sockname, str) and unix is None:
            reason, a = L.ENDED, None  # the socket of an attempt unbound a moment ago
        else:
            reason, a = self.authorize(unix, token, now)
            if reason == L.NO_TOKEN and token and unix is None:  # the TLS route: an attempt issued
                await self.sync()  # since the last poll is known after one more look at the records
                reason, a = self.authorize(None, token, now)
        row = self._row(a, request, now)
        if reason is None and (not forwardable(request.method, request.path) or request.query_string):
            reason = L.NOT_FOUND  # (a query string too: the codex arms send none, and the ledger none)
        if reason is None and unix is None and self.tcp_site is not None and a is not None:
            if not self.tcp_site.claim(request.transport, a.record.id):  # its share of the route
                reason = L.CONNECTIONS
        if reason is not None:
            row.update(outcome=L.REFUSED, refused=reason, status=STATUS.get(reason, 401))
            row["total_ms"] = round((time.monotonic() - t0) * 1000, 3)
            self.ledger.write(row)
            self.say(f"gateway: refused {request.method} {request.path} ({reason}) attempt {row['attempt']}")
            if reason == L.NOT_FOUND:
                return _refusal(
                    request, 404, reason,
                    f"the marathon gateway forwards POST /v1/responses (and /v1/responses/compact) only, "
                    f"with no query string, not {request.method} {request.path}"
                    + ("?…" if request.query_string else ""),
                )  # fmt: skip
            return _refusal(request, STATUS.get(reason, 401), reason, REFUSAL_TEXT[reason])
        assert a is not None
        async with a.calls, contextlib.AsyncExitStack() as turn:
            return await self.forward(request, a, row, now, t0, turn)

    async def forward(
        self,
        request: web.BaseRequest,
        a: Live,
        row: dict[str, Any],
        now: float,
        t0: float,
        turn: contextlib.AsyncExitStack,
    ) -> web.StreamResponse:
        body = await request.read()
        encodings = request.headers.getall("Content-Encoding", [])
        if len(encodings) > 1:  # decoded by one and forwarded with another (a probe): refused
            params, stream = {"unparsed": "more than one Content-Encoding header"}, False
        else:
            params, stream = await self.parser.params(body, encodings[0] if encodings else None, a.parsing)
        if self.caps.any:
            # under a spend cap the attempt's calls go upstream one at a time (``turn``, held until
            # the call ends): each is judged below once the one before has ended and been counted,
            # so a cap is passed by one call at most (codex makes one at a time; a probe's 64 calls
            # at once sent 8 upstream past a $1 cap, $2.40 counted). Taken once the body is in: a
            # body that never completes held every other call of its attempt (a review)
            await turn.enter_async_context(a.one)
        now = time.time()  # the call goes upstream now, if the attempt still takes it
        unmeterable = self._unmeterable(params)
        if unmeterable is not None:
            code, why = unmeterable
            row.update(outcome=L.REFUSED, refused=code, status=STATUS[code], at=now, params=params)
            row["total_ms"] = round((time.monotonic() - t0) * 1000, 3)
            self.ledger.write(row)
            self.say(f"gateway: refused {request.method} {request.path} ({code}) attempt {row['attempt']}")
            return _refusal(request, STATUS[code], code, why, "invalid_request_error")
        late = self._closed(a, now)
        if late is not None:
            row.update(outcome=L.REFUSED, refused=late, status=STATUS.get(late, 401), at=now)
            row["total_ms"] = round((time.monotonic() - t0) * 1000, 3)
            self.ledger.write(row)
            self.say(
                f"gateway: refused {request.method} {request.path} ({late}, after its wait) attempt {row['attempt']}"
            )
            return _refusal(request, STATUS.get(late, 401), late, REFUSAL_TEXT[late])
        row["at"] = now
        if a.first_at is None:
            a.first_at = now
            self._first[a.record.id] = now
        task = asyncio.current_task()
        assert task is not None
        a.inflight.add(task)
        budget_end = None
        if a.record.budget_sec:  # the call is cut where the budget ends, whatever the stream does
            budget_end = asyncio.get_running_loop().call_later(
                max(0.0, a.first_at + a.record.budget_sec - now), self._cut, a, task, L.BUDGET
            )
        a.n += 1
        rid = request_id(a.record.id, a.n)
        row.update(request_id=rid, params=params, stream=stream, model_time_sec=round(now - a.first_at, 3))
        headers = forwarded_request_headers(request.headers)
        headers.update(
            {"Authorization": f"Bearer {self.key}", REQUEST_ID_HEADER: rid, "Accept-Encoding": "identity"}
        )
        first: float | None = None
        resp: web.StreamResponse | None = None
        scanner: UsageScanner | None = None
        mask = KeyMask(self.key)  # never back to the agent, whatever the answer echoes
        row["outcome"] = L.GATEWAY_ERROR
        delivered: str | None = None
        try:
            try:
                up_cm = self.client.request(
                    request.method, self.upstream.url_for(request.path),
                    headers=headers, data=body, allow_redirects=False,
                )  # fmt: skip
                up = await up_cm.__aenter__()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                row.update(outcome=L.UPSTREAM_ERROR, status=502, error=f"{type(exc).__name__}")
                return _json_error(
                    502,
                    "upstream_unreachable",
                    f"the model provider is unreachable ({type(exc).__name__})",
                    "server_error",
                )
            try:
                scanner = UsageScanner(up.headers.get("Content-Type"))
                resp = web.StreamResponse(
                    status=up.status, reason=mask.text(up.reason) if up.reason else up.reason,
                    headers=passed_response_headers(up.headers, mask),
                )  # fmt: skip
                row["status"] = up.status
                await resp.prepare(request)
                noted = False
                async for chunk in up.content.iter_any():
                    if first is None:
                        first = time.monotonic()
                    scanner.feed(chunk)  # the answer as the provider wrote it
                    chunk = mask(chunk)
                    if not noted and scanner.usage is not None and self.tally is not None:
                        # counted for the caps before the client reads the answer's end (and can call again)
                        self.tally.note({**row, "usage": scanner.usage, "outcome": L.OK})
                        noted = True
                        self._cut_attempt(a)
                    if chunk:  # (all of a read the mask kept back: nothing to write yet)
                        await resp.write(chunk)
                rest = mask.flush()  # what could have begun the key and did not
                if rest:
                    await resp.write(rest)
                scanner.close()  # a JSON answer is read whole here: its usage is known now
                if not noted and scanner.usage is not None and self.tally is not None:
                    # counted before the answer's end reaches the client (a JSON answer's usage was
                    # counted from its ledger line alone, and a quick next call passed the cap)
                    self.tally.note({**row, "usage": scanner.usage, "outcome": L.OK})
                    self._cut_attempt(a)
                delivered = L.OK if up.status < 400 else L.UPSTREAM_ERROR  # every byte of the answer is out
                await resp.write_eof()
                row["outcome"] = delivered
            finally:
                await up_cm.__aexit__(*sys.exc_info())
            return resp
        except (asyncio.CancelledError, ConnectionResetError, aiohttp.ClientConnectionResetError):
            # gone before the answer was out: cut (a client that hangs up after the last byte, while
            # the chunked framing is still being closed, got the whole answer)
            row["outcome"] = delivered or L.CLIENT_CLOSED
            cut = self._cuts.get(task)
            if cut is not None and delivered is None:  # cut by the gateway: the client's call ends here
                row.update(outcome=L.CUT, cut=cut)
                if request.transport is not None:
                    request.transport.close()
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            row.update(outcome=L.UPSTREAM_ERROR, error=f"{type(exc).__name__}")
            raise
        finally:
            a.inflight.discard(task)
            self._cuts.pop(task, None)
            if budget_end is not None:
                budget_end.cancel()
            if scanner is not None:
                scanner.close()
                # the answer's own words, as the agent got them (an upstream may echo the key there too)
                rid_up, final = scanner.response_id, scanner.final
                row.update(
                    response_id=mask.text(rid_up) if isinstance(rid_up, str) else rid_up,
                    usage=scanner.usage,
                    final=mask.text(final) if isinstance(final, str) else final,
                )
            if row["outcome"] in (L.CLIENT_CLOSED, L.CUT) and (scanner is None or scanner.usage is None):
                # gone upstream, its usage never came: the caps count it at an estimate
                row["usage_estimate"] = wire.estimate(len(body), scanner.events if scanner is not None else 0)
                if self.tally is not None:
                    self.tally.note(row)
                    self._cut_attempt(a)
            if mask.hits:
                row["key_masked"] = mask.hits
                self.say(
                    f"gateway: the provider's answer to {rid} carried the key back: masked ({mask.hits}x)"
                )
            row["first_byte_ms"] = round((first - t0) * 1000, 3) if first is not None else None
            row["total_ms"] = round((time.monotonic() - t0) * 1000, 3)
            self.served += 1
            self.ledger.write(row)


def unmeterable_body(params: dict[str, Any]) -> tuple[str, str] | None:
    """(refusal code, why) for a body the gateway cannot read or meter, or None. Found by a probe as
    the agent: a zstd body hid its model (priced as the run's, a tenth of its price, and absent from
    the wire audit); ``background: true`` had the provider generate an answer whose usage no reply
    carried. The gateway's own parser failing (``parsing.PARSER_FAILED``) is not the body's doing:
    that call is forwarded, its parameters unknown (a review found an honest large body refused)."""
    unparsed = params.get("unparsed")
    if unparsed is not None and not str(unparsed).startswith(parsing.PARSER_FAILED):
        return L.UNREADABLE, (
            "the marathon gateway forwards only request bodies it can read (JSON, as sent or gzip or "
            f"deflate, up to {wire.MAX_DECODED >> 20} MiB decoded): this one's {unparsed}"
        )
    if params.get("background") is True:
        return L.NOT_METERABLE, (
            "background responses generate on at the provider, out of the marathon gateway's metering: "
            "send the call without background"
        )
    return None


def forwardable(method: str, path: str) -> bool:
    """One of the calls the codex arms make (``wire.FORWARDED``: ``POST /v1/responses`` and its
    ``/compact``), by the path as decoded, nothing that leaves it once a URL library normalises it
    (``/v1/../admin``, ``/v1/%2e%2e/x`` and ``/v1/..%2fx`` reached the provider's ``/admin`` with
    the real key before the first check). Why not all of ``/v1``: a probe as the agent read and
    deleted the operator's files (``/v1/files``) and started a fine-tuning job with the real key,
    sent chat completions no ledger line metered, and made free ``GET /v1/responses/<id>`` calls
    that each counted a response's usage again toward the run's cap, stopping every arm."""
    return (method, path) in wire.FORWARDED


REFUSAL_TEXT = {
    L.NO_TOKEN: "no valid marathon attempt token (the gateway accepts only the token of the attempt it serves)",
    L.OTHER_ATTEMPT: "this token belongs to another attempt: refused here",
    L.ENDED: "the attempt this token was issued for has ended (finished, voided or stopped)",
    L.GONE: "the attempt this token was issued for is gone (its harbor process no longer runs)",
    L.BUDGET: f"{L.BUDGET}: the attempt's model budget is spent: no further model calls",
    L.SPEND_CAP_RUN: "spend_cap_run: the run's spend cap (marathon run --max-spend) is reached",
    L.SPEND_CAP_ARM: "spend_cap_arm: this arm's spend cap (marathon run --max-spend-arm) is reached",
    L.SPEND_CAP_ATTEMPT: "spend_cap_attempt: this attempt's spend cap (marathon run --max-spend-attempt) is spent",
    L.STOPPING: "the marathon gateway is stopping: this call did not go to the model (retry)",
    L.CONNECTIONS: f"this attempt holds its {conns.MAX_CONNECTIONS} connections to the gateway already: "
    "this one is closed (use one of those)",
}
#: the HTTP status of a refusal (401 unless named): a spend cap is Payment Required, a path outside
#: the API is Not Found
STATUS = {
    L.NOT_FOUND: 404, L.UNREADABLE: 415, L.NOT_METERABLE: 400, L.UNPRICED: 400,
    L.SPEND_CAP_RUN: 402, L.SPEND_CAP_ARM: 402, L.SPEND_CAP_ATTEMPT: 402, L.CONNECTIONS: 429, L.STOPPING: 503,
}  # fmt: skip


# ---------------------------------------------------------------------------------------- main


#: what one read of a plain socket asks for. asyncio's own default (``max_size``, 256 KiB) is above
#: glibc's mmap threshold, so each ``recv`` of an SSE chunk (a few hundred bytes) mapped and unmapped
#: a fresh 256 KiB buffer: with 12 streams that was about a third of the gateway's CPU
#: (docs/gateway.md, "Figures"). A TLS socket reads into its protocol's own buffer and is unaffected.
RECV_BYTES = 64 * 1024


def small_reads() -> None:
    """Let this process's asyncio socket transports read at most :data:`RECV_BYTES` at a time.

    Called by the gateway's process before its event loop starts (it sets a class attribute of
    asyncio's selector transport, so it is for a process of our own, not a library import). An
    answer larger than one read arrives in more reads, as it would from the kernel anyway."""
    from asyncio import selector_events

    transport = getattr(selector_events, "_SelectorSocketTransport", None)
    if transport is not None and getattr(transport, "max_size", 0) > RECV_BYTES:
        transport.max_size = RECV_BYTES


def load_tls(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if not cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
