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
import stat
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from modes import safeio, safetext
from runner.results.tree import events_path

Listener = Callable[[dict[str, Any]], None]


class EventKind(StrEnum):
    """Every kind of event the journal holds; writers emit members, readers compare with members
    (a reader that matched names by substring once counted ``gate_open`` as a gate wait)."""

    RUNNER_START = "runner_start"  # run_id, tasks, arms, repeats, pid, pairs_per_arm, already_done
    RUNNER_EXIT = "runner_exit"
    #: n_running: the runner is alive, every ``ALIVE_SEC`` while it works; a runner that dies
    #: without its exit line worked until its last event (``runs.RunLog.current_pieces``)
    RUNNER_ALIVE = "runner_alive"
    PREFLIGHT_FAILED = "preflight_failed"
    PREFLIGHT_NOTE = "preflight_note"
    DATASET_MODIFIED = "dataset_modified"
    PASS_START = "pass_start"  # pass_no
    PASS_END = "pass_end"
    RETRY = "retry"
    SKIP_DONE = "skip_done"
    CLAIM_HELD = "claim_held"
    CLAIM_TAKEOVER = "claim_takeover"
    CLAIM_RELEASE = "claim_release"
    JOB_START = "job_start"  # task, arm, stamp: the attempt belongs to this run
    JOB_FINISH = "job_finish"
    JOB_KILL = "job_kill"
    ADOPT = "adopt"
    INTERNAL_ERROR = "internal_error"
    GATE_WAIT = "gate_wait"
    GATE_OPEN = "gate_open"
    GATE_ERROR = "gate_error"
    RECLAIM = "reclaim"
    RUN_PAUSED = "run_paused"  # cause (circuit breaker | spend cap), reason: one line for the operator
    SPEND_CAP = "spend_cap"  # scope (run | arm), arm, spent_usd, cap_usd, on_cap, running: a cap reached
    VOID = "void"
    CLEANUP = "cleanup"
    CLEANUP_PLAN = "cleanup_plan"
    CLEANUP_ERROR = "cleanup_error"
    STOP_REQUESTED = "stop_requested"
    GATEWAY_START = "gateway_start"  # pid, upstream, reused: the run's model gateway on this host
    GATEWAY_RESTART = "gateway_restart"  # a dead gateway replaced; the attempts it served are voided
    GATEWAY_STOP = "gateway_stop"  # the runner's exit stopped its gateway
    GATEWAY_ERROR = "gateway_error"  # the gateway could not be started (the runner waits and retries)
    IMAGE_READY = "image_ready"  # task, image_id, content_sha256, tag, how, seconds, task_dir, hosts
    IMAGE_FAILED = "image_failed"  # task, error: its pairs wait for the next pass


def repeat_field(repeat: int) -> dict[str, int]:
    """The ``repeat`` field of an event about one repeat of a pair (``marathon run --repeats``): only
    for repeat k >= 2, so a run of one repeat writes the events it always did. Its stamp says the
    same (``runner.results.tree.repeat_of``)."""
    return {"repeat": repeat} if repeat != 1 else {}


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

    def emit(self, event: EventKind, **fields: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {"ts": utc_now(), "event": EventKind(event), "run_id": self.run_id}
        rec.update({k: v for k, v in fields.items() if v is not None})
        append_event(self.out, rec)
        for listener in list(self.listeners):
            try:
                listener(rec)
            except Exception:  # noqa: BLE001 - a display bug must never stop the runner
                pass
        return rec


def append_event(out: Path, rec: dict[str, Any]) -> None:
    """Append one event line (``safeio.append_line``: whole, or an ``OSError`` such as a full disk's,
    never a line lost in silence); ``rec["event"]`` is an ``EventKind``."""
    rec = {**rec, "event": EventKind(rec["event"])}
    path = events_path(Path(out))
    path.parent.mkdir(parents=True, exist_ok=True)
    # strict JSON (a non-finite number is null: a journal line never stops the runner)
    line = (safetext.dumps(rec, default=str, nonfinite_as_null=True) + "\n").encode()
    safeio.append_line(path, line, sync=False)


#: events.jsonl is read from its end, at most this much (a day-long 10,000-trial run writes ~20 MB;
#: a 500 MB file planted or grown by a runaway writer must neither take the memory nor the time)
TAIL_CAP = 32 << 20
#: read and parsed this much at a time: the events are handed on chunk by chunk, never held whole
CHUNK = 1 << 20
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class EventReader:
    """The one reader of ``events.jsonl``, incremental: each ``read_new`` (``iter_new``) returns only
    the events appended since the last call (the console and the results model poll it).

    A torn last line (a writer mid-``write``) is not consumed until it is complete; a line that is
    not a JSON object with a string ``event`` is skipped and counted (``skipped``). When the file
    was replaced or truncated, reading starts over and ``restarted`` is True for that call, so the
    caller drops what it derived from the old file. The file is read by the safe rules of the
    runner's own files (``modes.safeio``): a FIFO, a device or a symlink at the name is never read
    (``refused`` says why); at most the last ``TAIL_CAP`` bytes are read (``skipped_bytes``: what was
    left unread before them), in chunks, so neither a huge file nor a burst costs its size in memory.
    """

    def __init__(self, out: Path | str) -> None:
        self.path = events_path(Path(out))
        self.offset = 0
        self.inode: int | None = None
        self.skipped = 0
        self.skipped_bytes = 0
        self.restarted = False
        self.refused = ""

    def read_new(self) -> list[dict[str, Any]]:
        return list(self.iter_new())

    def iter_new(self) -> Iterator[dict[str, Any]]:
        """The new events, oldest first; ``restarted`` and ``refused`` are set before it returns."""
        self.restarted = False
        try:
            fd = os.open(self.path, _OPEN)
        except OSError as exc:
            self.refused = "" if exc.errno in (2, 20) else f"{exc.strerror or exc}"
            if exc.errno == 40:
                self.refused = "a symlink (not followed)"
            return iter(())
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return iter(())
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            self.refused = "not a regular file"
            return iter(())
        self.refused = ""
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.restarted = self.inode is not None or self.offset > 0
            self.inode, self.offset, self.skipped, self.skipped_bytes = st.st_ino, 0, 0, 0
        if st.st_size - self.offset > TAIL_CAP:  # read the end only; start at a line's beginning
            start = st.st_size - TAIL_CAP
            self.skipped_bytes += start - self.offset
            self.offset = start
            self._align = True
        else:
            self._align = False
        if st.st_size == self.offset:
            os.close(fd)
            return iter(())
        return self._events(fd, st.st_size)

    def _events(self, fd: int, end: int) -> Iterator[dict[str, Any]]:
        try:
            align = self._align
            while self.offset < end:
                try:
                    data = os.pread(fd, min(CHUNK, end - self.offset), self.offset)
                except OSError:
                    return
                if not data:
                    return
                if align:  # the tail began mid-line: that part of a line is not an event
                    nl = data.find(b"\n")
                    if nl < 0:
                        self.offset += len(data)
                        self.skipped_bytes += len(data)
                        continue
                    self.offset += nl + 1
                    self.skipped_bytes += nl + 1
                    data = data[nl + 1 :]
                    align = False
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    if len(data) >= CHUNK:  # one line longer than a chunk: no event is; skip it
                        self.offset += len(data)
                        self.skipped += 1
                        align = True
                        continue
                    return  # a torn last line: wait until it is complete
                self.offset += cut
                for raw in data[:cut].splitlines():
                    if not raw.strip():
                        continue
                    try:
                        ev = json.loads(raw)
                    except (ValueError, RecursionError):
                        ev = None
                    if isinstance(ev, dict) and isinstance(ev.get("event"), str):
                        yield ev
                    else:
                        self.skipped += 1
        finally:
            os.close(fd)


def read_events(out: Path) -> Iterator[dict[str, Any]]:
    """Every well-formed event of the tree, oldest first (a torn last line is not one yet)."""
    yield from EventReader(out).read_new()


def last_run_id(out: Path) -> str | None:
    """The run id of the newest ``runner_start`` event, or None."""
    rid = None
    for rec in read_events(out):
        if rec["event"] == EventKind.RUNNER_START:
            rid = rec.get("run_id")
    return rid
