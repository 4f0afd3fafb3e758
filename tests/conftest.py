"""Shared fixtures. Real Docker, real harbor: nothing here mocks them.

With CI=true or MARATHON_REQUIRE_DOCKER=1 a missing Docker engine fails the session instead of
skipping the tests that need it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# harbor 0.25.0 sends telemetry when a job finishes: it imports litellm and tries the network, which
# keeps every `harbor run` alive ~30 s after its results are written. Tests never send it.
os.environ.setdefault("HARBOR_TELEMETRY", "0")

REQUIRE_DOCKER = os.environ.get("CI") == "true" or os.environ.get("MARATHON_REQUIRE_DOCKER") == "1"


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Require a reachable Docker engine: fail under CI, skip on a laptop without one."""
    if docker_available():
        return
    if REQUIRE_DOCKER:
        pytest.fail("no Docker engine reachable (CI requires one; run .ci/setup-machine)")
    pytest.skip("no Docker engine reachable")


# ------------------------------------------------------------------ real output trees (core area)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_TASKS = REPO_ROOT / "runner" / "demo" / "tasks"
DEMO_TASK_NAMES = ("build-gate", "calc-partial", "two-stage", "words-passrate")


def harbor_bin() -> str:
    """The harbor CLI of this environment (next to the running interpreter)."""
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


TEST_AGENTS = {
    "crash": "tests.harbor_agents:CrashAgent",
    "sleeper": "tests.harbor_agents:SleepAgent",
    "exit1": "tests.harbor_agents:ExitAgent",
    "partial": "tests.harbor_agents:PartialAgent",
}


def start_harbor_jobs(out: Path, jobs: list[tuple[str, str]], *extra: str, stamp: str | None = None):
    """Start one real harbor job per (task, arm), concurrently, in the output-tree layout.

    Each job: jobs dir ``<out>/<task>/<arm>/<stamp>``, job name ``<arm>``, one task (``-p <task dir>``),
    live logs (``--ek auto_mounting=true``). ``arm`` is a harbor agent name or a ``tests.harbor_agents``
    stand-in (``crash``/``sleeper``/``exit1``/``partial``). Runs from the repo root with it on PYTHONPATH
    so harbor can import the test agents. Returns a handle for ``wait_harbor_jobs``.
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True", HARBOR_TELEMETRY="0"
    )
    procs = []
    for task, arm in jobs:
        cmd = [harbor_bin(), "run", "-p", str(DEMO_TASKS / task), "-a", TEST_AGENTS.get(arm, arm)]
        cmd += ["-o", str(out / task / arm / stamp), "--job-name", arm, "-n", "1", "-y"]
        cmd += ["--ek", "auto_mounting=true", *extra]
        log = (out.parent / f"harbor-{task}-{arm}-{stamp}.log").open("wb")
        procs.append((task, arm, log, subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)))
    return stamp, procs


def wait_harbor_jobs(handle) -> str:
    """Wait for the jobs of ``start_harbor_jobs``; fail the test session if any harbor run failed."""
    stamp, procs = handle
    failed = []
    for task, arm, log, p in procs:
        try:
            rc = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its Popen handle
            rc = p.wait()
        if rc != 0:
            failed.append(f"{task}/{arm}: exit {rc} (see {log.name})")
        log.close()
    if failed:
        pytest.fail("harbor run failed: " + "; ".join(failed))
    return stamp


def run_harbor_jobs(out: Path, jobs: list[tuple[str, str]], *extra: str, stamp: str | None = None) -> str:
    """``start_harbor_jobs`` then ``wait_harbor_jobs``; returns the stamp."""
    return wait_harbor_jobs(start_harbor_jobs(out, jobs, *extra, stamp=stamp))


@pytest.fixture(scope="session")
def mini_tree(docker_engine, tmp_path_factory) -> Path:
    """A real output tree: harbor's oracle and nop over the 4 demo tasks, one job per task x arm.

    Read-only for tests (copy it if you need to change it). Oracle scores 1 everywhere; nop gives
    calc-partial partial 0.2, words-passrate pass rate 0.4, build-gate build_failed, two-stage
    partial 0.0 with a test pass rate above 0.
    """
    out = tmp_path_factory.mktemp("mini_tree") / "out"
    out.mkdir()
    run_harbor_jobs(out, [(t, a) for a in ("oracle", "nop") for t in DEMO_TASK_NAMES])
    return out


@pytest.fixture(scope="session")
def harbor_jobs() -> SimpleNamespace:
    """``start``/``wait``/``run`` of real harbor jobs in the output-tree layout, for any area's fixtures."""
    return SimpleNamespace(start=start_harbor_jobs, wait=wait_harbor_jobs, run=run_harbor_jobs)
