"""The current run as its events tell it: per-arm counts, elapsed, the ETA from the observed trial
durations at the run's concurrency, the spend rate, how the run ended, an open network-gate wait.

Why here: this is arithmetic over the event log, which is part of the output tree; the runner's tty
display (``runner.schedule.display``) and the console both render it, neither computes it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from runner.results.events import EventKind
from runner.results.tree import repeat_of, unit_label

#: a pool gate that has waited longer than this is worth waking the operator for
GATE_ALARM_SEC = 300.0


def long_duration(sec: float) -> str:
    """``2 min 48 s``, ``1 h 05 min``: for sentences (the end-of-run banner, a report's flag)."""
    sec = int(round(sec))
    if sec < 60:
        return f"{sec} s"
    if sec < 3600:
        return f"{sec // 60} min {sec % 60} s"
    return f"{sec // 3600} h {(sec % 3600) // 60:02d} min"


def event_time(ev: Mapping[str, Any]) -> float | None:
    """An event's ``ts`` (ISO-8601, ``Z``) as epoch seconds, or None when it has none."""
    ts = ev.get("ts")
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def eta_sec(remaining: int, durations: Sequence[float], concurrency: int | None) -> float | None:
    """Time left for ``remaining`` pairs: the mean observed trial duration per pair, run
    ``concurrency`` at a time (never more at a time than pairs are left). None until one trial
    has finished (nothing observed yet) or without a concurrency; 0 when nothing is left."""
    if remaining <= 0:
        return 0.0
    if not durations or not concurrency or concurrency < 1:
        return None
    mean = sum(durations) / len(durations)
    return remaining * mean / min(concurrency, remaining)


def per_hour(amount: float | None, elapsed_sec: float | None) -> float | None:
    """A spend (tokens, USD) over the run's elapsed time as a rate per hour; None before any time
    has passed or when the amount is unknown."""
    if amount is None or not elapsed_sec or elapsed_sec <= 0:
        return None
    return amount * 3600.0 / elapsed_sec


def progress_bar(done: int, running: int, total: int, width: int, chars: str = "█▒░") -> str:
    """``done`` then ``running`` cells of ``width``, the rest empty (``chars``: done, running, empty)."""
    total = max(total, 1)
    filled = min(width, int(width * done / total))
    run_w = min(width - filled, int(round(width * running / total)))
    return chars[0] * filled + chars[1] * run_w + chars[2] * (width - filled - run_w)


@dataclass(frozen=True)
class RunEnd:
    """How the last runner said it ended (its ``runner_exit`` event)."""

    reason: str
    done: int
    total: int
    at: float | None
    paused: str | None = None


@dataclass(frozen=True)
class ArmProgress:
    arm: str
    total: int
    done: int
    running: int
    voided: int = 0


@dataclass(frozen=True)
class RunProgress:
    """The current run as its events tell it: per-arm counts, when it started, the observed trial
    durations, the concurrency, whether (and how) it ended, and an open network-gate wait."""

    run_id: str | None = None
    started_at: float | None = None
    concurrency: int | None = None
    arms: tuple[ArmProgress, ...] = ()
    durations: tuple[float, ...] = ()
    end: RunEnd | None = None
    last_event_at: float | None = None
    gate_waiting_since: float | None = None
    gate_reason: str | None = None
    gate_waits: int = 0
    pass_no: int | None = None
    paused: str | None = None
    repeats: int = 1  # the run's --repeats: every count is then of repeats of pairs

    @property
    def unit(self) -> str:
        """What the counts count: ``pairs``, or ``repeats`` in a run with repeats."""
        return "pairs" if self.repeats == 1 else "repeats"

    @property
    def total(self) -> int:
        return sum(a.total for a in self.arms)

    @property
    def done(self) -> int:
        return sum(a.done for a in self.arms)

    def elapsed_sec(self, now: float) -> float | None:
        """Since the runner started; a run that ended stops its clock at its exit."""
        if self.started_at is None:
            return None
        end = self.end.at if self.end is not None and self.end.at is not None else now
        return max(0.0, end - self.started_at)

    def eta_sec(self) -> float | None:
        return eta_sec(self.total - self.done, self.durations, self.concurrency)

    def gate_waited_sec(self, now: float) -> float | None:
        return None if self.gate_waiting_since is None else max(0.0, now - self.gate_waiting_since)


#: a trial duration beyond this is no trial's: left out of the ETA, as a negative one is (above the
#: longest deadline a run takes, ``--goal-timeout-sec`` up to 30 days: runner.schedule.config.BOUNDS)
MAX_TRIAL_SEC = 32 * 24 * 3600.0


def _name(v: Any) -> str | None:
    """A task's or an arm's name from an event: a string, else none (a list there is unhashable)."""
    return v if isinstance(v, str) and v else None


def _mapping(v: Any) -> list[tuple[str, Any]]:
    """The items of an event's ``{arm: ...}`` field with string keys; [] when it is not a mapping."""
    return [(k, x) for k, x in v.items() if isinstance(k, str)] if isinstance(v, Mapping) else []


def _unit(task: Any, ev: Mapping[str, Any]) -> Any:
    """The repeat of a pair an event is about, as ``already_done`` names it: ``task`` / ``task@r2``
    (its stamp names the repeat)."""
    stamp = ev.get("stamp")
    if isinstance(task, str) and isinstance(stamp, str):
        return unit_label(task, None, repeat_of(stamp))
    return task


def _note_stamp(stamps: dict[tuple[str, str], str], arm: str, unit: Any, ev: Mapping[str, Any]) -> None:
    if isinstance(unit, str) and isinstance(stamp := ev.get("stamp"), str):
        stamps[(arm, unit)] = stamp
    elif isinstance(unit, str):
        stamps.pop((arm, unit), None)


def _voids(stamps: dict[tuple[str, str], Any], key: tuple[str, str], voided: Any) -> bool:
    """Whether a void of the attempt ``voided`` (its stamp) is of the unit's attempt in ``stamps``
    (forgotten there if so): yes when either stamp is unknown (a pair done before this run, an
    event without a stamp) or they are the same."""
    known = stamps.get(key)
    if known is None or not isinstance(voided, str) or known == voided:
        stamps.pop(key, None)
        return True
    return False


@dataclass
class Tally:
    """Folds the runner's events, in order, into the counts of the current run (a new
    ``runner_start`` starts over). The tty display and the console both feed it; ``run`` holds the
    figures that are not counts, as the snapshot will show them."""

    run: RunProgress = field(default_factory=RunProgress)
    arms: list[str] = field(default_factory=list)
    total: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: per arm, the tasks done / running: ``task``, or ``task@r<k>`` for repeat k >= 2
    done: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    running: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    voided: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    durations: list[float] = field(default_factory=list)
    #: (arm, unit) -> the stamp of its done / running attempt, when an event named it: a void takes
    #: the unit out only when it is of that attempt (an older errored one voided beside a done
    #: retry left the pair done)
    done_stamp: dict[tuple[str, str], str] = field(default_factory=dict)
    running_stamp: dict[tuple[str, str], str] = field(default_factory=dict)

    def _set(self, **changes: Any) -> None:
        self.run = replace(self.run, **changes)

    def add(self, ev: Mapping[str, Any]) -> None:
        """Fold one event in. Every field is checked for its type before it is used: the journal is
        a file of the tree, and one line with a list where a name belongs once stopped the console's
        reading of the runner for the rest of its session."""
        kind = ev.get("event")
        task, arm = _name(ev.get("task")), _name(ev.get("arm"))
        at = event_time(ev)
        if kind == EventKind.RUNNER_START:
            self.__dict__.update(vars(Tally()))  # a new run: start over
            conc, reps = ev.get("concurrency"), ev.get("repeats")
            self._set(
                run_id=ev.get("run_id"),
                started_at=at,
                concurrency=conc if isinstance(conc, int) else None,
                repeats=reps if isinstance(reps, int) and not isinstance(reps, bool) and reps > 1 else 1,
            )
            arms = ev.get("arms")
            self.arms = [a for a in arms if isinstance(a, str)] if isinstance(arms, list) else []
            for a, n in _mapping(ev.get("pairs_per_arm")):
                if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    self.total[a] = n
            for a, tasks in _mapping(ev.get("already_done")):
                if isinstance(tasks, list):
                    self.done[a].update(t for t in tasks if isinstance(t, str))
        elif kind in (EventKind.JOB_START, EventKind.ADOPT) and arm:
            unit = _unit(task, ev)
            self.running[arm].add(unit)
            _note_stamp(self.running_stamp, arm, unit, ev)
        elif kind == EventKind.JOB_FINISH and arm:
            unit = _unit(task, ev)
            self.running[arm].discard(unit)
            self.running_stamp.pop((arm, unit), None)
            if ev.get("status") == "done":
                self.done[arm].add(unit)
                _note_stamp(self.done_stamp, arm, unit, ev)
            took = ev.get("elapsed_sec")
            if isinstance(took, (int, float)) and not isinstance(took, bool) and 0 <= took <= MAX_TRIAL_SEC:
                self.durations.append(float(took))
        elif kind == EventKind.VOID and arm:
            self.voided[arm] += 1
            unit, stamp, still = _unit(task, ev), ev.get("stamp"), ev.get("pair_done")
            if isinstance(still, bool):  # the voider looked at the tree after the move
                if not still:
                    self.done[arm].discard(unit)  # its done attempt voided: the pair is run again
                if self.done_stamp.get((arm, unit)) == stamp:
                    self.done_stamp.pop((arm, unit), None)
            elif _voids(self.done_stamp, (arm, unit), stamp):  # (a journal older than ``pair_done``)
                self.done[arm].discard(unit)  # a done attempt voided: the pair is run again
            if _voids(self.running_stamp, (arm, unit), stamp):
                self.running[arm].discard(unit)
        elif kind == EventKind.PASS_START and isinstance(ev.get("pass_no"), int):
            self._set(pass_no=ev["pass_no"])
        elif kind == EventKind.GATE_WAIT:
            since = self.run.gate_waiting_since if self.run.gate_waiting_since is not None else at
            self._set(gate_waits=self.run.gate_waits + 1, gate_waiting_since=since,
                      gate_reason=str(ev.get("reason") or "") or None)  # fmt: skip
        elif kind == EventKind.GATE_OPEN:
            self._set(gate_waiting_since=None, gate_reason=None)
        elif kind == EventKind.RUN_PAUSED:
            self._set(paused=str(ev.get("reason") or "paused by the circuit breaker"))
        elif kind == EventKind.RUNNER_EXIT:
            done, total = ev.get("done"), ev.get("total")
            end = RunEnd(
                reason=str(ev.get("reason") or "exited"),
                done=done if isinstance(done, int) else 0,
                total=total if isinstance(total, int) else 0,
                at=at,
                paused=str(ev["paused"]) if ev.get("paused") else None,
            )
            self._set(end=end, gate_waiting_since=None)
            self.running.clear()
        if at is not None:
            self._set(last_event_at=at)

    def snapshot(self) -> RunProgress:
        arms = list(self.arms) + sorted(set(self.total) - set(self.arms))
        counts = tuple(
            ArmProgress(a, self.total.get(a, 0), len(self.done[a]), len(self.running[a]), self.voided[a])
            for a in arms
        )
        return replace(self.run, arms=counts, durations=tuple(self.durations))
