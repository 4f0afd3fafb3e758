"""Run assignment: which runner start each attempt belongs to, read from ``<out>/.runner/events.jsonl``.

Why: run scoping uses the runner's own stamps and events, never file mtimes. The current run is the
last ``{"event": "runner_start", "run_id", "ts", "tasks", "arms"}``; an attempt belongs to the run
whose event names its ``(task, arm, stamp)`` (``job_start`` etc.), else to the last runner start at
or before its stamp's time (both written by the runner's clock). The journal is written by the
runner, but a planted or half-written line must never raise nor make a million cells: every field
is taken only when it has the expected type (``_ts``, ``_strs``, ``_repeats``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.results import records as results
from runner.results import tree
from runner.results.attempts import Attempt, AttemptKey
from runner.results.events import EventKind, EventReader


@dataclass(frozen=True, slots=True)
class Run:
    """One runner start, from ``events.jsonl`` (``{"event": "runner_start", "run_id", "ts", ...}``)."""

    run_id: str
    started: datetime | None
    tasks: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()
    pid: int | None = None
    repeats: int = 1  # the run's ``--repeats`` (attempts per pair)
    model: str | None = None  # the run's ``--model`` (prices a ledger call whose request named none)
    prices: tuple[str, ...] = ()  # the run's ``--price`` items (``runner.results.prices``)
    resumed: bool = False  # a restart of the run before it (``--resume``, ``health --fix``, the console)
    ended: datetime | None = None  # its ``runner_exit`` (None: running, or killed without one)
    #: tasks it ran as they are on disk though they differ from dataset.toml (``--allow-modified``)
    modified: tuple[str, ...] = ()
    marathon: str | None = None  # the marathon that made it (``runner.version``; None: older ones)


def _ts(v: Any) -> datetime | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        try:
            return datetime.fromtimestamp(v, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(v, str):
        t = results.parse_time(v)
        if t is not None:
            return t if t.tzinfo else t.replace(tzinfo=UTC)
    return None


def _repeats(v: Any) -> int:
    """A runner_start's ``repeats``: a whole number from 1 to ``tree.MAX_REPEATS``, else 1."""
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= tree.MAX_REPEATS:
        return v
    return 1


#: a runner_start's task and arm lists are taken up to this many names (a planted event naming a
#: million tasks must not make a million pending cells)
MAX_PLANNED = 20_000


def _config_strs(config: Any, key: str) -> tuple[str, ...]:
    """A list of short texts of the runner_start's ``config`` (its ``--price`` items)."""
    v = config.get(key) if isinstance(config, dict) else None
    return tuple(x[:200] for x in v[:100] if isinstance(x, str)) if isinstance(v, list) else ()


def _strs(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [x for x in v[: MAX_PLANNED * 64].replace(",", " ").split() if x]
    if isinstance(v, (list, tuple)):
        return tuple(x for x in v[:MAX_PLANNED] if isinstance(x, str) and x and "/" not in x)
    return ()


#: the times the current run's runners ran: (start, end) of each, end None while it runs
Pieces = tuple[tuple[datetime, datetime | None], ...]


def span_sec(pieces: Pieces, now: float) -> float | None:
    """The seconds the current run's runners have run (``RunLog.current_pieces``): each start to its
    exit (or to its last event, for one that died without one), the live one to ``now``; the time
    between a stop or a crash and its ``--resume`` is not in it. None before it began."""
    if not pieces:
        return None
    return math.fsum(
        max(0.0, (end.timestamp() if end is not None else now) - start.timestamp()) for start, end in pieces
    )


class RunLog:
    """The runner starts of one tree and the attempts its events name; fed the journal's new lines."""

    @property
    def refused(self) -> str:
        """Why the journal could not be read ("" when it could, or there is none): a FIFO, a dir or a
        symlink at its name. Said beside the unreadable files, never a silent "all time"."""
        return f"{self._events.path}: {self._events.refused}" if self._events.refused else ""

    def __init__(self, out: Path) -> None:
        self.runs: list[Run] = []
        self._events = EventReader(out)
        self._event_stamp_run: dict[AttemptKey | tuple[str, str, str], str] = {}
        #: run id -> the ``ts`` of its latest event, as written (parsed only when asked): where a
        #: runner that died without its exit line stopped working (``current_pieces``)
        self._last_ts: dict[str, Any] = {}
        #: the attempts the journal says were voided, (task, arm dir, stamp) -> where they went
        self.voids: dict[tuple[str, str, str], str] = {}

    @property
    def current(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    def current_ids(self) -> frozenset[str]:
        """The run ids the current run's scope counts: the last runner start and the ones it resumed
        (back to the start that was not a resume). A runner restarted after a crash (``health
        --fix``) gets a run id of its own, but it goes on with the same run: counting its attempts
        alone showed the pairs its predecessor finished as pending, and means over the rest."""
        ids: set[str] = set()
        for r in reversed(self.runs):
            ids.add(r.run_id)
            if not r.resumed:
                break
        return frozenset(ids)

    def current_span(self) -> tuple[datetime | None, datetime | None]:
        """When the current run began and, once its runner exited, when it ended: from its first
        start (not a restart that resumed it) to the last runner's exit. Every rate of the run is
        over this span (``span_sec``): a rate since a `health --fix` restart put the whole run's spend
        over minutes, and one to "now" after the run ended kept falling (both found by probes)."""
        started = None
        for r in reversed(self.runs):
            started = r.started or started
            if not r.resumed:
                break
        return started, (self.runs[-1].ended if self.runs else None)

    def current_pieces(self) -> Pieces:
        """When each runner of the current run (its first start and the restarts that resumed it)
        ran: from its start to its exit, or to its last event when it died without one (a working
        runner writes ``runner_alive`` every 10 minutes), or open while it runs. Every rate of the run is over these (``span_sec``): a rate from the first
        start put a stop and its resume ten hours later into the hours worked (found by a review)."""
        chain: list[Run] = []
        for r in reversed(self.runs):
            chain.append(r)
            if not r.resumed:
                break
        chain.reverse()
        pieces = []
        for i, r in enumerate(chain):
            if r.started is None:
                continue
            nxt = next((c.started for c in chain[i + 1 :] if c.started is not None), None)
            end = r.ended
            if end is None and nxt is not None:
                # it died without its exit line (a full disk, kill -9): it worked until its last
                # event, not until the start that resumed it hours later (found by a review)
                last = _ts(self._last_ts.get(r.run_id))
                end = max(r.started, last) if last is not None else nxt
            pieces.append((r.started, min(end, nxt) if end is not None and nxt is not None else end))
        return tuple(pieces)

    def read(self) -> None:
        """Take in the new lines of events.jsonl (``runner.results.events.EventReader``)."""
        new = self._events.iter_new()  # streamed: a long journal is never held whole
        if self._events.restarted:  # replaced or truncated: what the old file said is gone
            self.runs = []
            self._event_stamp_run = {}
            self._last_ts = {}
        for ev in new:
            self._apply(ev)

    def _apply(self, ev: dict) -> None:
        run_id = ev.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return
        self._last_ts[run_id] = ev.get("ts")
        if ev["event"] == EventKind.RUNNER_START:
            cfg = ev.get("config") if isinstance(ev.get("config"), dict) else None
            self.runs.append(
                Run(
                    run_id=run_id,
                    started=_ts(ev.get("ts")),
                    tasks=_strs(ev.get("tasks")),
                    arms=_strs(ev.get("arms")),
                    pid=ev.get("pid") if isinstance(ev.get("pid"), int) else None,
                    repeats=_repeats(ev.get("repeats")),
                    model=m if isinstance(m := (cfg or {}).get("model"), str) else None,
                    prices=_config_strs(cfg, "prices"),
                    modified=_config_strs(cfg, "modified_tasks"),
                    marathon=v[:80] if isinstance(v := ev.get("marathon"), str) else None,
                    resumed=ev.get("resumed") is True,
                )
            )
            return
        if ev["event"] == EventKind.RUNNER_EXIT:
            for i in range(len(self.runs) - 1, -1, -1):
                if self.runs[i].run_id == run_id:
                    self.runs[i] = replace(self.runs[i], ended=_ts(ev.get("ts")))
                    break
            return
        if ev["event"] == EventKind.VOID:
            # a void names an attempt it moved, never one of its run (a takeover's is another run's)
            task, stamp, arm = ev.get("task"), ev.get("stamp"), ev.get("arm_dir") or ev.get("arm")
            dest = ev.get("dest")
            if isinstance(task, str) and isinstance(arm, str) and isinstance(stamp, str):
                self.voids[(task, arm, stamp)] = dest if isinstance(dest, str) else ""
            return
        task, stamp = ev.get("task"), ev.get("stamp")
        arm = ev.get("arm_dir") or ev.get("arm")
        if isinstance(task, str) and isinstance(arm, str) and isinstance(stamp, str):
            self._event_stamp_run[(task, arm, stamp)] = run_id
            self._event_stamp_run[(task, tree.arm_of_dir(arm), stamp)] = run_id

    def run_of(self, a: Attempt) -> str | None:
        """The run an attempt belongs to: the one whose event names it, else the last runner start at
        or before its stamp's time; None before any runner start (the run scope is then all time)."""
        if not self.runs and not self._event_stamp_run:
            return None
        rid = self._event_stamp_run.get((a.task, a.arm_dir, a.stamp)) or self._event_stamp_run.get(
            (a.task, a.arm, a.stamp)
        )
        if rid:
            return rid
        t = tree.stamp_time(a.stamp)
        if t is None:
            return None
        best = None
        for r in self.runs:  # the last runner start at or before the stamp (both the runner's clock)
            if r.started is not None and r.started <= t:
                best = r.run_id
        return best

    def assign(self, attempts: dict[AttemptKey, Attempt], dirty: set[AttemptKey]) -> None:
        """Give every attempt its run (``run_of``): one whose run changed is replaced (copy on write:
        cells already handed out keep theirs) and marked in ``dirty`` for the matrix to rebuild."""
        for k, a in attempts.items():
            rid = self.run_of(a)
            if rid != a.run_id:
                attempts[k] = replace(a, run_id=rid)
                dirty.add(k)
