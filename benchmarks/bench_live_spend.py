"""Benchmark of the console's live spend: a ledger line written to the figure on the screen.

The target (docs/console.md, issue [spend]): the top bar's spend per arm follows a call's ledger line
within 1 s. The real App runs headless in this process (Textual's run_test) on the benchmark tree
(benchmarks/bench_model.py's builder: 10,050 real trials by default, five arms); every attempt
already has one call on the ledger (what a finished run's tree looks like), then one more line at a
time is appended by the gateway's own writer (fsync'd, as the gateway writes it) and the time to
the new total on the screen is measured. Printed, never asserted.

    uv run python benchmarks/bench_live_spend.py [--trials 10050] [--lines 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_model import SHAPES, bench_tree  # noqa: E402

from runner.results import ledger as L  # noqa: E402
from runner.results.model import RunModel  # noqa: E402
from runner.results.tree import ledger_path  # noqa: E402

SIZE = (200, 48)


def row(task: str, arm: str, stamp: str, n: int, inp: int) -> dict:
    return {
        "kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9 + n, "gateway": "bench", "host": None,
        "attempt": f"{task}-{arm}-{stamp}", "task": task, "arm": arm, "stamp": stamp, "method": "POST",
        "path": "/v1/responses", "request_id": f"{task}-{arm}-{stamp}.{n}", "params": {"model": "gpt-5.5"},
        "outcome": L.OK, "status": 200, "usage": {"input": inp, "cached": 0, "output": 100, "reasoning": 0},
    }  # fmt: skip


async def measure(out: Path, attempts: list[tuple[str, str, str]], n_lines: int) -> dict:
    from console.app import make_app
    from runner.ops.gateway.server import LedgerWriter

    res: dict = {}
    w = LedgerWriter(ledger_path(out))
    t = time.perf_counter()
    for i, (task, arm, stamp) in enumerate(attempts):  # one call per attempt: a finished run's ledger
        w.write(row(task, arm, stamp, i, 10_000))
    w.close()
    res["seed_lines"] = len(attempts)
    res["seed_write_sec"] = time.perf_counter() - t
    t0 = time.perf_counter()
    app = make_app(out, docker=False, offer_start=False)
    async with app.run_test(size=SIZE) as pilot:
        while app.main.last_change_at is None:
            await asyncio.sleep(0.005)
        res["start_to_grid"] = time.perf_counter() - t0
        shown = time.time()
        while (app.main.scanned_at or 0) <= shown:  # the watcher's first heartbeat: watches are set
            await asyncio.sleep(0.05)
        await pilot.pause(1.0)
        w = LedgerWriter(ledger_path(out))
        lat = []
        try:
            for i in range(n_lines):
                task, arm, stamp = attempts[(i * 7919) % len(attempts)]
                before = app.main.summary.get(arm)
                was = before.ledger_spend_usd if before else None
                t = time.perf_counter()
                w.write(row(task, arm, stamp, 10**6 + i, 1_000_000))  # $1.25 more: a figure that moves
                deadline = t + 10
                while time.perf_counter() < deadline:
                    s = app.main.summary.get(arm)
                    if s is not None and s.ledger_spend_usd is not None and s.ledger_spend_usd != was:
                        break
                    await asyncio.sleep(0.002)
                await pilot.pause(0)  # the repaint that follows the record
                lat.append(time.perf_counter() - t)
                await pilot.pause(0.3)
        finally:
            w.close()
        res["latency"] = lat
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_050)
    ap.add_argument("--lines", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="build the tree here and keep it")
    args = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    tmp = Path(tempfile.mkdtemp(prefix="bench-live-spend-"))
    try:
        out = bench_tree(args.keep, tmp, args.trials, None, tasks=SHAPES["few-tasks"])
        shutil.rmtree(out / ".runner" / "gateway", ignore_errors=True)
        model = RunModel.load(out)
        attempts = [(a.task, a.arm_dir, a.stamp) for a in model.attempts()]
        r = asyncio.run(measure(out, attempts, args.lines))
        lat = sorted(x * 1000 for x in r["latency"])
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        print(
            f"tree: {len(attempts)} attempts, {r['seed_lines']} ledger lines before; {len(lat)} lines measured"
        )
        print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python "
              f"{platform.python_version()}, load avg {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(f"console start to full grid (with the ledger)  {r['start_to_grid']:.2f} s")
        print(f"ledger line to the arm's spend, median        {statistics.median(lat):.0f} ms")
        print(f"ledger line to the arm's spend, p95           {p95:.0f} ms   (target <= 1000 ms)")
        print(f"ledger line to the arm's spend, max           {lat[-1]:.0f} ms")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
