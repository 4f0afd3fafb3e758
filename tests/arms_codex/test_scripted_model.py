"""The scripted model itself, served on the host's 127.0.0.1 (stdlib server, real HTTP, no Docker)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[2] / "agents" / "scripted_model" / "server.py"


@pytest.fixture
def server(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"steps": ["echo a > a.txt"], "answer": "fin"}))
    log = tmp_path / "requests.jsonl"
    env = dict(os.environ, SCRIPTED_PORT=str(port), SCRIPTED_PLAN=str(plan), SCRIPTED_LOG=str(log))
    proc = subprocess.Popen([sys.executable, str(SERVER)], env=env, stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", log
    proc.terminate()  # the server we started, by its handle
    proc.wait(10)


def _post(base: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"{base}/v1/responses", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer sk-unit", **(headers or {})})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _events(sse: str) -> list[dict]:
    return [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]


def test_passthrough_field_is_rejected_with_400(server):
    base, log = server
    item = {
        "type": "message",
        "role": "user",
        "content": [],
        "internal_chat_message_metadata_passthrough": {},
    }
    status, body = _post(base, {"model": "scripted/solve", "input": [item]})
    assert status == 400 and json.loads(body)["error"]["code"] == "unknown_parameter"
    (entry,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert entry["outcome"] == "400 passthrough" and "sk-unit" not in log.read_text()


def test_solve_calls_the_plan_then_completes_a_goal_then_answers(server):
    base, _ = server
    goal_hdr = {"x-codex-turn-metadata": json.dumps({"turn_trigger": "goal"})}
    _, sse = _post(base, {"model": "scripted/solve", "input": []}, goal_hdr)
    kinds = [e["type"] for e in _events(sse)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    call = _events(sse)[2]["item"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"])["cmd"] == "echo a > a.txt"
    done = [{"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]
    _, sse = _post(base, {"model": "scripted/solve", "input": done}, goal_hdr)
    goal_call = _events(sse)[2]["item"]
    assert goal_call["name"] == "update_goal" and json.loads(goal_call["arguments"]) == {"status": "complete"}
    done.append({"type": "function_call_output", "call_id": goal_call["call_id"], "output": "{}"})
    _, sse = _post(base, {"model": "scripted/solve", "input": done}, goal_hdr)
    assert _events(sse)[-2]["item"]["content"][0]["text"] == "fin"


def test_unknown_scenario_is_a_400_and_stats_count_requests(server):
    base, _ = server
    assert _post(base, {"model": "gpt-5.5", "input": []})[0] == 400
    with urllib.request.urlopen(f"{base}/__scripted/stats", timeout=5) as resp:
        assert json.loads(resp.read())["requests"] == 1
