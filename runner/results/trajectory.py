"""What the agent did, step by step: harbor's ATIF ``trajectory.json`` and codex's raw app-server stdout.

An operator reading a trial wants one line per step (time, role, tokens, what happened) and the
failed commands and goal changes marked, not a scroll through braces. Both files are written by or
from the agent under test, so they are hostile input: they can be a gigabyte, a single line, or
garbage. Nothing here loads a whole file. ``StepIndex`` scans the file in chunks (a worker calls
``index_more`` until it returns False) and keeps only byte ranges and a flag per step; a step is
parsed when it is shown, from its own byte range, capped in size.

- ATIF: a streaming scan of the JSON text (strings skipped, brackets counted) finds each object of
  the root's ``steps`` array, whatever the formatting (harbor pretty-prints; a minified file works).
- app-server stdout (``agent/appserver.stdout.jsonl``): one JSON-RPC message a line; completed items
  (messages, commands, reasoning, file changes, tool calls), turns, errors, warnings and goal status
  changes become steps; deltas and usage updates do not (usage is carried to the turn's end).

No textual import here: the console renders these records, the tests read them directly.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import stat
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from modes import safeio
from modes.trial_files import TrialFiles
from runner.results.search import find_offsets

#: a step (ATIF object or app-server line) larger than this is not parsed: it shows as "too large"
MAX_STEP_BYTES = 8 * 1024 * 1024
#: text kept per field of a parsed step (message, reasoning, command output)
MAX_FIELD_CHARS = 64 * 1024
#: one-line summary length
SUMMARY_CHARS = 300
CHUNK = 8 * 1024 * 1024
CACHE_STEPS = 512

ATIF = "atif"
APPSERVER = "app-server"

#: step flags: what the reader marks and what next/previous error jumps to
OK, ERROR, GOAL = 0, 1, 2

#: tool calls that manage the goal rather than do work (not counted as commands)
GOAL_TOOLS = frozenset({"update_goal", "goal_objective", "get_goal", "create_goal"})

_STRUCT = re.compile(rb'[{}\[\]"]')
_EXIT = re.compile(r"Process exited with code (-?\d+)")
_WALL = re.compile(r"Wall time: ([0-9.]+) seconds")
_TAG_LINE = re.compile(r"^<([A-Za-z_][\w-]*)(?:\s[^>]*)?>$")
_SOURCE_ATTR = re.compile(r'source="([^"]{1,40})"')


@dataclass(frozen=True)
class Command:
    """One tool call of a step: the command (or tool and arguments) and, when known, how it ended."""

    tool: str
    text: str
    exit_code: int | None = None
    duration_sec: float | None = None
    output: str = ""
    failed: bool = False


@dataclass(frozen=True)
class Step:
    """One step as the reader shows it; ``offset``/``length`` locate it in the file (raw view, search)."""

    index: int
    offset: int
    length: int
    role: str  # user | system | agent | event | ?
    time: str = ""  # HH:MM:SS (UTC) when the file says
    tokens_in: int | None = None
    tokens_out: int | None = None
    summary: str = ""
    message: str = ""
    reasoning: str = ""
    commands: tuple[Command, ...] = ()
    flag: int = OK
    note: str = ""  # why the step could not be read in full

    @property
    def error(self) -> bool:
        return self.flag == ERROR


# ----------------------------------------------------------------------------------- the file
def open_regular(path: Path | str) -> BinaryIO:
    """Open an agent-written file of a trial (``<trial>/agent/...`` or ``<trial>/verifier/...``)
    for reading, by the tree's one safe-open rule (``modes.safeio``): a regular file only (never
    a FIFO or a device), never through a symlink out of the trial dir.

    The one place the reader opens files the agent under test could have planted; everything else
    reads through the handle it returns.
    """
    fd = safeio.open_tree_file(path, safeio.trial_root_of(path, 2), safeio.STREAM)
    if isinstance(fd, safeio.Refused):
        err = FileNotFoundError if fd.missing else OSError
        raise err(f"{Path(path).name}: {fd.reason}")
    return os.fdopen(fd, "rb")


def kind_of(path: Path | str) -> str:
    """ATIF for ``*.json``, app-server stdout for ``*.jsonl`` (the codex arms' raw transcript)."""
    return APPSERVER if str(path).endswith(".jsonl") else ATIF


# --------------------------------------------------------------------------------- formatting
def _clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit:,} more characters)"


def _text(v: Any) -> str:
    """ATIF messages are a string or a list of content parts; anything else is shown as JSON."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        parts = []
        for p in v:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict) and p.get("type") in ("image", "audio"):
                parts.append(f"[{p.get('type')}]")
            elif isinstance(p, str):
                parts.append(p)
        return "\n".join(parts)
    try:
        return json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(v)


def first_line(text: str) -> str:
    """The line an operator recognises a message by: the first non-empty one; codex's internal
    context wrappers (``<codex_internal_context source="goal">``) become a ``[goal]`` prefix."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    head = lines[0]
    m = _TAG_LINE.match(head)
    if m:
        src = _SOURCE_ATTR.search(head)
        label = src.group(1) if src else m.group(1)
        rest = next((ln for ln in lines[1:] if not _TAG_LINE.match(ln)), "")
        return f"[{label}] {rest}"[:SUMMARY_CHARS]
    return head[:SUMMARY_CHARS]


def _time(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            secs = v / 1000 if v > 1e11 else v  # app-server stamps are epoch milliseconds
            return datetime.fromtimestamp(secs, UTC).strftime("%H:%M:%S")
        except (OverflowError, OSError, ValueError):
            return ""
    if isinstance(v, str) and "T" in v:
        return v.split("T", 1)[1][:8]
    return ""


def _int(v: Any) -> int | None:
    """A whole number from the agent's file, or None: a token count or exit code past 2^53 is
    none (10**30 tokens once stopped the reader's index, whose counts are 64-bit)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -(2**53) < v < 2**53 else None


def _command_summary(c: Command) -> str:
    line = first_line(c.text) if c.tool in ("exec_command", "shell", "commandExecution") else ""
    if line:
        s = f"$ {line}"
    else:
        s = f"{c.tool} {c.text}" if c.text else c.tool
        s = " ".join(s.split())
    tail = []
    if c.exit_code is not None:
        tail.append(f"exit {c.exit_code}")
    if c.duration_sec is not None:
        tail.append(f"{c.duration_sec:.1f}s")
    if c.failed and c.exit_code is None:
        tail.append("failed")
    return s[:SUMMARY_CHARS] + (f"  → {' · '.join(tail)}" if tail else "")


# ------------------------------------------------------------------------------------- ATIF step
def _atif_command(call: dict, result: dict | None) -> Command:
    tool = str(call.get("function_name") or "?")[:80]
    args = call.get("arguments")
    if isinstance(args, dict) and isinstance(args.get("cmd"), str):
        text = args["cmd"]
    elif isinstance(args, dict) and isinstance(args.get("command"), (str, list)):
        cmd = args["command"]
        text = cmd if isinstance(cmd, str) else " ".join(str(x) for x in cmd)
    elif isinstance(args, dict):
        text = " ".join(f"{k}={_text(v)}" for k, v in list(args.items())[:8])
    else:
        text = _text(args)
    out = _text(result.get("content")) if isinstance(result, dict) else ""
    exit_code = duration = None
    m = _EXIT.search(out[:4096])
    if m:
        exit_code = int(m.group(1))
    m = _WALL.search(out[:4096])
    if m:
        try:
            duration = float(m.group(1))
        except ValueError:
            duration = None
    if "\nOutput:\n" in out[:4096]:
        out = out.split("\nOutput:\n", 1)[1]
    low = out[:4096].lower()
    failed = (exit_code is not None and exit_code != 0) or "unsupported call" in low
    failed = failed or low.startswith(("error", "failed to", "exec_command failed"))
    return Command(tool, _clip(text, 4096), exit_code, duration, _clip(out), failed)


def atif_step(obj: Any, index: int, offset: int, length: int) -> Step:
    """One ATIF step object (harbor's ``Step`` model, read leniently: a garbage field is skipped)."""
    if not isinstance(obj, dict):
        return Step(index, offset, length, "?", summary=f"not a step object: {_text(obj)[:80]}", flag=ERROR)
    role = str(obj.get("source") or "?")[:20]
    message = _text(obj.get("message"))
    reasoning = _text(obj.get("reasoning_content"))
    calls = obj.get("tool_calls") if isinstance(obj.get("tool_calls"), list) else []
    obs = obj.get("observation") if isinstance(obj.get("observation"), dict) else {}
    # every id a string and every list a list, or skipped: a list as an id or a number as the
    # results raised, and the reader stayed at "indexing..." (a probe's fuzz of real steps)
    raw = obs.get("results")
    results = [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []
    by_id = {sid: r for r in results if isinstance(sid := r.get("source_call_id"), str) and sid}
    commands = []
    for i, call in enumerate(c for c in calls if isinstance(c, dict)):
        cid = call.get("tool_call_id")
        result = (by_id.get(cid) if isinstance(cid, str) else None) or (
            results[i] if i < len(results) else None
        )
        commands.append(_atif_command(call, result))
    metrics = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else {}
    flag = ERROR if any(c.failed for c in commands) else OK
    goal = _goal_change(commands, message)
    if goal and flag == OK:
        flag = GOAL
    if commands:
        summary = "; ".join(_command_summary(c) for c in commands)
    else:
        summary = first_line(message) or (f"(reasoning) {first_line(reasoning)}" if reasoning else "")
    if goal:
        summary = f"{goal} · {summary}"
    return Step(
        index,
        offset,
        length,
        role,
        _time(obj.get("timestamp")),
        _int(metrics.get("prompt_tokens")),
        _int(metrics.get("completion_tokens")),
        summary[:SUMMARY_CHARS],
        _clip(message),
        _clip(reasoning),
        tuple(commands),
        flag,
    )


def _goal_change(commands: list[Command], message: str) -> str:
    """A goal status change, as LoopX and codex write it: the agent's update_goal, or the resume."""
    for c in commands:
        if c.tool == "update_goal" and "status=" in c.text:
            return "goal → " + c.text.split("status=", 1)[1].split()[0]
    if "User set goal status:" in message[:2000]:
        status = message.split("User set goal status:", 1)[1].strip().split()[0].strip('".')
        return f"goal → {status} (resumed)" if status == "active" else f"goal → {status}"
    return ""


# -------------------------------------------------------------------------------- app-server step
#: item types that become steps (completed items); everything else of an item/completed is kept too
_ROLE_OF_ITEM = {"userMessage": "user", "agentMessage": "agent", "reasoning": "agent"}


def appserver_step(obj: Any, index: int, offset: int, length: int) -> Step | None:
    """One app-server JSON-RPC line as a step, or None for the lines that are not steps (deltas…)."""
    if not isinstance(obj, dict):
        return Step(index, offset, length, "?", summary="not a JSON-RPC message", flag=ERROR)
    method = obj.get("method")
    params = obj.get("params") if isinstance(obj.get("params"), dict) else {}
    when = _time(obj.get("emittedAtMs"))
    if method == "item/completed":
        item = params.get("item") if isinstance(params.get("item"), dict) else {}
        kind = str(item.get("type") or "?")[:40]
        role = _ROLE_OF_ITEM.get(kind, "agent")
        if kind == "commandExecution":
            code = _int(item.get("exitCode"))
            dur = item.get("durationMs")
            duration = dur / 1000 if isinstance(dur, (int, float)) and not isinstance(dur, bool) else None
            status = str(item.get("status") or "")
            failed = (code is not None and code != 0) or status in ("failed", "declined")
            cmd = Command(
                "commandExecution",
                _clip(_text(item.get("command")), 4096),
                code,
                duration,
                _clip(_text(item.get("aggregatedOutput"))),
                failed,
            )
            return Step(
                index,
                offset,
                length,
                role,
                when,
                summary=_command_summary(cmd),
                commands=(cmd,),
                flag=ERROR if failed else OK,
            )
        if kind in ("userMessage",):
            text = _text(item.get("content"))
        elif kind == "reasoning":
            text = _text(item.get("summary")) or _text(item.get("content"))
            return Step(index, offset, length, role, when, summary=f"(reasoning) {first_line(text)}",
                        reasoning=_clip(text))  # fmt: skip
        else:
            text = _text(item.get("text") if "text" in item else item)
        summary = first_line(text) if kind in _ROLE_OF_ITEM else f"{kind}: {first_line(text)}"
        return Step(index, offset, length, role, when, summary=summary[:SUMMARY_CHARS], message=_clip(text))
    if method in ("turn/started", "turn/completed"):
        turn = params.get("turn") if isinstance(params.get("turn"), dict) else {}
        status = str(turn.get("status") or "")
        err = turn.get("error")
        text = f"{method.split('/')[1].replace('completed', 'turn completed').replace('started', 'turn started')}"
        if status and method == "turn/completed":
            text += f" ({status})"
        if err:
            text += f": {first_line(_text(err))}"
        failed = bool(err) or status == "failed"
        return Step(index, offset, length, "event", when, summary=text, flag=ERROR if failed else OK)
    if method == "error" or "error" in obj and "id" in obj:
        err = params.get("error") if method == "error" else obj.get("error")
        text = first_line(_text(err if err is not None else params))
        return Step(index, offset, length, "event", when, summary=f"error: {text}", message=_clip(_text(err)),
                    flag=ERROR)  # fmt: skip
    if method == "warning":
        text = _text(params.get("message"))
        return Step(
            index, offset, length, "event", when, summary=f"warning: {first_line(text)}", message=text
        )
    if method == "thread/goal/updated":
        goal = params.get("goal") if isinstance(params.get("goal"), dict) else {}
        status = str(goal.get("status") or "?")[:40]
        return Step(index, offset, length, "event", when, summary=f"goal → {status}", flag=GOAL)
    return None


def _usage_of(obj: Any) -> tuple[int | None, int | None]:
    if not isinstance(obj, dict) or obj.get("method") != "thread/tokenUsage/updated":
        return None, None
    params = obj.get("params") if isinstance(obj.get("params"), dict) else {}
    usage = params.get("tokenUsage") if isinstance(params.get("tokenUsage"), dict) else {}
    total = usage.get("total") if isinstance(usage.get("total"), dict) else {}
    return _int(total.get("inputTokens")), _int(total.get("outputTokens"))


def _too_large(index: int, offset: int, length: int) -> Step:
    return Step(index, offset, length, "?", summary=f"(a step of {length / 1e6:.1f} MB: not parsed; see raw)",
                note="too large to parse", flag=ERROR)  # fmt: skip


#: what a step reader may raise on a shape it did not foresee (a review found OverflowError from a
#: 400-digit time, and the app-server index path unguarded)
_UNFORESEEN = (TypeError, AttributeError, KeyError, IndexError, ValueError, ArithmeticError, RecursionError)
_NOT_UNDERSTOOD = "not a step this reader understands"


def _garbage(index: int, offset: int, length: int, raw: bytes) -> Step:
    head = raw[:80].decode("utf-8", "replace")
    return Step(index, offset, length, "?", summary=f"unreadable: {' '.join(head.split())}",
                note="not valid JSON", flag=ERROR)  # fmt: skip


# ------------------------------------------------------------------------------------- the index
class StepIndex:
    """The steps of one trajectory file, indexed incrementally; safe to read while a worker indexes.

    ``index_more`` scans the next chunk (True while there is more); ``refresh`` notices growth or a
    rewrite (harbor writes trajectory.json in one piece at the end; app-server stdout grows line by
    line); ``step(i)`` parses one step from its byte range (cached).
    """

    def __init__(self, path: Path | str, kind: str | None = None) -> None:
        self.path = Path(path)
        self.kind = kind or kind_of(path)
        self._lock = threading.RLock()  # the parse cache
        self._scan_lock = threading.Lock()  # one scanner at a time (index_more, refresh)
        self._fh: BinaryIO | None = None
        self._cache: OrderedDict[int, Step] = OrderedDict()
        self.size = 0
        self.error: str | None = None
        self._reset()
        self._open()

    def _reset(self) -> None:
        self._starts = array("q")
        self._ends = array("q")
        self._flags = bytearray()
        self._tok_in = array("q")
        self._tok_out = array("q")
        self._cache.clear()
        self._scanned = 0
        self.waiting = False
        # ATIF scanner state
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._keybuf: bytearray | None = None
        self._key: bytes | None = None
        self._steps_depth = 0
        self._step_start = -1
        self.closed = False  # ATIF: the root object ended
        # app-server state
        self._goal: str | None = None
        self._usage: tuple[int | None, int | None] = (None, None)

    def _open(self) -> None:
        try:
            self._fh = open_regular(self.path)
            self.size = os.fstat(self._fh.fileno()).st_size
            self.error = None
        except OSError as exc:
            self._fh = None
            self.size = 0
            self.error = f"{self.path.name}: {exc.strerror or exc}"

    def close(self) -> None:
        with self._scan_lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def _pread(self, length: int, offset: int) -> bytes:
        fh = self._fh
        if fh is None or length <= 0:
            return b""
        try:
            return os.pread(fh.fileno(), length, offset)
        except (OSError, ValueError):
            return b""

    # -- lifecycle ------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Re-stat the file; True when it changed (grew, appeared, or was replaced: then re-index)."""
        with self._scan_lock:
            if self._fh is None:
                self._open()
                return self._fh is not None
            try:
                size = os.fstat(self._fh.fileno()).st_size
                st = os.stat(self.path)
            except OSError:
                return False
            replaced = st.st_ino != os.fstat(self._fh.fileno()).st_ino or size < self._scanned
            if replaced or (self.kind == ATIF and self.closed and size != self.size):
                self._fh.close()
                self._fh = None
                self._reset()
                self._open()
                return True
            if size != self.size:
                self.size = size
                self.waiting = False
                return True
            return False

    @property
    def complete(self) -> bool:
        """Everything indexed that can be (a torn last line waits for the writer)."""
        return self._scanned >= self.size or self.waiting

    @property
    def scanned(self) -> int:
        return self._scanned

    @property
    def count(self) -> int:
        return len(self._flags)

    # -- indexing -------------------------------------------------------------------------------
    def index_more(self, max_bytes: int = CHUNK) -> bool:
        """Index up to ``max_bytes`` more of the file; True while there is more to index.

        Readers are never blocked by a scan: each step's arrays are appended flag last, and
        ``count`` is the number of flags, so a reader sees only complete entries.
        """
        with self._scan_lock:
            if self._fh is None or self._scanned >= self.size:
                return False
            start = self._scanned
            data = self._pread(min(max_bytes, self.size - start), start)
            if not data:
                return False
            if self.kind == ATIF:
                self._scan_atif(data, start)
                self._scanned = start + len(data)
            else:
                self._scanned = start + self._scan_lines(data, start)
                if self._scanned == start:  # a line longer than the chunk
                    self._scan_long_line(start)
            # a torn last line (being written) waits for the rest: no progress is the end for now
            self.waiting = self._scanned == start
            return self._scanned < self.size and not self.waiting

    def _add(self, start: int, end: int, step: Step | None) -> None:
        if step is None:
            return
        self._starts.append(start)
        self._ends.append(end)
        self._tok_in.append(-1 if step.tokens_in is None else step.tokens_in)
        self._tok_out.append(-1 if step.tokens_out is None else step.tokens_out)
        self._flags.append(step.flag)  # last: it publishes the entry (see ``count``)

    def _scan_atif(self, data: bytes, base: int) -> None:
        """Bracket counting over the JSON text, strings skipped; the root's ``steps`` items are steps.

        The state (depth, inside a string, a pending escape, the key being read) carries over from
        one chunk to the next, so a chunk boundary can fall anywhere.
        """
        i, n = 0, len(data)
        if self._in_str and self._esc and n:
            self._keep(data[:1])
            i, self._esc = 1, False
        while i < n:
            if self._in_str:
                j = data.find(b'"', i)
                if j < 0:
                    k = n
                    while k > i and data[k - 1] == 0x5C:
                        k -= 1
                    self._esc = (n - k) % 2 == 1
                    self._keep(data[i:n])
                    break
                k = j
                while k > i and data[k - 1] == 0x5C:
                    k -= 1
                if (j - k) % 2 == 1:  # an escaped quote
                    self._keep(data[i : j + 1])
                    i = j + 1
                    continue
                self._keep(data[i:j])
                self._in_str = False
                if self._keybuf is not None:
                    self._key = bytes(self._keybuf) if len(self._keybuf) <= 64 else None
                    self._keybuf = None
                i = j + 1
                continue
            m = _STRUCT.search(data, i)
            if m is None:
                break
            j = m.start()
            c = data[j]
            i = j + 1
            if c == 0x22:  # "
                self._in_str = True
                self._keybuf = bytearray() if self._depth == 1 else None
            elif c in (0x7B, 0x5B):  # { [
                self._depth += 1
                if c == 0x5B and self._depth == 2 and self._key == b"steps":
                    self._steps_depth = 2
                elif c == 0x7B and self._steps_depth and self._depth == self._steps_depth + 1:
                    self._step_start = base + j
            else:  # } ]
                if c == 0x7D and self._step_start >= 0 and self._depth == self._steps_depth + 1:
                    self._add_atif(self._step_start, base + j + 1)
                    self._step_start = -1
                elif c == 0x5D and self._steps_depth and self._depth == self._steps_depth:
                    self._steps_depth = 0
                self._depth = max(0, self._depth - 1)
                if self._depth == 0:
                    self.closed = True

    def _keep(self, part: bytes) -> None:
        """Collect the text of a root-level string (a key such as ``steps``), at most 65 bytes of it."""
        buf = self._keybuf
        if buf is not None and len(buf) <= 64:
            buf += part[: 65 - len(buf)]

    def _add_atif(self, start: int, end: int) -> None:
        self._add(start, end, self._parse(len(self._starts), start, end))

    def _scan_lines(self, data: bytes, base: int) -> int:
        """Index the complete lines of ``data``; returns how many bytes were consumed."""
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            if nl > pos:
                self._add_line(base + pos, base + nl, data[pos:nl])
            pos = nl + 1
        return pos

    def _scan_long_line(self, start: int) -> None:
        """A line longer than one chunk: find its end without keeping more than one chunk at a time."""
        pos = start
        while pos < self.size:
            data = self._pread(min(CHUNK, self.size - pos), pos)
            if not data:
                return
            nl = data.find(b"\n")
            if nl >= 0:
                end = pos + nl
                raw = self._pread(end - start, start) if end - start <= MAX_STEP_BYTES else b""
                self._add_line(start, end, raw)
                self._scanned = end + 1
                return
            pos += len(data)
        # unterminated: wait for the rest (a line being written)

    def _add_line(self, start: int, end: int, raw: bytes) -> None:
        index = len(self._starts)
        if end - start > MAX_STEP_BYTES:
            self._add(start, end, _too_large(index, start, end - start))
            return
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            self._add(start, end, _garbage(index, start, end - start, raw))
            return
        try:
            usage = _usage_of(obj)
            step = None if usage != (None, None) else appserver_step(obj, index, start, end - start)
        except _UNFORESEEN:  # as ``_parse``: a bad step, never an index that stops
            self._add(start, end, replace(_garbage(index, start, end - start, raw), note=_NOT_UNDERSTOOD))
            return
        if usage != (None, None):
            self._usage = usage
            return
        if step is None:
            return
        if step.flag == GOAL:
            status = step.summary
            if status == self._goal:
                return  # the same status again (every goal update repeats it): not a step
            self._goal = status
            if "active" in status and self._goal_was_blocked:
                step = _replace_summary(step, status + " (resumed)")
            self._goal_was_blocked = "blocked" in status
        if step.summary.startswith("turn completed"):
            tin, tout = self._usage
            step = replace(step, tokens_in=tin, tokens_out=tout)
        self._add(start, end, step)

    _goal_was_blocked = False

    # -- reading --------------------------------------------------------------------------------
    def _parse(self, index: int, start: int, end: int) -> Step:
        length = end - start
        if length > MAX_STEP_BYTES:
            return _too_large(index, start, length)
        raw = self._pread(length, start)
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            return _garbage(index, start, length, raw)
        try:
            if self.kind == ATIF:
                return atif_step(obj, index, start, length)
            step = appserver_step(obj, index, start, length)
        except _UNFORESEEN:
            # a shape the step readers did not foresee is a bad step, never an index that stops (the
            # reader stayed at "indexing..." and the compare view lost the arm's tests, a probe found)
            return replace(_garbage(index, start, length, raw), note=_NOT_UNDERSTOOD)
        return step or Step(index, start, length, "event", summary=str(obj.get("method", "?"))[:80])

    def step(self, index: int) -> Step | None:
        """Step ``index`` parsed from its byte range (tokens and flag as the index recorded them)."""
        with self._lock:
            if index < 0 or index >= self.count:
                return None
            hit = self._cache.get(index)
            if hit is not None:
                self._cache.move_to_end(index)
                return hit
            start, end = self._starts[index], self._ends[index]
            flag, tin, tout = self._flags[index], self._tok_in[index], self._tok_out[index]
            step = self._parse(index, start, end)
            if self.kind == APPSERVER:
                step = replace(step, flag=flag, tokens_in=None if tin < 0 else tin,
                               tokens_out=None if tout < 0 else tout)  # fmt: skip
                if flag == GOAL:
                    step = _goal_label(self, index, step)
            self._cache[index] = step
            if len(self._cache) > CACHE_STEPS:
                self._cache.popitem(last=False)
            return step

    def flag(self, index: int) -> int:
        with self._lock:
            return self._flags[index] if 0 <= index < len(self._flags) else OK

    def next_flagged(
        self, start: int, backwards: bool = False, flags: tuple[int, ...] = (ERROR,)
    ) -> int | None:
        """The next (or previous) step from ``start`` (exclusive) whose flag is one of ``flags``."""
        with self._lock:
            hits = []
            for f in flags:
                b = bytes([f])
                i = self._flags.rfind(b, 0, max(0, start)) if backwards else self._flags.find(b, start + 1)
                if i >= 0:
                    hits.append(i)
        if not hits:
            return None
        return max(hits) if backwards else min(hits)

    def count_flagged(self, flag: int = ERROR) -> int:
        with self._lock:
            return self._flags.count(bytes([flag]))

    def step_of_offset(self, offset: int) -> int | None:
        """The step whose byte range holds ``offset`` (search hits between steps: the next step)."""
        n = self.count
        i = bisect.bisect_right(self._starts, offset, 0, n) - 1
        if i >= 0 and offset < self._ends[i]:
            return i
        return i + 1 if i + 1 < n else None

    def raw(self, index: int, limit: int = MAX_FIELD_CHARS) -> str:
        """The step's own text in the file (capped): what the raw tab shows for it."""
        with self._lock:
            if index < 0 or index >= self.count:
                return ""
            start, end = self._starts[index], self._ends[index]
            return self._pread(min(end - start, limit), start).decode("utf-8", "replace")

    # -- search ---------------------------------------------------------------------------------
    def search(self, query: str, start: int = -1, backwards: bool = False) -> int | None:
        """The next step (after ``start``, or before it) whose text contains ``query``.

        Searches the file's bytes (JSON-escaped text: a newline in a message reads ``\\n``) through
        ``runner.results.search.find_offsets``.
        """
        if not query or self._fh is None:
            return None
        # no lock: a search must not stall the screen; it reads published entries only
        n = self.count
        if n == 0:
            return None
        size = self._ends[n - 1]
        if backwards:
            first, limit = 0, self._starts[start] if 0 <= start < n else size
        else:
            first, limit = self._ends[start] if 0 <= start < n else 0, size
        for offset in find_offsets(self._pread, size, query, first, limit, backwards):
            i = self.step_of_offset(offset)
            if i is None:
                if not backwards:
                    return None
                continue
            if (i < start if backwards else i > start) and offset >= self._starts[i]:
                return i
        return None


def _replace_summary(step: Step, summary: str) -> Step:
    return replace(step, summary=summary)


def _goal_label(index: StepIndex, i: int, step: Step) -> Step:
    """A goal step read alone cannot know it resumed a block: look back for the previous goal step."""
    if "active" not in step.summary:
        return step
    j = index.next_flagged(i, backwards=True, flags=(GOAL,))
    if j is None:
        return step
    prev = index._parse(j, index._starts[j], index._ends[j])
    return _replace_summary(step, step.summary + " (resumed)") if "blocked" in prev.summary else step


# ----------------------------------------------------------------------------------- summaries
@dataclass(frozen=True)
class TrajectoryFacts:
    """What the arm comparison shows from a trajectory: not scoring, only what the agent did."""

    steps: int = 0
    commands: int = 0
    failed_commands: int = 0
    last_agent_message: str = ""
    source: str = ""  # the file read, relative to the trial dir
    error: str | None = None


def trajectory_file(trial_dir: Path | str) -> Path | None:
    """The file the reader opens for a trial: ATIF when harbor wrote it, else the raw app-server stdout."""
    for rel in (TrialFiles.TRAJECTORY, TrialFiles.APPSERVER_STDOUT):
        p = Path(trial_dir) / rel
        try:
            if stat.S_ISREG(os.stat(p).st_mode):
                return p
        except OSError:
            continue
    return None


def trajectory_facts(trial_dir: Path | str, max_steps: int = 1_000_000) -> TrajectoryFacts:
    """Count the commands and failed commands of a trial and find the agent's last message."""
    path = trajectory_file(trial_dir)
    if path is None:
        return TrajectoryFacts(error="no trajectory")
    idx = StepIndex(path)
    try:
        if idx.error:
            return TrajectoryFacts(error=idx.error)
        while idx.index_more():
            if idx.count > max_steps:
                break
        cmds = failed = 0
        last = ""
        for i in range(idx.count):
            s = idx.step(i)
            if s is None:
                continue
            work = [c for c in s.commands if c.tool not in GOAL_TOOLS]
            cmds += len(work)
            failed += sum(1 for c in work if c.failed)
            if s.role == "agent" and not s.commands and s.message.strip():
                last = first_line(s.message)
        rel = path.relative_to(Path(trial_dir)).as_posix()
        return TrajectoryFacts(idx.count, cmds, failed, last, rel)
    finally:
        idx.close()
