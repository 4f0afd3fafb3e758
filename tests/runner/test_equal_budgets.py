"""Equal budgets and a clean fairness audit on a real five-arm run.

``marathon run`` drives the five real arms (real harbor, Docker, codex, LoopX) on one mini task with
the scripted ``never-finish`` model and a 30 s GOAL_TIMEOUT_SEC. The test's copy of the task sets its
own agent timeout to 40 s: less than a LoopX arm's preparation (33 s on a quiet machine) plus the
budget, so without the runner raising harbor's timeout the LoopX arms' budgets would be clamped and
this test would fail. (The budget rule does not depend on the budget's length; 30 s instead of the
90 s this test once used keeps the five arms' run near two minutes.)
The preparation differs by arm (the LoopX arms install their profile, the codex arms only check
the mount), yet every receipt has the same ``budget_sec``, every deadline falls at
``budget_start + GOAL_TIMEOUT_SEC`` (within 2 s), and the receipts agree on the codex binary, the
masked config hash, the image and harbor's timeout, so ``marathon report`` shows no red line.
One task, not four: five arms x four tasks of LoopX installs at once overran a loaded 2-core
machine; the budget rule does not depend on the task.

The task's image is built FROM a demo image tagged for this test alone: the shared engine's
the shared demo image tag is rebuilt by any checkout whose scripted model differs, and one such
rebuild in the middle of a run gave one arm another image (the audit rightly flagged it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from datetime import UTC, datetime

import pytest
from runner_support import DEMO_TASKS, done_jobs, run_marathon, start_marathon

from agents.staging import file_sha256, load_staged
from modes.budget import deadline_margin_sec
from modes.profiles import ARMS, DEFAULT_ARMS

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = "calc-partial"
BUDGET = 30
#: the task copy's own agent timeout: shorter than a LoopX preparation plus BUDGET (see above)
TASK_AGENT_TIMEOUT_SEC = 40.0
KEY_VAR = "MARATHON_DEMO_MODEL_KEY"


@pytest.fixture(scope="module")
def five_arm_deadline_run(docker_engine, module_out, tmp_path_factory):
    from agents.loopx_staging import stage_loopx
    from agents.scripted_model.image import DEMO_IMAGE, ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    image = ensure_demo_image(f"marathon-demo-base:budget-{uuid.uuid4().hex[:10]}")
    tasks = tmp_path_factory.mktemp("tasks")
    shutil.copytree(DEMO_TASKS / TASK, tasks / TASK)
    dockerfile = tasks / TASK / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace(f"FROM {DEMO_IMAGE}", f"FROM {image}", 1))
    assert f"FROM {image}" in dockerfile.read_text()
    toml = tasks / TASK / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[agent]\ntimeout_sec = 120.0", f"[agent]\ntimeout_sec = {TASK_AGENT_TIMEOUT_SEC}", 1
        )
    )
    assert f"timeout_sec = {TASK_AGENT_TIMEOUT_SEC}" in toml.read_text()
    try:
        yield _run(module_out, tasks, tmp_path_factory.mktemp("log") / "runner.log")
    finally:
        subprocess.run(["docker", "image", "rm", image], capture_output=True, timeout=120)  # our tag only


def _run(module_out, tasks, log):
    proc = start_marathon(
        "run", str(module_out), "--tasks-dir", str(tasks), "--tasks", TASK,
        "--arms", ",".join(DEFAULT_ARMS), "--model", "scripted/never-finish",
        "--ak", f"api_key_var={KEY_VAR}", "--goal-timeout-sec", str(BUDGET),
        # the five at once: the preparations overlap (the allowance holds a slow one), and the five
        # budgets run side by side
        "--concurrency", "5", "--max-passes", "2", "--plain",
        log=log, **{KEY_VAR: "scripted-placeholder"},
    )  # fmt: skip
    rc = proc.wait(timeout=2400)
    console = log.read_text(errors="replace")
    assert rc == 0, console[-3000:]
    done = done_jobs(module_out)
    assert {a for (t, a) in done} == set(DEFAULT_ARMS), console[-3000:]
    receipts = {}
    for arm in DEFAULT_ARMS:
        (job,) = done[(TASK, arm)]
        (path,) = job.glob("*/agent/goal_receipt.json")
        receipts[arm] = json.loads(path.read_text())
    return module_out, receipts


def test_every_arm_gets_the_same_budget_whatever_its_preparation(five_arm_deadline_run):
    _out, rec = five_arm_deadline_run
    assert {a: r["budget_sec"] for a, r in rec.items()} == dict.fromkeys(DEFAULT_ARMS, float(BUDGET))
    assert {r["extra"]["budget_source"] for r in rec.values()} == {"GOAL_TIMEOUT_SEC"}
    # the preparation really differs: every LoopX arm installs its profile before its budget starts
    loopx = [a for a in DEFAULT_ARMS if ARMS[a].loopx]
    codex = [a for a in DEFAULT_ARMS if not ARMS[a].loopx]
    assert min(rec[a]["prep_sec"] for a in loopx) > max(rec[a]["prep_sec"] for a in codex), {
        a: r["prep_sec"] for a, r in rec.items()
    }
    # the premise: the task's own agent timeout could not hold a LoopX preparation plus the budget
    assert min(rec[a]["prep_sec"] for a in loopx) + BUDGET > TASK_AGENT_TIMEOUT_SEC
    # harbor's agent timeout (raised by the runner) is the same for all and held budget + preparation
    (harbor_sec,) = {r["extra"]["harbor_agent_timeout_sec"] for r in rec.values()}
    for r in rec.values():
        assert harbor_sec - deadline_margin_sec(harbor_sec) >= r["prep_sec"] + BUDGET


def test_the_deadline_falls_at_budget_start_plus_goal_timeout_for_every_arm(five_arm_deadline_run):
    _out, rec = five_arm_deadline_run
    for arm, r in rec.items():
        assert r["deadline_hit"] is True and r["stop_reason"] == "deadline", (
            arm,
            r["stop_reason"],
            r["errors"],
        )
        assert abs(r["extra"]["deadline_after_sec"] - BUDGET) <= 2, (arm, r["extra"]["deadline_after_sec"])
        # budget_start (UTC, to the second) + the budget is when the deadline fell, on the wall clock
        start = datetime.strptime(r["budget_start"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        finished = datetime.strptime(r["timings"]["finished"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert (finished - start).total_seconds() >= BUDGET - 1, arm


def test_receipts_record_the_binary_config_and_image_and_the_audit_is_clean(five_arm_deadline_run):
    out, rec = five_arm_deadline_run
    binary = load_staged().binary
    assert {r["codex_sha256"] for r in rec.values()} == {file_sha256(binary)}
    # one image content for the five arms, though compose gave each trial's build its own image id
    (image,) = {r["image_digest"] for r in rec.values()}
    assert image.startswith("sha256:")
    assert all(r["extra"]["image_id"].startswith("sha256:") for r in rec.values())
    assert len({r["config_toml"]["normalized_sha256"] for r in rec.values()}) == 1
    for arm, r in rec.items():
        assert r["masked"] == [m.as_dict() for m in ARMS[arm].masked]
    report = run_marathon("report", str(out))
    assert report.returncode == 0, report.stderr
    assert "ALARM arms differ" not in report.stdout, report.stdout
    line = next(ln for ln in report.stdout.splitlines() if ln.startswith("No undeclared difference"))
    for label in (
        "codex sha256",
        "config.toml sha256 (declared differences masked)",
        "image digest",
        "budget_sec",
    ):
        assert label in line, line
