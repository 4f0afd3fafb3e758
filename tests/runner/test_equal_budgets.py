"""Equal budgets and a clean fairness audit on a real five-arm run (the shared run of
tests/runner/five_arm_run.py: the five real arms at once on calc-partial, the scripted
``never-finish`` model, a 30 s GOAL_TIMEOUT_SEC, the task's own agent timeout cut to 40 s).

The preparation differs by arm (the LoopX arms install their profile, the codex arms only check the
mount), yet every receipt has the same ``budget_sec``, every deadline falls at ``budget_start +
GOAL_TIMEOUT_SEC`` (within 2 s), and the receipts agree on the codex binary, the masked config hash,
the image and harbor's timeout, so ``marathon report`` shows no red line. Without the runner raising
harbor's agent timeout, the task's 40 s could not hold a LoopX preparation plus the budget, and the
LoopX arms' budgets would be clamped: the premise is asserted on the run itself. One task, not four:
the budget rule does not depend on the task. (The budget rule does not depend on the budget's
length either; 30 s instead of the 90 s this test once used keeps the run near two minutes.)
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from five_arm_run import BUDGET, TASK, TASK_AGENT_TIMEOUT_SEC
from runner_support import run_marathon

from agents.staging import file_sha256, load_staged
from modes.budget import deadline_margin_sec
from modes.profiles import ARMS, DEFAULT_ARMS

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def five_arm_deadline_run(five_arm_run):
    run = five_arm_run
    assert run.rc == 0, run.console[-3000:]
    assert set(run.receipts) == set(DEFAULT_ARMS), run.console[-3000:]
    return run.out, run.receipts


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
    # one image for the five arms, started together: the task's image built once by the runner
    # (runner.schedule.task_images), run by every trial through harbor's prebuilt path -- the same
    # engine id in every receipt (a trial's own compose build would have labelled its image with
    # the trial's project, another id), and the content digest the runner recorded
    from runner.schedule.task_images import read_record

    recorded = read_record(out, TASK)
    assert recorded is not None
    (image,) = {r["image_digest"] for r in rec.values()}
    assert image == recorded.content_sha256
    assert {r["extra"]["image_id"] for r in rec.values()} == {recorded.image_id}
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
