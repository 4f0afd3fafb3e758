"""runner.results.trajectory on real recorded trajectories, on garbage, and on files too big to load."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from reader_data import RECORDED, trial_of

from runner.results import trajectory as tj
from runner.results.trajectory import ERROR, GOAL, OK, StepIndex, trajectory_facts


def full_index(path: Path, chunk: int = tj.CHUNK, kind: str | None = None) -> StepIndex:
    ix = StepIndex(path, kind)
    while ix.index_more(chunk):
        pass
    return ix


def steps_of(ix: StepIndex) -> list[tj.Step]:
    return [ix.step(i) for i in range(ix.count)]


def atif(arm: str) -> Path:
    return trial_of(RECORDED, arm) / "agent" / "trajectory.json"


def appserver(arm: str) -> Path:
    return trial_of(RECORDED, arm) / "agent" / "appserver.stdout.jsonl"


# -- ATIF ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arm", ["plain", "goal", "ssh-goal", "codex-cli", "heartbeat"])
def test_every_atif_step_of_every_arm_is_found_with_its_time_role_and_tokens(arm):
    path = atif(arm)
    doc = json.loads(path.read_text())  # the independent reading: the whole (small) file
    steps = steps_of(full_index(path))
    assert len(steps) == len(doc["steps"])
    for got, want in zip(steps, doc["steps"], strict=True):
        assert got.role == want["source"]
        assert got.time == want["timestamp"].split("T")[1][:8]
        assert got.tokens_in == (want.get("metrics") or {}).get("prompt_tokens")
        assert got.tokens_out == (want.get("metrics") or {}).get("completion_tokens")
        # each byte range is exactly that step's JSON
        assert json.loads(path.read_bytes()[got.offset : got.offset + got.length]) == want


def test_atif_failed_command_is_marked_with_exit_code_duration_and_output():
    steps = steps_of(full_index(atif("codex-cli")))
    failed = [s for s in steps if s.flag == ERROR]
    assert len(failed) == 1
    (cmd,) = failed[0].commands
    assert cmd.exit_code == 1 and cmd.failed and cmd.duration_sec is not None
    assert "calc.sub" in cmd.text and "AttributeError" in cmd.output
    assert failed[0].summary.startswith("$ python3 -c") and "exit 1" in failed[0].summary
    ok = [s for s in steps if s.commands and s.commands[0].tool == "exec_command" and s.flag == OK]
    assert ok and all(c.exit_code == 0 for s in ok for c in s.commands)


def test_atif_block_and_unblock_of_the_loopx_arm_are_goal_steps():
    summaries = [s.summary for s in steps_of(full_index(atif("codex-cli"))) if s.flag == GOAL]
    assert summaries[0].startswith("goal → blocked")
    assert summaries[1].startswith("goal → active (resumed)")
    assert summaries[-1].startswith("goal → complete")


def test_atif_last_agent_message_is_the_final_answer():
    s = steps_of(full_index(atif("goal")))[-1]
    assert s.role == "agent" and s.summary == "calc.py now has add, sub, mul and div."


def test_chunk_boundaries_anywhere_give_the_same_steps():
    """Strings, escapes and brackets cut by a chunk boundary: tiny chunks find the same ranges."""
    path = atif("codex-cli")
    ref = [(s.offset, s.length, s.flag) for s in steps_of(full_index(path))]
    for chunk in (1, 7, 64, 4093):
        assert [(s.offset, s.length, s.flag) for s in steps_of(full_index(path, chunk))] == ref


def test_minified_atif_reads_the_same(tmp_path):
    doc = json.loads(atif("heartbeat").read_text())
    mini = tmp_path / "trajectory.json"
    mini.write_text(json.dumps(doc, separators=(",", ":")))
    a = [(s.role, s.summary, s.flag) for s in steps_of(full_index(atif("heartbeat")))]
    b = [(s.role, s.summary, s.flag) for s in steps_of(full_index(mini))]
    assert a == b and len(b) == len(doc["steps"])


def test_facts_count_commands_as_the_file_says():
    for arm in ("plain", "codex-cli", "heartbeat"):
        doc = json.loads(atif(arm).read_text())
        calls = [
            c for s in doc["steps"] for c in s.get("tool_calls") or [] if c["function_name"] == "exec_command"
        ]
        facts = trajectory_facts(trial_of(RECORDED, arm))
        assert facts.commands == len(calls) and facts.failed_commands == 1
        assert facts.source == "agent/trajectory.json"
    assert trajectory_facts(trial_of(RECORDED, "plain")).last_agent_message == ""  # the deadline hit first
    assert trajectory_facts(trial_of(RECORDED, "goal")).last_agent_message.startswith("calc.py now has")


# -- app-server stdout ---------------------------------------------------------------------------
def test_appserver_steps_commands_goal_changes_and_turn_tokens():
    path = appserver("codex-cli")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    steps = steps_of(full_index(path))
    cmds = [s for s in steps if s.commands]
    want = [
        x
        for x in lines
        if x.get("method") == "item/completed" and x["params"]["item"]["type"] == "commandExecution"
    ]
    assert len(cmds) == len(want)
    assert [c.commands[0].exit_code for c in cmds] == [x["params"]["item"]["exitCode"] for x in want]
    assert [s.flag for s in cmds].count(ERROR) == 1
    goals = [s.summary for s in steps if s.flag == GOAL]
    assert "goal → blocked" in goals and "goal → active (resumed)" in goals
    turns = [s for s in steps if s.summary.startswith("turn completed")]
    usage = [x for x in lines if x.get("method") == "thread/tokenUsage/updated"]
    assert turns[-1].tokens_in == usage[-1]["params"]["tokenUsage"]["total"]["inputTokens"]
    assert not any("delta" in s.summary for s in steps)


# -- search ----------------------------------------------------------------------------------------
def test_search_finds_steps_forward_backward_and_with_smart_case():
    path = atif("codex-cli")
    ix = full_index(path)
    data = path.read_bytes()
    texts = [data[s.offset : s.offset + s.length] for s in steps_of(ix)]

    def hits(needle: bytes, fold: bool) -> list[int]:
        return [i for i, t in enumerate(texts) if needle in (t.lower() if fold else t)]

    want = hits(b"zerodivisionerror", True)
    assert len(want) >= 2  # the instruction names it, and the agent's div command
    assert ix.search("zerodivisionerror") == want[0]  # lowercase ignores case
    assert ix.search("zerodivisionerror", want[0]) == want[1]
    assert ix.search("zerodivisionerror", want[-1]) is None
    assert ix.search("zerodivisionerror", ix.count, backwards=True) == want[-1]
    assert ix.search("zerodivisionerror", want[1], backwards=True) == want[0]
    assert ix.search("ZERODIVISIONERROR") is None  # a capital makes it exact
    blocked = hits(b"I am blocked", False)
    assert ix.search("I am blocked") == blocked[0]
    assert ix.step(blocked[0]).summary.startswith("I am blocked")
    assert ix.search("no such text anywhere") is None


# -- hostile input -------------------------------------------------------------------------------
GARBAGE = [
    b"",
    b"\x00\xff\xfe garbage \x00" * 100,
    b'{"steps": [1, "x", {"source": 5, "message": {"a": 1}}, {"tool_calls": "nope"}, [], {}]}',
    b'{"steps": [{"source": "agent", "message": "unterminated',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"steps": [' + b'{"message": "a\\\\"},' * 1000 + b"{}]}",
    b'{"notsteps": [{"a": 1}], "steps": {"source": "agent"}}',
    # token counts past 64 bits (found by a probe, 2026-12-06: the index's counts are 64-bit arrays,
    # and the OverflowError left the reader at "indexing..." for good)
    b'{"steps": [{"source": "agent", "message": "x", "metrics": {"prompt_tokens": '
    + b"1"
    + b"0" * 30
    + b', "completion_tokens": 5}}]}',
    b'{"method": "thread/tokenUsage/updated", "params": {"tokenUsage": {"total": {"inputTokens": '
    + str(2**70).encode()
    + b', "outputTokens": 1}}}}\n{"method": "turn/completed", "params": {"turn": {}}}\n',
    # ids that are not strings and results that are not a list (found by a probe's fuzz of real
    # steps, 2026-12-07: TypeError, and the reader stayed at "indexing...")
    b'{"steps": [{"source": "agent", "tool_calls": [{"tool_call_id": ["x"], "function_name": "shell", '
    b'"arguments": {"cmd": "ls"}}], "observation": {"results": [{"source_call_id": {"a": 1}, "content": "ok"}]}}]}',
    b'{"steps": [{"source": "agent", "tool_calls": [{"tool_call_id": "c1", "function_name": "shell"}], '
    b'"observation": {"results": 5}}, {"source": "agent", "observation": {"results": true}}]}',
    # a time of 400 digits (a review: OverflowError, in the app-server index path too)
    b'{"steps": [{"source": "agent", "message": "a", "timestamp": 1' + b"0" * 400 + b"}]}",
    b'{"method": "item/completed", "emittedAtMs": 1' + b"0" * 400 + b', "params": {"item": {"type": '
    b'"agentMessage", "text": "hi"}}}\n{"method": "turn/completed", "params": {"turn": {}}}\n',
]


@pytest.mark.parametrize("data", GARBAGE, ids=range(len(GARBAGE)))
@pytest.mark.parametrize("name", ["trajectory.json", "appserver.stdout.jsonl"])
def test_garbage_never_raises(tmp_path, data, name):
    p = tmp_path / name
    p.write_bytes(data)
    ix = full_index(p, chunk=4096)
    for s in steps_of(ix):
        assert isinstance(s.summary, str) and len(s.summary) <= tj.SUMMARY_CHARS
    ix.search("a")
    ix.next_flagged(0)


def test_garbage_steps_are_marked_not_dropped(tmp_path):
    p = tmp_path / "trajectory.json"
    p.write_bytes(GARBAGE[2])
    steps = steps_of(full_index(p))
    assert len(steps) == 3  # the three objects of the array; 1, "x" and [] are not steps
    assert steps[0].role == "5" and steps[0].summary == '{"a": 1}'  # a non-text message shown as JSON
    assert steps[1].commands == () and steps[2].role == "?"
    lines = tmp_path / "appserver.stdout.jsonl"
    lines.write_bytes(b'not json\n{"method": "error", "params": {"error": {"message": "boom"}}}\n')
    got = steps_of(full_index(lines))
    assert [s.flag for s in got] == [ERROR, ERROR] and "boom" in got[1].summary


def test_a_step_with_ids_of_another_type_keeps_its_commands(tmp_path):
    p = tmp_path / "trajectory.json"
    p.write_bytes(GARBAGE[-4])
    (step,) = steps_of(full_index(p))
    assert len(step.commands) == 1 and step.commands[0].output == "ok", step  # its result, by position


def test_a_fifo_or_directory_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trajectory.json"
    os.mkfifo(fifo)
    done = threading.Event()

    def open_it():
        StepIndex(fifo)
        done.set()

    t = threading.Thread(target=open_it, daemon=True)
    t.start()
    t.join(30)
    assert done.is_set(), "opening a FIFO blocked"
    assert "not a regular file" in (StepIndex(fifo).error or "")
    (tmp_path / "d.json").mkdir()
    assert StepIndex(tmp_path / "d.json").error
    assert StepIndex(tmp_path / "missing.json").error


def test_a_step_too_large_to_parse_is_reported_and_the_next_steps_still_read(tmp_path):
    big = "x" * (tj.MAX_STEP_BYTES + 10)
    doc = {"steps": [{"source": "user", "message": "first"}, {"source": "agent", "message": big},
                     {"source": "agent", "message": "after the big one"}]}  # fmt: skip
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc, indent=2))
    steps = steps_of(full_index(p))
    assert [s.summary for s in steps][0] == "first"
    assert steps[1].note == "too large to parse" and steps[1].flag == ERROR
    assert steps[2].summary == "after the big one"


def test_a_sparse_gigabyte_shows_its_first_steps_after_one_chunk(tmp_path):
    """The first screen needs the first chunk only: nothing else of the file is read for it."""
    head = json.loads(atif("goal").read_text())
    text = json.dumps(head, indent=2)
    cut = text.rindex("\n  ]")  # keep the steps array open: a file still being written
    p = tmp_path / "trajectory.json"
    with open(p, "wb") as fh:
        fh.write(text[:cut].encode() + b",\n")
        fh.truncate(1 << 30)  # a sparse gigabyte of NUL bytes after the real steps
    ix = StepIndex(p)
    assert ix.size == 1 << 30
    assert ix.index_more(1 << 20) is True  # more to come
    assert ix.scanned == 1 << 20
    assert ix.count == len(head["steps"]) and ix.step(0).role == "user"
    lines = tmp_path / "appserver.stdout.jsonl"
    with open(lines, "wb") as fh:
        fh.write(appserver("goal").read_bytes())
        fh.truncate(1 << 30)
    ix = StepIndex(lines)
    ix.index_more(1 << 20)
    assert ix.count == len(steps_of(full_index(appserver("goal"))))


def test_growth_is_picked_up_and_a_rewrite_starts_over(tmp_path):
    src = appserver("plain").read_bytes().splitlines(keepends=True)
    p = tmp_path / "appserver.stdout.jsonl"
    p.write_bytes(b"".join(src[:10]) + src[10][:20])  # a torn last line waits
    ix = full_index(p)
    first = ix.count
    with open(p, "ab") as fh:
        fh.write(src[10][20:] + b"".join(src[11:]))
    assert ix.refresh()
    while ix.index_more():
        pass
    assert ix.count == len(steps_of(full_index(appserver("plain")))) > first
    p2 = tmp_path / "new"
    p2.write_bytes(b"".join(src[:5]))
    os.replace(p2, p)
    assert ix.refresh()
    while ix.index_more():
        pass
    assert ix.count == len(steps_of(full_index(p)))
