"""One run under pool pressure, on a modified copy of the mini-benchmark, with a stale claim waiting:
the runner refuses modified tasks unless --allow-modified (then records it), takes the stale claim
over, waits at the network gate while foreign networks fill the pool to the cap (saying so in its
events), and goes on when they are removed."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from runner_support import DEMO_TASKS, dead_holder, done_jobs, events, run_marathon, start_marathon, wait_for

from runner.ops.docker_pool import pool_status, verdict
from runner.results.digest import task_digest
from runner.schedule import claims
from runner.schedule.config import read_driver_env

# alone: the gate reads the shared address pool as a whole, and the cap is set from its use now
pytestmark = [pytest.mark.docker, pytest.mark.alone]


@pytest.fixture
def foreign_networks():
    made: list[str] = []
    label = f"marathon.test.foreign={uuid.uuid4().hex[:8]}"

    def make() -> str:
        name = f"mtest-foreign-{uuid.uuid4().hex[:8]}"
        r = subprocess.run(
            ["docker", "network", "create", "--label", label, name], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        made.append(r.stdout.strip())
        return made[-1]

    def remove_all() -> None:
        while made:
            subprocess.run(["docker", "network", "rm", made.pop()], capture_output=True)

    try:
        yield make, remove_all
    finally:
        remove_all()


def test_modified_dataset_stale_claim_and_pool_pressure(docker_engine, out_tree, tmp_path, foreign_networks):
    make_net, remove_nets = foreign_networks
    tasks = tmp_path / "tasks"
    shutil.copytree(DEMO_TASKS, tasks)
    with open(tasks / "calc-partial" / "instruction.md", "a") as fh:
        fh.write("\nOne more sentence: this copy is modified.\n")
    digest_before = task_digest(tasks / "calc-partial")
    files_before = sorted(p.relative_to(tasks) for p in tasks.rglob("*"))
    out = out_tree
    base = [
        "run",
        str(out),
        "--tasks-dir",
        str(tasks),
        "--tasks",
        "calc-partial",
        "--arms",
        "oracle",
        "--plain",
    ]

    refused = run_marathon(*base, timeout=120)
    assert refused.returncode == 2
    assert "calc-partial" in refused.stderr and "--allow-modified" in refused.stderr
    assert not out.exists()

    assert claims.try_claim(out, "calc-partial", "oracle", dead_holder()).acquired
    # fill the pool with foreign networks up to (and one past) a cap set from today's use
    cap = pool_status(None).used + 3
    while verdict(pool_status(None), 0, cap=cap, margin=0).ok:
        make_net()
    proc = start_marathon(
        *base, "--allow-modified", "--net-cap", str(cap), "--net-margin", "0", log=tmp_path / "runner.log"
    )
    try:
        wait_for(lambda: events(out, "gate_wait"), 120, "the runner to wait at the gate")
        assert not events(out, "job_start")
        remove_nets()
        assert proc.wait(timeout=300) == 0, (tmp_path / "runner.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_ev = events(out, "gate_wait")[0]
    assert wait_ev["cap"] == cap and wait_ev["margin"] == 0 and wait_ev["reason"].startswith("wait:")
    opened = events(out, "gate_open")
    start = events(out, "job_start")
    assert opened and len(start) == 1 and start[0]["ts"] >= opened[0]["ts"]
    assert not events(out, "void")
    assert list(done_jobs(out)) == [("calc-partial", "oracle")]
    took = events(out, "claim_takeover")
    assert took and "dead-run" in took[0]["was"]
    # the modification is recorded for every later reader, and the tasks dir is untouched
    env = read_driver_env(out)
    assert env["MARATHON_ALLOW_MODIFIED"] == "1" and env["MARATHON_MODIFIED_TASKS"] == "calc-partial"
    assert events(out, "dataset_modified")[0]["tasks"] == ["calc-partial"]
    assert events(out, "runner_start")[0]["config"]["modified_tasks"] == ["calc-partial"]
    assert task_digest(tasks / "calc-partial") == digest_before
    assert sorted(p.relative_to(tasks) for p in tasks.rglob("*")) == files_before
