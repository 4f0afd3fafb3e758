"""Scheduling overhead through Ray, and what Ray costs at idle, on the two-host test cluster.

    uv run python benchmarks/bench_fleet.py [--arms 3] [--idle-sec 30]     (root: a private dockerd)

Brings up tests/fleet/two_hosts.py (host 2 = a private dockerd in a network namespace, a Ray head
here and a Ray worker there, 2 docker_slots each), runs ``marathon run --cluster`` with harbor's
``nop`` as N arms over the 4 mini tasks at concurrency 4, and reads each attempt's Ray job log
(``runner.schedule.fleet.job`` stamps its lines to the ms). A sample is a freed slot while pairs are still
queued: from a harbor process's exit (its job's "harbor exited" line) to the next "harbor run PID"
line on any host -- the runner's poll of the job API, its bookkeeping, the submission, Ray's
placement and supervisor start, the job's start-up (its node id, host.json) and the host's pool
gate; each sample is also split there (the job's submission time from the job API, its first log
line, its host line). Then the Ray processes of each node are sampled at idle (CPU % and RSS of
every descendant of its ``ray start``). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "fleet")]

from two_hosts import RayNode, two_hosts  # noqa: E402

from agents.scripted_model.image import DEMO_IMAGE  # noqa: E402
from runner.schedule.fleet.cluster import Fleet  # noqa: E402

TASKS = REPO / "runner" / "demo" / "tasks"


def _times(log: str, marker: str) -> list[float]:
    got = []
    for line in log.splitlines():
        stamp, _, rest = line.partition(" ")
        if rest.startswith(marker):
            try:
                got.append(datetime.fromisoformat(stamp).timestamp())
            except ValueError:
                continue
    return got


def idle(node: RayNode, sec: float) -> tuple[float, float]:
    """(CPU % of one core, RSS MiB) of a Ray node's processes over ``sec`` seconds at idle."""
    node.remember()
    procs = [p for p in node.seen if p.is_running()]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.NoSuchProcess:
            pass
    time.sleep(sec)
    cpu = rss = 0.0
    for p in procs:
        try:
            cpu += p.cpu_percent(None)
            rss += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return cpu, rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", type=int, default=3, help="nop stand-in arms (x 4 mini tasks = pairs)")
    ap.add_argument("--idle-sec", type=float, default=30.0)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-fleet-")) / "out"
    arms = ",".join(f"n{i}=nop" for i in range(a.arms))
    with two_hosts(REPO, ("marathon-base:bookworm", DEMO_IMAGE)) as th:
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"} | {"PYTHONPATH": str(REPO)}
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(TASKS),
                            "--arms", arms, "--concurrency", "4", "--cluster", th.cluster, "--plain"],
                           cwd=REPO, env=env, capture_output=True, text=True)  # fmt: skip
        wall = time.monotonic() - t0
        fleet = Fleet(th.dashboard)
        exits: list[float] = []
        attempts = []  # (submitted, job process start, host recorded, harbor start)
        for j in fleet.ours(out):
            log = fleet.client.get_job_logs(j.submission_id)
            info = fleet.client.get_job_info(j.submission_id)
            exits += _times(log, "harbor exited")
            first = (_times(log, "job process started") or [math.nan])[0]
            host = (_times(log, "attempt ") or [math.nan])[0]
            for s in _times(log, "harbor run PID"):
                attempts.append((info.start_time / 1000, first, host, s))
        attempts.sort(key=lambda a: a[3])
        samples, phases = [], []
        for sub, first, host, s in attempts[4:]:  # the first 4 fill the empty slots
            before = [e for e in exits if e < s]
            if before:
                freed = max(before)
                samples.append(s - freed)
                # runner (freed -> submitted), Ray (-> the job's first line), the job's start-up
                # (node id, host record), the gate and the held start
                phases.append((sub - freed, first - sub, host - first, s - host))
        cpu_h, rss_h = idle(th.head, a.idle_sec)
        cpu_w, rss_w = idle(th.worker, a.idle_sec)
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; run rc {r.returncode}, "
          f"{len(attempts)} attempts in {wall:.0f} s")  # fmt: skip
    if samples:
        ranked = sorted(samples)
        p95 = ranked[math.ceil(0.95 * len(ranked)) - 1]  # nearest rank: a measured sample, never extrapolated
        print(f"freed slot -> next harbor run (through Ray): n={len(samples)} median {statistics.median(samples):.2f} s"
              f", p95 {p95:.2f} s, max {ranked[-1]:.2f} s")  # fmt: skip
        names = ("runner: freed -> submitted", "Ray: submitted -> job process", "job: node id + host record",
                 "job: gate + held start")  # fmt: skip
        for i, name in enumerate(names):
            col = [ph[i] for ph in phases if not math.isnan(ph[i])]
            if col:
                print(
                    f"  {name:32s} median {statistics.median(col):6.2f} s, max {max(col):6.2f} s (n={len(col)})"
                )
    print(
        f"Ray at idle, head (GCS, dashboard, raylet, agents): CPU {cpu_h:.1f} % of a core, RSS {rss_h:.0f} MiB"
    )
    print(
        f"Ray at idle, worker (raylet, agents):               CPU {cpu_w:.1f} % of a core, RSS {rss_w:.0f} MiB"
    )


if __name__ == "__main__":
    main()
