"""Stopping and crashing the runner: SIGTERM tears everything of the run down; after kill -9,
`health --fix` restarts it with the same configuration, it adopts the still-running jobs, and no
pair is run twice or lost."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from runner_support import (
    AGENTS,
    DEMO_TASKS,
    dead_holder,
    docker_objects,
    done_jobs,
    events,
    run_marathon,
    start_marathon,
    trial_names,
    wait_for,
)

from modes.naming import compose_project
from runner.results.tree import claim_path
from runner.schedule import claims

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


def test_kill9_then_health_fix_resumes_same_config_without_duplicates(docker_engine, out_tree, tmp_path):
    out = out_tree
    tasks = ["calc-partial", "words-passrate"]
    arms = ["oracle", "slow"]
    # started with --detach: its own session, stdin /dev/null, output in OUT/.runner/runner.log
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", ",".join(tasks), "--arms", f"oracle,{SLOW}",
        "--goal-timeout-sec", "30", "--concurrency", "2", "--max-passes", "2", "--detach", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(r.stdout.split("PID ")[1].split()[0])
    assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own: a hang-up of ours cannot reach it
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(out.resolve() / ".runner" / "runner.log")

    def mid_run():
        fin = {(e["task"], e["arm"]) for e in events(out, "job_finish")}
        running = [e for e in events(out, "job_start") if (e["task"], e["arm"]) not in fin]
        return fin and any(e["arm"] == "slow" for e in running)

    wait_for(mid_run, 300, "a finished pair and a running slow job")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", 30, "the kill")
    fin_before = {(e["task"], e["arm"]) for e in events(out, "job_finish")}
    running_before = {
        (e["task"], e["arm"]): e["pid"]
        for e in events(out, "job_start")
        if (e["task"], e["arm"]) not in fin_before
    }
    # a stale claim on a pair not started yet: its holder is a real process that has exited
    not_started = [
        (t, a) for t in tasks for a in arms if (t, a) not in fin_before and (t, a) not in running_before
    ]
    stale_pair = not_started[-1]
    assert claims.try_claim(out, *stale_pair, dead_holder()).acquired

    health = run_marathon("health", str(out), "--json")
    assert health.returncode == 1
    kinds = {f["kind"] for f in json.loads(health.stdout)["findings"]}
    assert {"runner_dead", "orphan_job", "stale_claim"} <= kinds

    fixed = run_marathon("health", str(out), "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "restarted the runner" in fixed.stdout and "removed stale claim" in fixed.stdout
    wait_for(lambda: len(events(out, "runner_exit")) >= 1, 400, "the restarted runner to finish")

    starts = events(out, "runner_start")
    assert len(starts) == 2 and starts[1]["resumed"] is True
    assert starts[0]["config"] == starts[1]["config"]
    second = starts[1]["run_id"]
    adopted = {(e["task"], e["arm"]): e["pid"] for e in events(out, "adopt") if e["run_id"] == second}
    assert adopted == running_before  # the still-running jobs were adopted, not restarted
    restarted = {(e["task"], e["arm"]) for e in events(out, "job_start") if e["run_id"] == second}
    assert not restarted & (fin_before | set(running_before))
    done = done_jobs(out)
    assert sorted(done) == sorted((t, a) for t in tasks for a in arms)
    assert all(len(j) == 1 for j in done.values()), done
    assert not claim_path(out, *stale_pair).exists()
    assert events(out, "runner_exit")[-1]["done"] == 4
    time.sleep(0.5)
    assert not (out / ".runner" / "lock").exists()
