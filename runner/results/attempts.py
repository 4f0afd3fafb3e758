"""One attempt of a pair and what it shows: its status, its holes and its figures, from its records.

Why a module of its own: the scanner (``runner.results.scan``) makes attempts from the tree's files
and the cell matrix (``runner.results.cells``, ``runner.results.matrix``) scores pairs from them;
both need the one reading of an attempt, so it lives below both. Every rule comes from
``runner.results.rules``; the records come from ``runner.results.records``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from modes.trial_files import TrialFiles
from runner.results import records as results
from runner.results import rules
from runner.results.hosts import HostRecord
from runner.results.ledger import AttemptUsage, Ledger
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
    #: its verifier stated test counts, 0 of 0 too (``records.Metrics.counted``): a missing pass rate
    #: is then no hole (``cells.measures_of``)
    tests_counted: bool = False

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


def mean_opt(vals: list[float]) -> float | None:
    """The mean, or None for no values (a figure nobody recorded is not a zero)."""
    return sum(vals) / len(vals) if vals else None


def sum_opt(vals: Iterable[float | int | None]):
    """The sum of the values present, or None when none is (a figure nobody recorded is not a zero)."""
    got = [v for v in vals if v is not None]
    return sum(got) if got else None


NO_FIGURES = Figures()


def _figures(trials: Iterable[TrialRecord]) -> Figures:
    done = [t for t in trials if t.finished]
    if not done:
        return NO_FIGURES
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
            tests_counted=score and m.counted,
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
            wall = sum_opt(t.wall_sec for t in done)
    receipts = [t.receipt for t in done if t.receipt is not None and t.receipt.state == results.OK]
    status = next((r.goal_status_final for r in reversed(receipts) if r.goal_status_final), None)
    return Figures(
        reward=mean_opt(rewards),
        partial=mean_opt(partials),
        pass_rate=mean_opt(rates),
        build_failed=any(t.build_failed for t in done if t.metrics.is_score),
        cost_usd=sum_opt(t.cost_usd for t in done),
        n_input_tokens=sum_opt(t.n_input_tokens for t in done),
        n_output_tokens=sum_opt(t.n_output_tokens for t in done),
        wall_sec=wall,
        continuations=sum_opt(r.continuations for r in receipts),
        unblocks=sum_opt(r.unblocks for r in receipts),
        error_events=sum_opt(r.errors for r in receipts),
        goal_status=status,
        deadline_hit=any(r.deadline_hit for r in receipts),
        in_progress_metrics=any(t.metrics.state == results.IN_PROGRESS for t in done),
        tests_counted=any(t.metrics.is_score and t.metrics.counted for t in done),
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
    if job is not None and job.state == results.OK and job.finished:
        # harbor wrote each trial's result.json before its job's: one that does not parse now is
        # harbor's failure, as one too large is (a probe found a truncated one read as a done trial
        # "with metrics in progress", its cell then flagged as the arm's failure)
        holes += [
            Hole(UNREADABLE, f"{t.name}/{results.RESULT_JSON}", t.error, rules.HARNESS_SIDE)
            for t in a.trials.values()
            if t.state in _BROKEN
        ]
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


def refresh_attempt(a: Attempt, ledger: Ledger | None = None) -> None:
    """Recompute what the attempt shows from its records (holes, status, figures, unreadable files)
    and the gateway's ledger: the matrix calls it once per attempt re-read since its last rebuild."""
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
    said = {h.where for h in a.holes}  # a hole names the file and why: not the trial dir again
    for t in a.trials.values():
        if (
            t.stale or t.state in (results.UNREADABLE, results.EMPTY)
        ) and f"{t.name}/{results.RESULT_JSON}" not in said:
            bad.append(f"{a.job_dir}/{t.name}")
    bad.extend(f"{a.job_dir}/{h.text()}" for h in a.holes if h.status == UNREADABLE)
    a.unreadable = tuple(bad)
