"""The results model: one scanner turns an output tree into cells (task x arm), and keeps them current.

Everything that shows results (status, report, the console, the runner's skip decision) reads this
one model, so they cannot disagree. The scoring rules come from ``runner.results.rules``; files become typed
records in ``runner.results``; paths come from ``runner.results.tree``.

Public API (stable; other areas build on it):

    RunModel.load(out) -> RunModel          cold scan of the whole tree (and its voided trials)
    model.update(paths) -> set[(task, arm)] re-read only what the changed paths touch (watchfiles feed)
    model.refresh() -> set[(task, arm)]     re-scan everything, return the cells that changed
    model.cells: dict[(task, arm), Cell]    all-time cells; every task x arm seen (or planned) has one
    model.scoped(scope="run"|"all")         cells counted in the current run only, or all time
    model.tasks, model.arms                 sorted task names; arms in canonical order (modes.ARMS first)
    model.excluded: list[Excluded]          dirs left out (leftover dirs of another owner), with reason
    model.runs: list[Run]; model.run_id     runner starts from <out>/.runner/events.jsonl; the current one
    model.claims: set[(task, arm)]          pairs with a claim file in <out>/.claims (any repeat)
    model.repeats -> int                    K: attempts per pair the cells are read with (1 without repeats)
    model.unreadable: list[str]             files unreadable at the last read (relative paths)
    model.is_output_tree / model.n_attempts facts for "not an output tree" / "empty tree" messages
    pair_done(out, task, arm, repeat=1)     the runner's skip test, same dirs and exclusions as the model
    open_tree(out) -> RunModel              load for a command; one-line UserError on bad input

    Cell: task, arm, status (pending|running|done|errored|voided), reward, partial, pass_rate,
          build_failed, cost_usd, cost_usd_all, n_input_tokens, n_output_tokens, wall_sec,
          continuations, unblocks, error_events, goal_status, deadline_hit, run_id, attempts,
          scored_by, newer, claimed, unreadable, note, repeats (each repeat's cell when K > 1;
          ``parts``: those or the cell itself), k, repeats_done
    Attempt: task, arm, arm_dir, stamp, repeat, job_dir, job, trials, voided_trials, status, voided,
          reason, run_id, and the attempt's own reward/partial/pass_rate/... (``Attempt.figures``)
    scored_values(cell, measure) -> [float] a cell's values, one per counted repeat (its task's cluster)

Rules applied here (none re-implemented from runner.results.rules):
- a pair is scored by its latest done attempt; a newer running/errored attempt never replaces it
  (``Cell.newer`` says it exists);
- a done attempt whose metrics are not a score yet (``phase: initialized``) does not score: the
  previous done attempt with a score does, and ``note`` says so;
- a half-written file never raises and never erases a value: the record keeps its last good value
  and is marked ``stale``; the cell says ``unreadable``;
- repeats (``marathon run --repeats K``): an attempt belongs to the repeat its stamp names
  (``<stamp>@r<k>``; no mark: repeat 1, so a tree without repeats reads as it always did). Each repeat
  is a cell of its own by the rules above (``build_cell``, the hole rule included); the pair's cell
  shows the mean of its done repeats and its flagged ones (as failures, every score 0) and counts as
  done once one repeat is (``combine_repeats``); a pair of one repeat is that repeat's cell, unchanged;
- arm dirs owned by another uid than the tree's owner are excluded (``model.excluded``);
  ``<arm>-<pid>`` dirs count as ``<arm>``;
- run scoping uses the runner's own stamps and events, never file mtimes: the current run is the
  last ``{"event": "runner_start", "run_id", "ts", "tasks", "arms"}`` of ``.runner/events.jsonl``;
  an attempt belongs to the run whose event names its ``(task, arm, stamp)`` (``job_start`` etc.),
  else to the last runner start at or before its stamp's time (both written by the runner's clock).

Thread-safety: the model is not locked; the console feeds ``update`` from one worker and reads the
cells it returns.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path
from typing import Any

from modes import safeio
from modes.profiles import ARMS
from modes.trial_files import TrialFiles
from runner.results import clusters, rules, tree
from runner.results import records as results
from runner.results.events import EventKind, EventReader
from runner.results.hosts import HostRecord, HostUse, read_host
from runner.results.ledger import AttemptUsage, Ledger, LedgerReader
from runner.results.records import JobRecord, TrialRecord

#: ``Figures.tokens_source`` of tokens read from the gateway's ledger
LEDGER = "ledger"
PENDING = "pending"
RUNNING = "running"
DONE = "done"
ERRORED = "errored"
VOIDED = "voided"
#: a file of the attempt broke a safe-open rule (modes.safeio): a FIFO, a symlink out, too large
UNREADABLE = "unreadable"
#: a verifier file changed after the verifier finished (results.tampered)
TAMPERED = "tampered"
STATUSES = (PENDING, RUNNING, DONE, ERRORED, VOIDED, UNREADABLE, TAMPERED)

Key = tuple[str, str]  # (task, arm)
AttemptKey = tuple[str, str, str]  # (task, arm dir, stamp)


@dataclass(frozen=True, slots=True)
class Excluded:
    path: str
    reason: str
    task: str | None = None
    arm: str | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One runner start, from ``events.jsonl`` (``{"event": "runner_start", "run_id", "ts", ...}``)."""

    run_id: str
    started: datetime | None
    tasks: tuple[str, ...] = ()
    arms: tuple[str, ...] = ()
    pid: int | None = None
    repeats: int = 1  # the run's ``--repeats`` (attempts per pair)


@dataclass(frozen=True, slots=True)
class VoidedTrial:
    name: str
    path: str
    reason: str
    record: TrialRecord


@dataclass(slots=True)  # not frozen (hot path: one per attempt); treat as read-only
class Figures:
    """What an attempt (or a cell, from its scoring attempt) shows."""

    reward: float | None = None
    partial: float | None = None
    pass_rate: float | None = None
    build_failed: bool = False
    cost_usd: float | None = None
    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    wall_sec: float | None = None
    continuations: int | None = None
    unblocks: int | None = None
    error_events: int | None = None
    goal_status: str | None = None
    deadline_hit: bool = False  # the arm's deadline ended the agent phase (the receipt says so)
    in_progress_metrics: bool = False  # a trial's metrics say phase initialized/starting
    #: where the token figures come from: "ledger" (the gateway's, on the wire), else the agent's own
    #: report through harbor (None); with the ledger, what the agent said is kept beside it
    tokens_source: str | None = None
    agent_input_tokens: int | None = None
    agent_output_tokens: int | None = None
    #: the receipts' own (input, cached, output) token totals, for the reconciliation with the ledger
    receipt_usage: tuple[int, int, int] | None = None

    @property
    def has_score(self) -> bool:
        return (self.partial is not None or self.reward is not None) and not self.in_progress_metrics


@dataclass(frozen=True, slots=True)
class Hole:
    """Why an attempt is no score: a file refused or made nonsense (``UNREADABLE``) or changed after
    its verifier finished (``TAMPERED``); ``side``: who could have done it (``rules.hole_side``)."""

    status: str  # UNREADABLE | TAMPERED
    where: str  # "<trial>/<file relative to it>" or "result.json" of the job
    why: str
    side: str  # rules.AGENT_SIDE | rules.HARNESS_SIDE

    @property
    def flagged(self) -> bool:
        """The hole rule: a hole the agent could have made counts against its arm."""
        return self.side == rules.AGENT_SIDE

    def text(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass(slots=True)
class Attempt:
    """One harbor job of a pair: ``<out>/<task>/<arm dir>/<stamp>/<job>``, plus its voided trials."""

    task: str
    arm: str
    arm_dir: str
    stamp: str
    job_dir: str | None = None
    job: JobRecord | None = None
    trials: dict[str, TrialRecord] = field(default_factory=dict)
    voided_trials: dict[str, VoidedTrial] = field(default_factory=dict)
    run_id: str | None = None
    status: str = RUNNING
    figures: Figures = field(default_factory=Figures)
    unreadable: tuple[str, ...] = ()
    host: HostRecord | None = None  # from the attempt's host.json (a cluster run), never inferred
    repeat: int = 1  # the repeat of the pair its stamp names (``tree.repeat_of``)
    holes: tuple[Hole, ...] = ()  # why the attempt is UNREADABLE or TAMPERED (``_attempt_holes``)

    @property
    def voided(self) -> bool:
        return self.status == VOIDED

    @property
    def flagged(self) -> bool:
        """A hole through what the agent can write: counted against the arm as a failure."""
        return any(h.flagged for h in self.holes)

    @property
    def infrastructure(self) -> bool:
        """Not the arm's doing (the bias alarm's count): errored, voided, or a hole in what only the
        harness writes."""
        if self.status in (ERRORED, VOIDED):
            return True
        return self.status in (UNREADABLE, TAMPERED) and not self.flagged

    @property
    def reason(self) -> str | None:
        """Why it is voided (the README), or the exception types of an errored attempt."""
        if self.voided_trials:
            return "; ".join(dict.fromkeys(v.reason for v in self.voided_trials.values()))
        if self.status == ERRORED:
            types = [t.exception_type for t in self.trials.values() if t.exception_type]
            if not types and self.job:
                types = list(self.job.exception_types)
            return ", ".join(dict.fromkeys(types)) or "errored"
        return None

    @property
    def key(self) -> AttemptKey:
        return (self.task, self.arm_dir, self.stamp)


def _figure(name: str) -> property:
    # attrgetter, not a lambda: a report reads these half a million times on a 10,000-cell tree
    return property(attrgetter(f"figures.{name}"), doc=f"the scoring attempt's {name}")


@dataclass(frozen=True)
class Cell:
    """One task x arm: its status and the figures of the attempt that scores it.

    The figures are held once (``figures``: the scoring attempt's own ``Figures`` when it scores,
    else a copy without the score) and read through properties: ``cell.reward``, ``cell.partial``...
    """

    task: str
    arm: str
    status: str = PENDING
    figures: Figures = field(default_factory=Figures)
    cost_usd_all: float | None = None  # every attempt's spend, errored and voided ones too
    run_id: str | None = None
    attempts: tuple[Attempt, ...] = ()
    scored_by: str | None = None  # stamp of the scoring attempt
    scored_on: str | None = None  # host of the scoring attempt (its host.json; cluster runs only)
    newer: str | None = None  # status of a newer attempt that did not replace the score
    claimed: bool = False
    unreadable: bool = False
    note: str = ""
    #: each repeat's cell (1..K) when the pair is read with K > 1 repeats (``combine_repeats``); empty
    #: for a pair of one repeat, whose cell is that repeat's
    repeats: tuple[Cell, ...] = ()
    #: the hole rule (``rules.counts_in_means``): the cell's latest attempt has a hole the agent could
    #: have made; it counts against its arm as a failure (every score 0), never drops out of a mean.
    #: With repeats: no repeat is done and one is flagged (a done pair's flagged repeats count as
    #: failures among its repeats: ``flagged_repeats``)
    flagged: bool = False

    reward = _figure("reward")
    partial = _figure("partial")
    pass_rate = _figure("pass_rate")
    build_failed = _figure("build_failed")
    cost_usd = _figure("cost_usd")
    n_input_tokens = _figure("n_input_tokens")
    n_output_tokens = _figure("n_output_tokens")
    wall_sec = _figure("wall_sec")
    continuations = _figure("continuations")
    unblocks = _figure("unblocks")
    error_events = _figure("error_events")
    goal_status = _figure("goal_status")
    deadline_hit = _figure("deadline_hit")

    @property
    def key(self) -> Key:
        return (self.task, self.arm)

    @property
    def n_attempts(self) -> int:
        return len(self.attempts)

    @property
    def n_voided(self) -> int:
        return sum(1 for a in self.attempts if a.voided)

    @property
    def n_errored(self) -> int:
        return sum(1 for a in self.attempts if a.status == ERRORED)

    @property
    def parts(self) -> tuple[Cell, ...]:
        """The cell of each repeat, in order: ``repeats``, or the cell itself for a pair of one."""
        return self.repeats or (self,)

    @property
    def k(self) -> int:
        """How many repeats the pair is read with (1 without repeats)."""
        return len(self.repeats) or 1

    @property
    def repeats_done(self) -> int:
        return sum(1 for p in self.parts if p.status == DONE)

    @property
    def flagged_repeats(self) -> int:
        """How many of its repeats the hole rule flagged (0 or 1 for a pair of one repeat)."""
        return sum(1 for p in self.parts if p.flagged)


def scored_values(cell: Cell, measure: str, exclude_flagged: bool = False) -> list[float]:
    """A cell's values of a measure, one per counted repeat that has it: its task's cluster
    (``runner.results.clusters``). Counted: done, or flagged (the hole rule: a failure, every score
    0) unless ``exclude_flagged`` (``rules.counts_in_means``). A build failure counts as 0
    (``rules.scored_measure``). A pair of one repeat has one value (or none)."""
    return _scored(cell.parts, measure, exclude_flagged)


def _scored(parts: Iterable[Cell], measure: str, exclude_flagged: bool = False) -> list[float]:
    return [
        v
        for p in parts
        if rules.counts_in_means(p.status == DONE, p.flagged, exclude_flagged)
        and (v := rules.scored_measure(getattr(p, measure), p.build_failed, measure, p.flagged)) is not None
    ]


# --------------------------------------------------------------------------------------- attempts


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def _sum_opt(vals: Iterable[float | int | None]):
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


_NO_FIGURES = Figures()


def _figures(trials: Iterable[TrialRecord]) -> Figures:
    done = [t for t in trials if t.finished]
    if not done:
        return _NO_FIGURES
    if len(done) == 1:  # the usual shape (one task per job, one attempt): no aggregation needed
        t = done[0]
        m, r = t.metrics, t.receipt
        score = m.state == results.OK
        r = r if r is not None and r.state == results.OK else None
        return Figures(
            reward=t.reward,
            partial=m.partial if score else None,
            pass_rate=m.pass_rate if score else None,
            build_failed=m.build_failed if score else False,
            cost_usd=t.cost_usd,
            n_input_tokens=t.n_input_tokens,
            n_output_tokens=t.n_output_tokens,
            wall_sec=t.wall_sec,
            continuations=r.continuations if r else None,
            unblocks=r.unblocks if r else None,
            error_events=r.errors if r else None,
            goal_status=r.goal_status_final if r else None,
            deadline_hit=bool(r and r.deadline_hit),
            in_progress_metrics=m.state == results.IN_PROGRESS,
            receipt_usage=r.token_usage if r else None,
        )
    rewards = [t.reward for t in done if t.reward is not None]
    partials = [t.partial for t in done if t.metrics.is_score and t.partial is not None]
    rates = [t.pass_rate for t in done if t.metrics.is_score and t.pass_rate is not None]
    starts = [results.parse_time(t.started_at) for t in done]
    ends = [results.parse_time(t.finished_at) for t in done]
    wall = None
    if done and all(starts) and all(ends):
        try:
            wall = max(0.0, (max(ends) - min(starts)).total_seconds())  # type: ignore[type-var]
        except TypeError:  # naive vs aware
            wall = _sum_opt(t.wall_sec for t in done)
    receipts = [t.receipt for t in done if t.receipt is not None and t.receipt.state == results.OK]
    status = next((r.goal_status_final for r in reversed(receipts) if r.goal_status_final), None)
    return Figures(
        reward=_mean(rewards),
        partial=_mean(partials),
        pass_rate=_mean(rates),
        build_failed=any(t.build_failed for t in done if t.metrics.is_score),
        cost_usd=_sum_opt(t.cost_usd for t in done),
        n_input_tokens=_sum_opt(t.n_input_tokens for t in done),
        n_output_tokens=_sum_opt(t.n_output_tokens for t in done),
        wall_sec=wall,
        continuations=_sum_opt(r.continuations for r in receipts),
        unblocks=_sum_opt(r.unblocks for r in receipts),
        error_events=_sum_opt(r.errors for r in receipts),
        goal_status=status,
        deadline_hit=any(r.deadline_hit for r in receipts),
        in_progress_metrics=any(t.metrics.state == results.IN_PROGRESS for t in done),
    )


_BROKEN = (results.UNREADABLE, results.EMPTY, results.INVALID)


def _trial_holes(t: TrialRecord) -> list[Hole]:
    """The holes of one trial: each file refused, tampered with, or (once harbor finished the trial
    and its files are final) unreadable or holding a value that makes no sense. Never a score."""
    out = []
    if t.state == results.REFUSED:
        where = t.name if t.error == results.LINKED_DIR else f"{t.name}/{results.RESULT_JSON}"
        out.append(Hole(UNREADABLE, where, t.error, rules.HARNESS_SIDE))
    finished = t.state == results.OK and not t.stale
    if t.bad:
        out.append(
            Hole(UNREADABLE, f"{t.name}/{results.RESULT_JSON}", t.bad, t.bad_side or rules.HARNESS_SIDE)
        )
    m = t.metrics
    if m.state == results.TAMPERED:
        out.append(Hole(TAMPERED, f"{t.name}/{TrialFiles.VERIFIER_DIR}", m.error, rules.AGENT_SIDE))
    elif m.state == results.REFUSED or finished and m.state in _BROKEN:
        out.append(
            Hole(UNREADABLE, f"{t.name}/{TrialFiles.METRICS}", m.error, rules.hole_side(TrialFiles.METRICS))
        )
    r = t.receipt
    if r is not None and (r.state == results.REFUSED or finished and r.state in _BROKEN):
        out.append(
            Hole(UNREADABLE, f"{t.name}/{TrialFiles.RECEIPT}", r.error, rules.hole_side(TrialFiles.RECEIPT))
        )
    return out


def _attempt_holes(a: Attempt) -> tuple[Hole, ...]:
    holes = [h for t in a.trials.values() for h in _trial_holes(t)]
    job = a.job
    if job is not None and job.state == results.REFUSED:
        holes.append(Hole(UNREADABLE, results.RESULT_JSON, job.error, rules.HARNESS_SIDE))
    return tuple(holes)


def _attempt_status(a: Attempt) -> str:
    live = a.trials
    if a.voided_trials and not live:
        return VOIDED
    if a.holes:
        return TAMPERED if any(h.status == TAMPERED for h in a.holes) else UNREADABLE
    job = a.job
    if job is None or job.state != results.OK and not job.stale:
        # No readable job result: derive the job's counts from its trials (harbor sums them the same way).
        if not live:
            return RUNNING
        if any(not t.finished for t in live.values()):
            return RUNNING
        errored = sum(1 for t in live.values() if t.errored)
        return DONE if rules.done_of_counts(len(live), errored) else ERRORED
    if job.done:
        return DONE
    if job.finished:
        return ERRORED
    if job.n_running or job.n_pending or any(not t.finished for t in live.values()):
        return RUNNING
    if job.n_errored or job.n_cancelled:
        return ERRORED  # interrupted (no finished_at) after an error or a cancellation
    return RUNNING


def _with_ledger(f: Figures, u: AttemptUsage | None) -> Figures:
    """The figures with the tokens the gateway saw on the wire, when its ledger has the attempt
    (running attempts too: the console's live figures); what the agent reported is kept beside."""
    if u is None or not u.forwarded:
        return f
    return replace(
        f,
        n_input_tokens=u.input,
        n_output_tokens=u.output,
        tokens_source=LEDGER,
        agent_input_tokens=f.n_input_tokens,
        agent_output_tokens=f.n_output_tokens,
    )


def _refresh_attempt(a: Attempt, ledger: Ledger | None = None) -> None:
    a.holes = _attempt_holes(a)
    a.status = _attempt_status(a)
    a.figures = _figures(a.trials.values())
    if ledger is not None:
        a.figures = _with_ledger(a.figures, ledger.usage(a.task, a.arm_dir, a.stamp))
    bad = []
    if a.job is not None and (a.job.stale or a.job.state in (results.UNREADABLE, results.EMPTY)):
        bad.append(f"{a.job_dir}/result.json")
    elif a.job is not None and a.job.state == results.INVALID:
        bad.append(f"{a.job_dir}/result.json: {a.job.error}")
    for t in a.trials.values():
        if t.stale or t.state in (results.UNREADABLE, results.EMPTY):
            bad.append(f"{a.job_dir}/{t.name}")
    bad.extend(f"{a.job_dir}/{h.text()}" for h in a.holes if h.status == UNREADABLE)
    a.unreadable = tuple(bad)


# ------------------------------------------------------------------------------------------ cells


#: the note of a done cell without a partial score on a task whose other trials have one
NO_PARTIAL = (
    "no partial score (verifier/metrics.json missing or without one) where other trials of this task "
    "have one: a hole in what the agent can write, counted as a failure"
)


def partial_scored(a: Attempt) -> bool:
    """Is this attempt done with a partial score? (A task with one such attempt writes partial scores:
    a done cell of it without one is a hole, ``build_cell``'s ``task_scored``.)"""
    return a.status == DONE and a.figures.partial is not None and not a.figures.in_progress_metrics


def _partial_hole(f: Figures, task_scored: bool) -> bool:
    """A done attempt without a partial score on a task whose other trials have one (``NO_PARTIAL``)."""
    return task_scored and f.partial is None and not f.build_failed


def build_cell(
    task: str, arm: str, attempts: Iterable[Attempt], claimed: bool = False, task_scored: bool = False
) -> Cell:
    """The cell of one pair from its attempts: the latest done attempt with a score scores it.

    ``task_scored``: some attempt of this task (any arm) has a partial score; a done cell without one
    (its metrics.json deleted or emptied of scores) is then a hole and counts as a failure."""
    atts = sorted(attempts, key=lambda a: (a.stamp, a.arm_dir))
    if len(atts) == 1:  # the usual pair, done at its first attempt: what the rules below give it
        a = atts[0]
        f = a.figures
        # (a hole is never DONE; a missing partial where the task has them is the hole rule's, below)
        if a.status == DONE and f.has_score and not a.unreadable and not _partial_hole(f, task_scored):
            return Cell(
                task=task, arm=arm, status=DONE, figures=f, cost_usd_all=f.cost_usd, run_id=a.run_id,
                attempts=(a,), scored_by=a.stamp, scored_on=a.host.short() if a.host is not None else None,
                claimed=claimed,
            )  # fmt: skip
    cost_all = _sum_opt(a.figures.cost_usd for a in atts)
    unreadable = any(a.unreadable for a in atts)
    done = [a for a in atts if a.status == DONE]
    scoring = next((a for a in reversed(done) if a.figures.has_score), None)
    notes: list[str] = []
    if done and scoring is not done[-1]:
        notes.append(f"attempt {done[-1].stamp} has no score yet (metrics in progress)")
        if scoring is None:
            scoring = done[-1]
    live = [a for a in atts if not a.voided]
    flagged = False
    if live and live[-1].status in (UNREADABLE, TAMPERED):
        # the latest attempt has a hole: never a score, never an older one; a hole the agent could
        # have made counts against the arm (the hole rule)
        shown = live[-1]
        status = shown.status
        scoring = None
        newer = None
        flagged = shown.flagged
        notes.extend(f"tampered: {h.text()}" for h in shown.holes if h.status == TAMPERED)
        if flagged:
            notes.append("flagged: counted as a failure (a hole in what the agent can write)")
    elif scoring is not None:
        status = DONE
        later = [
            a for a in atts if (a.stamp, a.arm_dir) > (scoring.stamp, scoring.arm_dir) and a.status != DONE
        ]
        newer = later[-1].status if later else None
        if newer:
            notes.append(f"newer attempt {later[-1].stamp} is {newer}; score kept from {scoring.stamp}")
        shown = scoring
        if _partial_hole(scoring.figures, task_scored):
            status, flagged = UNREADABLE, True  # the hole rule: the cell never leaves the partial mean
            notes.append(NO_PARTIAL)
    else:
        newer = None
        live = [a for a in atts if not a.voided]
        if live:
            status = live[-1].status
            shown = live[-1]
            if status == ERRORED:
                notes.append(f"errored: {live[-1].reason}")
        elif atts:
            status = VOIDED
            shown = atts[-1]
            notes.append(f"voided: {shown.reason}")
        else:
            status = RUNNING if claimed else PENDING
            shown = None
    if unreadable:
        notes.append("unreadable: " + ", ".join(f for a in atts for f in a.unreadable))
    f = shown.figures if shown is not None else _NO_FIGURES
    scored = status == DONE and not flagged
    if not scored or f.in_progress_metrics:  # shown, but not a score: the same figures without one
        f = replace(
            f,
            reward=f.reward if scored else None,
            partial=None,
            pass_rate=None,
            build_failed=f.build_failed if scored else False,
        )
    return Cell(
        task=task,
        arm=arm,
        status=status,
        figures=f,
        cost_usd_all=cost_all,
        run_id=shown.run_id if shown else None,
        attempts=tuple(atts),
        scored_by=scoring.stamp if scoring is not None else None,
        scored_on=scoring.host.short() if scoring is not None and scoring.host is not None else None,
        newer=newer,
        claimed=claimed,
        unreadable=unreadable,
        note="; ".join(notes),
        flagged=flagged,
    )


#: the status of a pair none of whose repeats is done: the first of these any repeat has
_NOT_DONE_ORDER = (TAMPERED, UNREADABLE, RUNNING, ERRORED, VOIDED, PENDING)


def build_pair_cell(
    task: str,
    arm: str,
    attempts: Iterable[Attempt],
    claimed: Collection[int] = (),
    repeats: int = 1,
    task_scored: bool = False,
) -> Cell:
    """The cell of one pair read with ``repeats`` (K) repeats: with K = 1 and no attempt of a
    repeat k >= 2, ``build_cell`` of its attempts (exactly the cell of a tree without repeats);
    else each repeat's cell by ``build_cell`` from that repeat's attempts (each under the hole rule
    on its own, ``task_scored`` as ``build_cell``'s), combined (``combine_repeats``). ``claimed``:
    the repeats with a claim file."""
    atts = attempts if isinstance(attempts, (list, tuple)) else list(attempts)
    if repeats == 1 and all(a.repeat == 1 for a in atts):
        return build_cell(task, arm, atts, 1 in claimed, task_scored)
    by: dict[int, list[Attempt]] = {}
    for a in atts:
        by.setdefault(a.repeat, []).append(a)
    k = max(repeats, max(by, default=1))
    parts = tuple(build_cell(task, arm, by.get(r, ()), r in claimed, task_scored) for r in range(1, k + 1))
    return combine_repeats(task, arm, parts)


def combine_repeats(task: str, arm: str, parts: tuple[Cell, ...]) -> Cell:
    """One pair's cell from its repeats' cells (repeat 1 first).

    Done once any repeat is done: reward, partial and pass rate are the means over the counted
    repeats (done ones, and flagged ones as failures with every score 0: the hole rule) of each
    one's scored value (a build failure as 0: ``scored_values``), i.e. the task's mean that every
    statistic averages first (``runner.results.clusters``); the build-failure mark only when every
    done repeat failed its build (so the mean stays what ``rules.scored_measure`` reads of it).
    Cost and tokens add up over the done repeats' scoring attempts (what the arm spent on its
    scores; a flagged repeat says nothing that is cost), wall time is their mean, the receipt
    figures add up over every repeat. Not done: the most telling status of its repeats
    (``_NOT_DONE_ORDER``), flagged when a repeat is (a failure of the arm with every score 0). The
    note names every repeat that is not done or has a note of its own."""
    done = [p for p in parts if p.status == DONE]
    atts = tuple(sorted((a for p in parts for a in p.attempts), key=lambda a: (a.stamp, a.arm_dir)))
    scoring = max(done, key=lambda p: p.scored_by or "") if done else None

    def mean_of(measure: str) -> float | None:
        if not done:  # not a score: a flagged pair's zeros are the report's (``rules.scored_measure``)
            return None
        vals = _scored(parts, measure)
        return clusters.task_mean(vals) if vals else None

    walls = [p.wall_sec for p in done if p.wall_sec is not None]
    figures = Figures(
        reward=mean_of("reward"),
        partial=mean_of("partial"),
        pass_rate=mean_of("pass_rate"),
        build_failed=bool(done) and all(p.build_failed for p in done),
        cost_usd=_sum_opt(p.cost_usd for p in done),
        n_input_tokens=_sum_opt(p.n_input_tokens for p in done),
        n_output_tokens=_sum_opt(p.n_output_tokens for p in done),
        wall_sec=_mean(walls),
        continuations=_sum_opt(p.continuations for p in parts),
        unblocks=_sum_opt(p.unblocks for p in parts),
        error_events=_sum_opt(p.error_events for p in parts),
        goal_status=scoring.goal_status if scoring is not None else None,
        deadline_hit=any(p.deadline_hit for p in done),
    )
    flagged = False
    if done:
        status = DONE
    elif flagged_parts := [p for p in parts if p.flagged]:
        status, flagged = flagged_parts[-1].status, True
    else:
        status = next(s for s in _NOT_DONE_ORDER if s == PENDING or any(p.status == s for p in parts))
    notes = []
    for r, p in enumerate(parts, 1):
        if p.status != DONE or p.note:
            notes.append(
                f"r{r} {p.status}" + (" (flagged)" if p.flagged else "") + (f": {p.note}" if p.note else "")
            )
    if done and len(done) < len(parts):
        notes.insert(0, f"{len(done)}/{len(parts)} repeats done")
    shown = scoring or next((p for p in reversed(parts) if p.attempts), None)
    return Cell(
        task=task,
        arm=arm,
        status=status,
        figures=figures,
        cost_usd_all=_sum_opt(p.cost_usd_all for p in parts),
        run_id=shown.run_id if shown is not None else None,
        attempts=atts,
        scored_by=scoring.scored_by if scoring is not None else None,
        scored_on=scoring.scored_on if scoring is not None else None,
        newer=next((p.newer for p in parts if p.newer), None),
        claimed=any(p.claimed for p in parts),
        unreadable=any(p.unreadable for p in parts),
        note="; ".join(notes),
        repeats=parts,
        flagged=flagged,
    )


def claimed_repeats(cell: Cell) -> frozenset[int]:
    """The repeats of a cell that have a claim file (what ``build_pair_cell`` was given)."""
    return frozenset(r for r, p in enumerate(cell.parts, 1) if p.claimed)


def arm_order(arms: Iterable[str]) -> list[str]:
    """The five arms in canonical order first, then stand-ins (oracle, nop, test agents) by name."""
    arms = set(arms)
    return [a for a in ARMS if a in arms] + sorted(arms - set(ARMS))


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


def _strs(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [x for x in v[: MAX_PLANNED * 64].replace(",", " ").split() if x]
    if isinstance(v, (list, tuple)):
        return tuple(x for x in v[:MAX_PLANNED] if isinstance(x, str) and x and "/" not in x)
    return ()


# ------------------------------------------------------------------------------------------ model


class RunModel:
    """The cells of one output tree. Build with ``RunModel.load(out)``; keep current with ``update``."""

    def __init__(self, out: Path | str) -> None:
        self.out = Path(os.path.abspath(out))
        self._out_s = str(self.out)
        self.voided_root = tree.voided_root(self.out)
        self._voided_s = str(self.voided_root)
        self._attempts: dict[AttemptKey, Attempt] = {}
        self._by_pair: dict[Key, set[AttemptKey]] = {}
        self._excluded: dict[str, Excluded] = {}
        self._owner: int | None = None
        self._task_dirs: set[str] = set()
        self.cells: dict[Key, Cell] = {}
        self.claims: set[Key] = set()
        #: per pair, the repeats with a claim file (``tree.claim_unit``)
        self.claimed: dict[Key, frozenset[int]] = {}
        self._repeat_n: dict[int, int] = {}  # attempts per repeat number (for ``repeats``)
        self._built_repeats = 1  # the K the cells were last built with
        self.runs: list[Run] = []
        self._events = EventReader(self.out)
        self._ledger_reader = LedgerReader(self.out)
        self.ledger = Ledger()  # the gateway's ledger (runner.results.ledger); empty without one
        self._event_stamp_run: dict[AttemptKey | tuple[str, str, str], str] = {}
        self._scoped_cache: dict[str, dict[Key, Cell]] = {}
        self.markers: set[str] = set()
        self._prev: RunModel | None = None  # during refresh(): the model whose last good values to keep
        self._dirty: set[AttemptKey] = set()  # attempts (re)read since the last rebuild
        self._filled: set[Key] = set()  # pending cells the last matrix fill added
        self._scored_tasks: set[str] = set()  # tasks with a partial score somewhere (``_task_scored``)
        self._arms_seen: set[str] = set()  # every arm with an attempt (for ``_task_scored``)
        self.use_index = False  # RunModel.load turns it on: scans go through the scan index
        #: (attempts taken from the scan index, attempts read) of the last scan; None without one
        self.index_hits: tuple[int, int] | None = None

    # ---------------------------------------------------------------- public

    @classmethod
    def load(cls, out: Path | str, index: bool = True) -> RunModel:
        """Scan the tree; ``index``: through the tree's scan index (``runner.results.index``), a cache that
        never changes a figure (off: read every file, keep no index)."""
        m = cls(out)
        m.use_index = index
        # Tens of thousands of small records and no cycles among them: the cyclic GC would only
        # re-walk them again and again during the scan.
        was = gc.isenabled()
        gc.disable()
        try:
            m._scan_all()
        finally:
            if was:
                gc.enable()
        return m

    @property
    def tasks(self) -> list[str]:
        return sorted({k[0] for k in self.cells})

    @property
    def arms(self) -> list[str]:
        return arm_order(k[1] for k in self.cells)

    @property
    def excluded(self) -> list[Excluded]:
        return sorted(self._excluded.values(), key=lambda e: e.path)

    @property
    def run_id(self) -> str | None:
        return self.runs[-1].run_id if self.runs else None

    @property
    def repeats(self) -> int:
        """K, the repeats every pair is read with: the current run's ``--repeats`` or the highest
        repeat an attempt of the tree names, whichever is more (1 for a tree without repeats)."""
        planned = self.runs[-1].repeats if self.runs else 1
        return max(planned, max(self._repeat_n, default=1))

    @property
    def current_run(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    @property
    def n_attempts(self) -> int:
        return len(self._attempts)

    @property
    def is_output_tree(self) -> bool:
        """Has marathon's markers (.runner, .claims, .driver_env) or at least one job dir."""
        return bool(self.markers) or bool(self._attempts) or bool(self._excluded)

    @property
    def unreadable(self) -> list[str]:
        return [f for c in self.cells.values() for a in c.attempts for f in a.unreadable]

    def attempts(self) -> list[Attempt]:
        return sorted(self._attempts.values(), key=lambda a: a.key)

    def host_use(self) -> list[HostUse]:
        """Per host (``host.json`` of each attempt): its attempts by status and the pairs running
        there, sorted by host. Empty for a single-host run (no attempt records a host)."""
        nodes: dict[str, str] = {}
        counts: dict[str, dict[str, int]] = {}
        running: dict[str, list[tuple[str, str]]] = {}
        for a in sorted(self._attempts.values(), key=lambda a: a.stamp):
            if a.host is None:
                continue
            name = a.host.short()
            nodes[name] = a.host.node_id  # the latest attempt's node
            c = counts.setdefault(name, {})
            c[a.status] = c.get(a.status, 0) + 1
            if a.status == RUNNING:
                running.setdefault(name, []).append((a.task, a.arm))
        return [
            HostUse(n, nodes[n], sum(c.values()), tuple(c.items()), tuple(sorted(running.get(n, ()))))
            for n, c in sorted(counts.items())
        ]

    def hosts(self) -> dict[str, dict[str, int]]:
        """Per host: its attempts, then its attempts by status (``host_use``, as ``status`` prints it)."""
        return {u.name: {"attempts": u.attempts, **dict(u.by_status)} for u in self.host_use()}

    def scoped(self, scope: str = "run") -> dict[Key, Cell]:
        """Cells counted in the current run (``"run"``) or over all time (``"all"``).

        In the run scope a cell sees only the attempts of the current run; the pairs are those the
        runner planned (its ``runner_start`` event's tasks x arms) plus any it ran. Without any runner
        start recorded, the run scope is all time.
        """
        if scope == "all" or not self.runs:
            return self.cells
        cached = self._scoped_cache.get(scope)
        if cached is not None:
            return cached
        run = self.runs[-1]
        keys: set[Key] = {(t, a) for t in run.tasks for a in run.arms}
        per: dict[Key, list[Attempt]] = {}
        for att in self._attempts.values():
            if att.run_id == run.run_id:
                per.setdefault((att.task, att.arm), []).append(att)
                keys.add((att.task, att.arm))
        k_rep = self.repeats
        scored = {a.task for atts in per.values() for a in atts if partial_scored(a)}
        cells = {
            k: build_pair_cell(k[0], k[1], per.get(k, ()), self.claimed.get(k, ()), k_rep, k[0] in scored)
            for k in sorted(keys)
        }
        self._scoped_cache[scope] = cells
        return cells

    def refresh(self) -> set[Key]:
        """Re-scan the whole tree; the cells that changed."""
        before = self.cells
        fresh = RunModel(self.out)
        fresh.use_index = self.use_index
        fresh._prev = self  # keep last good values of files that are unreadable now
        fresh._scan_all()
        self.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "_prev"})
        return {k for k in set(before) | set(self.cells) if before.get(k) != self.cells.get(k)}

    def update(self, paths: Iterable[Path | str]) -> set[Key]:
        """Re-read only what the changed ``paths`` touch; return the (task, arm) cells that changed.

        Feed it watchfiles' changed paths (added, modified or deleted). A trial file re-reads that
        trial; a job result re-reads the job record; a new or removed dir re-lists just that dir;
        ``.runner/events.jsonl`` re-reads the new lines and re-scopes; ``.claims`` updates claims.
        """
        pairs: set[Key] = set()
        rescope = False
        for p in paths:
            ap = os.path.abspath(p)
            if ap == self._out_s or ap.startswith(self._out_s + os.sep):
                rel = ap[len(self._out_s) + 1 :]
                parts = tuple(x for x in rel.split(os.sep) if x)
                r = self._update_main(parts, pairs)
                rescope = rescope or r
            elif ap == self._voided_s or ap.startswith(self._voided_s + os.sep):
                rel = ap[len(self._voided_s) + 1 :]
                parts = tuple(x for x in rel.split(os.sep) if x)
                self._update_voided(parts, pairs)
        if rescope:
            self._assign_runs()
            pairs |= set(self.cells)
        return self._rebuild(pairs)

    # --------------------------------------------------------------- scanning

    def _scan_all(self) -> None:
        self.markers = {
            n for n in (tree.RUNNER_DIR, tree.CLAIMS_DIR, tree.DRIVER_ENV) if os.path.exists(self.out / n)
        }
        try:
            self._owner = os.stat(self._out_s).st_uid
        except OSError:
            self._owner = None
        self._read_events()
        self._read_ledger()
        self._read_claims()
        index = None
        if self.use_index and self._owner is not None:
            from runner.results.index import ScanIndex

            index = ScanIndex.open(self._out_s)
        todo: list[tuple[str, str, str]] = []
        for task in tree.list_dirs(self._out_s):
            self._task_dirs.add(task)
            for arm_dir in self._subdirs(index, task):
                adir = f"{self._out_s}/{task}/{arm_dir}"
                try:
                    st = os.lstat(adir)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and not self._arm_excluded(task, arm_dir, adir, st):
                    todo.extend(
                        (task, arm_dir, stamp) for stamp in self._subdirs(index, f"{task}/{arm_dir}", st)
                    )
        for key, got in zip(todo, _read_stamps(self._out_s, todo, index), strict=True):
            self._scan_stamp(*key, pre=got)
        self.index_hits = (index.hits, index.misses) if index is not None else None
        self._scan_voided()
        self._assign_runs()
        self._rebuild(None)

    def _scan_task(self, task: str) -> None:
        self._task_dirs.add(task)
        tdir = os.path.join(self._out_s, task)
        for arm_dir in tree.list_dirs(tdir):
            self._scan_arm(task, arm_dir)

    def _subdirs(self, index: Any, rel: str, st: os.stat_result | None = None) -> list[str]:
        """``tree.list_dirs`` of ``<out>/<rel>``, from the scan index while the dir ``lstat``s the
        same (``runner.results.index.ScanIndex.listing``)."""
        path = f"{self._out_s}/{rel}"
        if index is None:
            return tree.list_dirs(path)
        try:
            st = st or os.lstat(path)
        except OSError:
            return []
        got = index.listing(rel, st)
        if got is None:
            got = tree.list_dirs(path)
            index.put_listing(rel, st, got)
        return got

    def _arm_excluded(self, task: str, arm_dir: str, adir: str, st: os.stat_result | None = None) -> bool:
        uid = tree.excluded_owner(adir, self._owner, st)
        if uid == tree.UNREADABLE_DIR:
            return True
        if uid is not None:
            self._excluded[adir] = Excluded(
                path=os.path.relpath(adir, self._out_s),
                reason=f"owned by uid {uid}, not the tree's owner uid {self._owner} (leftover of an earlier round)",
                task=task,
                arm=tree.arm_of_dir(arm_dir),
            )
            return True
        self._excluded.pop(adir, None)
        return False

    def _scan_arm(self, task: str, arm_dir: str) -> None:
        adir = os.path.join(self._out_s, task, arm_dir)
        if self._arm_excluded(task, arm_dir, adir):
            for k in [k for k in self._attempts if k[0] == task and k[1] == arm_dir]:
                self._drop_attempt(k)
            return
        stamps = tree.list_dirs(adir)
        for k in [k for k in self._attempts if k[0] == task and k[1] == arm_dir and k[2] not in stamps]:
            if not self._attempts[k].voided_trials:
                self._drop_attempt(k)
        for stamp in stamps:
            self._scan_stamp(task, arm_dir, stamp)

    def _get_attempt(self, task: str, arm_dir: str, stamp: str) -> Attempt:
        """The attempt to modify: a copy, so cells already handed out keep their own (copy on write)."""
        key = (task, arm_dir, stamp)
        a = self._attempts.get(key)
        if a is None:
            arm = tree.arm_of_dir(arm_dir)
            rep = tree.repeat_of(stamp)
            a = self._attempts[key] = Attempt(task=task, arm=arm, arm_dir=arm_dir, stamp=stamp, repeat=rep)
            self._by_pair.setdefault((task, arm), set()).add(key)
            self._repeat_n[rep] = self._repeat_n.get(rep, 0) + 1
            self._arms_seen.add(arm)
            self._dirty.add(key)
            return a
        a = self._attempts[key] = replace(a, trials=dict(a.trials), voided_trials=dict(a.voided_trials))
        self._dirty.add(key)
        return a

    def _drop_attempt(self, key: AttemptKey) -> None:
        a = self._attempts.pop(key, None)
        if a is not None:
            self._by_pair.get((a.task, a.arm), set()).discard(key)
            n = self._repeat_n.get(a.repeat, 0) - 1
            if n > 0:
                self._repeat_n[a.repeat] = n
            else:
                self._repeat_n.pop(a.repeat, None)

    def _scan_stamp(self, task: str, arm_dir: str, stamp: str, pre: _Stamp | None | bool = False) -> None:
        sdir = f"{self._out_s}/{task}/{arm_dir}/{stamp}"
        got = _read_stamp(sdir, arm_dir) if pre is False else pre
        if got is None:
            key = (task, arm_dir, stamp)
            a = self._attempts.get(key)
            if a is not None and not a.voided_trials:
                self._drop_attempt(key)
            elif a is not None:
                a = self._get_attempt(task, arm_dir, stamp)
                a.job_dir, a.job, a.trials = None, None, {}
            return
        name, job, trials = got
        a = self._get_attempt(task, arm_dir, stamp)
        a.job_dir = f"{sdir}/{name}"
        a.host = read_host(sdir) or a.host
        self._set_job(a, job)
        old = a.trials
        a.trials = {n: _merge_trial(t, old.get(n) or self._prev_trial(a, n)) for n, t in trials.items()}

    def _prev_trial(self, a: Attempt, name: str) -> TrialRecord | None:
        if self._prev is None:
            return None
        pa = self._prev._attempts.get(a.key)
        return pa.trials.get(name) if pa else None

    def _read_job(self, a: Attempt) -> None:
        assert a.job_dir is not None
        self._set_job(a, results.read_job(a.job_dir))

    def _set_job(self, a: Attempt, rec: JobRecord) -> None:
        """Set the job record; one unreadable now keeps the last good one (marked stale)."""
        old = a.job
        if old is None:
            pa = self._prev._attempts.get(a.key) if self._prev is not None else None
            old = pa.job if pa else None
        if rec.state in (results.UNREADABLE, results.EMPTY) and old is not None and old.state == results.OK:
            rec = replace(old, stale=True, error=rec.error)
        a.job = rec

    @staticmethod
    def _read_trial(tdir: str, old: TrialRecord | None) -> TrialRecord:
        return _merge_trial(results.read_trial(tdir), old)

    # ---------------------------------------------------------------- voided

    def _scan_voided(self) -> None:
        root = self._voided_s
        for task in tree.list_dirs(root):
            for arm_dir in tree.list_dirs(os.path.join(root, task)):
                for stamp in tree.list_dirs(os.path.join(root, task, arm_dir)):
                    self._scan_voided_stamp(task, arm_dir, stamp)

    def _scan_voided_stamp(self, task: str, arm_dir: str, stamp: str) -> None:
        sdir = os.path.join(self._voided_s, task, arm_dir, stamp)
        found: dict[str, VoidedTrial] = {}
        for job in tree.list_dirs(sdir):
            jdir = os.path.join(sdir, job)
            for trial in tree.list_dirs(jdir):
                tdir = os.path.join(jdir, trial)
                reason = _void_reason(tdir, jdir, sdir)
                found[trial] = VoidedTrial(trial, tdir, reason, results.read_trial(tdir))
        key = (task, arm_dir, stamp)
        if found:
            a = self._get_attempt(task, arm_dir, stamp)
            a.voided_trials = found
            a.host = read_host(sdir) or a.host
        elif key in self._attempts:
            a = self._get_attempt(task, arm_dir, stamp)
            a.voided_trials = {}
            if a.job_dir is None:
                self._drop_attempt(key)

    def _update_voided(self, parts: tuple[str, ...], pairs: set[Key]) -> None:
        if len(parts) < 3:
            # The voided root or a task/arm dir of it appeared or went: re-scan the voided side.
            for k in [k for k, a in self._attempts.items() if a.voided_trials]:
                pairs.add((k[0], tree.arm_of_dir(k[1])))
            self._scan_voided()
            return
        task, arm_dir, stamp = parts[:3]
        self._scan_voided_stamp(task, arm_dir, stamp)
        pairs.add((task, tree.arm_of_dir(arm_dir)))

    # ---------------------------------------------------------- incremental

    def _update_main(self, parts: tuple[str, ...], pairs: set[Key]) -> bool:
        """Apply one changed path under ``out``; True when run scoping must be recomputed."""
        if not parts:
            self.markers = {
                n for n in (tree.RUNNER_DIR, tree.CLAIMS_DIR, tree.DRIVER_ENV) if os.path.exists(self.out / n)
            }
            present = set(tree.list_dirs(self._out_s))
            for task in present - self._task_dirs:
                self._scan_task(task)
                pairs.update(k for k in self._by_pair if k[0] == task)
            for task in self._task_dirs - present:
                self._drop_task(task, pairs)
            return True
        head = parts[0]
        if head == tree.RUNNER_DIR:
            self.markers.add(head)
            if parts[1:] == (tree.EVENTS_FILE,) or len(parts) == 1:
                self._read_events()
                return True
            if len(parts) == 3 and parts[1] == tree.GATEWAY_DIR and parts[2].startswith("ledger"):
                pairs.update(self._read_ledger())
            return False
        if head == tree.CLAIMS_DIR:
            self.markers.add(head)
            before = self.claimed
            self._read_claims()
            pairs.update(k for k in set(before) | set(self.claimed) if before.get(k) != self.claimed.get(k))
            return False
        if head.startswith("."):
            if head == tree.DRIVER_ENV:
                self.markers.add(head)
            return False
        if len(parts) == 1:
            if os.path.isdir(os.path.join(self._out_s, head)):
                before = {k for k in self._by_pair if k[0] == head}
                self._scan_task(head)
                pairs.update(before | {k for k in self._by_pair if k[0] == head})
            else:
                self._drop_task(head, pairs)
            return True
        task, arm_dir = parts[0], parts[1]
        if arm_dir.startswith("."):
            return False
        arm = tree.arm_of_dir(arm_dir)
        pairs.add((task, arm))
        self._task_dirs.add(task)
        if len(parts) == 2:
            self._scan_arm(task, arm_dir)
            return True
        adir = os.path.join(self._out_s, task, arm_dir)
        if adir in self._excluded:
            return False
        stamp = parts[2]
        if stamp.startswith("."):
            return False
        if len(parts) <= 4:
            self._scan_stamp(task, arm_dir, stamp)
            return True
        key = (task, arm_dir, stamp)
        a = self._attempts.get(key)
        job = parts[3]
        if a is None or a.job_dir is None or os.path.basename(a.job_dir) != job:
            self._scan_stamp(task, arm_dir, stamp)
            return True
        name = parts[4]
        if len(parts) == 5 and name in tree.JOB_FILES:
            if name == results.RESULT_JSON:
                self._read_job(self._get_attempt(task, arm_dir, stamp))
            return False
        if name.startswith("."):
            return False
        tdir = f"{a.job_dir}/{name}"
        rest = parts[5:]
        if len(parts) == 5 or name not in a.trials:
            a = self._get_attempt(task, arm_dir, stamp)
            if os.path.isdir(tdir):
                a.trials[name] = self._read_trial(tdir, a.trials.get(name))
            else:
                a.trials.pop(name, None)
        elif (
            rest in tree.TRIAL_FILES
            or len(rest) == 1
            and rest[0] in (TrialFiles.VERIFIER_DIR, TrialFiles.AGENT_DIR)
        ):
            a = self._get_attempt(task, arm_dir, stamp)
            a.trials[name] = self._read_trial(tdir, a.trials.get(name))
        # else: trial.log, sessions, test output: nothing the model shows
        return False

    def _drop_task(self, task: str, pairs: set[Key]) -> None:
        self._task_dirs.discard(task)
        for k in [k for k in self._attempts if k[0] == task]:
            if not self._attempts[k].voided_trials:
                self._drop_attempt(k)
            else:
                a = self._get_attempt(*k)
                a.job_dir, a.job, a.trials = None, None, {}
        for p in [p for p in self._excluded.values() if p.task == task]:
            self._excluded.pop(os.path.join(self._out_s, p.path), None)
        pairs.update(k for k in self._by_pair if k[0] == task)

    # ------------------------------------------------------------- claims, events, runs

    def _read_claims(self) -> None:
        claimed: dict[Key, set[int]] = {}
        try:
            with os.scandir(self.out / tree.CLAIMS_DIR) as it:
                for e in it:
                    u = tree.claim_unit(e.name)
                    if u:
                        claimed.setdefault(u[:2], set()).add(u[2])
        except OSError:
            pass
        self.claimed = {k: frozenset(v) for k, v in claimed.items()}
        self.claims = set(claimed)

    def _read_ledger(self) -> set[Key]:
        """Take in the new lines of the gateway's ledgers; mark the attempts they touch for a re-read
        of their figures, and return their pairs."""
        rows = self._ledger_reader.read_new()
        if self._ledger_reader.restarted:  # a ledger replaced or truncated: read all of them again
            self._ledger_reader = LedgerReader(self.out)
            self.ledger = Ledger()
            rows = self._ledger_reader.read_new()
            touched = set(self.ledger.attempts) | self.ledger.add_rows(rows)
        else:
            touched = self.ledger.add_rows(rows)
        pairs = set()
        for task, arm, stamp in touched:
            for ak in self._by_pair.get((task, tree.arm_of_dir(arm)), ()):
                if ak[1] == arm and ak[2] == stamp:
                    self._dirty.add(ak)
                    pairs.add((task, tree.arm_of_dir(arm)))
        return pairs

    def _read_events(self) -> None:
        """Take in the new lines of events.jsonl (``runner.results.events.EventReader``)."""
        new = self._events.iter_new()  # streamed: a long journal is never held whole
        if self._events.restarted:  # replaced or truncated: what the old file said is gone
            self.runs = []
            self._event_stamp_run = {}
        for ev in new:
            self._apply_event(ev)

    def _apply_event(self, ev: dict) -> None:
        run_id = ev.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return
        if ev["event"] == EventKind.RUNNER_START:
            self.runs.append(
                Run(
                    run_id=run_id,
                    started=_ts(ev.get("ts")),
                    tasks=_strs(ev.get("tasks")),
                    arms=_strs(ev.get("arms")),
                    pid=ev.get("pid") if isinstance(ev.get("pid"), int) else None,
                    repeats=_repeats(ev.get("repeats")),
                )
            )
            return
        task, stamp = ev.get("task"), ev.get("stamp")
        arm = ev.get("arm_dir") or ev.get("arm")
        if isinstance(task, str) and isinstance(arm, str) and isinstance(stamp, str):
            self._event_stamp_run[(task, arm, stamp)] = run_id
            self._event_stamp_run[(task, tree.arm_of_dir(arm), stamp)] = run_id

    def _run_of(self, a: Attempt) -> str | None:
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

    def _assign_runs(self) -> None:
        for k, a in self._attempts.items():
            rid = self._run_of(a)
            if rid != a.run_id:
                self._attempts[k] = replace(a, run_id=rid)
                self._dirty.add(k)

    def _rebuild(self, pairs: set[Key] | None) -> set[Key]:
        """Recompute the cells of ``pairs`` (all when None); return those that changed."""
        self._scoped_cache.clear()
        old = dict(self.cells)
        full = pairs is None
        k_rep = self.repeats
        if pairs is None:
            pairs = set(self._by_pair) | set(self.cells)
            self.cells = {}
        elif k_rep != self._built_repeats:  # a run with more repeats, or a repeat beyond them: every cell
            pairs = set(self._by_pair) | set(self.cells)
        self._built_repeats = k_rep
        changed: set[Key] = set()
        per: dict[Key, list[Attempt]] = {}
        for k in pairs:
            atts = per[k] = []
            for ak in self._by_pair.get(k, ()):
                a = self._attempts.get(ak)
                if a is None:
                    continue
                if not full:  # a cold load assigned runs already (_assign_runs)
                    rid = self._run_of(a)
                    if rid != a.run_id:
                        a = self._attempts[ak] = replace(a, run_id=rid)
                        self._dirty.add(ak)
                if full or ak in self._dirty:  # only attempts re-read since the last rebuild
                    _refresh_attempt(a, self.ledger)
                atts.append(a)
        # which tasks have a partial score somewhere (``build_cell``'s task_scored); a task that
        # gained or lost its last one rebuilds all its cells
        tasks = {k[0] for k in pairs}
        now = {t for t in tasks if self._task_scored(t)}
        flipped = (now ^ self._scored_tasks) & tasks
        self._scored_tasks = (self._scored_tasks - tasks) | now
        if flipped:
            for k in self._by_pair:
                if k[0] in flipped and k not in per:
                    pairs.add(k)
                    per[k] = [a for ak in self._by_pair[k] if (a := self._attempts.get(ak)) is not None]
        for k, atts in per.items():
            if not atts:
                self.cells.pop(k, None)  # the matrix fill below adds it back as pending if it belongs
                continue
            self.cells[k] = build_pair_cell(k[0], k[1], atts, self.claimed.get(k, ()), k_rep,
                                            k[0] in self._scored_tasks)  # fmt: skip
        self._dirty.clear()
        self._fill_matrix()
        if not old:  # a first scan: every cell is new
            return set(self.cells)
        for k in pairs | (set(old) ^ set(self.cells)) | self._filled:
            o, n = old.get(k), self.cells.get(k)
            if o is not n and o != n:
                changed.add(k)
        return changed

    def _task_scored(self, task: str) -> bool:
        for arm in self._arms_seen:
            for ak in self._by_pair.get((task, arm), ()):
                a = self._attempts.get(ak)
                if a is not None and partial_scored(a):
                    return True
        return False

    def _fill_matrix(self) -> None:
        """Every task x arm seen or planned has a cell; a pair with no attempt is pending (or claimed)."""
        with_attempts = {k for k, v in self._by_pair.items() if v}
        tasks = {k[0] for k in with_attempts} | self._task_dirs | {k[0] for k in self.claims}
        arms = {k[1] for k in with_attempts} | {k[1] for k in self.claims}
        if self.runs:
            tasks |= set(self.runs[-1].tasks)
            arms |= set(self.runs[-1].arms)
        for k in [k for k, c in self.cells.items() if not c.attempts]:
            if k[0] not in tasks or k[1] not in arms:
                del self.cells[k]
        self._filled = set()
        k_rep = self.repeats
        for t in tasks:
            for a in arms:
                k = (t, a)
                c = self.cells.get(k)
                claimed = self.claimed.get(k, frozenset())
                if c is None or (not c.attempts and (claimed_repeats(c) != claimed or c.k != k_rep)):
                    self.cells[k] = build_pair_cell(t, a, (), claimed, k_rep)
                    self._filled.add(k)


def _void_reason(*dirs: str) -> str:
    """The first meaningful line of the README next to a voided trial (trial, job or stamp dir)."""
    for d in dirs:
        raw = safeio.read_own(os.path.join(d, tree.VOID_README), 4096 * 16)  # a FIFO there never blocks
        if isinstance(raw, safeio.Refused):
            if raw.missing:
                continue
            return f"voided (README {raw.reason})"
        text = raw[:4096].decode("utf-8", "replace")
        for line in text.splitlines():
            line = line.strip().lstrip("#").strip()
            if line.lower().startswith("voided:"):  # runner.ops.void writes "# Voided: <reason>"
                line = line[len("voided:") :].strip()
            if line and line.lower() not in ("voided", "voided trial"):
                return line[:200]
        return "voided (README empty)"
    return "voided (no README)"


_Stamp = tuple[str, JobRecord, dict[str, TrialRecord]]


def _merge_trial(rec: TrialRecord, old: TrialRecord | None) -> TrialRecord:
    """The fresh record, except that a file unreadable now keeps its last good value (marked stale)."""
    if old is None:
        return rec
    stale = False
    # harbor writes result.json last: once it reads clean, the verifier's files are final, and one
    # unreadable now is a hole (the hole rule), not a half-written file to wait for
    settled = rec.state == results.OK
    if rec.state in (results.UNREADABLE, results.EMPTY) and old.state == results.OK:
        rec = replace(old, metrics=rec.metrics, receipt=rec.receipt, error=rec.error)
        stale = True
    m_old, m_new = old.metrics, rec.metrics
    if m_old.is_score and m_new.state in (results.UNREADABLE, results.EMPTY) and not settled:
        rec = replace(rec, metrics=replace(m_old, error=m_new.error))
        stale = True
    elif m_old.is_score and m_new.state == results.IN_PROGRESS:
        rec = replace(rec, metrics=m_old)  # a verifier rerun started: not a score, keep the last one
    if stale:
        rec = replace(rec, stale=True)
    return rec


def _read_stamp(sdir: str, arm_dir: str) -> _Stamp | None:
    """Read one attempt's job dir (job record and trials) without touching the model; None if no job dir."""
    arm = tree.arm_of_dir(arm_dir)
    for name in (arm_dir,) if arm == arm_dir else (arm_dir, arm):
        jdir = f"{sdir}/{name}"
        if os.path.islink(jdir):  # never followed: it would bring in results from anywhere
            return name, results.JobRecord(state=results.REFUSED, error=f"job dir: {results.LINKED_DIR}"), {}
        loaded = results.load_json(f"{jdir}/{results.RESULT_JSON}")
        if loaded.state == results.MISSING and not os.path.isdir(jdir):
            continue  # (a stat only when the job result is missing)
        job = results.job_from_loaded(loaded)
        # A finished one-trial job summarises its trial (harbor's own stats): skip listing the job
        # dir and parsing the trial's result.json. Incremental updates read the trial in full.
        summary = results.trial_from_job_summary(loaded.data, jdir) if loaded.data is not None else None
        if summary is not None:
            return name, job, {summary.name: summary}
        links: list[str] = []  # trial dirs that are symlinks: listed as refused, never read
        trials = {n: results.read_trial(f"{jdir}/{n}") for n in tree.list_dirs(jdir, links)}
        for n in links:
            if n not in tree.JOB_FILES:
                trials[n] = results.read_trial(f"{jdir}/{n}")
        return name, job, trials
    return None


def _read_stamps(out: str, todo: list[tuple[str, str, str]], index: Any = None) -> list[_Stamp | None]:
    """``_read_stamp`` for many attempts, through the scan index (``runner.results.index``) when given.

    One thread: reader threads were measured slower (GIL).
    """
    if index is None:
        return [_read_stamp(f"{out}/{t}/{a}/{s}", a) for t, a, s in todo]
    got: list[_Stamp | None] = []
    for key in todo:
        sdir = f"{out}/{key[0]}/{key[1]}/{key[2]}"
        hit = index.get(key, sdir)
        if hit is None:
            hit = _read_stamp(sdir, key[1])
            if hit is not None:
                index.put(key, sdir, hit)
        got.append(hit)
    index.save(scanned_all=True, create=any(g is not None and g[1].state == results.OK for g in got))
    return got


def pair_done(out: Path | str, task: str, arm: str, repeat: int = 1) -> bool:
    """True when some attempt of (task, arm) -- of its repeat ``repeat`` -- is done, read the way
    the model reads it.

    For the runner's skip decision without loading the whole tree: the same dirs count (``<arm>``
    and ``<arm>-<pid>``), leftover arm dirs owned by another uid than the tree's owner do not, an
    attempt is of the repeat its stamp names (``tree.repeat_of``), and done is
    ``runner.results.rules.is_done`` of the job's stats (via ``results.read_job``).
    """
    base = os.path.abspath(out)
    try:
        owner = os.stat(base).st_uid
    except OSError:
        return False
    for arm_dir in tree.list_dirs(f"{base}/{task}"):
        if tree.arm_of_dir(arm_dir) != arm:
            continue
        adir = f"{base}/{task}/{arm_dir}"
        if tree.excluded_owner(adir, owner) is not None:
            continue
        for stamp in tree.list_dirs(adir):
            if tree.repeat_of(stamp) != repeat:
                continue
            name = tree.job_name_in(f"{adir}/{stamp}", arm_dir)
            if name is not None and results.read_job(f"{adir}/{stamp}/{name}").done:
                return True
    return False


def open_tree(out: Path | str) -> RunModel:
    """Load the model of an output tree for a command, or raise a one-line ``UserError``.

    Bad input never modifies anything: a missing path, a file, an unreadable dir, an empty dir, a
    dir that is not an output tree (with a hint when it is a harbor jobs/job dir inside one).
    """
    from runner.errors import NotAnOutputTree, UserError

    p = Path(out)
    if not p.exists():
        raise UserError(f"{p}: no such directory (give the output tree, e.g. `marathon status OUT`)")
    if not p.is_dir():
        raise NotAnOutputTree(f"{p}: not a directory; give the output tree's root dir")
    try:
        with os.scandir(p) as it:
            names = [e.name for e in it]
    except OSError as exc:
        raise UserError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    names = [n for n in names if n != tree.INDEX_DIR]  # the scan index alone is no result
    if not names and not tree.voided_root(p).is_dir():
        raise UserError(f"{p}: empty directory: no results yet (start a run with `marathon run {p}`)")
    if "result.json" in names or "config.json" in names:
        raise NotAnOutputTree(
            f"{p}: this is a harbor job dir; give the output tree root (the dir above <task>/<arm>/<stamp>/<arm>)"
        )
    model = RunModel.load(p)
    # A command's model lives until the process exits: keep the collector from walking its tens of
    # thousands of records again (they hold no cycles; refcounting still frees them).
    gc.freeze()
    if not model.is_output_tree:
        raise NotAnOutputTree(
            f"{p}: not a marathon output tree (expected <task>/<arm>/<stamp>/<arm>/result.json or .runner/)"
        )
    return model
