"""A pair's cell (task x arm) and how it is built from the pair's attempts: the scoring rules of a cell.

Why a module of its own: the model's matrix (``runner.results.matrix``), its run scope, the reports
and the tests all build or read cells the same way, without a tree to scan: a cell is a pure
function of its attempts (``build_cell``, ``build_pair_cell``, ``combine_repeats``).

Rules applied here (none re-implemented from ``runner.results.rules``):
- a pair is scored by its latest done attempt; a newer running/errored attempt never replaces it
  (``Cell.newer`` says it exists);
- a done attempt whose metrics are not a score yet (``phase: initialized``) does not score: the
  previous done attempt with a score does, and ``note`` says so;
- repeats: each repeat is a cell of its own by the rules above (the hole rule included); the pair's
  cell shows the mean of its done repeats and its flagged ones (as failures, every score 0) and
  counts as done once one repeat is (``combine_repeats``); a pair of one repeat is that repeat's cell.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter

from modes.profiles import ARMS
from runner.results import clusters, rules
from runner.results.attempts import (
    DONE,
    ERRORED,
    NO_FIGURES,
    PENDING,
    RUNNING,
    TAMPERED,
    UNREADABLE,
    VOIDED,
    Attempt,
    Figures,
    Key,
    mean_opt,
    sum_opt,
)


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
        return len([a for a in self.attempts if a.voided])

    @property
    def n_errored(self) -> int:
        return len([a for a in self.attempts if a.status == ERRORED])

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
        if not self.repeats:  # a pair of one repeat, whose part is itself (read per cell by status)
            return 1 if self.status == DONE else 0
        return sum(1 for p in self.repeats if p.status == DONE)

    @property
    def flagged_repeats(self) -> int:
        """How many of its repeats the hole rule flagged (0 or 1 for a pair of one repeat)."""
        if not self.repeats:
            return 1 if self.flagged else 0
        return sum(1 for p in self.repeats if p.flagged)


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


#: the note of a done cell without a partial score on a task whose other trials have one
NO_PARTIAL = (
    "no partial score (verifier/metrics.json missing or without one) where other trials of this task "
    "have one: a hole in what the agent can write, counted as a failure"
)
#: the same for the reward (harbor's reading of the verifier's) or the test pass rate (its counts)
NO_MEASURE = (
    "no {measure} where other trials of this task have one: a hole in what the agent can write, "
    "counted as a failure"
)

#: the measures of a done attempt, as bits: a task's (``task_measures``) are those its arms' done
#: attempts share (``shared_measures``), and a done cell without one of them is a hole
PARTIAL, REWARD, PASS_RATE = 1, 2, 4
_NAMES = ((PARTIAL, "partial score"), (REWARD, "reward"), (PASS_RATE, "test pass rate"))


def measures_of(f: Figures) -> int:
    """The measures these figures have (``PARTIAL | REWARD | PASS_RATE``); test counts stated as 0
    of 0 have no pass rate to average, but are the verifier's word, not a hole (``tests_counted``)."""
    rate = f.pass_rate is not None or f.tests_counted
    return (f.partial is not None) | (f.reward is not None) << 1 | rate << 2


def shared_measures(by_arm: Mapping[str, int]) -> int:
    """A task's measures (``task_measures``) from what each arm's done attempts of it have
    (``arm_measures``, or'ed over an arm's attempts): a measure at least half of the arms that could
    give it have. One arm's files cannot make the cells of most arms holes: a probe planted a
    metrics.json in one arm's trial of a task whose verifier writes none, and every other arm's cell
    of the task failed for lacking a partial score (2026-12-07). An arm that deletes its own fails
    wherever as many arms have it (of two arms, one is half: the rule as it was). A build failure
    that gives no partial or pass rate is not counted for those (it has none to give)."""
    got = 0
    for bit, _name in _NAMES:
        have = sum(1 for m in by_arm.values() if m & bit)
        could = sum(1 for m in by_arm.values() if m & bit or not m & (bit << _EXCUSED))
        if have and 2 * have >= could:
            got |= bit
    return got


#: ``arm_measures``' bits for the measures a build failure has none of (above the measures' own)
_EXCUSED = 3


def arm_measures(f: Figures) -> int:
    """A done attempt's bits for ``shared_measures``: its measures, and (shifted) those a build
    failure is excused from giving."""
    excused = (PARTIAL | PASS_RATE) << _EXCUSED if f.build_failed else 0
    return measures_of(f) | excused


def _holes(f: Figures, task_measures: int) -> int:
    """The measures its task has that a done attempt lacks (``NO_PARTIAL``, ``NO_MEASURE``): a build
    failure has no partial or pass rate to give (both count as 0). A probe found the rule on the
    partial score alone: a missing pass rate or reward left that mean unflagged, the cell out of it."""
    missing = task_measures & ~measures_of(f)
    return missing & REWARD if f.build_failed else missing


def _hole_notes(missing: int) -> list[str]:
    return [
        NO_PARTIAL if bit == PARTIAL else NO_MEASURE.format(measure=name)
        for bit, name in _NAMES
        if missing & bit
    ]


#: attempts in the order they ran (their stamps; the arm dir when two share one)
_stamp_order = attrgetter("stamp", "arm_dir")


def build_cell(
    task: str, arm: str, attempts: Iterable[Attempt], claimed: bool = False, task_measures: int = 0
) -> Cell:
    """The cell of one pair from its attempts: the latest done attempt with a score scores it.

    ``task_measures``: the measures this task's arms share (``shared_measures``); a
    done cell without one of them (its metrics.json deleted or emptied of scores, its reward gone) is
    then a hole and counts as a failure."""
    atts = list(attempts)
    if len(atts) > 1:
        atts.sort(key=_stamp_order)
    if len(atts) == 1:  # the usual pair, done at its first attempt: what the rules below give it
        a = atts[0]
        f = a.figures
        # (a hole is never DONE; a missing partial where the task has them is the hole rule's, below)
        if a.status == DONE and f.has_score and not a.unreadable and not _holes(f, task_measures):
            return Cell(
                task=task, arm=arm, status=DONE, figures=f, cost_usd_all=f.cost_usd, run_id=a.run_id,
                attempts=(a,), scored_by=a.stamp, scored_on=a.host.short() if a.host is not None else None,
                claimed=claimed,
            )  # fmt: skip
    cost_all = sum_opt(a.figures.cost_usd for a in atts)
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
        if missing := _holes(scoring.figures, task_measures):
            status, flagged = UNREADABLE, True  # the hole rule: the cell never leaves a mean
            notes.extend(_hole_notes(missing))
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
    f = shown.figures if shown is not None else NO_FIGURES
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
    task_measures: int = 0,
) -> Cell:
    """The cell of one pair read with ``repeats`` (K) repeats: with K = 1 and no attempt of a
    repeat k >= 2, ``build_cell`` of its attempts (exactly the cell of a tree without repeats);
    else each repeat's cell by ``build_cell`` from that repeat's attempts (each under the hole rule
    on its own, ``task_measures`` as ``build_cell``'s), combined (``combine_repeats``). ``claimed``:
    the repeats with a claim file."""
    atts = attempts if isinstance(attempts, (list, tuple)) else list(attempts)
    if repeats == 1 and all([a.repeat == 1 for a in atts]):
        return build_cell(task, arm, atts, 1 in claimed, task_measures)
    by: dict[int, list[Attempt]] = {}
    for a in atts:
        by.setdefault(a.repeat, []).append(a)
    k = max(repeats, max(by, default=1))
    parts = tuple(build_cell(task, arm, by.get(r, ()), r in claimed, task_measures) for r in range(1, k + 1))
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
        cost_usd=sum_opt(p.cost_usd for p in done),
        n_input_tokens=sum_opt(p.n_input_tokens for p in done),
        n_output_tokens=sum_opt(p.n_output_tokens for p in done),
        wall_sec=mean_opt(walls),
        continuations=sum_opt(p.continuations for p in parts),
        unblocks=sum_opt(p.unblocks for p in parts),
        error_events=sum_opt(p.error_events for p in parts),
        goal_status=scoring.goal_status if scoring is not None else None,
        deadline_hit=any(p.deadline_hit for p in done),
        tests_counted=any(p.figures.tests_counted for p in done),
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
        cost_usd_all=sum_opt(p.cost_usd_all for p in parts),
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
