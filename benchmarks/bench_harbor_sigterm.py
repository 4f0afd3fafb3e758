"""How long harbor 0.25.0 takes to exit after SIGTERM mid-trial: the figure behind DEFAULT_GRACE_SEC.

    uv run --frozen python benchmarks/bench_harbor_sigterm.py [runs] [--parallel N]

Each run starts a real ``harbor run`` of the demo task calc-partial with a sleeping agent
(tests.harbor_agents:SleepAgent), in its own session as the runner starts it, with the runner's job
flags (``-n 1 -y --ek auto_mounting=true``, HARBOR_TELEMETRY=0). Once the trial's container runs,
the harbor process group gets SIGTERM (what ``marathon kill`` and the console send first), and the
script times (a) until the harbor process exits and (b) until no container of the trial's compose
project is left. ``--parallel N`` terminates N runs at once (a loaded machine). A run that has not
exited after 120 s is killed and reported. Prints figures; asserts nothing. Containers, networks and
images it leaves are removed by the exact compose project label of its own trials.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from modes.naming import compose_project  # noqa: E402
from runner.ops.procs import DEFAULT_GRACE_SEC  # noqa: E402
from runner.results.tree import iter_job_dirs, iter_trial_dirs  # noqa: E402

TASK = REPO / "runner" / "demo" / "tasks" / "calc-partial"
HARD_LIMIT_SEC = 120.0
LABEL = "com.docker.compose.project"


def _harbor() -> str:
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def _containers(project: str, running_only: bool = False) -> list[str]:
    cmd = ["docker", "ps", "-q", "--filter", f"label={LABEL}={project}"]
    if not running_only:
        cmd.insert(2, "-a")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.split()


def _cleanup(project: str) -> None:
    """Remove what harbor left of this trial, by the exact compose project label."""
    for cid in _containers(project):
        subprocess.run(["docker", "rm", "-f", "-v", cid], capture_output=True, timeout=120)
    nets = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", f"label={LABEL}={project}"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    for net in nets:
        subprocess.run(["docker", "network", "rm", net], capture_output=True, timeout=60)
    subprocess.run(["docker", "image", "rm", f"{project}-main"], capture_output=True, timeout=120)


def one_run(out: Path, ready_timeout: float = 600.0) -> dict:
    """Start harbor, wait for the trial container, TERM the group, time the exit."""
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True", HARBOR_TELEMETRY="0")
    jobs = out / "calc-partial" / "sleeper" / "stamp"
    argv = [_harbor(), "run", "-p", str(TASK), "-a", "tests.harbor_agents:SleepAgent", "-o", str(jobs),
            "--job-name", "sleeper", "-n", "1", "-y", "--ek", "auto_mounting=true"]  # fmt: skip
    log = open(out / "harbor.log", "wb")
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    project = None
    result: dict = {"out": str(out)}
    try:
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            trials = [t.name for *_, job in iter_job_dirs(out) for t in iter_trial_dirs(job)]
            if trials:
                project = compose_project(trials[0])
                if _containers(project, running_only=True):
                    break
            time.sleep(0.5)
        else:
            result["error"] = f"harbor never got its trial container running (rc {proc.poll()})"
            return result
        time.sleep(2.0)  # the agent is now in its sleep: mid-trial
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(HARD_LIMIT_SEC)
            result["exit_sec"] = round(time.monotonic() - t0, 2)
            result["returncode"] = proc.returncode
        except subprocess.TimeoutExpired:
            result["error"] = f"still running {HARD_LIMIT_SEC:.0f} s after SIGTERM; killed"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        while _containers(project) and time.monotonic() - t0 < HARD_LIMIT_SEC:
            time.sleep(0.2)
        left = _containers(project)
        result["containers_gone_sec"] = None if left else round(time.monotonic() - t0, 2)
        return result
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()
        if project:
            _cleanup(project)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=1, help="runs terminated at the same time")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="bench-sigterm-"))
    results: list[dict] = []
    n = 0
    while n < args.runs:
        batch = min(args.parallel, args.runs - n)
        dirs = [base / f"run{n + i}" for i in range(batch)]
        for d in dirs:
            d.mkdir()
        with ThreadPoolExecutor(batch) as pool:
            results += list(pool.map(one_run, dirs))
        n += batch
    load = os.getloadavg()[0]
    for r in results:
        print(json.dumps(r))
    exits = [r["exit_sec"] for r in results if "exit_sec" in r]
    gone = [r["containers_gone_sec"] for r in results if r.get("containers_gone_sec") is not None]
    print(f"harbor exit after SIGTERM: n={len(exits)}", end="")
    if exits:
        print(
            f" min {min(exits):.1f} s  median {statistics.median(exits):.1f} s  max {max(exits):.1f} s",
            end="",
        )
    print(f"; containers gone: max {max(gone):.1f} s" if gone else "; containers gone: n/a")
    print(f"parallel {args.parallel}, load average {load:.1f}; DEFAULT_GRACE_SEC = {DEFAULT_GRACE_SEC:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
