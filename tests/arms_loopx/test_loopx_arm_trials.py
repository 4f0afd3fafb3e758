"""The three LoopX arms in real harbor trials (real Docker, codex, LoopX, Node 22; the scripted model
on the host, reached through the model gateway as in a real run).

All jobs run once per session, concurrently (conftest.loopx_runs).
"""

from __future__ import annotations

import json

import pytest

from modes.profiles import ARMS
from runner.results.rules import partial_score

pytestmark = pytest.mark.docker

MODES = ("ssh-goal", "codex-cli", "heartbeat")


def _guard_runs(o) -> list[dict]:
    return [c for c in o.commands() if " quota should-run " in c["command"]]


@pytest.mark.parametrize("arm", MODES)
def test_each_mode_solves_a_mini_task_running_the_loopx_guard_in_the_container(loopx_runs, arm):
    o = loopx_runs[arm]
    res = o.result()
    assert res["exception_info"] is None, res["exception_info"]
    assert res["verifier_result"]["rewards"]["reward"] == 1.0
    rec = o.receipt()
    lx = rec["extra"]["loopx"]
    assert (
        rec["arm"] == arm
        and rec["mode"]["runtime_profile"]
        == {"ssh-goal": "codex_app_ssh_goal", "codex-cli": "codex_cli", "heartbeat": "generic_cli"}[arm]
    )
    assert [g["gate"] for g in lx["gates"]] == ["skills", "doctor", "skills/list"]
    assert all(g["ok"] for g in lx["gates"])
    assert lx["parts"]["delivery"] == "mounted" and lx["profile"]["node"] >= "v22.22.3"
    # the model reached through the gateway, as in a real run: the token, never the key
    assert (
        rec["provider"]["gateway"] == "local" and rec["provider"]["api_key_var"] == "MARATHON_GATEWAY_TOKEN"
    )
    assert rec["extra"]["relay"]["connections"] > 0 and rec["extra"]["relay"]["unreachable"] == 0
    # the real LoopX CLI ran inside the container, through codex's own shell, and answered ok
    guards = _guard_runs(o)
    assert guards and all(g["exitCode"] == 0 for g in guards)
    assert all('"ok":true' in (g.get("aggregatedOutput") or "").replace(" ", "") for g in guards)
    assert lx["body"]["chars"] > 1000 and len(lx["body"]["sha256"]) == 64
    # LoopX evidence survives the container
    goal_dir = o.trial / "agent" / "loopx" / "project" / ".loopx"
    assert (goal_dir / "registry.json").is_file()
    state = (goal_dir / "goals" / "marathon-goal" / "ACTIVE_GOAL_STATE.md").read_text()
    assert state.startswith("---\nstatus: active") and "calc.py" in state
    assert (o.trial / "agent" / "loopx" / "runtime").is_dir()
    assert rec["disclosures"] == list(ARMS[arm].disclosures)  # heartbeat's substitution travels along
    if arm == "heartbeat":
        assert rec["disclosures"] and rec["mode"]["substitution"] == "codex_app"
        assert rec["stop_reason"] == "heartbeat_idle"
        ticks = lx["ticks"]
        assert len(ticks) >= 2 and ticks[0]["work_commands"] >= 3 and ticks[-1]["work_commands"] == 0
        assert len({t["loopx_turn"] for t in ticks}) == len(ticks)  # a new turn instance per tick
        # the first tick's body was rendered in the preparation (none of the budget spent on it, as
        # for the goal modes); every later tick renders its own inside the budget, and says how long
        assert (
            ticks[0]["render_sec"] is None and lx["bodies"][0]["turn_instance_id"] == ticks[0]["loopx_turn"]
        )
        assert all(t["render_sec"] > 0 for t in ticks[1:])
        assert all(
            "LOOPX_TURN=" + t["loopx_turn"] in g["command"] for t, g in zip(ticks, guards, strict=True)
        )
        assert lx["pacing"][0]["action"]  # LoopX's scheduler hint was read between ticks
        assert rec["goal_status_final"] is None and rec["our_turns"] == len(ticks)
    else:
        assert rec["stop_reason"] == "goal_complete" and rec["goal_status_final"] == "complete"
        assert rec["extra"]["goal_objective_chars"] == lx["body"]["chars"]  # the body is the objective
        assert (
            "--runtime-profile codex_app_ssh_goal --begin-turn" in guards[0]["command"]
            if arm == "ssh-goal"
            else True
        )


def test_body_digest_matches_the_saved_body(loopx_runs):
    import hashlib

    o = loopx_runs["ssh-goal"]
    body = (o.trial / "agent" / "loopx-body.txt").read_text()
    lx = o.receipt()["extra"]["loopx"]
    assert (
        hashlib.sha256(body.encode()).hexdigest() == lx["body"]["sha256"] and len(body) == lx["body"]["chars"]
    )


@pytest.mark.parametrize(
    "key,names",
    [
        ("no-node", "node missing"),
        ("old-node", "LoopX gate 'doctor' failed"),
        ("future-skill", "LoopX gate 'skills' failed"),
    ],
)
def test_broken_profile_fails_before_the_first_model_request(loopx_runs, key, names):
    o = loopx_runs[key]
    res = o.result()
    assert res["exception_info"] is not None and names in res["exception_info"]["exception_message"]
    assert res["verifier_result"] is None
    rec = o.receipt()
    assert rec["stop_reason"] == "error" and rec["turns"] == 0
    assert o.requests() == []  # the scripted model ran and recorded not a single request
    lx = rec["extra"]["loopx"]
    if key == "future-skill":
        assert lx["failed_gate"] == "skills" and "loopx-future-skill" in lx["gates"][0]["data"]["missing"]
    if key == "old-node":
        assert (
            lx["failed_gate"] == "doctor" and "typescript_effect_runtime_ready" in lx["gates"][-1]["detail"]
        )


def test_blocked_goal_is_resumed_and_counted_when_ungated(loopx_runs):
    o = loopx_runs["block-ungated"]
    res = o.result()
    assert res["exception_info"] is None and res["verifier_result"]["rewards"]["reward"] == 1.0
    rec = o.receipt()
    lx = rec["extra"]["loopx"]
    assert rec["unblocks"] == 1 and rec["stop_reason"] == "goal_complete", lx
    # counted from the goal's transitions, whichever of codex's orderings this run took
    (event,) = lx["unblock_events"]
    assert event["n"] == 1 and event["from"] == "blocked" and event["turns_before"] >= 1
    assert [e["to"] for e in lx["blocked_events"]] == ["blocked"]
    assert lx["ungated"] is True


def test_a_block_over_before_the_harness_looks_is_still_counted(loopx_runs):
    """The fresh-machine ordering, pinned: goal turn blocks and ends, then the instruction turn runs."""
    o = loopx_runs["block-before-instruction"]
    res = o.result()
    assert res["exception_info"] is None and res["verifier_result"]["rewards"]["reward"] == 1.0
    rec = o.receipt()
    lx = rec["extra"]["loopx"]
    assert lx["instruction_turn"] == "separate" and lx["harness_resumes"] == 0
    # the harness never saw a quiet blocked goal; the goal still went blocked once and left it once
    assert rec["unblocks"] == 1 and rec["stop_reason"] == "goal_complete"
    (blocked,) = lx["blocked_events"]
    (event,) = lx["unblock_events"]
    first, ours = rec["extra"]["thread_turns"]
    assert blocked["by"] == f"turn {first}" and (event["from"], event["to"]) == ("blocked", "complete")
    assert event["by"] == f"turn {ours}"
    statuses = [t["to"] for t in rec["extra"]["goal_transitions"]]
    assert statuses == ["active", "blocked", "complete"]


def test_blocked_goal_ends_the_run_as_blocked_when_gated(loopx_runs):
    """Gated, the harness never plays the user: it never resumes a blocked goal. Which outcome the
    run has depends on an ordering inside codex (see test_a_block_over_before_the_harness_looks_is_
    still_counted): when the instruction merges into the goal's turn, the blocked goal ends the run;
    when codex runs it as a separate turn after the block, the model may complete the goal from
    blocked in that turn. Either way the block is recorded, and so is who left it."""
    o = loopx_runs["block-gated"]
    res = o.result()
    assert res["exception_info"] is None
    rec = o.receipt()
    lx = rec["extra"]["loopx"]
    assert lx["ungated"] is False and lx["harness_resumes"] == 0, lx
    assert [e["to"] for e in lx["blocked_events"]] == ["blocked"], lx
    if rec["stop_reason"] == "goal_blocked":
        assert rec["unblocks"] == 0 and lx["unblock_events"] == [] and rec["goal_status_final"] == "blocked"
    else:
        assert lx["instruction_turn"] == "separate", lx  # only that ordering can leave the block
        (event,) = lx["unblock_events"]
        assert event["from"] == "blocked" and str(event["by"]).startswith("turn"), event


@pytest.mark.parametrize("key", ["never-ssh-goal", "never-heartbeat"])
def test_deadline_scores_partial_progress_like_the_codex_arms(loopx_runs, key):
    o = loopx_runs[key]
    res = o.result()
    assert res["exception_info"] is None, res["exception_info"]
    assert res["verifier_result"] is not None
    rec = o.receipt()
    assert rec["deadline_hit"] is True and rec["stop_reason"] == "deadline" and rec["errors"] == []
    # the LoopX preparation is outside the budget: the model gets GOAL_TIMEOUT_SEC like the codex arms
    assert rec["budget_sec"] == float(o.job.ae["GOAL_TIMEOUT_SEC"]) and rec["prep_sec"] > 0
    assert abs(rec["extra"]["deadline_after_sec"] - rec["budget_sec"]) <= 2
    assert rec["extra"]["budget_anchor"] == "first model request"  # where the wire's budget starts
    # the deadline hit while the model was working (not during the LoopX install) ...
    # (the stamps have 1 s resolution: a fast install can share its second with the first turn)
    assert len(o.requests()) >= 2 and rec["timings"]["loopx_ready"] <= rec["timings"]["first_turn"]
    # ... and the verifier scored exactly the work that landed: add (given) + sub (the plan's first step)
    sub_done = any("def sub" in c["command"] and c["exitCode"] == 0 for c in o.commands())
    metrics = json.loads((o.trial / "verifier" / "metrics.json").read_text())
    assert sub_done and partial_score(metrics) == pytest.approx(0.4)
    assert (o.trial / "agent" / "loopx" / "project" / ".loopx" / "registry.json").is_file()
