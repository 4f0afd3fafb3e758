"""What the model gateway adds: latency per call (first byte, whole answer) against the provider
reached directly, and its CPU and memory with 12 streams at once.

    uv run python benchmarks/bench_gateway.py [--calls 300] [--streams 12] [--seconds 30] [--floor]

The provider is a stdlib SSE server on the host's loopback (one thread per call, no model: what is
measured is the path, not a model). Each call gets the same answer: ``response.created``, 40 text
deltas and ``response.completed`` with usage (about 6 KB), the shape of a short codex turn.

1. Latency: ``--calls`` calls one after the other, alternately straight to the provider and through
   the gateway (``marathon gateway``, started as the runner starts it, an attempt issued, the call on
   the attempt's unix socket with its token), each timed by the client from its request to the
   first byte of the answer and to its end. The overhead is the difference of the two paths'
   p50/p95, and the per-call difference of the medians.
2. Load: ``--streams`` clients, each on its own attempt, calling for ``--seconds`` a provider that
   streams every answer over 2 s (40 deltas 50 ms apart: a live model's pace); the gateway's CPU
   time (psutil, the gateway process and its children) over the wall time, and its RSS at the end.

3. ``--floor``: the same load through relays that only copy bytes (asyncio's, with its default
   reads and with the gateway's, and socat's when installed): what any relay on this machine pays.

4. ``--against DIR [--pairs 5]``: only the load with connections kept, of this checkout and of
   another (``git worktree add DIR COMMIT``) in turn, ``--pairs`` times, each in a fresh process,
   and the medians. One load's figure varies by a fifth from run to run on a shared VM; a change to
   the gateway is judged by pairs, never by one run.

Targets (issue 27): under 5 ms p50 first-byte overhead on loopback; under 2 % of a core and 150 MB
with 12 streams.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.ops.gateway import attempts, process  # noqa: E402

KEY_VAR = "MARATHON_BENCH_GATEWAY_KEY"
DELTAS = 40


def _event(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def provider(pace_sec: float, keep_alive: bool = False) -> ThreadingHTTPServer:
    """``keep_alive``: answers in chunked framing on a connection kept for the next call (as a
    provider's HTTPS endpoint does); else one connection per call, closed at the answer's end."""
    usage = {"input_tokens": 1000, "output_tokens": 40, "total_tokens": 1040}

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as a provider's SSE endpoint: each event out as it is written

        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if keep_alive:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()

            def send(data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if keep_alive else data)
                self.wfile.flush()

            send(_event("response.created", {"response": {"id": "r"}}))
            for _ in range(DELTAS):
                if pace_sec:
                    time.sleep(pace_sec)
                send(_event("response.output_text.delta", {"delta": "x" * 80}))
            send(_event("response.completed", {"response": {"id": "r", "usage": usage}}))
            if keep_alive:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


BODY = json.dumps(
    {"model": "bench", "stream": True, "input": [{"type": "message", "content": "x" * 2000}]}
).encode()


def call(connect, token: str | None, kept: socket.socket | None = None) -> tuple[float, float]:
    """(first byte, whole answer) in ms, timed by the client; ``kept``: on that open connection,
    left open (the gateway answers in chunked framing: its end is the zero-length chunk)."""
    s = kept or connect()
    head = (f"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n" + ("" if kept else "Connection: close\r\n")
            + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode()  # fmt: skip
    t0 = time.perf_counter()
    s.sendall(head + BODY)
    first = None
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        if first is None:
            first = time.perf_counter()
        got += chunk
        if b"response.completed" in got and (got.endswith(b"\r\n0\r\n\r\n") or got.endswith(b"\n\n")):
            if kept is None or got.endswith(b"\r\n0\r\n\r\n"):
                break
    end = time.perf_counter()
    if kept is None:
        s.close()
    assert b"response.completed" in got, got[:300]
    return (first - t0) * 1000, (end - t0) * 1000


def tcp(port: int):
    return lambda: socket.create_connection(("127.0.0.1", port))


def unix(path: Path):
    def c():
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))
        return s

    return c


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def load(out: Path, streams: int, seconds: float, keep_alive: bool) -> None:
    """``streams`` clients on their own attempts for ``seconds``: the gateway's CPU and peak RSS.
    ``keep_alive``: each client keeps its connection, and the provider its own (as codex and an HTTPS
    provider do); else a new connection per call on both sides (the worst case)."""
    slow = provider(0.05, keep_alive)
    st = process.start_detached(
        out,
        process.GatewaySettings(upstream=f"http://127.0.0.1:{slow.server_address[1]}/v1", key_var=KEY_VAR),
    )
    issued = [
        attempts.issue(out, "bench", f"arm{i}", f"s{i + 1}-{keep_alive}", budget_sec=None)
        for i in range(streams)
    ]
    for iss in issued:
        while not attempts.socket_path(out, iss.record.id).exists():
            time.sleep(0.05)
    how = (
        "connections kept (as codex and a provider keep them)" if keep_alive else "a new connection per call"
    )
    sockets = [attempts.socket_path(out, iss.record.id) for iss in issued]
    pct_core, rss, wall, n = drive(
        psutil.Process(st.pid), sockets, [i.token for i in issued], seconds, keep_alive
    )
    print(f"{streams} streams for {wall:.1f} s ({n} calls, each ~2 s of SSE; {how}): gateway CPU "
          f"{pct_core:.2f} % of one core, peak RSS {rss / 1e6:.1f} MB", flush=True)  # fmt: skip
    led = [json.loads(x) for x in (out / ".runner" / "gateway" / "ledger.jsonl").read_text().splitlines()]
    calls = [x for x in led if x.get("kind") == "call" and x.get("outcome") == "ok"]
    print(
        f"ledger: {len(calls)} calls recorded so far, every one with usage: {all(x.get('usage') for x in calls)}"
    )
    process.stop(out)
    slow.shutdown()


def drive(
    proc: psutil.Process, sockets: list[Path], tokens: list[str | None], seconds: float, keep_alive: bool
) -> tuple[float, int, float, int]:
    """One client per socket calling for ``seconds``: ``proc``'s CPU (with its children) in % of one
    core over the wall time, its peak RSS, the wall time and the calls made."""

    def cpu() -> float:
        t = proc.cpu_times()  # with its children that ended (socat forks one per connection)
        return (
            t.user
            + t.system
            + t.children_user
            + t.children_system
            + sum(c.cpu_times().user + c.cpu_times().system for c in proc.children(recursive=True))
        )

    stop = time.monotonic() + seconds
    counts = [0] * len(sockets)

    def client(i: int) -> None:
        connect = unix(sockets[i])
        kept = connect() if keep_alive else None
        try:
            while time.monotonic() < stop:
                call(connect, tokens[i], kept)
                counts[i] += 1
        finally:
            if kept is not None:
                kept.close()

    c0, w0 = cpu(), time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sockets))]
    for t in threads:
        t.start()
    rss = 0
    while any(t.is_alive() for t in threads):
        rss = max(rss, proc.memory_info().rss)
        time.sleep(0.5)
    c1, w1 = cpu(), time.monotonic()
    return 100 * (c1 - c0) / (w1 - w0), rss, w1 - w0, sum(counts)


def relay(path: str, port: int, recv_bytes: int) -> None:
    """The floor: a bare asyncio byte relay from a unix socket to the provider (no HTTP, no token,
    no ledger), what any asyncio gateway pays at least for the same chunks."""
    import asyncio
    from asyncio import selector_events

    if recv_bytes:
        selector_events._SelectorSocketTransport.max_size = recv_bytes

    class Up(asyncio.Protocol):
        def __init__(self, down: asyncio.Transport) -> None:
            self.down = down

        def data_received(self, data: bytes) -> None:
            self.down.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.down.close()

    class Down(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t, self.up, self.early = transport, None, []
            asyncio.ensure_future(self.connect())

        async def connect(self) -> None:
            up, _ = await asyncio.get_running_loop().create_connection(lambda: Up(self.t), "127.0.0.1", port)
            self.up = up
            for data in self.early:
                up.write(data)

        def data_received(self, data: bytes) -> None:
            self.up.write(data) if self.up else self.early.append(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.up:
                self.up.close()

    async def serve() -> None:
        await asyncio.get_running_loop().create_unix_server(Down, path)
        await asyncio.Event().wait()

    asyncio.run(serve())


def floor(streams: int, seconds: float) -> None:
    """The same load as ``load`` (connections kept) through relays that only copy bytes: asyncio
    with its default 256 KiB reads, with the gateway's reads (``server.RECV_BYTES``), and socat (a C
    relay) when it is installed. The gap between these and the gateway is what its HTTP costs."""
    from runner.ops.gateway import server

    slow = provider(0.05, True)
    port = slow.server_address[1]
    kinds = [("asyncio, 256 KiB reads (its default)", [sys.executable, __file__, "--relay", "0"]),
             (f"asyncio, {server.RECV_BYTES // 1024} KiB reads (the gateway's)",
              [sys.executable, __file__, "--relay", str(server.RECV_BYTES)])]  # fmt: skip
    if shutil.which("socat"):
        kinds.append(("socat", ["socat"]))
    for name, argv in kinds:
        d = Path(tempfile.mkdtemp(prefix="bench-relay-"))
        path = d / "relay.sock"
        if argv == ["socat"]:
            argv = ["socat", f"UNIX-LISTEN:{path},fork", f"TCP:127.0.0.1:{port}"]
        else:
            argv = [*argv, str(path), str(port)]
        p = subprocess.Popen(argv)
        try:
            while not path.exists():
                time.sleep(0.05)
            pct_core, rss, wall, n = drive(
                psutil.Process(p.pid), [path] * streams, [None] * streams, seconds, True
            )
            print(f"floor, {name}: {streams} streams for {wall:.1f} s ({n} calls): CPU {pct_core:.2f} % of one core, "
                  f"peak RSS {rss / 1e6:.1f} MB", flush=True)  # fmt: skip
        finally:
            p.terminate()
            p.wait()
            shutil.rmtree(d, ignore_errors=True)
    slow.shutdown()


#: one load of a checkout's gateway (its own bench module and code), in a fresh process
_ONE_LOAD = """
import os, sys, tempfile
from pathlib import Path
root = sys.argv[1]
sys.path[:0] = [root, root + "/benchmarks"]
import bench_gateway as B
import shutil
from runner.ops.gateway import attempts
os.environ[B.KEY_VAR] = "sk-bench-" + os.urandom(8).hex()
base = Path(tempfile.mkdtemp(prefix="bench-gw-ab-"))
out = base / "out"
out.mkdir()
try:
    B.load(out, int(sys.argv[2]), float(sys.argv[3]), True)
finally:
    shutil.rmtree(attempts.socket_root(out), ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
"""


def ab(against: Path, pairs: int, streams: int, seconds: float) -> None:
    """The kept-connections load of this checkout and of ``against`` in turn, ``pairs`` times."""
    import re

    sides = {"this": REPO, "against": against.resolve()}
    if not (sides["against"] / "benchmarks" / "bench_gateway.py").is_file():
        raise SystemExit(
            f"--against {against}: not a marathon checkout (make one: git worktree add DIR COMMIT)"
        )
    got: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(pairs):
        for name, root in sides.items():
            r = subprocess.run(
                [sys.executable, "-c", _ONE_LOAD, str(root), str(streams), str(seconds)],
                capture_output=True, text=True, timeout=seconds + 120, cwd=root,
            )  # fmt: skip
            m = re.search(r"gateway CPU ([0-9.]+) %", r.stdout)
            if m is None:
                raise SystemExit(f"{name} ({root}): no figure\n{r.stdout[-800:]}{r.stderr[-800:]}")
            got[name].append(float(m.group(1)))
            print(f"pair {i + 1}, {name:<7} {root}: {m.group(1)} % of a core (load {os.getloadavg()[0]:.1f})",
                  flush=True)  # fmt: skip
    for name, xs in got.items():
        print(
            f"{name:<7}: median {statistics.median(xs):.2f} % of a core, {min(xs):.2f}-{max(xs):.2f} over {pairs}"
        )
    ratio = statistics.median(a / b for a, b in zip(got["this"], got["against"], strict=True))
    print(f"this / against, median of the pairs' ratios: {ratio:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--streams", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--floor", action="store_true", help="also measure relays that only copy bytes")
    ap.add_argument("--against", type=Path, help="another checkout: paired loads of it and this one")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--relay", nargs=3, metavar=("RECV_BYTES", "SOCKET", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        relay(args.relay[1], int(args.relay[2]), int(args.relay[0]))
        return 0
    if args.against:
        ab(args.against, args.pairs, args.streams, args.seconds)
        return 0
    os.environ[KEY_VAR] = "sk-bench-" + os.urandom(8).hex()
    base = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    out = base / "out"
    out.mkdir()
    print(f"load average before: {os.getloadavg()}", flush=True)
    fast = provider(0.0)
    try:
        process.start_detached(
            out,
            process.GatewaySettings(
                upstream=f"http://127.0.0.1:{fast.server_address[1]}/v1", key_var=KEY_VAR
            ),
        )
        a = attempts.issue(out, "bench", "plain", "s0", budget_sec=None)
        sock = attempts.socket_path(out, a.record.id)
        while not sock.exists():
            time.sleep(0.05)
        direct, via = [], []
        for i in range(args.calls + 20):
            d = call(tcp(fast.server_address[1]), None)
            g = call(unix(sock), a.token)
            if i >= 20:  # warm-up
                direct.append(d)
                via.append(g)
        for name, idx in (("first byte", 0), ("whole answer", 1)):
            dd, gg = [x[idx] for x in direct], [x[idx] for x in via]
            diffs = [g - d for d, g in zip(dd, gg, strict=True)]
            print(f"{name}: direct p50 {pct(dd, .5):.2f} ms p95 {pct(dd, .95):.2f} ms | via gateway p50 "
                  f"{pct(gg, .5):.2f} ms p95 {pct(gg, .95):.2f} ms | added p50 {pct(gg, .5) - pct(dd, .5):.2f} ms "
                  f"p95 {pct(gg, .95) - pct(dd, .95):.2f} ms (median per-call difference {statistics.median(diffs):.2f} ms)",
                  flush=True)  # fmt: skip
        process.stop(out)

        for keep_alive in (False, True):
            load(out, args.streams, args.seconds, keep_alive)
        if args.floor:
            floor(args.streams, args.seconds)
    finally:
        print(f"load average after: {os.getloadavg()}", flush=True)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
