"""Scheduling overhead of ``marathon run``: from a freed slot (a harbor job's process exits) to the
next harbor process started, at concurrency 12 with a no-op agent (harbor's ``nop``), on the real
Docker engine. Target: p95 <= 2 s.

The exit instant is taken from a pidfd (Linux: readable the moment the process exits, without
reaping it, so the runner's own bookkeeping is untouched); the start instant is the runner's
``job_start`` event. Every freed slot while pairs are still queued is one sample; the overhead
includes the runner's poll, reading the finished job, releasing its claim, the done check, the
network gate (a Docker API round trip) and claiming and spawning the next job.

    uv run python benchmarks/bench_scheduling.py [--concurrency 12] [--arms 6] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import shutil
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from runner.schedule.config import resolve
from runner.schedule.driver import Driver

TASKS = Path(__file__).resolve().parents[1] / "runner" / "demo" / "tasks"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--arms", type=int, default=6, help="no-op stand-in arms (x 4 mini tasks = pairs)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    base = Path(a.out or tempfile.mkdtemp(prefix="bench-sched-"))
    out = base / "out"
    exits: list[float] = []
    starts: list[float] = []
    lock = threading.Lock()

    def watch(pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            select.select([fd], [], [])
            with lock:
                exits.append(time.time())
        finally:
            os.close(fd)

    def listener(ev: dict) -> None:
        if ev["event"] == "job_start":
            starts.append(
                datetime.strptime(ev["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
            )
            threading.Thread(target=watch, args=(ev["pid"],), daemon=True).start()

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    arms = [f"n{i}=nop" for i in range(a.arms)]
    cfg = resolve(
        out,
        {"tasks_dir": str(TASKS), "arms": arms, "concurrency": a.concurrency, "max_passes": 1},
        environ={},
    )
    t0 = time.time()
    Driver(cfg, listeners=[listener]).run()
    wall = time.time() - t0
    exits.sort()
    later = sorted(starts)[a.concurrency :]  # every start after the initial fill took a freed slot
    samples = [s - e for s, e in zip(later, exits, strict=False)]
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))] if samples else float("nan")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(
        f"pairs {len(starts)}, concurrency {a.concurrency}, wall {wall:.1f}s, freed-slot samples {len(samples)}"
    )
    if samples:
        print(
            f"freed slot -> next harbor start: median {statistics.median(samples):.3f}s  "
            f"p95 {p95:.3f}s  max {samples[-1]:.3f}s  (target p95 <= 2 s)"
        )
    if not a.out:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
