"""How many connections an attempt's agent can hold open at the gateway, on either route.

The agent holds its token and root in its sandbox, so it can open connections without end: a probe
opened 20,000 idle ones on one attempt's socket, used up the gateway's descriptors, and every other
attempt's calls (of every arm) timed out. Each listener therefore counts its connections from the
moment they are accepted, before a byte is read:

- **an attempt's unix socket** (local Docker) holds ``MAX_CONNECTIONS`` at once; the rest are closed
  at once (``UnixSite``).
- **the TLS route** (remote sandboxes: one listener for every attempt) cannot tell whose a
  connection is before a call on it carries a token. A connection no call has named yet is
  *unnamed*: at most ``MAX_UNNAMED_PER_PEER`` from one address (a new one closes that address's
  oldest) and ``MAX_UNNAMED`` in all (a new one closes the oldest of the address holding the most,
  its own on a tie: closing an address's only waiting connection takes ``MAX_UNNAMED`` addresses),
  each for at most ``UNNAMED_SEC`` (the TLS handshake included: asyncio's own handshake timeout
  would hold a flood of half-open handshakes outside any count for a minute). A call with a live token names its connection for
  that attempt, which holds at most ``MAX_CONNECTIONS`` named ones, as on its socket; past that the
  call is refused (``too_many_connections``, on the ledger) and the connection closed
  (``TcpSite.claim``); an attempt that ends has its connections closed (``close_attempt``). A
  client without a live token never names one, so it holds at most ``MAX_UNNAMED_PER_PEER``
  connections for ``UNNAMED_SEC`` each, however many it opens, and closes its own address's.

Counting before TLS means the listener wraps asyncio's own TLS protocol (``asyncio.sslproto``, the
class the event loop itself puts on every TLS server connection) around aiohttp's, instead of
handing the certificate to ``create_server``; the same signature since Python 3.11
(tests/gateway/test_gateway.py floods the route through it).
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections import Counter
from typing import Any

from aiohttp import web

#: the connections one attempt holds at once, on its socket or named on the TLS route (codex keeps
#: one or two)
MAX_CONNECTIONS = 64
#: the TLS route's connections that no call has named yet, at once (a new one closes the oldest)
MAX_UNNAMED = 256
#: ... and from one peer address (a new one closes that peer's oldest): a sandbox that floods the
#: route closes its own waiting connections, not another sandbox's
MAX_UNNAMED_PER_PEER = 32
#: how long a TLS-route connection may stay unnamed: its handshake and its first call's headers
UNNAMED_SEC = 30.0


class _Share:
    """What both kinds of counted connection do alike: hand the site's count back when the
    connection ends, and pass the rest on to the protocol inside (``inner``), once admitted."""

    site: UnixSite | TcpSite
    inner: Any
    transport: asyncio.BaseTransport | None

    def _admitted(self, transport: asyncio.BaseTransport) -> bool:
        """Counted by the site, or closed at once (before a byte is read)."""
        if not self.site.admit(self, transport):
            transport.abort()  # type: ignore[attr-defined]
            return False
        self.transport = transport
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.site.release(self)
            self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class _Counted(_Share, asyncio.Protocol):
    """One accepted connection: its site's count first, then aiohttp's protocol (plain bytes)."""

    def __init__(self, site: UnixSite | TcpSite) -> None:
        self.site = site
        self.inner = None
        self.transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._admitted(transport):
            return
        self.inner = self.site.protocol()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)


class _CountedTls(_Share, asyncio.BufferedProtocol):
    """One accepted TLS-route connection: counted before its handshake, then asyncio's TLS protocol
    with aiohttp's inside it (what ``create_server(ssl=...)`` would have put there)."""

    def __init__(self, site: TcpSite, context: ssl.SSLContext) -> None:
        self.site = site
        self.context = context
        self.inner = None
        self.transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._admitted(transport):
            return
        loop = asyncio.get_running_loop()
        self.inner = sslproto.SSLProtocol(
            loop,
            self.site.protocol(),
            self.context,
            None,
            server_side=True,
            ssl_handshake_timeout=UNNAMED_SEC,
        )
        self.inner.connection_made(transport)

    def get_buffer(self, sizehint: int) -> Any:
        return self.inner.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.inner.buffer_updated(nbytes)


class UnixSite(web.UnixSite):
    """An attempt's unix socket, at most ``MAX_CONNECTIONS`` open at once."""

    open = 0

    def protocol(self) -> asyncio.Protocol:
        return self._runner.server()  # type: ignore[misc]

    def admit(self, _conn: Any, _transport: asyncio.BaseTransport) -> bool:
        if self.open >= MAX_CONNECTIONS:
            return False
        self.open += 1
        return True

    def release(self, _conn: Any) -> None:
        self.open -= 1

    async def start(self) -> None:
        await web.BaseSite.start(self)
        self.open = 0
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: _Counted(self), self._path, ssl=self._ssl_context, backlog=self._backlog
        )


def _abort(conn: _Share) -> None:
    if conn.transport is not None:
        conn.transport.abort()  # type: ignore[attr-defined]


def _peer(transport: asyncio.BaseTransport) -> str:
    """The address a connection came from (its port left out: one sandbox, many ports)."""
    got = transport.get_extra_info("peername")
    return str(got[0]) if isinstance(got, tuple) and got else "?"


def _key(transport: asyncio.BaseTransport | None) -> Any:
    """What names one TCP connection at every layer: its socket (a TLS transport hands on its raw
    transport's, the same object)."""
    return transport.get_extra_info("socket") if transport is not None else None


class TcpSite(web.TCPSite):
    """The TLS route's listener (every remote sandbox's attempts on one port): connections counted
    unnamed until a call names its attempt, then per attempt (the module's docstring)."""

    def protocol(self) -> asyncio.Protocol:
        return self._runner.server()  # type: ignore[misc]

    def admit(self, conn: _Share, transport: asyncio.BaseTransport) -> bool:
        peer = _peer(transport)
        mine = self.by_peer.setdefault(peer, {})
        while len(mine) >= MAX_UNNAMED_PER_PEER:
            self._close(next(iter(mine)))  # this peer's oldest waiting for its first call
        while len(self.unnamed) >= MAX_UNNAMED:  # the oldest of the address holding the most
            victim = max(self.by_peer, key=lambda p: (len(self.by_peer[p]), p == peer))
            self._close(next(iter(self.by_peer[victim])))
        key = _key(transport)
        loop = asyncio.get_running_loop()
        self.unnamed[key] = (conn, loop.call_later(UNNAMED_SEC, self._close, key), peer)
        self.by_peer.setdefault(peer, {})[key] = None
        return True

    def _unnamed_pop(self, key: Any) -> _Share | None:
        """Take a connection off the unnamed (its timer stopped, its peer's list updated)."""
        got = self.unnamed.pop(key, None)
        if got is None:
            return None
        conn, timer, peer = got
        timer.cancel()
        mine = self.by_peer.get(peer, {})
        mine.pop(key, None)
        if not mine:
            self.by_peer.pop(peer, None)
        return conn

    def release(self, conn: _Share) -> None:
        key = _key(conn.transport)
        self._unnamed_pop(key)
        named = self.named.pop(key, None)
        if named is not None:
            self._uncount(named[0])

    def _uncount(self, attempt: str) -> None:
        self.per_attempt[attempt] -= 1
        if not self.per_attempt[attempt]:
            del self.per_attempt[attempt]

    def _close(self, key: Any) -> None:
        conn = self._unnamed_pop(key)
        if conn is not None:
            _abort(conn)

    def claim(self, transport: asyncio.BaseTransport | None, attempt: str) -> bool:
        """Count the connection a call with ``attempt``'s live token came in on as that attempt's;
        False when the attempt holds ``MAX_CONNECTIONS`` named ones already (refuse the call). A
        connection already lost (no socket any more: its handler is about to be cancelled) is
        nobody's to count, and the call goes on to meet its client's absence."""
        key = _key(transport)
        if key is None:
            return True
        held = self.named.get(key)
        if held is not None and held[0] == attempt:
            return True
        if self.per_attempt[attempt] >= MAX_CONNECTIONS:
            return False
        got = self._unnamed_pop(key)
        if got is not None:
            conn = got
        elif held is not None:  # named for another attempt before: counted for this one now
            self._uncount(held[0])
            conn = held[1]
        else:
            return True  # released already (closing): nothing left to count
        self.named[key] = (attempt, conn)
        self.per_attempt[attempt] += 1
        return True

    def close_attempt(self, attempt: str) -> None:
        """Close every connection named for an attempt that ended: an idle one would otherwise stay
        counted (and hold its descriptor) until aiohttp's keep-alive timeout, an hour."""
        for aid, conn in list(self.named.values()):
            if aid == attempt:
                _abort(conn)

    async def start(self) -> None:
        await web.BaseSite.start(self)
        #: key -> (connection, its timer, its peer), oldest first; and each peer's keys, oldest first
        self.unnamed: dict[Any, tuple[_Share, asyncio.TimerHandle, str]] = {}
        self.by_peer: dict[str, dict[Any, None]] = {}
        self.named: dict[Any, tuple[str, _Share]] = {}  # key -> (attempt, its connection)
        self.per_attempt: Counter[str] = Counter()
        tls = self._ssl_context
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            (lambda: _CountedTls(self, tls)) if tls is not None else (lambda: _Counted(self)),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]
