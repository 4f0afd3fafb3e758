"""The varied demo's scenarios: the scripted model's choice per harness, the plans that hold it, and
the table docs/arms.md shows (fast tier: the model's decision function on requests shaped as the
demo's real ones, recorded from a demo run's ``agent/scripted-model/requests.jsonl``)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "runner" / "demo" / "tasks"
GUARD = (
    "/opt/lxprofile/bin/loopx --runtime-root /opt/lxprofile/runtime --registry /app/.loopx/registry.json "
    "--format json quota should-run --goal-id marathon-goal --agent-id marathon-agent "
    "--available-capability shell --available-capability filesystem_write --runtime-profile {profile}"
)
GOAL_HDR = {"x-codex-turn-metadata": json.dumps({"turn_trigger": "goal"})}


def _server():
    spec = importlib.util.spec_from_file_location("scripted_server", REPO / "agents/scripted_model/server.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


server = _server()


def _body(text: str = "Do the task.", outputs: tuple[str, ...] = ()) -> dict:
    items: list[dict] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    ]
    items += [{"type": "function_call_output", "call_id": c, "output": "ok"} for c in outputs]
    return {"model": "scripted/demo", "input": items}


@pytest.mark.parametrize(
    "text,headers,harness",
    [
        ("Do the task.", {}, "plain"),
        ("Do the task.", GOAL_HDR, "goal"),
        (GUARD.format(profile="codex_app_ssh_goal --begin-turn"), GOAL_HDR, "ssh-goal"),
        (GUARD.format(profile="codex_cli"), GOAL_HDR, "codex-cli"),
        ("LOOPX_TURN=marathon-tick-1-39f39a03\n" + GUARD.format(profile="generic_cli"), {}, "heartbeat"),
    ],
)
def test_the_harness_is_read_from_what_the_arm_sends(text, headers, harness):
    assert server.harness_of(_body(text), headers) == harness


def _run(plan: dict, text: str, headers: dict) -> list[tuple[str, dict]]:
    """Answer as codex would: feed each call's output back until the model sends a message."""
    outputs: list[str] = []
    seen = []
    for _ in range(20):
        kind, what = server.decide("demo", _body(text, tuple(outputs)), headers, plan)
        seen.append((kind, what))
        if kind == "message":
            return seen
        outputs.append(what["call_id"])
    raise AssertionError(f"no answer after 20 requests: {seen}")


PLAN = {"steps": ["echo 1", "echo 2", "echo 3"], "break_steps": ["echo broken"], "answer": "fin"}


def test_partial_runs_the_first_steps_then_completes_the_goal():
    plan = {**PLAN, "demo": {"goal": "partial:2"}}
    seen = _run(plan, "Do the task.", GOAL_HDR)
    cmds = [w["args"].get("cmd") for k, w in seen if k == "call" and w["name"] == "exec_command"]
    assert cmds == ["echo 1", "echo 2"]
    assert [w["name"] for k, w in seen if k == "call"][-1] == "update_goal" and seen[-1][1]["text"] == "fin"


def test_break_runs_the_break_steps_and_unlisted_harnesses_solve():
    plan = {**PLAN, "demo": {"plain": "break"}}
    cmds = [w["args"]["cmd"] for k, w in _run(plan, "Do the task.", {}) if k == "call"]
    assert cmds == ["echo broken"]
    guard = GUARD.format(profile="codex_cli")
    cmds = [w["args"]["cmd"] for k, w in _run(plan, guard, GOAL_HDR) if k == "call" and "cmd" in w["args"]]
    assert cmds == [guard, "echo 1", "echo 2", "echo 3"]  # the LoopX guard first, then the whole plan


def test_block_on_a_loopx_arm_runs_the_guard_then_blocks_the_goal():
    plan = {**PLAN, "demo": {"codex-cli": "block"}}
    guard = GUARD.format(profile="codex_cli")
    kind, what = server.decide("demo", _body(guard), GOAL_HDR, plan)
    assert what["args"]["cmd"] == guard
    kind, what = server.decide("demo", _body(guard, (what["call_id"],)), GOAL_HDR, plan)
    assert (what["name"], what["args"]) == ("update_goal", {"status": "blocked"})


def _plans() -> dict[str, dict]:
    return {
        p.parent.parent.name: json.loads(p.read_text()) for p in sorted(TASKS.glob("*/environment/plan.json"))
    }


def test_every_plan_names_only_known_scenarios_and_harnesses():
    for task, plan in _plans().items():
        for harness, scenario in plan.get("demo", {}).items():
            assert harness in server.PROFILE_HARNESS.values() or harness in ("plain", "goal"), (task, harness)
            name, _, arg = scenario.partition(":")
            assert name in server.DEMO_SCENARIOS and (name != "partial" or arg.isdigit()), (task, scenario)
            if name == "break":
                assert plan.get("break_steps"), task


def test_docs_table_is_the_plans_table():
    """docs/arms.md shows the demo's task x arm table; it must be what the images carry."""
    from marathon.commands.demo import SETUP_FAULT_PAIR
    from modes.profiles import DEFAULT_ARMS

    text = (REPO / "docs" / "arms.md").read_text().split("## The demo's scenarios", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z-]+)` \|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    plans = _plans()
    assert set(rows) == set(plans)
    for task, plan in plans.items():
        expected = []
        for arm in DEFAULT_ARMS:
            cell = f"`{plan.get('demo', {}).get(arm, 'solve')}`"
            if f"{task}/{arm}" == SETUP_FAULT_PAIR:
                cell += " + setup fault once"
            expected.append(cell)
        assert rows[task] == expected, task
