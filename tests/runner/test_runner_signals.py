"""Stopping the runner: SIGTERM tears everything of the run down. (Crashing it -- kill -9, then
`health --fix` restarts it with the same configuration, it adopts the still-running jobs, and no
pair is run twice or lost -- is tests/runner/test_run_repeats.py, on repeats.)"""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from runner_support import (
    AGENTS,
    DEMO_TASKS,
    docker_objects,
    events,
    start_marathon,
    trial_names,
    wait_for,
)

from modes.naming import compose_project

pytestmark = [pytest.mark.docker]
SLOW = f"slow={AGENTS}:GoalSleeperAgent"


def _running_containers(out) -> list[str]:
    return docker_objects({compose_project(t) for t in trial_names(out)})["containers"]


def test_sigterm_stops_jobs_and_leaves_no_container_or_network(docker_engine, out_tree, tmp_path):
    out = out_tree
    proc = start_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", "calc-partial,words-passrate",
        "--arms", SLOW, "--goal-timeout-sec", "300", "--concurrency", "2", "--plain", log=tmp_path / "runner.log",
    )  # fmt: skip
    try:
        wait_for(lambda: len(_running_containers(out)) >= 2, 180, "both trials' containers")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=180) == 0, (tmp_path / "runner.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    projects = {compose_project(t) for t in trial_names(out)}
    assert len(projects) == 2
    assert docker_objects(projects) == {"containers": [], "networks": []}
    stop = events(out, "stop_requested")
    assert stop and stop[0]["signal"] == "SIGTERM" and stop[0]["n_running"] == 2
    voids = events(out, "void")
    assert len(voids) == 2 and all("stopped by the runner" in v["reason"] for v in voids)
    assert events(out, "runner_exit")[-1]["reason"] == "stopped by SIGTERM"
    assert not list((out / ".claims").glob("*.claim"))
    assert not (out / ".runner" / "lock").exists()
    harbor_pids = [e["pid"] for e in events(out, "job_start")]
    assert not [p for p in harbor_pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
