"""The circuit breaker: k alike failures in a row pause the run; across arms they are voided and a
resume with the cause fixed reruns them; one arm's wall is never voided silently.

The end-to-end test is the real thing: harbor, Docker, the staged codex driving two real arms,
and the scripted model answering HTTP 401 to every request (a revoked credential, which no
preflight can see: the runner's environment is fixed at start).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
from runner_support import DEMO_TASKS, done_jobs, events, run_marathon

from runner.results.tree import iter_job_dirs, voided_root
from runner.schedule.breaker import (
    EXIT_PAUSED,
    SCOPE_ARM,
    SCOPE_INFRA,
    Attempt,
    Breaker,
    last_pause,
    shape,
    signature,
)


def _att(task: str, arm: str, msg: str, cls: str = "ArmFailure") -> Attempt:
    return Attempt(task, arm, f"stamp-{uuid.uuid4().hex[:6]}", signature(cls, msg), f"{cls}: {msg}")


def test_message_shape_ignores_numbers_ids_and_paths():
    a = shape(
        "turn 019a6c1e-7f1b-7c30-9a55-3c5b1f0e2d11 failed: unexpected status 401 Unauthorized "
        "after 2.5 s at /tmp/mrun-abc/out/t1/plain/x (request 5f3e9a0c1b)"
    )
    b = shape(
        "turn 019a6c20-0000-7000-8000-000000000001 failed: unexpected status 401 Unauthorized "
        "after 31 s at /var/other/place/t2/goal (request 77aa00ff1234)"
    )
    assert a == b
    assert "Unauthorized" in a and "401" not in a
    assert shape("connection refused") != shape("no space left on device")
    # harbor names the task and the trial in compose project names: the attempt's own names go too
    c = "Docker compose command failed for environment calc-partial. Command: docker compose --project-name calc-partial__xfmdpfw__env"
    d = "Docker compose command failed for environment two-stage. Command: docker compose --project-name two-stage__qwertyz__env"
    assert shape(c, ("calc-partial", "calc-partial__xFMdPFw")) == shape(
        d, ("two-stage", "two-stage__QWERTYZ")
    )


def test_streak_trips_at_k_across_arms_and_resets_on_success_or_a_new_failure():
    br = Breaker(3)
    assert br.failure(_att("t1", "plain", "boom 1")) is None
    assert br.failure(_att("t1", "goal", "boom 2")) is None
    br.success()
    assert br.failure(_att("t2", "plain", "boom 3")) is None
    assert br.failure(_att("t2", "goal", "other failure 1")) is None  # a different shape starts over
    assert br.failure(_att("t3", "plain", "other failure 2")) is None
    trip = br.failure(_att("t3", "goal", "other failure 3"))
    assert trip is not None and trip.scope == SCOPE_INFRA
    assert trip.pairs == ["t2/goal", "t3/plain", "t3/goal"] and trip.arms == ["goal", "plain"]
    # the same wall after the trip joins it; anything else does not
    assert br.failure(_att("t4", "plain", "other failure 9")) is None and len(trip.attempts) == 4
    assert br.failure(_att("t4", "goal", "something new")) is None and len(trip.attempts) == 4


def test_timeouts_are_outcomes_and_never_count():
    from runner.schedule.breaker import is_outcome

    assert is_outcome("AgentTimeoutError") and is_outcome("VerifierTimeoutError")
    assert not is_outcome("ArmFailure") and not is_outcome("RuntimeError")
    assert not is_outcome("EnvironmentStartTimeoutError")  # the sandbox's, not the agent's


def test_a_wall_of_one_arm_pauses_as_arm_specific_and_k_0_never_trips():
    br = Breaker(3)
    for t in ("t1", "t2"):
        assert br.failure(_att(t, "heartbeat", "profile missing")) is None
    trip = br.failure(_att("t3", "heartbeat", "profile missing"))
    assert trip is not None and trip.scope == SCOPE_ARM and trip.arms == ["heartbeat"]
    assert "arm heartbeat" in trip.reason() and "voided" not in trip.reason()
    off = Breaker(0)
    assert all(off.failure(_att(f"t{i}", "plain", "x")) is None for i in range(10))


# --- end to end -----------------------------------------------------------------------------------

TASKS = ("calc-partial", "two-stage")


@pytest.fixture
def private_tasks(tmp_path, docker_engine):
    """Two demo tasks whose image is built FROM a private tag of the demo base image (so other
    sessions rebuilding the shared tag cannot change the scripted model under this test), under
    task names of their own (harbor names the task image after the task)."""
    from agents.scripted_model.image import context_digest, ensure_demo_image

    tag = f"marathon-demo-base:breaker-{context_digest()[:12]}"
    ensure_demo_image(tag)
    tasks = tmp_path / "tasks"
    suffix = uuid.uuid4().hex[:6]
    for t in TASKS:
        shutil.copytree(DEMO_TASKS / t, tasks / t)
        toml = tasks / t / "task.toml"
        toml.write_text(toml.read_text().replace(f'"marathon-demo/{t}"', f'"breaker-test/{t}-{suffix}"'))
        df = tasks / t / "environment" / "Dockerfile"
        df.write_text(df.read_text().replace("FROM marathon-demo-base:1", f"FROM {tag}"))
    yield tasks
    images = [f"hb__{t}-{suffix}" for t in TASKS]
    subprocess.run(["docker", "image", "rm", *images], capture_output=True)
    # the private base tag only (the image itself stays while the shared tag names it)
    subprocess.run(["docker", "image", "rm", "--no-prune", tag], capture_output=True)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_breaker_pauses_on_a_revoked_credential_voids_and_a_fixed_resume_completes(out_tree, private_tasks):
    out = out_tree
    key = "MARATHON_BREAKER_TEST_KEY"
    common = ["--ak", f"api_key_var={key}", "--plain"]
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(private_tasks), "--arms", "plain,goal",
        "--model", "scripted/unauthorized", "--concurrency", "1", "--max-passes", "3",
        "--breaker-k", "3", *common, timeout=1500, **{key: "sk-breaker-test-not-a-secret"},
    )  # fmt: skip
    log = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == EXIT_PAUSED, log
    starts = events(out, "job_start")
    assert len(starts) == 3, log  # exactly k attempts, then nothing more was started
    (paused,) = events(out, "run_paused")
    assert paused["scope"] == SCOPE_INFRA and paused["voided"] is True and paused["k"] == 3
    assert paused["pairs"] == ["calc-partial/plain", "calc-partial/goal", "two-stage/plain"]
    assert "401" in paused["message"] or "Unauthorized" in paused["message"], paused
    assert "sk-breaker-test" not in (out / ".runner" / "events.jsonl").read_text()
    voids = events(out, "void")
    assert sorted(v["stamp"] for v in voids) == sorted(s["stamp"] for s in starts)
    assert all(v["reason"].startswith("circuit breaker") for v in voids)
    assert list(iter_job_dirs(out)) == []  # every attempt moved aside, none left as an arm's error
    assert len(list(iter_job_dirs(voided_root(out)))) == 3
    assert last_pause(out) == paused["reason"]
    (exit_ev,) = events(out, "runner_exit")
    assert exit_ev["paused"] == paused["reason"] and exit_ev["errored"] == 0

    # health does not restart a paused run (the cause needs a person)
    h = run_marathon("health", str(out), "--fix", timeout=300, **{key: "x"})
    assert h.returncode == 1 and "run_paused" in h.stdout and len(events(out, "runner_start")) == 1

    # the cause fixed (the model answers again): a resume reruns the voided attempts, every pair once
    r2 = run_marathon(
        "run", str(out), "--resume", "--model", "scripted/solve", "--concurrency", "2", *common,
        timeout=1500, **{key: "sk-breaker-test-not-a-secret"},
    )  # fmt: skip
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-2000:]
    done = done_jobs(out)
    assert sorted(done) == sorted((t, a) for t in TASKS for a in ("plain", "goal"))
    assert all(len(jobs) == 1 for jobs in done.values()), done
    assert len(list(iter_job_dirs(out))) == 4  # no extra attempt beside the four done ones
    assert len(events(out, "run_paused")) == 1 and last_pause(out) is None
