"""How long one attempt's stream stands still while another attempt sends the gateway the largest
bodies it takes (issue 27's hostile client: one agent must not slow every other arm).

    uv run python benchmarks/bench_gateway_stall.py [--root DIR] [--seconds 20] [--body-mb 50]
        [--attackers 2]

A victim attempt streams answers from a paced provider (40 deltas 50 ms apart, the load of
``bench_gateway.py``) on a kept connection, and its client times every gap between two reads.
For the first half of ``--seconds`` nothing else happens; for the second, ``--attackers`` clients
of another attempt send, again and again, a body of ``--body-mb`` MB of small input items (the
shape that costs ``json.loads`` most per byte). Printed: the victim's largest gap and its 99th
percentile in each half. A gap of 50 ms is the provider's own pace.

``--root DIR``: the checkout whose gateway runs (``git worktree add DIR COMMIT``), to compare a
commit with this one; the clients and the provider are this script's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--body-mb", type=float, default=50.0)
    ap.add_argument("--attackers", type=int, default=2)
    args = ap.parse_args()
    root = args.root.resolve()
    os.chdir(root)  # ``python -m`` puts the working dir first: the gateway it starts runs root's code
    sys.path.insert(0, str(root))
    # the gateway's modules from ``root`` first; this script's own helpers after them (their import
    # puts this checkout on the path, but ``runner`` is then already loaded from ``root``)
    from runner.ops.gateway import attempts, process

    sys.path.insert(1, str(Path(__file__).resolve().parent))
    import bench_gateway as B

    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    n = int(args.body_mb * 1e6 / len(json.dumps(item)))
    big = json.dumps({"model": "bench", "stream": True, "input": [item] * n}).encode()

    os.environ[B.KEY_VAR] = "sk-bench-" + os.urandom(8).hex()
    base = Path(tempfile.mkdtemp(prefix="bench-gw-stall-"))
    out = base / "out"
    out.mkdir()
    paced = B.provider(0.05, True)
    try:
        process.start_detached(
            out, process.GatewaySettings(upstream=f"http://127.0.0.1:{paced.server_address[1]}/v1",
                                         key_var=B.KEY_VAR),
        )  # fmt: skip
        victim = attempts.issue(out, "bench", "plain", "s-victim", budget_sec=None)
        hostile = attempts.issue(out, "bench", "goal", "s-hostile", budget_sec=None)
        for a in (victim, hostile):
            while not attempts.socket_path(out, a.record.id).exists():
                time.sleep(0.05)
        half = args.seconds / 2
        t0 = time.monotonic()
        attack_at, stop_at = t0 + half, t0 + args.seconds
        gaps: dict[str, list[float]] = {"quiet": [], "attacked": []}

        def victim_client() -> None:
            connect = B.unix(attempts.socket_path(out, victim.record.id))
            s = connect()
            head = (f"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(B.BODY)}\r\nAuthorization: Bearer {victim.token}\r\n\r\n").encode()  # fmt: skip
            try:
                while time.monotonic() < stop_at:
                    s.sendall(head + B.BODY)
                    got, last = b"", time.monotonic()  # the wait for the first byte counts too
                    while not got.endswith(b"\r\n0\r\n\r\n"):
                        chunk = s.recv(65536)
                        if not chunk:
                            return
                        now = time.monotonic()
                        if last is not None:
                            gaps["attacked" if now >= attack_at else "quiet"].append((now - last) * 1000)
                        last, got = now, got + chunk
            finally:
                s.close()

        sent = [0]

        def attacker() -> None:
            while time.monotonic() < attack_at:
                time.sleep(0.01)
            connect = B.unix(attempts.socket_path(out, hostile.record.id))
            head = (f"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(big)}\r\nConnection: close\r\n"
                    f"Authorization: Bearer {hostile.token}\r\n\r\n").encode()  # fmt: skip
            while time.monotonic() < stop_at:
                s = connect()
                try:
                    s.sendall(head + big)
                    while s.recv(65536):
                        pass
                    sent[0] += 1
                finally:
                    s.close()

        threads = [threading.Thread(target=victim_client)] + [
            threading.Thread(target=attacker) for _ in range(args.attackers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"gateway of {root}; load average {os.getloadavg()[0]:.1f}")
        print(f"hostile bodies: {len(big) / 1e6:.1f} MB each, {sent[0]} sent by {args.attackers} clients")
        for name, xs in gaps.items():
            if xs:
                print(f"victim, {name}: {len(xs)} gaps, largest {max(xs):.0f} ms, p99 {B.pct(xs, 0.99):.0f} ms, "
                      f"p50 {B.pct(xs, 0.5):.0f} ms")  # fmt: skip
        process.stop(out)
        rows = [
            json.loads(x) for x in (out / ".runner" / "gateway" / "ledger.jsonl").read_text().splitlines()
        ]
        hostile_rows = [r for r in rows if r.get("attempt") == hostile.record.id and "params" in r]
        parsed = sum(r["params"].get("n_input_items") == n for r in hostile_rows)
        print(f"hostile calls on the ledger: {len(hostile_rows)}, their parameters read: {parsed}")
    finally:
        paced.shutdown()
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
