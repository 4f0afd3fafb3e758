"""A trial container killed while harbor's verifier runs is the sandbox's failure, never the arm's.

Found by the fresh-clone chaos run: ``docker kill`` of a trial container after the agent ended
made harbor's verifier fail with ``RewardFileNotFoundError`` (harbor files that as the verifier's
failure, and no trial file says the sandbox went away), and the runner scored the attempt as the
arm's error. The runner now follows the engine's container deaths (``runner.ops.death_watch``):
a main container that died without a stop request before the trial's last phase ended voids the
attempt (row ``container_died``). Harbor's own teardown (``compose down``, after the last phase)
does not, so a verifier that simply wrote no reward stays a scored error.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from runner_support import DEMO_TASKS, events, run_marathon, start_marathon, wait_for, write_task

from modes.naming import compose_project
from runner.ops.void import VOID_JSON
from runner.results.tree import iter_job_dirs, iter_trial_dirs, voided_root

pytestmark = [pytest.mark.docker]
BASE_IMAGE = "marathon-base:bookworm"
STARTED = "verifier-started"

TEST_SH = {
    # the verifier says it started (its dir is the trial's verifier/ on the host), then takes its time
    "slow-verify": f"#!/bin/bash\ntouch /logs/verifier/{STARTED}\nsleep 120\necho 1 > /logs/verifier/reward.txt\n",
    # a verifier that writes no reward: harbor's RewardFileNotFoundError, the task's own failure
    "no-reward": "#!/bin/bash\necho 'no reward today'\n",
}


@pytest.fixture
def tasks(tmp_path, docker_engine):
    suffix = uuid.uuid4().hex[:6]
    root = tmp_path / "tasks"
    for name, script in TEST_SH.items():
        write_task(root, name, f"deaths-test/{name}-{suffix}", script, base=BASE_IMAGE)
    yield root
    subprocess.run(["docker", "image", "rm", *[f"hb__{n}-{suffix}" for n in TEST_SH]], capture_output=True)


def _trial(out, task):
    for t_name, *_, job in iter_job_dirs(out):
        if t_name == task:
            for t in iter_trial_dirs(job):
                return t
    return None


def test_container_killed_under_the_verifier_is_voided_and_a_missing_reward_is_scored(
    out_tree, tasks, tmp_path
):
    out = out_tree

    def ready() -> str | None:
        t = _trial(out, "slow-verify")
        return _main_container(compose_project(t.name)) if t and (t / "verifier" / STARTED).exists() else None

    cid = _kill_when(
        ready,
        ["run", str(out), "--tasks-dir", str(tasks), "--arms", "nop", "--concurrency", "2", "--max-passes", "1",
         "--plain"],
        tmp_path / "runner.log",
    )  # fmt: skip
    log = (tmp_path / "runner.log").read_text()[-3000:]
    fin = {e["task"]: e for e in events(out, "job_finish")}
    assert fin["slow-verify"]["status"] == "void", log
    assert fin["no-reward"]["status"] == "errored", log
    assert "RewardFileNotFoundError" in fin["no-reward"]["detail"], fin["no-reward"]

    (voided,) = [job for t, *_, job in iter_job_dirs(voided_root(out)) if t == "slow-verify"]
    stamp = json.loads((voided.parent / VOID_JSON).read_text())
    evidence = "\n".join(stamp["evidence"])
    assert "RewardFileNotFoundError" in evidence  # what harbor said ...
    assert (
        f"main container {cid[:12]} die" in evidence and "without a stop request" in evidence
    )  # ... and the engine
    assert "container die under it" in stamp["reason"], stamp
    # the scored one stays in the tree, not voided, though harbor's teardown ended its container too
    assert _trial(out, "no-reward") is not None
    assert [t for t, *_ in iter_job_dirs(voided_root(out)) if t == "no-reward"] == []
    r = run_marathon("report", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "step",
    [
        "pip install",  # the LoopX profile install: the failed step asks SandboxTransport.lost
        "agents.sandbox_driver",  # the in-sandbox driver runs: the status watch asks at its next poll
    ],
)
def test_container_killed_under_a_loopx_arm_is_voided_by_the_arm(step, out_tree, tmp_path, docker_engine):
    """The arm's own check (``SandboxTransport.lost``, the in-sandbox route every arm takes by default)
    says the sandbox went away, before the runner's watch would: the reason is the arm's
    ``EnvironmentLost``, not a scored ``ArmFailure: LoopX profile install: exit 137`` (what the
    fresh-clone chaos run scored)."""
    out = out_tree
    key = "MARATHON_DEMO_MODEL_KEY"

    def ready() -> str | None:
        t = _trial(out, "two-stage")
        cid = _main_container(compose_project(t.name)) if t and (t / "agent").is_dir() else None
        return cid if cid and step in _processes(cid) else None

    cid = _kill_when(
        ready,
        ["run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", "two-stage", "--arms", "codex-cli",
         "--concurrency", "1", "--max-passes", "1", "--model", "scripted/loopx", "--ak", f"api_key_var={key}",
         "--plain"],
        tmp_path / "runner.log",
        **{key: "scripted-placeholder"},
    )  # fmt: skip
    log = (tmp_path / "runner.log").read_text()[-3000:]
    (fin,) = events(out, "job_finish")
    assert fin["status"] == "void", log
    assert fin["detail"].startswith(
        "EnvironmentLost: the trial's container or engine went away under the agent"
    ), fin
    (voided,) = [job for *_, job in iter_job_dirs(voided_root(out))]
    evidence = "\n".join(json.loads((voided.parent / VOID_JSON).read_text())["evidence"])
    assert f"container {cid[:12]} is exited (exit code 137)" in evidence, evidence


def _main_container(project: str) -> str | None:
    ids = subprocess.run(
        ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={project}",
         "--filter", "label=com.docker.compose.service=main"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return ids[0] if len(ids) == 1 else None


def _processes(cid: str) -> str:
    """The command lines running in the container (``docker top``, read on the host)."""
    return subprocess.run(["docker", "top", cid, "-eo", "pid,args"], capture_output=True, text=True).stdout


def _kill_when(ready, args: list[str], log, **env: str) -> str:
    """Run ``marathon`` with ``args``; ``docker kill`` the container ``ready()`` names once it names
    one; return its id after the runner ended."""
    proc = start_marathon(*args, log=log, **env)
    try:
        cid = wait_for(ready, 600, "the moment to kill", step=0.2)
        subprocess.run(["docker", "kill", cid], check=True, capture_output=True)  # ours, by exact id
        proc.wait(600)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
    return cid


def test_an_engine_restart_under_the_verifier_voids_the_trial(docker_engine, tmp_path):
    """A real dockerd restart (a private engine in its own network namespace) stops the running trial
    container with ``kill``/``die``/``stop`` events, the same as harbor's teardown. Under the verifier
    (the container stopped before harbor's ``verifier.finished_at``) it failed the verifier with
    ``RewardFileNotFoundError``, and the runner scored that against the arm (the chaos run of
    2026-12-05); now the runner's watch (``runner.ops.death_watch``) voids it (row
    ``container_died``), and harbor's own stop after the verifier stays harbor's."""
    import os
    import shutil
    import time
    from datetime import UTC, datetime

    from private_engine import private_dockerd

    from runner.ops.death_watch import DeathWatch
    from runner.ops.void import classify_trial

    if os.geteuid() != 0 or not all(shutil.which(b) for b in ("dockerd", "unshare", "nsenter")):
        pytest.skip("a private dockerd needs root, dockerd, unshare and nsenter")
    trial = "calc-partial__restart1"
    project = compose_project(trial)

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")

    def harbor_trial(root, verifier_finished: float, end: float | None = None,
                     exc=("RewardFileNotFoundError", "No reward file")):  # fmt: skip
        t = root / trial
        t.mkdir(parents=True)
        res = {"exception_info": {"exception_type": exc[0], "exception_message": exc[1]},
               "agent_setup": {"started_at": "a", "finished_at": "b"},
               "agent_execution": {"started_at": "a", "finished_at": "b"},
               "verifier": {"started_at": "a", "finished_at": iso(verifier_finished)},
               "finished_at": iso(time.time() + 60 if end is None else end)}  # fmt: skip
        (t / "result.json").write_text(json.dumps(res, indent=4))  # as harbor writes it
        return t

    with private_dockerd() as pd:
        pd.load_images(BASE_IMAGE)
        pd.client.containers.run(BASE_IMAGE, ["sleep", "600"], detach=True, labels={
            "com.docker.compose.project": project, "com.docker.compose.service": "main"})  # fmt: skip
        watch = DeathWatch(base_url=pd.host).start()
        try:
            assert watch.connected.is_set()
            before = time.time()
            pd.restart()
            (died,) = wait_for(
                lambda: watch.deaths_of({project}), 60, "the restart's stop, once the watch is back"
            )
            assert died.stopped and died.at > before  # the engine's stop: the same events as harbor's
            # (classified once the watch is back: while the engine is away, a trial that ends is its)
            wait_for(lambda: watch.is_up() or None, 60, "the watch back on the restarted engine")
            v = classify_trial(harbor_trial(tmp_path / "under", died.at + 1), deaths=watch)
            assert (v.kind, v.rule) == ("infra", "container_died"), (v.kind, v.rule, v.evidence)
            assert (
                classify_trial(harbor_trial(tmp_path / "after", died.at - 1), deaths=watch).kind == "errored"
            )
            # the chaos run of 2026-12-07: the restart killed harbor's own command at the verifier's
            # start, the stop came after harbor closed the verifier phase, and the runner classified
            # the trial before the engine was back: it was scored against the arm. The stream's loss
            # near the trial's end is the engine's account of it
            lost = wait_for(lambda: watch.lost_times() or None, 30, "the stream's loss")[-1]
            killed = ("RuntimeError", "Failed to remove verifier reward files (exit code 137): None")
            # the stop after harbor closed the verifier phase: no death of the trial's by the stop rule
            near = harbor_trial(tmp_path / "near", died.at - 1, end=max(died.at, lost) + 1, exc=killed)
            v = classify_trial(near, deaths=watch)
            assert (v.kind, v.rule) == ("infra", "container_died"), (v.kind, v.rule, v.evidence)
            assert any("the engine went away" in e for e in v.evidence), v.evidence
            long_before = harbor_trial(tmp_path / "long-before", lost - 200, end=lost - 100, exc=killed)
            assert classify_trial(long_before, deaths=watch).kind == "errored"  # no engine loss near it
        finally:
            watch.stop()
