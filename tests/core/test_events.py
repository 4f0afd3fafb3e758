"""events.jsonl has one reader and one writer (runner.results.events): the kinds are an enum both
share, the reader is incremental, waits for a torn last line and counts the garbage it skips."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from runner.results.events import EventKind, EventLog, EventReader, append_event, last_run_id, read_events
from runner.results.model import RunModel
from runner.results.tree import events_path

REPO = Path(__file__).resolve().parents[2]


def test_the_reader_reads_only_new_lines_and_waits_for_a_torn_one(tmp_path):
    log = EventLog(tmp_path, "r1")
    log.emit(EventKind.RUNNER_START, tasks=["t"], arms=["a"])
    reader = EventReader(tmp_path)
    assert [e["event"] for e in reader.read_new()] == ["runner_start"]
    assert reader.read_new() == []  # nothing new
    path = events_path(tmp_path)
    line = json.dumps({"event": "job_start", "run_id": "r1", "task": "t", "arm": "a", "stamp": "s"})
    with open(path, "a") as fh:
        fh.write(line[:10])  # a writer mid-write
    assert reader.read_new() == []
    with open(path, "a") as fh:
        fh.write(line[10:] + "\n")
    assert [e["event"] for e in reader.read_new()] == [EventKind.JOB_START]
    assert not reader.restarted


def test_garbage_lines_are_skipped_and_counted(tmp_path):
    path = events_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(
        b'{"event": "runner_start", "run_id": "r1"}\n'
        b"not json\n"
        b"[1, 2]\n"
        b'{"event": 7}\n'
        b'{"no_event": 1}\n'
        b"\xff\xfe\n"
        b"\n"
        b'{"event": "runner_exit", "run_id": "r1"}\n'
    )
    reader = EventReader(tmp_path)
    assert [e["event"] for e in reader.read_new()] == ["runner_start", "runner_exit"]
    assert reader.skipped == 5
    assert last_run_id(tmp_path) == "r1"


def test_a_replaced_or_truncated_log_starts_over(tmp_path):
    log = EventLog(tmp_path, "r1")
    log.emit(EventKind.RUNNER_START)
    log.emit(EventKind.PASS_START, pass_no=1)
    reader = EventReader(tmp_path)
    assert len(reader.read_new()) == 2
    path = events_path(tmp_path)
    tmp = path.with_suffix(".new")
    tmp.write_text(json.dumps({"event": "runner_start", "run_id": "r2"}) + "\n")
    os.replace(tmp, path)
    assert [e["run_id"] for e in reader.read_new()] == ["r2"] and reader.restarted
    path.write_text("")
    assert reader.read_new() == [] and reader.restarted


def test_the_model_reads_the_log_incrementally_through_the_reader(tmp_path):
    (tmp_path / "t" / "a").mkdir(parents=True)
    EventLog(tmp_path, "20261201T000000Z-aaaaaa").emit(EventKind.RUNNER_START, tasks=["t"], arms=["a"])
    m = RunModel.load(tmp_path)
    assert m.run_id == "20261201T000000Z-aaaaaa"
    EventLog(tmp_path, "20261201T010000Z-bbbbbb").emit(EventKind.RUNNER_START, tasks=["t"], arms=["a"])
    m.update([events_path(tmp_path)])
    assert [r.run_id for r in m.runs] == ["20261201T000000Z-aaaaaa", "20261201T010000Z-bbbbbb"]


def test_writers_only_write_known_kinds(tmp_path):
    with pytest.raises(ValueError):
        EventLog(tmp_path, "r1").emit("gate_opened")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        append_event(tmp_path, {"event": "job_started"})
    append_event(tmp_path, {"event": EventKind.PREFLIGHT_FAILED, "problems": []})
    assert [e["event"] for e in read_events(tmp_path)] == ["preflight_failed"]


_KINDS = "|".join(k.value for k in EventKind)
_COMPOUND = "|".join(k.value for k in EventKind if "_" in k.value)  # "void" is also a console action
_SPELLED = (
    r"\.emit\(\s*[\"']",  # a writer naming its kind as a string
    rf"[\"']event[\"']\s*:\s*[\"']({_KINDS})[\"']",  # a record built with a string kind
    rf"[=!]=\s*[\"']({_COMPOUND})[\"']|[\"']({_COMPOUND})[\"']\s*[=!]=",  # a reader comparing with a name
    r"[\"'][a-z_]+[\"']\s+in\s+(kind|str\(ev)",  # a reader matching by substring
)


def test_no_writer_or_reader_spells_a_kind_as_a_string():
    """Every emit names an EventKind member; no reader matches kinds by name or substring."""
    found = []
    for top in ("runner", "console"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path.name == "events.py" or "demo" in path.parts:
                continue
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "``" not in line and any(re.search(p, line) for p in _SPELLED):
                    found.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    assert not found, "\n".join(found)
