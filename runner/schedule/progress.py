"""Headless progress: live per-arm bars on a TTY, plain timestamped lines otherwise, or JSON events.

Why: the runner runs for a day in an ssh session or under ``--detach`` with its output in a log
file. On a terminal the operator wants the state at a glance; in a log file every line must stand
alone with its time (no carriage-return animation garbling the file); a machine wants the events.
The display only listens to the runner's events; it never reads the tree.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any, TextIO

# events worth a line in plain mode (gate waits and reclaims included: the operator must see them)
_PLAIN = {
    "runner_start": "runner started: run {run_id}, {n_pairs} pairs, arms {arms}, concurrency {concurrency}",
    "dataset_modified": "WARNING: tasks differ from dataset.toml: {tasks} (--allow-modified; reports will say so)",
    "pass_start": "pass {pass_no}: {n_pairs} pair(s) to run",
    "adopt": "adopted running job {task}/{arm} (PID {pid}) from a dead runner",
    "claim_takeover": "took over stale claim {task}/{arm} (was {was})",
    "claim_held": "skip {task}/{arm}: claimed by {holder}",
    "job_start": "start {task}/{arm} stamp {stamp} (PID {pid})",
    "job_finish": "{status:<7} {task}/{arm} in {elapsed_sec}s {detail}",
    "void": "VOID    {task}/{arm} stamp {stamp}: {reason}",
    "retry": "retry   {task}/{arm} in pass {next_pass}: {reason}",
    "gate_wait": "network gate: waiting ({reason})",
    "gate_open": "network gate: open after {waited_sec}s",
    "reclaim": "reclaimed empty network(s) of ours: {networks}",
    "gate_error": "network gate: {error}",
    "stop_requested": "stopping ({signal}): no new jobs; terminating {n_running} running job(s)",
    "cleanup": "cleanup: removed {containers} container(s), {networks} network(s)",
    "pass_end": "pass {pass_no} finished: {done} done, {left} left",
    "runner_exit": "runner exit: {reason}; {done}/{total} pairs done",
    "run_paused": "PAUSED by the circuit breaker: {reason}",
    "preflight_note": "note: {what} ({todo})",
}


class _Fmt(dict):
    def __missing__(self, key: str) -> str:
        return ""


class Progress:
    """Listener for ``EventLog``: ``mode`` is ``tty``, ``plain`` or ``json``."""

    def __init__(self, mode: str | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        if mode is None:
            mode = "tty" if getattr(self.stream, "isatty", lambda: False)() else "plain"
        self.mode = mode
        self.total: dict[str, int] = defaultdict(int)
        self.done: dict[str, set[str]] = defaultdict(set)
        self.running: dict[str, set[str]] = defaultdict(set)
        self.voided: dict[str, int] = defaultdict(int)
        self.arms: list[str] = []
        self._drawn = 0
        self.last_line = ""

    def __call__(self, ev: dict[str, Any]) -> None:
        self._track(ev)
        if self.mode == "json":
            self.stream.write(json.dumps(ev, default=str) + "\n")
            self.stream.flush()
            return
        line = self._line(ev)
        if self.mode == "plain":
            if line:
                self.stream.write(f"{ev['ts'][:19].replace('T', ' ')}Z {line}\n")
                self.stream.flush()
            return
        if line:
            self.last_line = line
        self._draw()

    def _track(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        task, arm = ev.get("task"), ev.get("arm")
        if kind == "runner_start":
            self.arms = list(ev.get("arms") or [])
            for a, n in (ev.get("pairs_per_arm") or {}).items():
                self.total[a] = n
            for a, tasks in (ev.get("already_done") or {}).items():
                self.done[a].update(tasks)
        elif kind in ("job_start", "adopt") and arm:
            self.running[arm].add(task)
        elif kind == "job_finish" and arm:
            self.running[arm].discard(task)
            if ev.get("status") == "done":
                self.done[arm].add(task)
        elif kind == "void" and arm:
            self.voided[arm] += 1

    @staticmethod
    def _line(ev: dict[str, Any]) -> str:
        tmpl = _PLAIN.get(ev.get("event", ""))
        if tmpl is None:
            return ""
        vals = _Fmt({k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in ev.items()})
        return tmpl.format_map(vals).rstrip()

    def _draw(self) -> None:
        width = 30
        out = []
        for arm in self.arms:
            total = max(self.total.get(arm, 0), 1)
            d, r = len(self.done[arm]), len(self.running[arm])
            filled = int(width * d / total)
            run_w = min(width - filled, int(round(width * r / total)))
            bar = "#" * filled + ">" * run_w + "." * (width - filled - run_w)
            v = f"  void {self.voided[arm]}" if self.voided[arm] else ""
            out.append(f"{arm:>12} [{bar}] {d}/{self.total.get(arm, 0)} done, {r} running{v}")
        out.append(self.last_line[:120])
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F")
        for ln in out:
            self.stream.write("\x1b[2K" + ln + "\n")
        self._drawn = len(out)
        self.stream.flush()
