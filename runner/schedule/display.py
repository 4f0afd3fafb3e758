"""Headless progress: live per-arm bars on a TTY, plain timestamped lines otherwise, or JSON events.

Why: the runner runs for a day in an ssh session or under ``--detach`` with its output in a log
file. On a terminal the operator wants the state at a glance; in a log file every line must stand
alone with its time (no carriage-return animation garbling the file); a machine wants the events.
The display only listens to the runner's events; it never reads the tree.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from modes import safetext
from runner.results.events import EventKind
from runner.results.run_progress import Tally, progress_bar
from runner.results.tree import with_repeat

# events worth a line in plain mode (gate waits and reclaims included: the operator must see them)
_PLAIN = {
    EventKind.RUNNER_START: "runner started: run {run_id}, {n_pairs} {pairs}, arms {arms}, concurrency {concurrency}",
    EventKind.DATASET_MODIFIED: "WARNING: tasks differ from dataset.toml: {tasks} (--allow-modified; reports will say so)",
    EventKind.PASS_START: "pass {pass_no}: {n_pairs} {pairs} to run",
    EventKind.ADOPT: "adopted running job {task}/{arm} (PID {pid}) from a dead runner",
    EventKind.CLAIM_TAKEOVER: "took over stale claim {task}/{arm} (was {was})",
    EventKind.CLAIM_HELD: "skip {task}/{arm}: claimed by {holder}",
    EventKind.JOB_START: "start {task}/{arm} stamp {stamp} (PID {pid})",
    EventKind.JOB_FINISH: "{status:<7} {task}/{arm} in {elapsed_sec}s {detail}",
    EventKind.VOID: "VOID    {task}/{arm} stamp {stamp}: {reason}",
    EventKind.RETRY: "retry   {task}/{arm} in pass {next_pass}: {reason}",
    EventKind.GATE_WAIT: "gate: waiting ({reason})",
    EventKind.GATE_OPEN: "gate: open after {waited_sec}s",
    EventKind.RECLAIM: "reclaimed empty network(s) of ours: {networks}",
    EventKind.GATE_ERROR: "network gate: {error}",
    EventKind.STOP_REQUESTED: "stopping ({signal}): no new jobs; terminating {n_running} running job(s)",
    EventKind.CLEANUP: "cleanup: removed {containers} container(s), {networks} network(s)",
    EventKind.PASS_END: "pass {pass_no} finished: {done} done, {left} left",
    EventKind.RUNNER_EXIT: "runner exit: {reason}; {done}/{total} {pairs} done",
    EventKind.RUN_PAUSED: "PAUSED by the {cause}: {reason}",
    EventKind.SPEND_CAP: "SPEND CAP: {text}; the running attempts: {on_cap}",
    EventKind.PREFLIGHT_NOTE: "note: {what} ({todo})",
    EventKind.IMAGE_READY: "image   {task}: {tag} {how} in {seconds}s (content {content_sha256}) {hosts}",
    EventKind.IMAGE_FAILED: "IMAGE FAILED {task}: {error}",
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
        self.tally = Tally()
        self._drawn = 0
        self.last_line = ""

    def __call__(self, ev: dict[str, Any]) -> None:
        self.tally.add(ev)
        if self.mode == "json":
            self.stream.write(json.dumps(ev, default=str) + "\n")
            self.stream.flush()
            return
        line = self._line(ev, self.tally.run.repeats)
        if self.mode == "plain":
            if line:
                self.stream.write(f"{ev['ts'][:19].replace('T', ' ')}Z {line}\n")
                self.stream.flush()
            return
        if line:
            self.last_line = line
        self._draw()

    @staticmethod
    def _line(ev: dict[str, Any], repeats: int = 1) -> str:
        """The event's line; in a run with repeats the counts are of repeats and a repeat k >= 2
        reads ``task/arm@r<k>``."""
        tmpl = _PLAIN.get(ev.get("event", ""))
        if tmpl is None:
            return ""
        vals = _Fmt({k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in ev.items()})
        vals["pairs"] = "pairs" if repeats == 1 else f"repeats ({repeats} per pair)"
        if ev.get("event") == EventKind.PASS_START and repeats == 1:
            vals["pairs"] = "pair(s)"
        if isinstance(ev.get("repeat"), int) and "arm" in vals:
            vals["arm"] = with_repeat(str(vals["arm"]), ev["repeat"])
        # an errored attempt's reason is harbor's exception message, often the sandbox's own stderr:
        # one line, every control character shown as its escape (a newline would forge a verdict
        # line of the log, an escape write to the operator's terminal)
        return safetext.clean(tmpl.format_map(vals).rstrip(), None)

    def _draw(self) -> None:
        width = 30
        out = []
        t = self.tally
        for arm in t.arms:
            total = t.total.get(arm, 0)
            d, r = len(t.done[arm]), len(t.running[arm])
            bar = progress_bar(d, r, total, width, "#>.")
            v = f"  void {t.voided[arm]}" if t.voided[arm] else ""
            out.append(f"{arm:>12} [{bar}] {d}/{total} done, {r} running{v}")
        out.append(self.last_line[:120])
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F")
        for ln in out:
            self.stream.write("\x1b[2K" + ln + "\n")
        self._drawn = len(out)
        self.stream.flush()
