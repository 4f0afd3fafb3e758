"""The relay inside the sandbox: the sandbox's loopback to the gateway, byte for byte.

Why: codex speaks HTTP to a base URL, and on local Docker the gateway is reachable only through the
attempt's unix socket, bind-mounted into the trial (``modes.gateway``). A remote sandbox reaches the
gateway's TLS listener instead: the relay is then the TLS client (trusting the operator's CA, uploaded
beside it), and codex still speaks plain HTTP to the sandbox's loopback. So on both routes every arm's
codex has the same base URL, and the relay sees each request leave: the budget's start at the first
model request (``on_first``) is the same rule on both. No credential is involved here: codex sends the
attempt's token, the gateway checks it. The relay is started by the in-sandbox driver
(``agents.sandbox_driver``) before codex and runs in the driver's own event loop; stdlib only, like
everything uploaded into a sandbox.

A connection the gateway does not take (socket missing, gateway down) is answered ``502`` with an
OpenAI-shaped error naming the gateway, so codex's log says what happened, and is counted in
``stats`` (the driver's receipt shows them; the runner's own record of a gateway outage is what
voids an attempt, never this count, which the agent could forge).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable

CHUNK = 64 * 1024
#: a TLS connection to a remote gateway that takes longer than this is answered 502 (codex retries)
CONNECT_TIMEOUT_SEC = 30.0


class Relay:
    """One listening relay: ``await start()``, ``await close()``; ``stats`` for the receipt.

    To the gateway by ``socket_path`` (local Docker), or by ``tls`` = (host, port, CA file or None
    for the system's trust) (a remote sandbox: the gateway's TLS listener, its name checked)."""

    def __init__(
        self,
        host: str,
        port: int,
        socket_path: str | None = None,
        tls: tuple[str, int, str | None] | None = None,
    ) -> None:
        if (socket_path is None) == (tls is None):
            raise ValueError("a relay goes to the gateway's socket or to its TLS address, one of the two")
        self.host = host
        self.port = port
        self.socket_path = socket_path
        self.tls = tls
        self._ssl: ssl.SSLContext | None = None
        if tls is not None:
            self._ssl = ssl.create_default_context(cafile=tls[2]) if tls[2] else ssl.create_default_context()
        self.server: asyncio.AbstractServer | None = None
        self.stats = {"connections": 0, "unreachable": 0, "last_unreachable": None}
        self._tasks: set[asyncio.Task] = set()
        #: set by the driver when the budget starts: called once, with (monotonic, epoch) seconds,
        #: when the next request's first bytes pass towards the gateway (on any connection, a reused
        #: one too): codex's first model request of the budget, within milliseconds of the gateway's
        #: first call of the attempt (the wire budget's start, ``modes.budget``)
        self.on_first: Callable[[float, float], None] | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), 5)
            except TimeoutError:
                pass

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.stats["connections"] += 1
        try:
            try:
                up_r, up_w = await self._connect()
            # (one class from Python 3.11 on; a sandbox's Python may be older)
            except (OSError, asyncio.TimeoutError) as exc:  # noqa: UP041
                self.stats["unreachable"] += 1
                self.stats["last_unreachable"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                await _refuse(
                    writer,
                    f"the marathon model gateway is unreachable ({getattr(exc, 'strerror', None) or exc!r})",
                )
                return
            await _splice(reader, writer, up_r, up_w, self._sent)
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.tls is None:
            assert self.socket_path is not None
            return await asyncio.open_unix_connection(self.socket_path)
        host, port, _ca = self.tls
        # (ssl.SSLError, a refused certificate, is an OSError: answered 502 like an unreachable socket)
        return await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=self._ssl, server_hostname=host), CONNECT_TIMEOUT_SEC
        )

    def _sent(self) -> None:
        """Bytes of a request are on their way to the gateway (called per chunk: a check, no more)."""
        if self.on_first is not None:
            first, self.on_first = self.on_first, None
            first(time.monotonic(), time.time())


async def _pipe(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, on_chunk: Callable[[], None] | None = None
) -> None:
    try:
        while chunk := await src.read(CHUNK):
            if on_chunk is not None:
                on_chunk()
            dst.write(chunk)
            await dst.drain()
    except (ConnectionError, OSError):
        pass


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_r: asyncio.StreamReader,
    up_w: asyncio.StreamWriter,
    on_request: Callable[[], None] | None = None,
) -> None:
    """Both directions until either side closes; then both are closed at once. codex never half-closes
    a request, so its EOF means it went away: the gateway sees the connection drop and cancels its
    upstream request (a model still thinking is not left running for nobody)."""
    to_up = asyncio.ensure_future(_pipe(reader, up_w, on_request))
    to_client = asyncio.ensure_future(_pipe(up_r, writer))
    try:
        await asyncio.wait({to_up, to_client}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (to_up, to_client):
            t.cancel()
        await asyncio.gather(to_up, to_client, return_exceptions=True)
        up_w.close()


async def _refuse(writer: asyncio.StreamWriter, message: str) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": "server_error", "code": "gateway_unreachable", "param": None}}
    ).encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        writer.write(head + body)
        await writer.drain()
    except (ConnectionError, OSError):
        pass
