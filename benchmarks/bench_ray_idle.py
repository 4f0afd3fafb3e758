"""The CPU an idle Ray head takes, as the fleet tests start it, with and without their idle knobs.

Why: the fleet module keeps a two-node Ray cluster for its whole run (about 20 minutes of CI) on
two cores the other workers share; what its processes spend doing nothing is CI time lost.
``tests/fleet/two_hosts.py`` sets ``IDLE_KNOBS``/``IDLE_ARGS``; this measures one head on loopback
(``ray start --head --block``, the same options), settled for 25 s, then every process of its tree
over a window (their own CPU and their reaped children's), alternately without and with the knobs.

    uv run --frozen python benchmarks/bench_ray_idle.py [--window 60] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "fleet"), str(REPO / "tests")]
from two_hosts import IDLE_ARGS, IDLE_KNOBS, ray_cmd  # noqa: E402


def cpu_of(root: psutil.Process) -> dict[int, tuple[str, float]]:
    got = {}
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            got[p.pid] = (p.name(), t.user + t.system + t.children_user + t.children_system)
        except psutil.Error:
            pass
    return got


def measure(knobs: bool, window: float, settle: float = 25.0) -> tuple[float, dict[str, float]]:
    tmp = tempfile.mkdtemp(prefix="mri", dir="/tmp")  # short: Ray's unix socket paths
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    env |= IDLE_KNOBS if knobs else {}
    argv = [*ray_cmd(), "start", "--head", "--node-ip-address", "127.0.0.1", "--temp-dir", tmp,
            "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--num-cpus", "1", "--num-gpus", "0",
            "--resources", json.dumps({"docker_slots": 2}), "--disable-usage-stats", "--block",
            "--port", "46379", "--dashboard-port", "48265", *(IDLE_ARGS if knobs else [])]  # fmt: skip
    with open(Path(tmp) / "ray.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(settle)
        root = psutil.Process(proc.pid)
        a = cpu_of(root)
        time.sleep(window)
        b = cpu_of(root)
        seen = [root, *root.children(recursive=True)]
    finally:
        proc.terminate()  # ray start --block stops its node on SIGTERM
        proc.wait(60)
    _gone, alive = psutil.wait_procs(locals().get("seen", []), timeout=20)
    for p in alive:  # what we started and saw, by psutil identity (never a reused PID)
        try:
            p.kill()
        except psutil.Error:
            pass
    per: dict[str, float] = {}
    for pid, (name, cpu) in b.items():
        per[name] = per.get(name, 0.0) + cpu - a.get(pid, (name, 0.0))[1]
    return sum(per.values()) / window * 100, per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    for _ in range(args.pairs):
        for knobs in (False, True):
            pct, per = measure(knobs, args.window)
            top = {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:6]}
            print(f"{'with' if knobs else 'without'} the idle knobs: {pct:.1f} % of a core over "
                  f"{args.window:.0f} s; CPU s by process: {top}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
