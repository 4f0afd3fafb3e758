"""Planning a run from a pilot: how many tasks (and repeats) a target difference needs, per pair.

Power analysis belongs before the run (Miller, "Adding Error Bars to Evals", 2024): a pilot tree
(a small run, or a recorded one) gives each pair's spread of per-task differences, and the spread
says how many tasks a difference of a given size needs to be detected with 80 % power at the
Holm-adjusted level of the full comparison (``runner.results.power``).

Repeats shrink only the part of the spread that is between attempts of one task: with K attempts
averaged per task, the variance of a task's difference is sigma_b^2 + sigma_w^2 / K (between tasks,
within a task). A pilot with repeats estimates both (``clusters.within_variance``; see ``_split``
for a negative sigma_b^2), so that at the pilot's K the projection is the observed spread; a pilot
with one attempt per pair cannot split them, so the tasks needed for K repeats are given as a range:
from "all of the spread is between attempts" (the fewest) to "all of it is between tasks" (as many
as K = 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from runner.results import clusters, power, stats
from runner.results.cells import Cell


@dataclass(frozen=True)
class RepeatPlan:
    """Tasks needed with K attempts per (task, arm): one figure, or a range (low, high)."""

    repeats: int
    low: int | None
    high: int | None
    over: bool = False  # more than power.MAX_TASKS at the high end

    def text(self) -> str:
        hi = power.fmt_tasks(self.high, power.MAX_TASKS if self.over else None)
        if self.low == self.high and not self.over:
            return hi
        return f"{power.fmt_tasks(self.low)}-{hi}"


@dataclass(frozen=True)
class PairPlan:
    a: str
    b: str
    n: int  # tasks both arms completed in the pilot
    pilot_repeats: float  # mean attempts per (task, arm) in the pilot
    diff: float | None
    sd: float | None  # of the per-task differences (task means)
    within: float | None  # per-attempt within-task variance of the difference; None: unknown (K = 1)
    mde: float | None  # what the pilot itself detects
    target: float | None
    plans: tuple[RepeatPlan, ...] = field(default_factory=tuple)
    below_floor: bool = False  # the pilot's sign test could not pass Holm at all: it detects none

    def as_dict(self) -> dict[str, object]:
        return {
            "a": self.a,
            "b": self.b,
            "n": self.n,
            "pilot_repeats": self.pilot_repeats,
            "diff": _r(self.diff),
            "sd": _r(self.sd),
            "within_variance": _r(self.within),
            "mde": _r(self.mde),
            "below_sign_floor": self.below_floor,
            "target": _r(self.target),
            "tasks_needed": [
                {
                    "repeats": p.repeats,
                    "low": p.low,
                    "high": p.high,
                    "over": power.MAX_TASKS if p.over else None,
                }
                for p in self.plans
            ],
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _needed(target: float, sd: float, alpha: float, pw: float) -> int | None:
    """Tasks needed at this spread (> 0: ``plan_pair`` plans nothing without one, as the report's
    ``power.pair_power``), never fewer than the report's sign test needs to reach the level at all
    (``power.sign_floor``); None past ``power.MAX_TASKS``."""
    got = power.tasks_needed_d(target / sd, alpha, pw)
    return None if got is None else max(got, power.sign_floor(alpha))


def _split(total: float, within: float, k_pilot: float) -> tuple[float, float]:
    """(sigma_b^2, sigma_w^2) for the projection, by the method of moments: between tasks = total -
    within / K_pilot. When that is negative (the task means vary less than the within-task variance
    alone would make them), between is 0 and the within part is what the total allows, total *
    K_pilot: the projected variance at the pilot's K is then the observed one in every case, so
    the plan there agrees with the report's tasks needed and the pilot's own MDE."""
    between = max(0.0, total - within / k_pilot)
    return between, min(within, (total - between) * k_pilot)


def plan_pair(
    a: str,
    b: str,
    ca: Sequence[clusters.Cluster],
    cb: Sequence[clusters.Cluster],
    *,
    target: float | None,
    alpha: float,
    pw: float,
    repeats: Sequence[int],
    reachable: bool = True,
) -> PairPlan:
    """One pair's plan from its pilot clusters (the same tasks, in order, both arms done), at the
    Holm level ``alpha``; ``reachable``: whether the pilot's own sign test could pass Holm at all
    (``power.best_holm``; when not, its "MDE now" reads >1)."""
    diffs = clusters.paired_differences(ca, cb)
    n = len(diffs)
    pp = power.pair_power(diffs, alpha, pw, reachable=reachable)
    sizes = [len(c) for c in (*ca, *cb) if len(c)]
    k_pilot = sum(sizes) / len(sizes) if sizes else 0.0
    wa, wb = clusters.within_variance(ca), clusters.within_variance(cb)
    within = None if wa is None or wb is None else wa + wb
    observed = abs(pp.diff) if pp.diff is not None and abs(pp.diff) > stats.SCORE_TOL else None
    goal = target if target is not None else observed
    plans = []
    if pp.sd is not None and pp.sd <= stats.SCORE_TOL:
        # no spread: the t test is undefined, the sign test needs its own (the report's tasks needed)
        floor = power.sign_floor(alpha) if goal else None
        plans = [RepeatPlan(k, floor, floor) for k in repeats]
    elif goal and pp.sd is not None:
        total = pp.sd**2
        split = None if within is None else _split(total, within, k_pilot)
        for k in repeats:
            if split is not None:  # sigma_b^2 + sigma_w^2 / K: the observed total at K_pilot
                lo_sd = hi_sd = math.sqrt(split[0] + split[1] / k)
            else:  # one attempt per pair: all within (fewest tasks) .. all between (most)
                lo_sd, hi_sd = math.sqrt(total / k), math.sqrt(total)
            lo = _needed(goal, lo_sd, alpha, pw)
            hi = _needed(goal, hi_sd, alpha, pw)
            plans.append(RepeatPlan(k, lo, hi, over=hi is None))
    return PairPlan(a, b, n, k_pilot, pp.diff, pp.sd, within, pp.mde, goal, tuple(plans), pp.below_floor)


@dataclass(frozen=True)
class Plan:
    """The plan of every pair with a common task, at the Holm level of the whole comparison."""

    measure: str
    target: float | None  # None: each pair's observed difference
    power: float
    alpha: float
    alpha_holm: float
    repeats: tuple[int, ...]
    pairs: tuple[PairPlan, ...]
    family: int  # the pairs the Holm level is over: every pair of the comparison's arms

    def as_dict(self) -> dict[str, object]:
        return {
            "measure": self.measure,
            "target": self.target,
            "power": self.power,
            "alpha": self.alpha,
            "family": self.family,
            "alpha_holm": self.alpha_holm,
            "sign_floor_holm": power.sign_floor(self.alpha_holm),
            "repeats": list(self.repeats),
            "method": power.METHOD,
            "max_tasks": power.MAX_TASKS,
            "pairs": [p.as_dict() for p in self.pairs],
        }


def plan(
    cells: Mapping[tuple[str, str], Cell],
    arms: Sequence[str],
    tasks: Sequence[str],
    *,
    measure: str = "partial",
    target: float | None = None,
    alpha: float = power.ALPHA,
    pw: float = power.POWER,
    repeats: Sequence[int] = (1, 2, 3),
    compared: int | None = None,
) -> Plan:
    """Per pair of arms with a common task: the pilot's n, spread and MDE, and the tasks needed
    for ``target`` (each pair's observed difference when None) with each number of repeats, at the
    Holm level over every pair of the ``compared`` arms of the full run (default: the pilot's arms,
    each counted whether or not it completed a task: a pilot where one arm failed everywhere
    planned at 0.05 over one pair, not over three)."""
    from runner.results.report import cell_values, common_done

    family = []
    untied = []  # per pair: its tasks that partial does not tie, the report's sign test's n
    cells = dict(cells)
    for a, b in combinations(arms, 2):
        both = common_done(cells, a, b, list(tasks))
        ca = [cell_values(cells[(t, a)], measure) for t in both]
        cb = [cell_values(cells[(t, b)], measure) for t in both]
        keep = [i for i in range(len(both)) if ca[i] and cb[i]]
        if keep:
            family.append((a, b, [ca[i] for i in keep], [cb[i] for i in keep]))
            pa = [cell_values(cells[(t, a)], "partial") for t in both]
            pb = [cell_values(cells[(t, b)], "partial") for t in both]
            scored = [
                (clusters.task_mean(x), clusters.task_mean(y)) for x, y in zip(pa, pb, strict=True) if x and y
            ]
            wins, losses, _ties = stats.tally(scored)  # the report's own count (report.paired)
            untied.append(wins + losses)
    k = len(arms) if compared is None else compared
    size = max(1, k * (k - 1) // 2)
    level = power.holm_alpha(size, alpha)
    # whether each pilot pair's sign test (on partial, as the report's) could pass Holm at all, its
    # untied tasks all one way; the family's other pairs (no common task, or not in the pilot) at p = 1
    if len(family) <= size:
        best = power.best_holm(untied + [0] * (size - len(family)))
    else:  # --arms fewer than the pilot's: each pair with the pilot's pairs that help it most, at their best
        best = [
            power.best_holm(
                [u, *sorted((v for j, v in enumerate(untied) if j != i), reverse=True)[: size - 1]]
            )[0]
            for i, u in enumerate(untied)
        ]  # (each pair as the first of a family of p = 1 read a pair undetectable at --arms 3, not at 4)
    pairs = tuple(
        plan_pair(a, b, ca, cb, target=target, alpha=level, pw=pw, repeats=repeats, reachable=p <= alpha)
        for (a, b, ca, cb), p in zip(family, best, strict=False)
    )
    return Plan(measure, target, pw, alpha, level, tuple(repeats), pairs, size)
