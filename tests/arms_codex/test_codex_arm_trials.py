"""The codex arms in real harbor trials (see conftest.arm_runs for the jobs, run once, concurrently),
each reaching the scripted model through the model gateway as a real run does."""

from __future__ import annotations

import json

import pytest

from agents.staging import file_sha256
from runner.results.rules import partial_score

pytestmark = pytest.mark.docker

MINI = ("build-gate", "calc-partial", "two-stage", "words-passrate")


def _metrics(trial) -> dict:
    return json.loads((trial / "verifier" / "metrics.json").read_text())


def _rollouts(trial) -> list:
    return sorted((trial / "agent" / "sessions").rglob("rollout-*.jsonl"))


@pytest.mark.parametrize("key", ["plain-mini", "goal-mini"])
def test_each_arm_solves_the_mini_tasks(arm_runs, staged_codex, key):
    outcomes, _ = arm_runs
    o = outcomes[key]
    trials = o.by_task()
    assert sorted(trials) == sorted(MINI), o.log_tail()
    for task, trial in trials.items():
        res = o.result(trial)
        assert res["exception_info"] is None, (task, res["exception_info"])
        assert res["verifier_result"]["rewards"]["reward"] == 1.0, task
        rec = o.receipt(trial)
        assert rec["arm"] == ("plain" if key.startswith("plain") else "goal")
        assert rec["command_executions"] >= 1 and rec["errors"] == []
        # the model reached through the gateway, as in a real run: the token, never the key
        assert rec["provider"]["gateway"] == "local", rec["provider"]
        assert rec["provider"]["api_key_var"] == "MARATHON_GATEWAY_TOKEN"
        assert rec["extra"]["relay"]["connections"] > 0 and rec["extra"]["relay"]["unreachable"] == 0
        # what the fairness audit compares: the mounted binary, the config hashes, the image
        assert rec["codex_sha256"] == file_sha256(staged_codex.binary)
        assert rec["image_digest"].startswith("sha256:") and rec["config_toml"]["normalized_sha256"]
        assert res["agent_result"]["n_input_tokens"] > 0 and res["agent_result"]["n_output_tokens"] > 0
        assert (trial / "agent" / "trajectory.json").is_file() and _rollouts(trial)
        if key == "goal-mini":
            assert rec["goal_status_final"] == "complete" and rec["stop_reason"] == "goal_complete"
            assert rec["goal_objective"] == "Finish the task."
        else:
            assert rec["goal_status_final"] is None and rec["stop_reason"] == "turn_completed"
            assert rec["disclosures"], "plain must carry its disclosed substitution"


@pytest.mark.parametrize("key", ["plain-mini", "goal-mini"])
def test_neither_arm_sends_metadata_passthrough(arm_runs, key):
    """The scripted model answers 400 to any request with the field; both arms solve, no 400 seen."""
    outcomes, _ = arm_runs
    o = outcomes[key]
    for trial in o.trials():
        reqs = o.requests(trial)
        assert reqs, "the scripted model recorded no request"
        assert all(r.get("outcome") != "400 passthrough" for r in reqs)
        assert all(r.get("auth_sha256_12") for r in reqs if r["method"] == "POST")


@pytest.mark.parametrize("key", ["never-plain", "never-goal"])
def test_deadline_scores_partial_progress_without_error(arm_runs, key):
    outcomes, _ = arm_runs
    o = outcomes[key]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is None, res["exception_info"]
    assert res["verifier_result"] is not None
    calls = [r["answer"].get("call_id", "") for r in o.requests(trial) if r.get("outcome") == "call"]
    assert any(c.startswith("call_scr_tick_") for c in calls), "the plan's first step never finished"
    assert partial_score(_metrics(trial)) == pytest.approx(0.4)  # add (given) + sub (the plan's first step)
    rec = o.receipt(trial)
    assert rec["deadline_hit"] is True and rec["stop_reason"] == "deadline"
    assert rec["goal_timeout_sec"] == float(o.job.ae["GOAL_TIMEOUT_SEC"]) and rec["errors"] == []
    # the budget started right before the first model request and the deadline ended it on time
    assert rec["budget_sec"] == float(o.job.ae["GOAL_TIMEOUT_SEC"]) and rec["prep_sec"] > 0
    assert rec["budget_start"] and abs(rec["extra"]["deadline_after_sec"] - rec["budget_sec"]) <= 2
    assert rec["extra"]["budget_anchor"] == "first model request"  # where the wire's budget starts
    assert rec["budget_used_sec"] >= rec["extra"]["deadline_after_sec"]
    assert _rollouts(trial), "sessions must be saved after a timeout"


def test_workdir_not_app_and_non_root_user(arm_runs):
    for key in ("special-plain", "special-goal"):
        o = arm_runs[0][key]
        trials = o.by_task()
        assert sorted(trials) == ["nonroot-user", "workdir-srv"], o.log_tail()
        for task, trial in trials.items():
            res = o.result(trial)
            assert res["exception_info"] is None, (key, task, res["exception_info"])
            assert res["verifier_result"]["rewards"]["reward"] == 1.0, (key, task)
        assert o.receipt(trials["workdir-srv"])["transport"]["workdir"] == "/srv/work"
        assert o.receipt(trials["nonroot-user"])["transport"]["user"] == "worker"


def test_no_command_line_contains_the_credential(arm_runs):
    _, watcher = arm_runs
    assert watcher.scans > 10 and watcher.appserver_seen > 0, "the watcher never overlapped a run"
    assert watcher.offenders == []


def test_noise_line_on_appserver_stdout_does_not_break_the_run(arm_runs):
    o = arm_runs[0]["noise-plain"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is None and res["verifier_result"]["rewards"]["reward"] == 1.0
    rec = o.receipt(trial)
    assert any("not JSON" in line for line in rec["noise_lines"])
    raw = (trial / "agent" / "appserver.stdout.jsonl").read_text()
    assert raw.startswith("welcome to the trial container")  # kept as evidence
    assert {r["scenario"] for r in o.requests(trial) if r["method"] == "POST"} == {"noise"}


def test_missing_sidecar_fails_loudly_before_any_turn(arm_runs):
    o = arm_runs[0]["no-sidecar"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is not None
    assert "codex-code-mode-host" in res["exception_info"]["exception_message"]
    rec = o.receipt(trial)
    assert rec["stop_reason"] == "error" and rec["turns"] == 0
    assert o.requests(trial) == []  # not a single model request was spent


def test_blocked_goal_ends_the_goal_arm(arm_runs):
    o = arm_runs[0]["block-goal"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is None
    rec = o.receipt(trial)
    assert rec["goal_status_final"] == "blocked" and rec["stop_reason"] == "goal_blocked"


@pytest.mark.parametrize("key", ["cancel-plain", "cancel-goal"])
def test_receipt_and_sessions_survive_harbor_cancellation(arm_runs, key):
    o = arm_runs[0][key]
    assert o.cancelled_at is not None, "the run never reached a turn: " + o.log_tail()
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"]["exception_type"] == "CancelledError"
    rec = o.receipt(trial)
    assert rec["stop_reason"] == "cancelled" and rec["turns"] >= 1
    assert _rollouts(trial), "sessions must be saved under cancellation"
    assert (trial / "agent" / "appserver.stdout.jsonl").stat().st_size > 0


def test_goal_arm_follows_codex_continuations(arm_runs):
    o = arm_runs[0]["continue-goal"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is None and res["verifier_result"]["rewards"]["reward"] == 1.0
    rec = o.receipt(trial)
    assert rec["our_turns"] == 1 and rec["continuations"] == 1 and rec["turns"] == 2
    assert rec["goal_status_final"] == "complete"


def test_zero_token_goal_loop_is_stopped_and_reported(arm_runs):
    o = arm_runs[0]["zero-goal"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert "consecutive turns used zero tokens" in res["exception_info"]["exception_message"]
    rec = o.receipt(trial)
    assert rec["stop_reason"] == "error" and rec["deadline_hit"] is False
    # three empty turns trip the guard; codex continues within milliseconds, so on a loaded machine
    # a turn or two more may start before the app-server is gone -- but never thousands
    assert 3 <= rec["turns"] <= 6 and rec["token_usage"].get("totalTokens", 0) == 0
    assert 3 <= len(o.requests(trial)) <= 10  # stopped at once, not 17,945 turns later


def test_unsupported_call_tool_output_fails_loudly(arm_runs):
    """codex answers a retired tool with 'unsupported call' and still completes the turn: the arm
    must not report that as a clean run."""
    o = arm_runs[0]["unsupported-plain"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert "unsupported call" in res["exception_info"]["exception_message"]
    rec = o.receipt(trial)
    assert rec["stop_reason"] == "error" and any("unsupported call" in e for e in rec["errors"])
    assert _rollouts(trial)


def test_copy_delivery_where_no_mount_is_possible_says_so(arm_runs, staged_codex):
    o = arm_runs[0]["copy-goal"]
    (trial,) = o.trials()
    res = o.result(trial)
    assert res["exception_info"] is None and res["verifier_result"]["rewards"]["reward"] == 1.0
    assert "mounts" not in json.loads((trial / "config.json").read_text()).get("environment", {})
    rec = o.receipt(trial)
    assert rec["extra"]["codex_delivery"] == "copy"
    assert any("copied into the container" in w for w in rec["warnings"])
    assert rec["codex_sha256"] == file_sha256(staged_codex.binary)  # the staged tree copied in
