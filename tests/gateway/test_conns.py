"""The TLS route's connection rules on a real listener (runner.ops.gateway.conns.TcpSite), plain
TCP, with a handler that names its connection as the gateway's does: an unnamed connection is
closed once ``UNNAMED_SEC`` has passed; a named one stays, an attempt's share is counted back when
its connections close, and its connections are closed when it ends. (Through the gateway and TLS: tests/gateway/test_gateway.py.)"""

from __future__ import annotations

import asyncio
import http.client
import select
import socket
import time

import pytest
from aiohttp import web

from runner.ops.gateway import conns


def test_a_flood_from_one_address_closes_its_own_waiting_connections_not_anothers(monkeypatch):
    """Unnamed connections: ``MAX_UNNAMED_PER_PEER`` from one address (its oldest closed for a new
    one), ``MAX_UNNAMED`` in all (the oldest of the address holding the most). Loopback's other
    addresses stand for other sandboxes."""
    monkeypatch.setattr(conns, "MAX_UNNAMED_PER_PEER", 4)
    monkeypatch.setattr(conns, "MAX_UNNAMED", 8)

    async def scenario() -> None:
        runner = web.AppRunner(web.Application(), handle_signals=False)
        await runner.setup()
        site = conns.TcpSite(runner, "127.0.0.1", 0)
        await site.start()
        loop = asyncio.get_running_loop()

        def blocking() -> None:
            def waiting() -> dict[str, int]:
                """The waiting connections by address, read on the listener's own loop."""

                async def snap() -> dict[str, int]:
                    return {p: len(k) for p, k in site.by_peer.items()}

                return asyncio.run_coroutine_threadsafe(snap(), loop).result(10)

            def taken_in(ip: str) -> dict[str, int]:
                """Wait until the listener has an address's connection (accepted in the order made:
                every one made before it is taken in too)."""
                deadline = time.monotonic() + 10
                while ip not in (now := waiting()):
                    assert time.monotonic() < deadline, now
                    time.sleep(0.01)
                return now

            def open_from(ip: str, n: int) -> list[socket.socket]:
                got = [socket.create_connection(("127.0.0.1", site.port), timeout=10, source_address=(ip, 0))
                       for _ in range(n)]  # fmt: skip
                for s in got:
                    s.settimeout(conns.UNNAMED_SEC / 2)
                return got

            def closed(s: socket.socket) -> bool:
                try:
                    return s.recv(1) == b""
                except ConnectionResetError:
                    return True

            flood = open_from("127.0.0.2", 6)
            assert [closed(s) for s in flood[:2]] == [True, True]  # its own oldest went
            other = open_from("127.0.0.3", 1)
            assert taken_in("127.0.0.3") == {"127.0.0.2": 4, "127.0.0.3": 1}
            assert select.select(flood[2:] + other, [], [], 0)[0] == []  # the rest still open
            more = open_from("127.0.0.4", 4)  # 9 in all: the busiest address's oldest goes
            assert closed(flood[2])
            assert select.select(flood[3:] + other + more, [], [], 0)[0] == []
            # floods from more addresses close each other's, never the one that waits alone (a
            # probe: eight addresses of idle connections closed an honest client's before its call)
            rest = [
                s for ip in ("127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8") for s in open_from(ip, 4)
            ]
            rest += open_from("127.0.0.9", 1)  # the last made: once it is in, all are
            now = taken_in("127.0.0.9")
            assert now.get("127.0.0.3") == 1 and select.select(other, [], [], 0)[0] == [], now
            assert sum(now.values()) == 8 and max(now.values()) <= 2, now
            for s in flood + other + more + rest:
                s.close()

        try:
            await asyncio.to_thread(blocking)
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_unnamed_connections_expire_named_ones_stay_and_closing_frees_the_share(monkeypatch):
    # each connection below must be named within it, on a machine that may be loaded (0.3 s was
    # too short for a stall of the loop this test shares with its client thread)
    monkeypatch.setattr(conns, "UNNAMED_SEC", 2.0)
    monkeypatch.setattr(conns, "MAX_CONNECTIONS", 2)

    async def scenario() -> None:
        site: conns.TcpSite | None = None

        async def handle(request: web.BaseRequest) -> web.Response:
            assert site is not None
            if "X-End" in request.headers:  # as the gateway does when a record says ended
                site.close_attempt(request.headers["X-End"])
                return web.Response(status=204)
            ok = site.claim(request.transport, request.headers["X-Attempt"])
            return web.Response(status=200 if ok else 429)

        runner = web.AppRunner(web.Application(), handle_signals=False)
        runner.app.router.add_route("*", "/{tail:.*}", handle)
        await runner.setup()
        site = conns.TcpSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site.port

        def blocking() -> None:
            quiet = socket.create_connection(("127.0.0.1", port), timeout=10)
            assert quiet.recv(1) == b""  # never named: closed once UNNAMED_SEC has passed
            quiet.close()

            def call(conn: http.client.HTTPConnection, attempt: str) -> int:
                conn.request("GET", "/", headers={"X-Attempt": attempt})
                r = conn.getresponse()
                r.read()
                return r.status

            a1, a2, a3 = (http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(3))
            assert (call(a1, "a"), call(a2, "a"), call(a3, "a")) == (200, 200, 429)  # a's share is 2
            time.sleep(3 * conns.UNNAMED_SEC)  # past the unnamed timeout: a named one stays
            assert call(a1, "a") == 200 and call(a1, "a") == 200
            a2.close()
            deadline = time.monotonic() + 10
            while True:  # once a2's close reaches the listener, a's share has room again
                a4 = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                got = call(a4, "a")
                a4.close()
                if got == 200:
                    break
                assert time.monotonic() < deadline, got
            b1 = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            assert call(b1, "b") == 200
            ender = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            ender.request("GET", "/", headers={"X-Attempt": "-", "X-End": "a"})
            assert ender.getresponse().status == 204
            ender.close()
            with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
                call(a1, "a")  # a's connections were closed when it ended
            assert call(b1, "b") == 200  # b's were not
            for c in (a1, a3, b1):
                c.close()

        try:
            await asyncio.to_thread(blocking)
            for _ in range(100):  # every connection closed: nothing counted for anyone
                if not site.per_attempt and not site.named:
                    break
                await asyncio.sleep(0.05)
            assert (dict(site.per_attempt), site.named) == ({}, {})
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
