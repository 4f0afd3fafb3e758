"""One real run shared by several assertions: 4 mini tasks x 3 arms at concurrency 2, with one
injected infrastructure failure (an agent whose setup fails once) and the build-gate task's
build failure (nop leaves the code unbuildable)."""

from __future__ import annotations

import json

import pytest
from runner_support import AGENTS, DEMO_TASKS, done_jobs, events, run_marathon

from runner.ops.procs import Registry
from runner.results.tree import VOID_README, claim_path, voided_root
from runner.schedule.config import read_driver_env

pytestmark = [pytest.mark.docker]
TASKS = ["build-gate", "calc-partial", "two-stage", "words-passrate"]
ARMS = ["oracle", "nop", "flaky"]


@pytest.fixture(scope="module")
def main_run(docker_engine, module_out, tmp_path_factory):
    out = module_out
    marker = tmp_path_factory.mktemp("marker") / "failed-once"
    proc = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--arms",
        f"oracle,nop,flaky={AGENTS}:FlakySetupAgent", "--concurrency", "2", "--max-passes", "2", "--plain",
        MARATHON_TEST_FAIL_ONCE=str(marker),
    )  # fmt: skip
    return out, proc, marker


def test_every_pair_done_exactly_once(main_run):
    out, proc, _ = main_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = done_jobs(out)
    assert sorted(done) == sorted((t, a) for t in TASKS for a in ARMS)
    assert all(len(jobs) == 1 for jobs in done.values()), done
    starts = events(out, "job_start")
    assert len(starts) == 13  # 12 pairs + the one rerun after the void
    assert events(out, "runner_exit")[-1]["done"] == 12


def test_concurrency_never_exceeded(main_run):
    out, _, _ = main_run
    running, peak = 0, 0
    for e in events(out):
        if e["event"] == "job_start":
            running += 1
            peak = max(peak, running)
        elif e["event"] == "job_finish":
            running -= 1
    assert peak == 2


def test_infrastructure_failure_voided_with_readme_and_rerun_next_pass(main_run):
    out, _, marker = main_run
    assert marker.exists()
    voids = events(out, "void")
    assert len(voids) == 1
    v = voids[0]
    assert v["arm"] == "flaky" and "before the agent ran" in v["reason"]
    dest = voided_root(out) / v["task"] / "flaky" / v["stamp"]
    readme = (dest / VOID_README).read_text()
    assert "simulated agent setup failure" in readme and v["reason"] in readme
    assert json.loads((dest / "void.json").read_text())["reason"] == v["reason"]
    assert not (out / v["task"] / "flaky" / v["stamp"]).exists()  # moved, not copied
    retry = [e for e in events(out, "retry") if e["task"] == v["task"] and e["arm"] == "flaky"]
    assert retry and retry[0]["next_pass"] == 2
    reruns = [
        e
        for e in events(out, "job_start")
        if (e["task"], e["arm"]) == (v["task"], "flaky") and e["ts"] > v["ts"]
    ]
    assert len(reruns) == 1
    passes = [e["pass_no"] for e in events(out, "pass_start")]
    assert passes == [1, 2]


def test_build_failure_is_scored_not_voided(main_run):
    out, _, _ = main_run
    (job,) = done_jobs(out)[("build-gate", "nop")]
    (trial,) = [p for p in job.iterdir() if p.is_dir()]
    metrics = json.loads((trial / "verifier" / "metrics.json").read_text())
    assert metrics["phase"] == "build_failed"
    assert "BUILD FAILED" in (trial / "verifier" / "test-stdout.txt").read_text()
    assert not [e for e in events(out, "void") if e["task"] == "build-gate" and e["arm"] == "nop"]
    fin = [e for e in events(out, "job_finish") if (e["task"], e["arm"]) == ("build-gate", "nop")]
    assert [e["status"] for e in fin] == ["done"] and "BUILD FAILED" in fin[0]["detail"]


def test_state_is_released_and_config_recorded(main_run):
    out, _, _ = main_run
    assert not any(claim_path(out, t, a).exists() for t in TASKS for a in ARMS)
    assert not (out / ".runner" / "lock").exists()
    assert Registry(out).live_entries() == []
    env = read_driver_env(out)
    assert env["MARATHON_CONCURRENCY"] == "2"
    assert env["MARATHON_ARMS"] == f"oracle,nop,flaky={AGENTS}:FlakySetupAgent"
    assert env["GOAL_TIMEOUT_SEC"] == "5340" and env["MARATHON_VERIFIER_MULT"] == "4.0"
    start = events(out, "runner_start")[0]
    assert start["run_id"] and all(e["run_id"] == start["run_id"] for e in events(out))
    # which marathon made the start, and the fresh tree's id (its voided trials' root is named by it)
    from runner.results.tree import tree_id, voided_root
    from runner.version import marathon_version

    assert start["marathon"] == marathon_version()
    assert tree_id(out) is not None and voided_root(out).name == f"{out.name}@{tree_id(out)}"
    # the harbor command of every job: own jobs dir + job name = arm, multipliers, live mounts
    argv = events(out, "job_start")[0]["argv"]
    assert argv[argv.index("--job-name") + 1] in ARMS
    assert "auto_mounting=true" in argv and "--verifier-timeout-multiplier" in argv
