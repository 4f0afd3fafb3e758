"""The session API the LoopX arms build on, against the real codex in a real container.

skills/list before thread/start, a long goal objective, a blocked goal resumed by the harness (an
unblock), the deadline raised by message, server requests answered -- without harbor, through the
same docker-exec transport and agent code the arms use.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from agents.codex_goal_agent import CodexGoalAgent
from agents.session import is_deadline
from agents.transport import DockerExecTransport

pytestmark = pytest.mark.docker

KEY_VAR = "MARATHON_TEST_MODEL_KEY"
PLAN = {"steps": ["echo one > one.txt", "echo two > two.txt"], "answer": "done", "partial_steps": 1}


@pytest.fixture
def container(docker_engine, demo_image, staged_codex):
    cid = subprocess.run(
        ["docker", "run", "-d", "--label", "org.marathon.test=arms-codex-session", "-w", "/work",
         "-v", f"{staged_codex.root}:/opt/codex:ro", demo_image, "sleep", "infinity"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(["docker", "exec", "-i", cid, "sh", "-c", "cat > /opt/scripted/plan.json"],
                   input=json.dumps(PLAN).encode(), check=True)  # fmt: skip
    yield cid
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True)  # by the exact id we created


def _agent(tmp_path, model: str, monkeypatch) -> CodexGoalAgent:
    monkeypatch.setenv(KEY_VAR, "sk-session-test")
    agent = CodexGoalAgent(logs_dir=tmp_path, model_name=model, api_key_var=KEY_VAR)
    agent.receipt = agent._new_receipt()
    return agent


def _requests(cid: str) -> list[dict]:
    out = subprocess.run(["docker", "exec", cid, "cat", "/var/log/scripted/requests.jsonl"],
                         capture_output=True, text=True).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_skills_before_thread_long_goal_blocked_then_resumed(container, tmp_path, monkeypatch):
    agent = _agent(tmp_path, "scripted/block", monkeypatch)
    transport = DockerExecTransport(container, "/work", None)

    async def scenario():
        session = await agent.open_session(transport, deadline=time.monotonic() + 90)
        skills = await session.skills_list()
        assert skills["data"][0]["cwd"] == "/work" and skills["data"][0]["skills"]
        await session.thread_start()
        body = "Finish the task.\n" + "Keep working toward the objective and record evidence.\n" * 60
        assert 3000 < len(body) < 4000
        await session.goal_set(body)
        first = await session.follow_goal()
        await session.goal_resume()
        second = await session.follow_goal()
        await session.client.close()
        return first, second

    first, second = asyncio.run(scenario())
    assert (first, second) == ("blocked", "complete")
    r = agent.receipt
    assert r.unblocks == 1 and r.goal_status_final == "complete" and r.extra["goal_objective_chars"] > 3000
    assert r.turns >= 2 and r.continuations == r.turns  # every turn here was started by codex itself
    files = subprocess.run(["docker", "exec", container, "cat", "/work/one.txt", "/work/two.txt"],
                           capture_output=True, text=True).stdout  # fmt: skip
    assert files.split() == ["one", "two"]
    assert [r["answer"].get("args", {}).get("status") for r in _requests(container)
            if r.get("answer", {}).get("name") == "update_goal"] == ["blocked", "complete"]  # fmt: skip


def test_deadline_is_raised_by_message(container, tmp_path, monkeypatch):
    agent = _agent(tmp_path, "scripted/never-finish", monkeypatch)
    transport = DockerExecTransport(container, "/work", None)

    async def scenario():
        session = await agent.open_session(transport, deadline=time.monotonic() + 6)
        await session.thread_start()
        tid = await session.turn_start("work forever")
        try:
            await session.wait_turn_end(tid)
        except RuntimeError as exc:
            await session.wind_down()
            await session.client.close()
            return exc
        return None

    exc = asyncio.run(scenario())
    assert exc is not None and is_deadline(exc)
    assert type(exc) is RuntimeError  # any RuntimeError class with the message counts, by design
    assert len(_requests(container)) >= 3
