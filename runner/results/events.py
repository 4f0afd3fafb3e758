"""The runner's journal: ``<out>/.runner/events.jsonl``, one JSON object per line, append-only.

Why: every start, finish, void, retry, gate wait and reclaim must be visible after the fact (the
field's driver logged to a terminal that was gone by morning). The console, ``health`` and the
results model read this file; ``runner_start`` carries the ``run_id`` that scopes "this run".
Each line is written with one ``write`` on an ``O_APPEND`` descriptor, so concurrent writers
(runner, console actions) never interleave inside a line.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.results.tree import events_path

Listener = Callable[[dict[str, Any]], None]


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with ``Z`` (never compared with file mtimes)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    """A run id that sorts by start time: ``20261129T080102Z-1a2b3c``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


class EventLog:
    """Appends events for one run; listeners (the progress display) see each event as written."""

    def __init__(self, out: Path, run_id: str) -> None:
        self.out = Path(out)
        self.run_id = run_id
        self.path = events_path(self.out)
        self.listeners: list[Listener] = []

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {"ts": utc_now(), "event": event, "run_id": self.run_id}
        rec.update({k: v for k, v in fields.items() if v is not None})
        append_event(self.out, rec)
        for listener in list(self.listeners):
            try:
                listener(rec)
            except Exception:  # noqa: BLE001 - a display bug must never stop the runner
                pass
        return rec


def append_event(out: Path, rec: dict[str, Any]) -> None:
    """Append one event line atomically (one write on an O_APPEND descriptor)."""
    path = events_path(Path(out))
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(rec, default=str, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(out: Path) -> Iterator[dict[str, Any]]:
    """Every well-formed event of the tree, oldest first; a torn last line is skipped."""
    try:
        fh = open(events_path(Path(out)), encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "event" in rec:
                yield rec


def last_run_id(out: Path) -> str | None:
    """The run id of the newest ``runner_start`` event, or None."""
    rid = None
    for rec in read_events(out):
        if rec.get("event") == "runner_start":
            rid = rec.get("run_id")
    return rid
