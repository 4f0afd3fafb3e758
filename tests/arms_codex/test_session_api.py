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
from agents.session import ArmFailure, is_deadline
from agents.staging import SIDECAR
from agents.transport import DockerExecTransport

pytestmark = pytest.mark.docker

KEY_VAR = "MARATHON_TEST_MODEL_KEY"
PLAN = {"steps": ["echo one > one.txt", "echo two > two.txt"], "answer": "done", "partial_steps": 1}


def _start(root, image: str) -> str:
    return subprocess.run(
        ["docker", "run", "-d", "--label", "org.marathon.test=arms-codex-session", "-w", "/work",
         "-v", f"{root}:/opt/codex:ro", image, "sleep", "infinity"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture
def container_factory(docker_engine, demo_image):
    """Containers of the demo image with a codex tree mounted; removed by the exact ids we created."""
    made: list[str] = []

    def make(root) -> str:
        cid = _start(root, demo_image)
        made.append(cid)
        subprocess.run(["docker", "exec", "-i", cid, "sh", "-c", "cat > /opt/scripted/plan.json"],
                       input=json.dumps(PLAN).encode(), check=True)  # fmt: skip
        return cid

    yield make
    for cid in made:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


@pytest.fixture
def container(container_factory, staged_codex) -> str:
    return container_factory(staged_codex.root)


def _agent(tmp_path, model: str, monkeypatch) -> CodexGoalAgent:
    monkeypatch.setenv(KEY_VAR, "sk-session-test")
    agent = CodexGoalAgent(logs_dir=tmp_path, model_name=model, api_key_var=KEY_VAR)
    agent.receipt = agent.new_receipt()
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
        session = await agent.open_session(transport)
        await session.thread_start()
        tid = await session.turn_start("work forever")
        # the deadline starts once the model is working, as an arm's budget does (from its first model
        # request); a deadline set before the session opened lapsed in turn/start on a loaded machine
        for _ in range(1200):
            if len(await asyncio.to_thread(_requests, container)) >= 3:
                break
            await asyncio.sleep(0.25)
        session.deadline = time.monotonic() + 3
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


def test_code_mode_host_failure_at_runtime_fails_loudly(
    container_factory, staged_codex, tmp_path, monkeypatch
):
    """The preflight is fooled (a file named like the sidecar sits next to a wrapper), the real codex
    has no sidecar, and the model is code-mode-only: codex only warns and its turn would 'complete';
    the session must fail loudly instead."""
    broken = tmp_path / "codex-no-sidecar"
    subprocess.run(["cp", "-al", str(staged_codex.root), str(broken)], check=True)
    (broken / "bin" / SIDECAR).unlink()
    cid = container_factory(broken)
    catalog = json.loads(subprocess.run([str(staged_codex.binary), "debug", "models", "--bundled"],
                                        capture_output=True, text=True, check=True).stdout)  # fmt: skip
    entry = next(m for m in catalog["models"] if m.get("tool_mode") == "code_mode_only")
    entry = {**entry, "slug": "scripted/solve", "display_name": "scripted/solve"}
    setup = (
        "mkdir -p /opt/wrap/bin && printf '#!/bin/sh\\nexec /opt/codex/bin/codex \"$@\"\\n' > /opt/wrap/bin/codex"
        f" && chmod +x /opt/wrap/bin/codex && touch /opt/wrap/bin/{SIDECAR} && cat > /opt/wrap/catalog.json"
    )
    subprocess.run(["docker", "exec", "-i", cid, "sh", "-c", setup],
                   input=json.dumps({"models": [entry]}).encode(), check=True)  # fmt: skip
    monkeypatch.setenv(KEY_VAR, "sk-session-test")
    agent = CodexGoalAgent(logs_dir=tmp_path / "logs", model_name="scripted/solve", api_key_var=KEY_VAR,
                           codex_bin="/opt/wrap/bin/codex", model_catalog_json="/opt/wrap/catalog.json")  # fmt: skip
    agent.receipt = agent.new_receipt()

    async def scenario():
        session = await agent.open_session(
            DockerExecTransport(cid, "/work", None), deadline=time.monotonic() + 60
        )
        try:
            await session.thread_start()
            await session.wait_turn_end(await session.turn_start("write one.txt"))
        except ArmFailure as exc:
            return exc
        finally:
            await session.client.close()
        return None

    exc = asyncio.run(scenario())
    assert exc is not None and "code-mode host unavailable" in str(exc), agent.receipt.errors


def test_the_instruction_is_in_the_goal_turns_first_request_however_late_the_harness(
    container, tmp_path, monkeypatch
):
    """``thread/goal/set`` starts a goal turn by itself. Were the instruction's ``turn/start`` sent
    only after the goal's answer, a harness not scheduled in between (a loaded host) would let that
    turn ask the model without the instruction, and codex drops that answer once the instruction
    merges in (docs/gateway.md). Written in one write with the goal, the instruction is in codex's
    input before the goal turn starts: here the whole harness stalls 1 s after each write, and the
    goal turn's first request still carries it, merged into that one turn."""
    agent = _agent(tmp_path, "scripted/solve", monkeypatch)
    transport = DockerExecTransport(container, "/work", None)
    instruction = "Create one.txt and two.txt in the working directory."

    async def scenario():
        session = await agent.open_session(transport, deadline=time.monotonic() + 90)
        await session.thread_start()
        write = session.client._send_lines

        async def stalled(msgs):
            await write(msgs)
            time.sleep(1.0)  # the whole process descheduled right after its write

        session.client._send_lines = stalled
        tid = await session.goal_set_and_turn_start("Finish the task.", instruction)
        session.client._send_lines = write
        status = await session.follow_goal()
        await session.client.close()
        return tid, session.turn_ids, status

    tid, turns, status = asyncio.run(scenario())
    assert status == "complete" and turns[0] == tid, (turns, tid)  # merged into the goal's own turn
    (first, *_rest) = [r for r in _requests(container) if r.get("method") == "POST"]
    assert first["goal_turn"] and instruction[:60] in first["user_texts"], first
