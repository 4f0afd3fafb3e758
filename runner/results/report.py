"""The comparison report: matrix, per-arm summary, paired comparisons, infrastructure-bias alarm.

Built from the results model only (``build_report(model) -> dict``), then rendered as md, json,
csv or html. The dict is the JSON contract other tools read:

    schema "marathon-report-v4", arms, tasks, cells[task][arm]{reward, partial, pass_rate,
    build_failed, status, flagged, cost_usd, n_input_tokens, n_output_tokens, spend_usd, ...},
    reading, exclude_flagged, arm_summary[arm]{n, flagged, flagged_in_n, reward, partial,
    pass_rate, *_ci, build_failed, cost_usd, cost_per_solved, spend_usd, ...}, paired[{a, b, n,
    flagged_a, flagged_b, *_diff, *_diff_ci, *_mde, *_tasks_needed, wins, losses, ties,
    sign_test_p, sign_test_p_holm, sign_best_holm_p}], power{...}, suspect[...], suspect_excluded,
    infrastructure[...], bootstrap{method, resamples, seed, confidence}, disclosures{arm: [...]},
    masked{arm: [{what, why, config_keys}]}, masked_config_keys, gateway_deaths{arm: n},
    modified_tasks, versions[{marathon, runs, message}], made_by, generated_by

Why cost apart from spend: an arm's cost is what its scored attempts cost (the sum of its cells);
what errored and voided attempts cost is the run's spend, not the arm's, or an arm that hit more
infrastructure would look more expensive. Why intervals on every difference: with 15 tasks a
mean difference of 0.06 from 8 wins and 2 losses may well be noise.

Why paired: the arms may have run different task sets (the field's ``ssh-goal`` ran extra hard
tasks), so per-arm means are not comparable; pairs compare only cells both arms completed.
Why the alarm: when one arm's error or void rate is significantly higher, the difference is most
likely infrastructure, not capability (runbook pitfall 1).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

from modes import profiles, safetext
from runner.results import audit, clusters, power, rules, stats, suspect
from runner.results.alarms import (
    ALARM_P,
    PROVIDER_DOWN_SEC,
    infrastructure,
    provider_errors,
    provider_outages,
)
from runner.results.attempts import DONE, ERRORED, LEDGER, STATUSES, VOIDED, Attempt, Key
from runner.results.cells import Cell, scored_values
from runner.results.ledger import live_at_deaths
from runner.results.model import NOT_RECORDED, RunModel
from runner.results.prices import Money, add_costs, money_shown
from runner.results.records import TrialRecord
from runner.version import marathon_version

FORMATS = ("md", "json", "csv", "html")
#: The JSON contract's version. v2: cell and arm cost/tokens are the scoring attempts' (spend_* is
#: every attempt), per-arm and paired 95 % intervals, Holm-adjusted p, p-values unrounded. v3: the
#: hole rule (flagged cells count as failures in n, the means and the pairs; ``flagged``,
#: ``flagged_in_n``, ``flagged_a``/``flagged_b``, ``reading``, ``exclude_flagged``); also ``power``
#: (MDE and tasks needed per pair), ``suspect`` and ``suspect_excluded``.
#: v4: money from the gateway's ledger beside harbor's figures (``ledger_cost_usd``,
#: ``ledger_spend_usd``, ``cost_unpriced`` per cell; ``ledger_*`` per arm), ``prices`` (the LiteLLM
#: map's identity and the overrides) and ``reconciliation.cost`` (per arm, ledger vs harbor).
SCHEMA = "marathon-report-v4"
CELL_FIELDS = (
    "status",
    "reward",
    "partial",
    "pass_rate",
    "build_failed",
    "cost_usd",
    "n_input_tokens",
    "n_output_tokens",
)


def _r(v: float | None, nd: int | None = None) -> float | None:
    """``v`` rounded to ``nd`` places (None, for scores, means, differences and their intervals: as
    computed; md, html and the console print them to 2 places, and a value rounded to 4 first
    printed 0.134951 as 0.14: found for cells by one probe, for the means by the next); a tie is
    0.0, never -0.0 (``+ 0.0``)."""
    if v is None:
        return None
    return (round(v, nd) if nd is not None else v) + 0.0


def _score(c: Cell, field: str, exclude_flagged: bool = False) -> float | None:
    """A counted cell's measure for means; build failures count as 0 (never dropped), and so does
    every score of a flagged cell (the hole rule, ``rules.scored_measure``). With repeats it is the
    task's mean over its counted repeats (``runner.results.cells.combine_repeats``): the mean of
    ``cell_values``, the value every mean, interval and paired difference takes per task; with
    ``exclude_flagged`` the flagged repeats of a done pair are left out of it (the other reading)."""
    if c.repeats:
        vals = scored_values(c, field, exclude_flagged)
        return clusters.task_mean(vals) if vals else None
    return rules.scored_measure(getattr(c, field), c.build_failed, field, c.flagged)


def counted(c: Cell, exclude_flagged: bool = False) -> bool:
    """Does the cell count in means and paired comparisons (``rules.counts_in_means``)?"""
    return rules.counts_in_means(c.status == DONE, c.flagged, exclude_flagged)


def flagged_in(c: Cell, exclude_flagged: bool = False) -> bool:
    """Does a counted cell count a flagged attempt as a failure: flagged itself, or (with repeats) a
    done pair with a flagged repeat among its counted ones? Never in the other reading."""
    return not exclude_flagged and c.flagged_repeats > 0


def cell_values(c: Cell, field: str, exclude_flagged: bool = False) -> list[float]:
    """A counted cell's values of a measure, one per counted repeat: its task's cluster
    (``runner.results.clusters``; ``runner.results.cells.scored_values``). One value without repeats."""
    return scored_values(c, field, exclude_flagged)


MEASURES = ("reward", "partial", "pass_rate")
PAIR_MEASURES = ("partial", "reward", "pass_rate")  # the paired table leads with partial (wins are by it)


def spend(c: Cell) -> tuple[float | None, int | None, int | None]:
    """What a pair cost the run: cost and input/output tokens of every attempt's trials, the
    errored and the voided ones too (voided trials are read where they were moved to).

    Why apart from the cell's cost: an arm that hit more infrastructure errors spent more, but that
    is the run's cost, not the arm's; the arm's cost is its scoring attempts'.
    """
    atts = c.attempts
    if len(atts) == 1 and len(atts[0].trials) == 1 and not atts[0].voided_trials:
        # the usual pair: one attempt of one trial (sum() of one value is the value)
        (t,) = atts[0].trials.values()
        return (t.cost_usd, *_attempt_tokens(atts[0], (t,)))
    recs = {a.key: [*a.trials.values(), *(v.record for v in a.voided_trials.values())] for a in atts}
    tokens = [_attempt_tokens(a, recs[a.key]) for a in atts]
    return (
        _total([t.cost_usd for rs in recs.values() for t in rs]),
        _total([i for i, _o in tokens]),
        _total([o for _i, o in tokens]),
    )


def _attempt_tokens(a: Attempt, recs: Sequence[TrialRecord]) -> tuple[int | None, int | None]:
    """An attempt's input and output tokens as the cells count them: the ledger's when it has the
    attempt (every call, its voided trials' too), else harbor's reading of the agent's logs in
    ``recs`` (a probe found a spend below the cost: harbor's tokens here, the ledger's in the cells)."""
    if a.figures.tokens_source == LEDGER:
        return a.figures.n_input_tokens, a.figures.n_output_tokens
    return _total([t.n_input_tokens for t in recs]), _total([t.n_output_tokens for t in recs])


def _scored(c: Cell, field: str):
    """A cell's cost or tokens as the arm's: the scoring attempt's, None when the cell is not done."""
    return getattr(c, field) if c.status == DONE else None


def _usd(cost: Any) -> float | None:
    return None if cost is None or cost.usd is None else round(cost.usd, 6)


def money_dict(cost: Any, spent: Any) -> dict[str, Any]:
    """The ledger's figures of a cell or an arm: its cost (scoring attempts), its spend (every
    attempt), and why any of it is unpriced ([] when all is priced or there is no ledger)."""
    why = list(dict.fromkeys([*(cost.unpriced if cost else ()), *(spent.unpriced if spent else ())]))
    return {"ledger_cost_usd": _usd(cost), "ledger_spend_usd": _usd(spent), "cost_unpriced": why,
            "ledger_unmetered_calls": spent.unmetered if spent else 0}  # fmt: skip


def cell_dict(c: Cell, money: Money | None = None, exclude_flagged: bool = False) -> dict[str, Any]:
    """A cell's figures; with ``money``, also the ledger's cost and spend (``money_dict``). In the
    other reading (``exclude_flagged``) a pair's scores and spreads are over its repeats that
    reading counts: the task mean its arm's figures take (the cell showed the headline's, its
    flagged repeats as zeros, beside an arm mean without them)."""
    s_cost, s_in, s_out = spend(c)
    f = c.figures  # the cell's figures, read from their record once (not through ten properties)
    done = c.status == DONE  # cost and tokens are the arm's only when the cell is done (``_scored``)
    d = {
        "status": c.status,
        # the cell's scores as read, not rounded: md and html print them to 2 places, and a value
        # rounded to 4 first printed 0.134951 as 0.14 where the console said 0.13 (a probe)
        "reward": _r(f.reward, None),
        "partial": _r(f.partial, None),
        "pass_rate": _r(f.pass_rate, None),
        "build_failed": f.build_failed,
        "cost_usd": _r(f.cost_usd, 6) if done else None,
        "n_input_tokens": f.n_input_tokens if done else None,
        "n_output_tokens": f.n_output_tokens if done else None,
        "tokens_source": f.tokens_source or "agent",
        "spend_usd": _r(s_cost, 6),
        "spend_input_tokens": s_in,
        "spend_output_tokens": s_out,
        "wall_sec": _r(f.wall_sec, 1),
        "attempts": len(c.attempts),
        "errored_attempts": c.n_errored,
        "voided_attempts": c.n_voided,
        "continuations": f.continuations,
        "unblocks": f.unblocks,
        "error_events": f.error_events,
        "goal_status": f.goal_status,
        "deadline_hit": f.deadline_hit,
        "scored_by": c.scored_by,
        "host": c.scored_on,
        "newer": c.newer,
        "unreadable": c.unreadable,
        "flagged": c.flagged,
        "note": c.note,
    }
    if c.repeats:
        d.update(repeat_dict(c, exclude_flagged))
        if exclude_flagged and c.flagged_repeats and done:
            for m in MEASURES:
                vals = scored_values(c, m, exclude_flagged=True)
                d[m] = _r(clusters.task_mean(vals), None) if vals else None
    if money is not None:
        d.update(money_dict(money.scored(c), money.spend(c)))
        d["spend_capped"] = money.spend_capped(c)
    return d


def repeat_dict(c: Cell, exclude_flagged: bool = False) -> dict[str, Any]:
    """A cell's repeats (``marathon run --repeats K``, K > 1): how many are done, the spread of each
    measure over the repeats the reading counts (sample standard deviation), and each repeat's own
    figures."""
    return {
        "repeats": c.k,
        "repeats_done": c.repeats_done,
        "flagged_repeats": c.flagged_repeats,  # a done pair's flagged ones too (its cell is not flagged)
        **{f"{m}_sd": _r(clusters.spread(scored_values(c, m, exclude_flagged))) for m in MEASURES},
        "by_repeat": [
            {
                "repeat": r,
                "status": p.status,
                "reward": _r(p.reward),
                "partial": _r(p.partial),
                "pass_rate": _r(p.pass_rate),
                "build_failed": p.build_failed,
                "flagged": p.flagged,
                "cost_usd": _r(_scored(p, "cost_usd"), 6),
                "wall_sec": _r(p.wall_sec, 1),
                "attempts": p.n_attempts,
                "scored_by": p.scored_by,
                "note": p.note,
            }
            for r, p in enumerate(c.parts, 1)
        ],
    }


def _ci(values: list[float]) -> list[float] | None:
    return _holding_mean(stats.bootstrap_mean_ci(values), values)


def _holding_mean(ci: tuple[float, float] | None, values: list[float]) -> list[float] | None:
    """The interval as the report puts it beside its mean (``stats.mean`` of the same values),
    widened to hold the mean where the two differ by float rounding alone: with every value the same,
    numpy's pairwise sum and ``sum() / n`` differ in the last bit, and a JSON reader found 0.6999999999999998
    beside [0.7000000000000001, 0.7000000000000001] (a review)."""
    if ci is None:
        return None
    lo, hi = ci
    m = stats.mean(values)
    if m is not None and lo - stats.SCORE_TOL <= m < lo:
        lo = m
    if m is not None and hi < m <= hi + stats.SCORE_TOL:
        hi = m
    return [_r(lo), _r(hi)]


def _task_ci(cells: tuple, values: tuple) -> list[float] | None:
    """The interval of the pooled mean of values of cells that share tasks: tasks resampled, each
    resample's mean over all its cells (``clusters.bootstrap_ci(pooled=True)``; a probe found the total row's
    interval, over 115 cells of 25 tasks as if independent, 1.7 times too narrow, and the next one
    an interval of task means that missed the pooled mean it stood beside)."""
    by: dict[str, list[float]] = {}
    for c, v in zip(cells, values, strict=True):
        if v is not None:
            by.setdefault(c.task, []).append(v)
    ci = clusters.bootstrap_ci(list(by.values()), pooled=True)
    return _holding_mean(ci, [v for v in values if v is not None])


def _total(got: list) -> Any:
    """The sum of what is known (in order: sum() compensates floats); None when nothing is."""
    got = [v for v in got if v is not None]
    return sum(got) if got else None


#: the receipt figures an arm's summary sums over all its cells
RECEIPT_SUMS = ("continuations", "unblocks", "error_events")


class _Sums:
    """What ``_summarize`` fed one summary (an arm's, or the total row's): a row per cell and one
    per counted cell, turned into columns by ``_summary`` (one append per cell and summary)."""

    __slots__ = ("rows", "counted")

    def __init__(self) -> None:
        #: per cell: (cell, its statuses, flagged repeats, attempts, errored, voided, the three
        #: RECEIPT_SUMS figures, the three ``spend`` figures)
        self.rows: list[tuple] = []
        #: per counted cell, in task order: (cell, the three MEASURES' scores (None: none), flagged
        #: in n, done, cost, input and output tokens, solved, build failures)
        self.counted: list[tuple] = []


def _summarize(cells: Iterable[tuple[Cell, tuple[_Sums, ...]]], exclude_flagged: bool) -> None:
    """Feed each cell to the summaries it counts in: one pass over the cells and one over the
    counted ones, each cell's figures read once however many summaries take it (`marathon status`'s
    total row is every arm's cells again). A pair of one repeat (the usual cell) is read from its
    own fields, not through ``Cell.parts``/``flagged_repeats`` and the figure properties (their
    values are the same: the parts of such a cell are the cell itself)."""
    counted_cells = []
    for c, into in cells:
        reps = c.repeats
        if reps:  # with repeats, each repeat is counted by its status
            statuses = tuple(p.status for p in reps)
            flagged = c.flagged_repeats
        else:
            statuses = (c.status,)
            flagged = 1 if c.flagged else 0
        atts = c.attempts
        errored = voided = 0
        for a in atts:
            errored += a.status == ERRORED
            voided += a.status == VOIDED
        f = c.figures
        row = (c, statuses, flagged, len(atts), errored, voided,
               f.continuations, f.unblocks, f.error_events, *spend(c))  # fmt: skip
        for s in into:
            s.rows.append(row)
        if counted(c, exclude_flagged):
            counted_cells.append((c, into))
    # in task order: the bootstrap draws positions, so the same tree must list its cells the same way
    counted_cells.sort(key=lambda ci: (ci[0].task, ci[0].arm))
    for c, into in counted_cells:
        f = c.figures
        if c.repeats:  # the task's value: with repeats, the mean of its counted repeats
            scores = tuple([_score(c, m, exclude_flagged) for m in MEASURES])
        else:  # ``_score`` of a pair of one repeat, from its figures
            fl, bf = c.flagged, f.build_failed
            scores = tuple([rules.scored_measure(getattr(f, m), bf, m, fl) for m in MEASURES])
        done = c.status == DONE  # a flagged cell: a failure in the means, nothing it says is cost
        solved = build_failed = 0
        if done:
            if c.repeats:  # solved and build failures are counted per attempt, as the cost is summed
                solved = sum(1 for p in c.repeats if p.status == DONE and p.reward == 1.0)
                build_failed = sum(1 for p in c.repeats if p.status == DONE and p.build_failed)
            else:
                solved = int(f.reward == 1.0)
                build_failed = int(bool(f.build_failed))
        row = (c, *scores, flagged_in(c, exclude_flagged), done,
               f.cost_usd, f.n_input_tokens, f.n_output_tokens, solved, build_failed)  # fmt: skip
        for s in into:
            s.counted.append(row)


def _columns(rows: list[tuple], n: int) -> list[tuple]:
    return list(zip(*rows, strict=True)) if rows else [()] * n


def _summary(
    s: _Sums, exclude_flagged: bool, money: Money | None, by_task: bool = False, repeats: int = 1
) -> dict[str, Any]:
    """The summary dict of what ``_summarize`` fed ``s`` (``arm_summary``'s); ``by_task``: cells of
    one task are not independent (the total row: every arm's cell of a task), so its intervals
    resample tasks (``clusters.bootstrap_ci``), not cells."""
    cells, statuses, flagged, attempts, errored, voided, *rest = _columns(s.rows, 12)
    receipts, spends = rest[:3], rest[3:]
    counts = dict.fromkeys(STATUSES, 0)
    for sts in statuses:
        for st in sts:
            if st in counts:
                counts[st] += 1
    means_of, *scores, fl_in, done, cost, tok_in, tok_out, solved_n, bf_n = _columns(s.counted, 11)
    vals = {m: [v for v in got if v is not None] for m, got in zip(MEASURES, scores, strict=True)}

    def of_done(got: tuple) -> list:  # a flagged cell: a failure in the means, nothing it says is cost
        return [v for v, d in zip(got, done, strict=True) if d]

    solved = sum(solved_n)
    cost_usd = _total(of_done(cost))
    # errored cells (an agent failure the voiding table scores; the next pass reruns it) are out of
    # the means: what the means would be with them as failures is said beside them, never silent
    n_errored = sum(1 for c in cells if c.status == ERRORED)
    as_failures = {m: _r(stats.mean(vals[m] + [0.0] * n_errored)) for m in MEASURES} if n_errored else None
    ledger = {}
    if money is not None:
        l_cost = add_costs(money.scored(c) for c in means_of if c.status == DONE)
        l_spend = add_costs(money.spend(c) for c in cells)
        ledger = money_dict(l_cost, l_spend)
        ledger["ledger_cost_per_solved"] = (
            _r(l_cost.usd / solved, 6) if l_cost and l_cost.usd is not None and solved else None
        )
    return {
        "n": len(means_of),
        "flagged": sum(flagged),
        "flagged_in_n": sum(fl_in),
        **{m: _r(stats.mean(vals[m])) for m in MEASURES},
        **{
            f"{m}_ci": _task_ci(means_of, got) if by_task else _ci(vals[m])
            for m, got in zip(MEASURES, scores, strict=True)
        },
        "build_failed": sum(bf_n),
        "errored_cells": n_errored,
        "errored_as_failures": as_failures,
        "cost_usd": _r(cost_usd, 6),
        "n_input_tokens": _total(of_done(tok_in)),
        "n_output_tokens": _total(of_done(tok_out)),
        "solved": solved,
        "cost_per_solved": _r(cost_usd / solved, 6) if cost_usd is not None and solved else None,
        "spend_usd": _r(_total(spends[0]), 6),
        "spend_input_tokens": _total(spends[1]),
        "spend_output_tokens": _total(spends[2]),
        "cells": len(cells),
        **counts,
        "attempts": sum(attempts),
        "errored_attempts": sum(errored),
        "voided_attempts": sum(voided),
        **{k: _total(got) for k, got in zip(RECEIPT_SUMS, receipts, strict=True)},
        **pass_k(list(means_of), exclude_flagged, max(repeats, max((c.k for c in cells), default=1))),
        **ledger,
    }


def arm_summary(
    cells: list[Cell], exclude_flagged: bool = False, money: Money | None = None, by_task: bool = False
) -> dict[str, Any]:
    """One arm's figures over its cells: means (with 95 % bootstrap intervals) over the counted
    cells (done, and flagged ones as failures: the hole rule; ``exclude_flagged``: done only), the
    arm's cost over its scoring attempts, and the run's spend over every attempt; with ``money``,
    both also from the gateway's ledger (``ledger_*``: unpriced, None, when any token is).

    One pass over the cells and one over the counted ones (a 10,000-cell tree's status called this
    for every figure in turn, half a million attribute reads)."""
    s = _Sums()
    into = (s,)
    _summarize(((c, into) for c in cells), exclude_flagged)
    return _summary(s, exclude_flagged, money, by_task)


def arm_summaries(
    cells: dict[Key, Cell],
    arms: list[str],
    exclude_flagged: bool = False,
    money: Money | None = None,
    total: bool = True,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """``arm_summary`` of each arm's cells (by the key's arm) and, with ``total``, of all the cells
    (`marathon status`'s total row; else None), in one pass: each cell's figures are read once."""
    every = _Sums()
    per = {a: (_Sums(), every) if total else (_Sums(),) for a in arms}
    alone = (every,) if total else ()  # a cell of an arm not asked for counts in the total only
    _summarize(((c, per.get(k[1], alone)) for k, c in cells.items()), exclude_flagged)
    k = max((c.k for c in cells.values()), default=1)  # an arm of pending cells has the K of the run
    return (
        {a: _summary(into[0], exclude_flagged, money, repeats=k) for a, into in per.items()},
        _summary(every, exclude_flagged, money, by_task=True, repeats=k) if total else None,
    )


def pass_k(counted_cells: list[Cell], exclude_flagged: bool = False, k: int = 1) -> dict[str, Any]:
    """pass@K and pass^K of an arm's counted cells when its cells have K > 1 repeats (``k``, or the
    counted cells' own; none without): per task the unbiased estimate from its n >= K counted
    repeats (done, and flagged ones as failures: the hole rule, unless ``exclude_flagged``) of which
    c solved it (reward 1; ``runner.results.clusters.pass_at_k``/``pass_hat_k``), averaged over
    those tasks, with the bootstrap interval over tasks; ``pass_k_n`` tasks had K counted repeats.
    An arm with no counted cell has the keys, null (they were missing: the contract lists them)."""
    k = max(k, max((c.k for c in counted_cells), default=1))
    if k < 2:
        return {}
    at, hat = [], []
    for c in counted_cells:
        rewards = scored_values(c, "reward", exclude_flagged)
        if len(rewards) >= k:
            solved = sum(1 for r in rewards if r == 1.0)
            at.append(clusters.pass_at_k(len(rewards), solved, k))
            hat.append(clusters.pass_hat_k(len(rewards), solved, k))
    return {
        "pass_k": k,
        "pass_k_n": len(at),
        "pass_at_k": _r(stats.mean(at)),
        "pass_at_k_ci": _ci(at),
        "pass_hat_k": _r(stats.mean(hat)),
        "pass_hat_k_ci": _ci(hat),
    }


def common_done(
    cells: dict[tuple[str, str], Cell], a: str, b: str, tasks: list[str], exclude_flagged: bool = False
) -> list[str]:
    """The tasks both arms have a counted cell on (done, or flagged: a failure by the hole rule):
    the only cells a paired comparison may use."""
    return [
        t
        for t in tasks
        if (ca := cells.get((t, a))) is not None
        and (cb := cells.get((t, b))) is not None
        and counted(ca, exclude_flagged)
        and counted(cb, exclude_flagged)
    ]


def paired(
    cells: dict[tuple[str, str], Cell], arms: list[str], tasks: list[str], exclude_flagged: bool = False
) -> list[dict[str, Any]]:
    """Each pair of arms over the tasks both have a counted cell on: means, mean difference a - b
    with its paired bootstrap 95 % interval (per measure), wins/losses/ties by partial, the exact
    sign test and its Holm adjustment across every pair that has a common task, and how many of
    the compared cells of each side are flagged (counted as failures by the hole rule)."""
    out = []
    diffs: dict[tuple[str, str, str], list[float]] = {}  # per-task differences, for the power figures
    scores: dict[tuple[str, str], tuple[float | None, ...]] = {}  # each cell's measures, read once

    def score(key: tuple[str, str]) -> tuple[float | None, ...]:
        got = scores.get(key)
        if got is None:
            got = scores[key] = tuple(_score(cells[key], f, exclude_flagged) for f in MEASURES)
        return got

    for a, b in combinations(arms, 2):
        both = common_done(cells, a, b, tasks, exclude_flagged)
        row: dict[str, Any] = {"a": a, "b": b, "n": len(both), "tasks": both}
        row["flagged_a"] = sum(1 for t in both if flagged_in(cells[(t, a)], exclude_flagged))
        row["flagged_b"] = sum(1 for t in both if flagged_in(cells[(t, b)], exclude_flagged))
        sa, sb = [score((t, a)) for t in both], [score((t, b)) for t in both]
        for i, field in enumerate(MEASURES):
            pa = [(x[i], y[i]) for x, y in zip(sa, sb, strict=True) if x[i] is not None and y[i] is not None]
            d = diffs[(a, b, field)] = [x - y for x, y in pa]
            row[f"{field}_a"] = _r(stats.mean([x for x, _ in pa]))
            row[f"{field}_b"] = _r(stats.mean([y for _, y in pa]))
            row[f"{field}_diff"] = _r(stats.mean(d))
            row[f"{field}_diff_ci"] = _ci(d)
            row[f"{field}_n"] = len(pa)
            if field == "partial":  # wins and losses are by partial
                pp = pa
        wins, losses, ties = stats.tally(pp)
        row.update(wins=wins, losses=losses, ties=ties, sign_test_p=stats.sign_test(wins, losses))
        row["sign_test_p_holm"] = None
        out.append(row)
    family = [r for r in out if r["n"]]
    for r, p in zip(family, stats.holm([r["sign_test_p"] for r in family]), strict=True):
        r["sign_test_p_holm"] = p
    power.annotate(out, diffs)  # MDE and tasks needed per measure, at the Holm level
    return out


def full_audit(cells: dict, arms: list[str], model: RunModel) -> dict[str, Any]:
    """The fairness audit of the receipts' setup facts, with the wire audit of the gateway's ledger
    (``audit["wire"]``); an arm either marks is marked (the console's summary row, the report)."""
    au = audit.audit(cells, arms)
    au["wire"] = audit.wire_audit(cells, arms, model.ledger)
    marked = set(au["arms_differing"]) | set(au["wire"]["arms_differing"])
    au["arms_differing"] = [a for a in arms if a in marked]
    return au


def reconciliation(
    cells: dict, arms: list[str], model: RunModel, money: Money | None = None
) -> dict[str, Any]:
    """The receipts' self-reported tokens against the gateway's ledger, per done cell whose attempt
    went through the gateway: a difference is a flagged line (token counts are integers: any
    difference is more than rounding), never silently one or the other. With ``money``, also per
    arm (``arms``/``arm_lines``): harbor's own tokens and cost (the agent's logs, priced by harbor)
    against the ledger's, with a flagged line naming the attempts that differ beyond rounding."""
    from runner.results.ledger import reconcile, reconcile_harbor

    lines, compared = [], 0
    per_arm: dict[str, dict[str, Any]] = {}
    for (task, arm), c in sorted(cells.items()):
        if arm not in arms or c.status != DONE or c.figures.tokens_source != "ledger":
            continue
        att = next((a for a in c.attempts if a.stamp == c.scored_by), None)
        u = model.ledger.usage(task, att.arm_dir, att.stamp) if att is not None else None
        if u is None:
            continue
        compared += 1
        got = c.figures.receipt_usage
        said = (
            dict(zip(("inputTokens", "cachedInputTokens", "outputTokens"), got, strict=True)) if got else None
        )
        lines += [f"{task} × {arm} ({att.stamp}): {d}" for d in reconcile(u, said)]
        if money is None:
            continue
        f, cost = att.figures, money.attempt(att)
        # harbor prices with LiteLLM's map alone: a cost from an operator's --price has no harbor
        # counterpart, so only the tokens are compared then (a flag would be noise on every attempt)
        wire_usd = cost.usd if cost is not None else None
        compared_usd = wire_usd if cost is not None and not cost.overridden else None
        row = per_arm.setdefault(arm, {"compared": 0, "cost_compared": 0, "cost_overridden": 0, "ledger_usd": [],
                                       "harbor_usd": [], "ledger_tokens": [0, 0], "harbor_tokens": [[], []],
                                       "differ": []})  # fmt: skip
        row["compared"] += 1
        row["cost_compared"] += compared_usd is not None
        row["cost_overridden"] += cost is not None and cost.overridden
        row["ledger_usd"].append(wire_usd)
        row["harbor_usd"].append(f.cost_usd)
        row["ledger_tokens"][0] += u.input
        row["ledger_tokens"][1] += u.output
        row["harbor_tokens"][0].append(f.agent_input_tokens)
        row["harbor_tokens"][1].append(f.agent_output_tokens)
        if diff := reconcile_harbor(u, f.agent_input_tokens, f.agent_output_tokens, f.cost_usd, compared_usd):
            row["differ"].append(f"{task} ({att.stamp}): {'; '.join(diff)}")
    out_arms, arm_lines = {}, []
    for arm in arms:
        row = per_arm.get(arm)
        if row is None:
            continue
        ledger_usd = None if None in row["ledger_usd"] else _r(_total(row["ledger_usd"]), 6)
        d = out_arms[arm] = {
            "compared": row["compared"],
            "cost_compared": row["cost_compared"],  # of those, the cells whose cost harbor priced alike
            "cost_overridden": row["cost_overridden"],  # not compared: an operator's --price priced them
            "ledger_usd": ledger_usd,
            "harbor_usd": _r(_total(row["harbor_usd"]), 6),
            "ledger_input_tokens": row["ledger_tokens"][0],
            "ledger_output_tokens": row["ledger_tokens"][1],
            "harbor_input_tokens": _total(row["harbor_tokens"][0]),
            "harbor_output_tokens": _total(row["harbor_tokens"][1]),
            "differ": row["differ"],
        }
        if d["differ"]:
            arm_lines.append(
                f"{arm}: ledger {_money_text(ledger_usd)}, {d['ledger_input_tokens']} in / {d['ledger_output_tokens']} out; "
                f"harbor {_money_text(d['harbor_usd'])}, {d['harbor_input_tokens']} in / {d['harbor_output_tokens']} out "
                f"over {d['compared']} done cell(s); {len(d['differ'])} differ: " + " | ".join(d["differ"])
            )
    rec: dict[str, Any] = {"compared": compared, "lines": lines}
    if money is not None:
        rec.update(arms=out_arms, arm_lines=arm_lines)
    return rec


def _money_text(v: float | None) -> str:
    return "unpriced" if v is None else f"${v:.4f}"


#: how the means of a report read the flagged cells (``reading`` in the JSON)
HEADLINE = "flagged cells counted as failures (the hole rule)"
OTHER_READING = "flagged cells excluded: the other reading (--exclude-flagged), not the headline"


def build_report(
    model: RunModel,
    scope: str = "all",
    exclude_flagged: bool = False,
    exclude_suspect: bool = False,
    prices: Iterable[str] = (),
) -> dict[str, Any]:
    """The report's dict. Two other readings, each labelled as such: ``exclude_flagged``, flagged
    cells left out of the means and pairs instead of counted as failures (the hole rule);
    ``exclude_suspect``, every figure without the tasks every arm failed alike
    (``runner.results.suspect``). ``prices``: ``--price`` items over the run's recorded ones
    (``runner.results.prices``; a ``ValueError`` names a bad one)."""
    money = model.money(prices)
    cells = model.scoped(scope)
    arms = [a for a in model.arms if any(k[1] == a for k in cells)]
    tasks = sorted({k[0] for k in cells})
    suspects = suspect.find(cells, arms, tasks)
    if exclude_suspect:
        cells = {k: c for k, c in cells.items() if k[0] not in suspects}
        tasks = [t for t in tasks if t not in suspects]
    pairs = paired(cells, arms, tasks, exclude_flagged)
    stand_ins = [a for a in arms if profiles.mode_for(a) is None]
    repeats = max((c.k for c in cells.values()), default=1)
    return {
        "schema": SCHEMA,
        "out": str(model.out),
        "scope": scope if model.runs else "all",
        "run_id": model.run_id,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generated_by": marathon_version(),
        "arms": arms,
        "tasks": tasks,
        "cells": {
            t: {a: cell_dict(cells[(t, a)], money, exclude_flagged) for a in arms if (t, a) in cells}
            for t in tasks
        },
        "reading": OTHER_READING if exclude_flagged else HEADLINE,
        "exclude_flagged": exclude_flagged,
        "arm_summary": arm_summaries(cells, arms, exclude_flagged, money, total=False)[0],
        "paired": pairs,
        "power": power.block(pairs),
        "suspect": [s.as_dict() for s in suspects.values()],
        "suspect_excluded": exclude_suspect,
        "infrastructure": infrastructure(cells, arms),
        "provider_errors": provider_errors(cells, arms, model.ledger),
        "provider_outages": provider_outages(cells, arms, model.ledger, model.out),
        "gateway_deaths": gateway_deaths(model.out, cells),
        "audit": full_audit(cells, arms, model),
        "reconciliation": reconciliation(cells, arms, model, money),
        "prices": {**money.pricer.source(), "line": money.pricer.source_line()},
        "bootstrap": {
            "method": "percentile",
            "resamples": stats.BOOTSTRAP_RESAMPLES,
            "seed": stats.BOOTSTRAP_SEED,
            "confidence": stats.CONFIDENCE,
        },
        "disclosures": profiles.disclosures([a for a in arms if a in profiles.ARMS]),
        "masked": profiles.masked([a for a in arms if a in profiles.ARMS]),
        "masked_config_keys": list(profiles.masked_config_keys()),
        "stand_ins": stand_ins,
        "modified_tasks": [t for t in model.modified_tasks if t in tasks],
        **_versions(model.versions()),
        "excluded": [{"path": e.path, "reason": e.reason} for e in model.excluded],
        "unreadable": model.unreadable,
        "notes": {
            "means": "over done cells and flagged cells (a hole in what the agent can write: every score 0); "
            "build failures count as partial 0 and pass rate 0; n counts both, flagged_in_n the flagged",
            "cost_usd": "what the arm cost: its scoring attempts (done cells), equal to the sum of the cells' cost_usd "
            "(harbor's figure: the agent's own logs priced by harbor); a flagged cell's attempt is in spend_usd only",
            "ledger_cost_usd": "the same attempts priced from the gateway's ledger (prices.line); None when any of "
            "their tokens is unpriced (cost_unpriced says why); ledger_spend_usd: every attempt's",
            "spend_usd": "what the run cost: every attempt, errored and voided ones too",
            "cost_per_solved": "cost_usd over the cells with reward 1",
            "intervals": "95 % percentile bootstrap of the mean (paired: of the per-task differences), fixed seed",
            "paired": "only tasks both arms completed (flagged cells count as failures; flagged_a/flagged_b say "
            "how many); wins/losses by partial score; two-sided exact sign test, "
            "Holm-adjusted across every pair with a common task",
            "infrastructure": "errored+voided attempts and holes only the harness could have made vs the other "
            f"arms, Fisher's exact test; alarm at p < {ALARM_P}",
            "provider_errors": "attempts the provider answered with an error at least once (the gateway's "
            "ledger; codex retries most of them unseen) vs the other arms, the same test and level; "
            "statuses: the error answers by HTTP status",
            "provider_outages": f"scored attempts whose calls the provider failed for {PROVIDER_DOWN_SEC:.0f} s "
            "or more (from a failed call to the next answered one; a request the harness got wrong, a 400, "
            "is not an outage): flagged, never voided by the report",
            "gateway_deaths": "per arm, attempts live at a model gateway found dead (outages.jsonl): the "
            "calls they had in flight have no ledger line, so the ledger's spend is a lower bound by those",
            "power": "per pair and measure: MDE and tasks needed (runner.results.power)",
            "suspect": f"{suspect.LABEL}: counted as any task unless suspect_excluded (the other reading)",
            **({"repeats": REPEATS_NOTE} if repeats > 1 else {}),
        },
        "repeats": repeats,
    }


#: what a report of a run with repeats says about them (its ``notes.repeats``)
REPEATS_NOTE = (
    "K attempts per (task, arm): a cell is done once one repeat is, and shows the mean of its done repeats "
    "(a flagged repeat among them a failure, every score 0: the hole rule) with their spread (sd); every "
    "mean and interval averages within a task first and resamples tasks (cluster bootstrap), paired "
    "comparisons pair the two arms' task means; done/errored/flagged count repeats, n counts tasks; "
    "pass@K / pass^K: at least one / every one of K attempts solves a task (unbiased, from the tasks with "
    "K counted repeats)"
)


# ------------------------------------------------------------------------------------ rendering


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


P_FLOOR = 1e-4


def fmt_p(p: float | None) -> str:
    """A p-value for reading: four decimals, and ``<1e-4`` below that (never ``0.0000``)."""
    if p is None:
        return "-"
    return "<1e-4" if p < P_FLOOR else f"{p:.4f}"


def fmt_diff(n: int, diff: float | None, ci: list[float] | None, nd: int = 2) -> str:
    """``n = 15, diff +0.06 [\u22120.03, +0.15]``: a paired difference is never shown without n and interval."""
    if diff is None:
        return f"n = {n}, diff -"
    iv = f" [{power.fmt_signed(ci[0], nd)}, {power.fmt_signed(ci[1], nd)}]" if ci else ""
    return f"n = {n}, diff {power.fmt_signed(diff, nd)}{iv}"


def fmt_mean(mean: float | None, ci: list[float] | None, nd: int = 2) -> str:
    """``0.53 [0.41, 0.66]``: a mean with its 95 % interval."""
    if mean is None:
        return "-"
    iv = f" [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]" if ci else ""
    return f"{mean:.{nd}f}{iv}"


def _cell_text(c: dict[str, Any] | None) -> str:
    """reward / partial / pass rate, with the build-failure mark ✗; with repeats, the means over the
    done repeats, then how many are done and the spread of the partial (``2/3 sd 0.12``)."""
    if c is None:
        return ""
    reps = f" ({c['repeats_done']}/{c['repeats']}" if "repeats" in c else ""
    if reps and c["status"] == DONE and c.get("partial_sd") is not None:
        reps += f" sd {_f(c['partial_sd'], 2)}"
    reps += ")" if reps else ""
    if c["status"] != DONE:
        return c["status"] + reps
    mark = " ✗build" if c["build_failed"] else ""
    return f"{_f(c['reward'], 2)} / {_f(c['partial'], 2)} / {_f(c['pass_rate'], 2)}{mark}{reps}"


def render_json(rep: dict[str, Any], pretty: bool = False) -> str:
    """One line for scripts (the indenting encoder was the largest part of a 10,000-trial report);
    ``pretty`` indents for a human."""
    return dump_json(rep, pretty) + "\n"


def dump_json(d: Any, pretty: bool = False) -> str:
    """The JSON of ``status --json`` and ``report --format json``: compact, or indented with ``pretty``.

    Strict RFC 8259: ``allow_nan=False`` (every number passed ``modes.values`` on the way in, so a
    NaN here is a bug that must fail loudly, never print ``NaN``), and no control, bidi or
    undecodable character raw in the text (``modes.safetext.json_text``)."""
    return safetext.dumps(d, pretty=pretty)


#: cell statuses of a pair whose file broke a safe-open rule, made no sense or was changed after its
#: verifier: never a score (a flagged one counts as a failure: the hole rule)
NOT_SCORED = ("unreadable", "tampered")


def n_text(n: int, flagged: int) -> str:
    """``15`` or ``15 (2 flagged)``: a mean's n, always with the flagged cells it counts."""
    return f"{n} ({flagged} flagged)" if flagged else str(n)


def arm_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-arm table (heads, rows) every format shows: means with intervals, the arm's cost
    (scoring attempts) beside the run's spend (every attempt), the ledger's (``money_shown``); an
    arm without calls on the ledger of a tree that has one shows harbor's, marked so."""
    k = rep.get("repeats", 1)
    many = k > 1  # with repeats: pass@K and pass^K beside the means; n counts tasks, the rest repeats
    shown = {a: money_shown(rep["arm_summary"][a]) for a in rep["arms"]}
    ledger = any(m[3] for m in shown.values())
    src = " (ledger)" if ledger else ""
    heads = ["arm", "n", "reward", "partial", "pass rate", *([f"pass@{k}", f"pass^{k}"] if many else [])]
    heads += ["build failed", "solved", f"cost USD{src}", f"cost/solved{src}", f"spend USD{src}"]
    heads += ["done"] if many else []
    heads += ["errored", "voided", "pending", "running"]
    rows = []
    for a in rep["arms"]:
        s = rep["arm_summary"][a]
        # over the tasks with K counted repeats, which may be fewer than n and differ by arm: said
        # when so (a review read 1.00 beside 0.50, each arm over 4 of 5 tasks, not the same 4)
        over = "" if s.get("pass_k_n") in (None, s["n"]) else f" (over {s['pass_k_n']} tasks)"
        passes = [
            fmt_mean(s.get("pass_at_k"), s.get("pass_at_k_ci")) + over,
            fmt_mean(s.get("pass_hat_k"), s.get("pass_hat_k_ci")) + over,
        ]
        rows.append(
            [a, n_text(s["n"], s["flagged_in_n"])]
            + [fmt_mean(s[f], s[f"{f}_ci"]) for f in MEASURES]
            + (passes if many else [])
            + [str(s["build_failed"]), str(s["solved"])]
            + [
                _f(v, 4) + (" (harbor)" if ledger and not shown[a][3] and v is not None else "")
                for v in shown[a][:3]
            ]
            + [str(s[k]) for k in ((("done",) if many else ()) + ("errored", "voided", "pending", "running"))]
        )
    return heads, rows


def pair_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The paired table (heads, rows): per measure ``n = 15, diff +0.06 [\u22120.03, +0.15]``, wins/
    losses/ties by partial, the sign test's p and its Holm adjustment. Pairs without a common task
    are left out here (still listed in the JSON)."""
    heads = ["a", "b", "flagged a/b", "partial", "reward", "pass rate", "W/L/T", "sign p", "Holm p"]
    heads += ["MDE (partial / reward / pass)", "tasks needed (partial / reward / pass)"]
    rows = []
    for p in rep["paired"]:
        if not p["n"]:
            continue
        rows.append(
            [p["a"], p["b"], f"{p['flagged_a']}/{p['flagged_b']}"]
            + [fmt_diff(p[f"{f}_n"], p[f"{f}_diff"], p[f"{f}_diff_ci"]) for f in PAIR_MEASURES]
            + [
                f"{p['wins']}/{p['losses']}/{p['ties']}",
                fmt_p(p["sign_test_p"]),
                fmt_p(p["sign_test_p_holm"]),
            ]
            + power_cells(p)
        )
    return heads, rows


def power_cells(p: dict[str, Any]) -> list[str]:
    """A pair's MDE and tasks needed per measure (``runner.results.power``), as ``0.13 / - / 0.12``."""
    mde = " / ".join(
        power.fmt_mde(p.get(f"{f}_mde"), p.get(f"{f}_below_sign_floor", False)) for f in PAIR_MEASURES
    )
    need = " / ".join(
        power.fmt_tasks(p.get(f"{f}_tasks_needed"), p.get(f"{f}_tasks_needed_over")) for f in PAIR_MEASURES
    )
    return [mde, need]


def power_lines(rep: dict[str, Any]) -> list[str]:
    """What the MDE means, and the pairs whose reported differences are below it."""
    block = rep.get("power")
    if not block or not block["family"]:
        return []
    out = [power.headline(block)]
    under = power.underpowered_lines(block, lambda m: m.replace("_", " "))
    if under:
        out.append(
            'Underpowered: these differences are smaller than the run can detect; a "no difference" '
            "among them is not evidence of none:"
        )
        out += under
    return out


def repeats_line(rep: dict[str, Any]) -> str | None:
    """What a report of a run with repeats says about them (None without)."""
    k = rep.get("repeats", 1)
    if k < 2:
        return None
    what = REPEATS_NOTE.split(": ", 1)[1]
    return f"Repeats: K = {k} attempts per (task, arm). {what[0].upper()}{what[1:]}."


#: what the report says of an arm's errored cells, out of its means
ERRORED_NOTE = (
    "Errored cells (an agent failure the voiding table scores, not voided; the next pass reruns it, "
    "up to --max-passes) are out of the means above, as in every reading; with them as failures:"
)


def errored_lines(rep: dict[str, Any]) -> list[str]:
    """Per arm with errored cells, the means they would make as failures (``errored_as_failures``):
    an arm whose agent crashed on its hardest tasks reads a higher mean over its done cells, and a
    count alone did not say by how much (a probe's crashing arm, 0.73 against an identical 0.55)."""
    out = []
    for a in rep["arms"]:
        s = rep["arm_summary"][a]
        got = s.get("errored_as_failures")
        if got:
            means = ", ".join(f"{m.replace('_', ' ')} {_f(got[m], 2)}" for m in MEASURES)
            out.append(f"{a}: {s['errored_cells']} errored cell(s) out of its means; as failures: {means}")
    return [ERRORED_NOTE, *out] if out else []


def flagged_cost_line(rep: dict[str, Any]) -> str:
    """One line naming the arms whose cost leaves out flagged cells ("" when none): a flagged cell
    counts as a failure in the means, but nothing it says is cost, so its attempt is in the spend
    only. Said, since an agent that made its failed cell unreadable took that task's cost out of its
    arm's cost without a word (a probe: nop's cost 4.0 -> 3.0, "(1 flagged)" beside n alone)."""
    arms = [f"{a} {n}" for a in rep["arms"] if (n := rep["arm_summary"][a].get("flagged_in_n"))]
    if not arms:
        return ""
    return (
        "cost and cost/solved are the done cells' scoring attempts; the flagged cells' attempts "
        f"(failures in the means) are in the spend only: {', '.join(arms)}"
    )


def suspect_lines(rep: dict[str, Any]) -> list[str]:
    """The tasks every arm failed alike, with the evidence, and which reading this is."""
    sus = rep.get("suspect") or []
    if not sus:
        return []
    how = (
        "Excluded from every figure of this reading (the other reading, --exclude-suspect)."
        if rep.get("suspect_excluded")
        else "Counted like any task (the default reading); --exclude-suspect prints the other reading."
    )
    return [f"{s['task']}: {suspect.LABEL}: {s['evidence']}" for s in sus] + [how]


def reading_banner(rep: dict[str, Any]) -> str | None:
    """The label of the other reading: never mistaken for the default one."""
    if not rep.get("suspect_excluded"):
        return None
    names = ", ".join(s["task"] for s in rep.get("suspect") or []) or "none"
    return (
        f"OTHER READING: the {len(rep.get('suspect') or [])} suspect task(s) every arm failed alike are "
        f"excluded from every figure ({names}). The default reading (without --exclude-suspect) counts them."
    )


def _task_label(rep: dict[str, Any], t: str, esc=lambda t: t) -> str:
    """A task's name as a table row shows it (``esc``: the format's escaping of a tree name)."""
    return f"{esc(t)} ⚠suspect" if any(s["task"] == t for s in rep.get("suspect") or []) else esc(t)


def _audit_lines(rep: dict[str, Any], alarm, esc=lambda t, cap=None: t) -> list[str]:
    """The audit's red lines, or what was compared and found equal (never a silent pass); then the
    wire audit's (what the arms sent the model, from the gateway's ledger). The lines name arms and
    values from receipts and from the agents' own requests: ``alarm`` and ``esc`` escape them."""
    au = rep["audit"]
    if au["lines"]:
        out = [alarm(t) for t in au["lines"]]
    else:
        facts = sorted({f for fs in au["compared"].values() for f in fs}, key=list(audit.LABELS).index)
        if not facts:
            out = ["No arm recorded its setup (no receipts): nothing to compare."]
        else:
            out = [f"No undeclared difference between arms in: {', '.join(audit.LABELS[f] for f in facts)}."]
            missing = [a for a, fs in au["compared"].items() if not fs]
            if missing:
                out.append(f"Not recorded by: {esc(', '.join(missing), None)}.")
    wire = au.get("wire")
    if wire is None:
        return out
    if wire["lines"]:
        return out + [alarm(t) for t in wire["lines"]]
    if not wire["compared"]:
        return out + [
            "On the wire: no attempt went through the model gateway (no ledger): nothing to compare."
        ]
    return out + [
        f"On the wire (the gateway's ledger), no undeclared difference in what the arms sent the model: "
        f"{', '.join(wire['compared'])}."
    ]


def reconciliation_lines(rep: dict[str, Any], flag) -> list[str]:
    """The receipts' tokens against the ledger: flagged differences (``flag`` escapes them: they
    name tasks and attempts), or how many agreed."""
    rec = rep.get("reconciliation") or {}
    if not rec.get("compared"):
        return []
    if rec["lines"]:
        return [flag(t) for t in rec["lines"]]
    return [
        f"The receipts' own token counts equal the gateway's ledger for all {rec['compared']} done cell(s)."
    ]


def cost_lines(rep: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The money section: which prices, each arm's cost (scoring attempts) and spend (every attempt)
    from the gateway's ledger or why it is unpriced; then the flagged lines, harbor's figures where
    they differ from the ledger's (they name tasks and attempts: the formats escape them).
    Nothing without a ledger."""
    prices = rep.get("prices")
    summ = rep.get("arm_summary") or {}
    rows = [
        (a, s) for a, s in summ.items() if s.get("ledger_spend_usd") is not None or s.get("cost_unpriced")
    ]
    if not prices or not rows:
        return [], []
    out = [prices["line"]]
    for a, s in rows:
        out.append(
            f"{a}: cost {_money_text(s['ledger_cost_usd'])} (scored attempts), "
            f"spend {_money_text(s['ledger_spend_usd'])} (every attempt)"
            + (f"; unpriced: {'; '.join(s['cost_unpriced'])}" if s.get("cost_unpriced") else "")
            + (f"; {n} {UNMETERED}" if (n := s.get("ledger_unmetered_calls")) else "")
            + (f"; {n} {GATEWAY_DIED}" if (n := (rep.get("gateway_deaths") or {}).get(a)) else "")
        )
    rec = rep.get("reconciliation") or {}
    if rec.get("arms") and not rec.get("arm_lines"):
        out.append(agreement_line(rec["arms"]))
    return out, list(rec.get("arm_lines") or [])


def agreement_line(arms: Mapping[str, Mapping[str, Any]]) -> str:
    """What the reconciliation found equal, saying only what it compared: harbor prices with
    LiteLLM's map alone, so a call an operator's --price priced has its tokens compared and not its
    cost (harbor's $0 for the demo's scripted model was once called "equal" to the ledger's $10.88)."""
    cells = sum(int(d.get("compared") or 0) for d in arms.values())
    costs = sum(int(d.get("cost_compared") or 0) for d in arms.values())
    if costs == cells:
        return "Harbor's own tokens and cost equal the ledger's for every compared done cell."
    overridden = sum(int(d.get("cost_overridden") or 0) for d in arms.values())
    unpriced = cells - costs - overridden
    why = [
        *([f"{overridden} priced by an operator's --price, which harbor (LiteLLM's map alone) cannot know"] if overridden else []),
        *([f"{unpriced} of a model the prices lack (unpriced)"] if unpriced > 0 else []),
    ]  # fmt: skip
    said = f"its cost is compared for {costs} of the {cells}" if costs else "its cost is not compared"
    return f"Harbor's own tokens equal the ledger's for every compared done cell; {said} ({'; '.join(why)})."


#: what the money section says of an arm's calls cut before their usage arrived
UNMETERED = (
    "call(s) cut before the provider's usage arrived (the client or the deadline ended them): the "
    "provider may bill their tokens, which no figure here counts; the spend is a lower bound by those"
)


def gateway_deaths(out: Path | str, cells: Mapping[Key, Cell]) -> dict[str, int]:
    """Per arm, the cells' attempts that were live at a gateway found dead (``live_at_deaths``): the
    report's ``gateway_deaths`` and the one ``status`` prints on its spend line."""
    return live_at_deaths(out, ((a.task, a.arm, a.stamp) for c in cells.values() for a in c.attempts))


def spend_lacks_line(unmetered: dict[str, int], deaths: dict[str, int]) -> str:
    """One line for `status` of what the spend lacks, per arm ("" when nothing): the report's money
    section says the same per arm (``UNMETERED``, ``GATEWAY_DIED``)."""
    parts = [f"{a} {n} call(s) cut before their usage arrived" for a, n in unmetered.items()]
    parts += [f"{a} {n} attempt(s) live at a dead gateway" for a, n in deaths.items()]
    return f"spend is a lower bound: {'; '.join(parts)}" if parts else ""


#: what the report says of a tree whose runner starts were made by different marathon versions
VERSIONS = "runner starts of this tree were made by different marathon versions (their rules may differ)"


def _versions(by_version: dict[str, list[str]]) -> dict[str, Any]:
    """The report's ``versions`` (a FLAG each, when the tree's starts were made by two or more) and
    ``made_by`` (the versions recorded) from ``RunModel.versions``."""
    flagged = [
        {"marathon": v, "runs": ids, "message": f"{VERSIONS}: {v} ({', '.join(ids)})"}
        for v, ids in by_version.items()
    ]
    return {
        "versions": flagged if len(flagged) > 1 else [],
        "made_by": [v for v in by_version if v != NOT_RECORDED],
    }


def other_version_line(rep: dict[str, Any]) -> str | None:
    """When the run was made by another marathon than the one writing the report: the declared
    differences, masks and rules printed here are this one's, not necessarily the run's (a probe
    found the report taking them from the code at report time, silently)."""
    made, by = rep.get("made_by") or [], rep.get("generated_by")
    if not made or not by or made == [by]:
        return None
    return (f"this report was written by marathon {by}; the run by {', '.join(made)}: the declared "
            "differences and masks below are this version's")  # fmt: skip


#: what the report says of the tasks run as modified (a disclosed deviation of the dataset)
MODIFIED = (
    "Tasks run modified (--allow-modified: they differ from dataset.toml, so their results are not "
    "the published tasks')"
)

#: what the money section says of an arm's attempts that were live when their gateway died
GATEWAY_DIED = (
    "attempt(s) live when their model gateway died: the calls they had in flight then have no ledger "
    "line; the spend is a lower bound by those"
)

#: what a flagged line of the money section says before its arm's figures
COST_FLAG = "harbor's figures differ from the ledger"


def masked_lines(rep: dict[str, Any]) -> list[str]:
    """The differences each arm's harness makes by design (modes.profiles), which the fairness
    audit does not flag, and the config.toml keys it masks for every arm before hashing."""
    out = [
        f"{a} (by design, not compared): " + "; ".join(f"{m['what']}: {m['why']}" for m in ms)
        for a, ms in rep.get("masked", {}).items()
    ]
    if out and rep.get("masked_config_keys"):
        out.append(
            "config.toml keys masked for every arm before its hash is compared: "
            + ", ".join(rep["masked_config_keys"])
        )
    return out


def _md_table(heads: list[str], rows: list[list[str]], names: int = 1) -> list[str]:
    """A Markdown table; the first ``names`` columns hold names from the tree (escaped)."""
    if not rows:
        return ["None."]
    out = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    esc = [[safetext.md(v) if i < names else v for i, v in enumerate(r)] for r in rows]
    return out + ["| " + " | ".join(r) + " |" for r in esc]


def _holes(rep: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, arm, cell) of every cell that is not scored because of a hole, in table order; and of a
    done pair with repeats, each repeat the hole rule flagged (``task (repeat K)``, its own figures:
    it counts as a failure among the pair's repeats, and nothing but the per-arm count said so)."""
    out = []
    for t in rep["tasks"]:
        for a in rep["arms"]:
            c = rep["cells"][t].get(a)
            if not c:
                continue
            if c["status"] in NOT_SCORED:
                out.append((t, a, c))
            elif c.get("by_repeat"):
                out += [(f"{t} (repeat {r['repeat']})", a, r) for r in c["by_repeat"] if r["flagged"]]
    return out


def hole_line(c: dict[str, Any]) -> str:
    """What a hole's cell is: its status, and whether it counts against its arm (the hole rule)."""
    if c["flagged"]:
        return f"{c['status']}, flagged: counted as a failure"
    return f"{c['status']}: the harness's file, not a score"


def provider_error_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The provider's error answers per arm (heads, rows) every format shows; no rows without a
    ledger (the statuses come from the tree: escaped by the formats like a name)."""
    heads = ["arm", "attempts with errors", "attempts", "error answers", "calls", "statuses", "Fisher p"]
    rows = [
        [r["arm"], str(r["attempts_with_errors"]), str(r["attempts"]), str(r["error_calls"]), str(r["calls"]),
         ", ".join(f"{k} x{v}" for k, v in r["statuses"].items()) or "-", fmt_p(r["p_value"])]
        for r in rep.get("provider_errors") or []
    ]  # fmt: skip
    return heads, rows


#: what the provider-errors table is (md and html)
PROVIDER_ERRORS_TITLE = "Provider errors at the wire (the gateway's ledger: attempts the provider answered with an error at least once; codex retries most of them unseen)"


def render_md(rep: dict[str, Any]) -> str:
    m = safetext.md
    arms, tasks = rep["arms"], rep["tasks"]
    lines = [f"# marathon report: {m(rep['out'])}", ""]
    if banner := reading_banner(rep):
        lines += [f"**{m(banner, None)}**", ""]
    lines.append(f"Scope: {rep['scope']}" + (f" (run {m(rep['run_id'])})" if rep["run_id"] else "") + ".")
    lines.append(f"Reading: {rep['reading']}.")
    if line := repeats_line(rep):
        lines += ["", m(line, None)]
    lines += ["", "## Infrastructure-bias alarm", ""]
    alarms = [r for r in rep["infrastructure"] if r["alarm"]]
    lines += [f"- **ALARM** {m(r['message'])}" for r in alarms] or [
        "No arm's error/void rate is significantly higher."
    ]
    lines += [
        "",
        "| arm | errored+voided | attempts | rate | others | Fisher p |",
        "|---|---|---|---|---|---|",
    ]
    for r in rep["infrastructure"]:
        lines.append(
            f"| {m(r['arm'])} | {r['bad_attempts']} | {r['attempts']} | {_f(r['rate'])} | {_f(r['others_rate'])} | {fmt_p(r['p_value'])} |"
        )
    if rep.get("provider_errors"):
        lines += ["", f"{PROVIDER_ERRORS_TITLE}:", ""]
        lines += [f"- **ALARM** {m(r['message'], None)}" for r in rep["provider_errors"] if r["alarm"]]
        lines += _md_table(*provider_error_table(rep))
    lines += [f"- **FLAG** {m(r['message'], None)}" for r in rep.get("provider_outages") or []]
    lines += [f"- **FLAG** {m(r['message'], None)}" for r in rep.get("versions") or []]
    lines += ["", "## Fairness audit (setup facts from the receipts, per task)", ""]
    lines += _audit_lines(rep, lambda t: f"- **ALARM** {m(t, None)}", m)
    if rec := reconciliation_lines(rep, lambda t: f"- **FLAG** tokens differ: {m(t, None)}"):
        lines += ["", "## Tokens: the receipts against the gateway's ledger", "", *rec]
    money, flagged = cost_lines(rep)
    if money:
        lines += ["", "## Cost from the gateway's ledger", ""] + [f"- {m(t, None)}" for t in money]
        lines += [f"- **FLAG** {COST_FLAG}: {m(t, None)}" for t in flagged]
    lines += ["", "## Results (reward / partial / test pass rate; ✗build = build failed, counted as 0)", ""]
    lines.append("| task | " + " | ".join(m(a) for a in arms) + " |")
    lines.append("|---" * (len(arms) + 1) + "|")
    for t in tasks:
        row = [_cell_text(rep["cells"][t].get(a)) for a in arms]
        lines.append(f"| {_task_label(rep, t, m)} | " + " | ".join(row) + " |")
    lines += [
        "",
        "## Per arm (means over done cells and flagged ones as failures, 95 % bootstrap intervals)",
        "",
    ]
    lines += _md_table(*arm_table(rep))
    if fc := flagged_cost_line(rep):
        lines += ["", m(fc, None)]
    if err := errored_lines(rep):  # they name arms: escaped
        lines += ["", err[0], ""] + [f"- {m(t, None)}" for t in err[1:]]
    lines += [
        "",
        "## Paired comparisons (only tasks both arms completed; diff = a − b, 95 % paired bootstrap)",
        "",
    ]
    lines += _md_table(*pair_table(rep), names=2)
    if power_text := power_lines(rep):  # the underpowered lines name arms: escaped
        lines += ["", power_text[0]] + (
            ["", power_text[1], ""] + [f"- {m(t, None)}" for t in power_text[2:]]
            if len(power_text) > 1
            else []
        )
    if sus := suspect_lines(rep):  # task names, test names and exception messages from the tree
        lines += [
            "",
            "## Suspect tasks (every arm failed alike: more often the environment than the task)",
            "",
        ]
        lines += [f"- {m(t, None)}" for t in sus[:-1]] + ["", sus[-1]]
    lines += ["", "## Disclosed deviations", ""]
    if other := other_version_line(rep):
        lines += [f"- {m(other, None)}"]
    if rep["disclosures"]:
        for a, ds in rep["disclosures"].items():
            lines += [f"- **{a}**: {d}" for d in ds]
    else:
        lines.append("None for the arms in this report.")
    lines += [f"- {t}" for t in masked_lines(rep)]
    if rep["stand_ins"]:
        lines.append(
            f"- Stand-in arms (not among the five arms): {', '.join(m(a) for a in rep['stand_ins'])}."
        )
    if rep.get("modified_tasks"):
        lines.append(f"- **{MODIFIED}**: {', '.join(m(t) for t in rep['modified_tasks'])}.")
    if rep["excluded"]:
        lines += ["", "## Excluded", ""] + [f"- {m(e['path'])}: {m(e['reason'])}" for e in rep["excluded"]]
    hostile = _holes(rep)
    if hostile:
        lines += ["", "## Holes: a file refused, made nonsense or tampered with (never a score)", ""]
        lines += [f"- {m(t)} × {m(a)}: **{hole_line(c)}**: {m(c['note'], None)}" for t, a, c in hostile]
    if rep["unreadable"]:
        lines += ["", "## Unreadable files (half-written ones show their last good values)", ""] + [
            f"- {m(u, None)}" for u in rep["unreadable"]
        ]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = (
    "task",
    "arm",
    *CELL_FIELDS,
    "ledger_cost_usd",
    "ledger_spend_usd",
    "flagged",
    "attempts",
    "errored_attempts",
    "voided_attempts",
    "note",
)


def render_csv(rep: dict[str, Any]) -> str:
    """One row per cell; every text a spreadsheet could take for a formula is made text
    (``modes.safetext.csv_cell``)."""
    buf = io.StringIO()
    cols = list(CSV_COLUMNS)
    if rep.get("repeats", 1) > 1:
        cols[-1:-1] = ["repeats", "repeats_done", "flagged_repeats", *(f"{m}_sd" for m in MEASURES)]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for t in rep["tasks"]:
        for a in rep["arms"]:
            c = rep["cells"][t].get(a)
            if c is None:
                continue
            vals = ["" if c.get(k) is None else c[k] for k in cols[2:]]
            w.writerow([safetext.csv_cell(v, None) if isinstance(v, str) else v for v in (t, a, *vals)])
    return buf.getvalue()


def _html_table(heads: list[str], rows: list[list[str]]) -> str:
    e = safetext.html
    if not rows:
        return "<p>None.</p>"
    head = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def render_html(rep: dict[str, Any]) -> str:
    e = safetext.html
    parts = []
    arms, tasks = rep["arms"], rep["tasks"]
    parts.append(f"<h1>marathon report</h1><p>{e(rep['out'])} &middot; scope {e(rep['scope'])}</p>")
    if line := repeats_line(rep):
        parts.append(f'<p class="note">{e(line)}</p>')
    if banner := reading_banner(rep):
        parts.append(f'<p class="alarm">{e(banner, None)}</p>')
    parts.append(f"<p>Reading: {e(rep['reading'])}.</p>")
    alarms = [r for r in rep["infrastructure"] if r["alarm"]]
    parts.append("<h2>Infrastructure-bias alarm</h2>")
    parts += [f'<p class="alarm">ALARM: {e(r["message"])}</p>' for r in alarms] or [
        "<p>No arm's error/void rate is significantly higher.</p>"
    ]
    parts.append("<table><tr><th>arm</th><th>errored+voided</th><th>attempts</th><th>Fisher p</th></tr>")
    for r in rep["infrastructure"]:
        parts.append(
            f"<tr><td>{e(r['arm'])}</td><td>{r['bad_attempts']}</td><td>{r['attempts']}</td><td>{e(fmt_p(r['p_value']))}</td></tr>"
        )
    parts.append("</table>")
    if rep.get("provider_errors"):
        parts.append(f"<p>{e(PROVIDER_ERRORS_TITLE)}:</p>")
        parts += [
            f'<p class="alarm">ALARM: {e(r["message"])}</p>' for r in rep["provider_errors"] if r["alarm"]
        ]
        parts.append(_html_table(*provider_error_table(rep)))
    parts += [f'<p class="alarm">FLAG: {e(r["message"])}</p>' for r in rep.get("provider_outages") or []]
    parts += [f'<p class="alarm">FLAG: {e(r["message"])}</p>' for r in rep.get("versions") or []]
    parts.append("<h2>Fairness audit</h2>")
    parts += [
        f'<p class="alarm">{e(t, None)}</p>' if t.startswith("ALARM ") else f"<p>{e(t, None)}</p>"
        for t in _audit_lines(rep, lambda t: f"ALARM {t}")
    ]
    if rec := reconciliation_lines(rep, lambda t: f"FLAG tokens differ: {t}"):
        parts.append("<h2>Tokens: the receipts against the gateway's ledger</h2>")
        parts += [
            f'<p class="alarm">{e(t, None)}</p>' if t.startswith("FLAG ") else f"<p>{e(t, None)}</p>"
            for t in rec
        ]
    money, flagged = cost_lines(rep)
    if money:
        parts.append("<h2>Cost from the gateway's ledger</h2>")
        parts += [f"<p>{e(t, None)}</p>" for t in money]
        parts += [f'<p class="alarm">FLAG {e(COST_FLAG)}: {e(t, None)}</p>' for t in flagged]
    parts.append(
        "<h2>Per arm (means over done cells and flagged ones as failures, 95 % bootstrap intervals)</h2>"
    )
    parts.append(_html_table(*arm_table(rep)))
    if fc := flagged_cost_line(rep):
        parts.append(f'<p class="note">{e(fc, None)}</p>')
    if err := errored_lines(rep):
        parts.append(f'<p class="note">{e(err[0])}</p><ul>')
        parts += [f"<li>{e(t, None)}</li>" for t in err[1:]]
        parts.append("</ul>")
    parts.append("<h2>Paired comparisons (diff = a − b, 95 % paired bootstrap)</h2>")
    parts.append(_html_table(*pair_table(rep)))
    if power_text := power_lines(rep):
        parts.append(f'<p class="note">{e(power_text[0])}</p>')
        if len(power_text) > 1:
            parts.append(f'<p class="alarm">{e(power_text[1])}</p><ul>')
            parts += [f"<li>{e(t, None)}</li>" for t in power_text[2:]]
            parts.append("</ul>")
    if sus := suspect_lines(rep):
        parts.append("<h2>Suspect tasks (every arm failed alike)</h2><ul>")
        parts += [f'<li class="suspect">{e(t, None)}</li>' for t in sus[:-1]]
        parts.append(f"</ul><p>{e(sus[-1], None)}</p>")
    from runner.results import plots

    parts.append("<h2>Figures</h2>")
    for fid, title, svg in plots.figures(rep):
        parts.append(f'<figure id="fig-{fid}"><figcaption>{e(title)}</figcaption>{svg}</figure>')
    parts.append("<h2>Results: reward / partial / test pass rate</h2><table><tr><th>task</th>")
    parts += [f"<th>{e(a)}</th>" for a in arms]
    parts.append("</tr>")
    for t in tasks:
        parts.append(f"<tr><td>{e(_task_label(rep, t))}</td>")
        for a in arms:
            c = rep["cells"][t].get(a)
            cls = e(c["status"]) + (" build" if c and c["build_failed"] else "") if c else ""
            parts.append(
                f'<td class="{cls}" title="{e(c["note"], None) if c else ""}">{e(_cell_text(c))}</td>'
            )
        parts.append("</tr>")
    parts.append("</table>")
    hostile = _holes(rep)
    if hostile:
        parts.append("<h2>Holes: a file refused, made nonsense or tampered with (never a score)</h2><ul>")
        parts += [
            f"<li>{e(t)} × {e(a)}: <b>{e(hole_line(c))}</b>: {e(c['note'], None)}</li>" for t, a, c in hostile
        ]
        parts.append("</ul>")
    parts.append("<h2>Disclosed deviations</h2><ul>")
    if other := other_version_line(rep):
        parts.append(f"<li>{e(other, None)}</li>")
    for a, ds in rep["disclosures"].items():
        parts += [f"<li><b>{e(a)}</b>: {e(d, None)}</li>" for d in ds]
    parts += [f"<li>{e(t, None)}</li>" for t in masked_lines(rep)]
    if rep["stand_ins"]:
        parts.append(f"<li>Stand-in arms: {e(', '.join(rep['stand_ins']), None)}</li>")
    if rep.get("modified_tasks"):
        parts.append(f"<li><b>{e(MODIFIED)}</b>: {e(', '.join(rep['modified_tasks']), None)}</li>")
    parts.append("</ul>")
    if rep["excluded"]:
        parts.append("<h2>Excluded</h2><ul>")
        parts += [f"<li>{e(x['path'])}: {e(x['reason'])}</li>" for x in rep["excluded"]]
        parts.append("</ul>")
    style = (
        "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        ".errored{background:#fdd}.voided{background:#eee}.build{color:#a00}.alarm{color:#a00;font-weight:bold}"
        ".suspect{color:#a60}.note{max-width:60em}"
        "figure{display:inline-block;vertical-align:top;margin:0.5em 1em 0.5em 0}figcaption{font-weight:bold;margin-bottom:4px}figure svg{max-width:100%;height:auto}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>marathon report</title><style>{style}</style>'
        f"</head><body>{''.join(parts)}</body></html>\n"
    )


RENDERERS = {"md": render_md, "json": render_json, "csv": render_csv, "html": render_html}


def render(rep: dict[str, Any], fmt: str, pretty: bool = False) -> str:
    if fmt == "json":
        return render_json(rep, pretty)
    return RENDERERS[fmt](rep)
