"""Minimum detectable effects and tasks needed (runner/results/power.py), against statsmodels.

statsmodels' ``TTestPower`` (the paired t test's power from scipy's noncentral t) is the reference
for every figure: on a grid of sizes, effects and levels, on the recorded real harbor trees and the
hand-made tree, and a seeded simulation checks the claim itself: a planted true difference equal to
the MDE is detected by the paired t test at about the stated 80 % power. statsmodels is a test-only
dependency (the runner's scan cannot afford its import; see the module's docstring).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from runner.results import power, stats
from runner.results.model import RunModel
from runner.results.report import MEASURES, _score, build_report, render

SM = TTestPower()


def sign_floor_of(alpha: float) -> int:
    """The fewest tasks with which scipy's exact two-sided binomial (sign) test reaches ``alpha``."""
    return next(n for n in range(1, 2000) if scipy.stats.binomtest(n, n, 0.5).pvalue <= alpha)


def sm_power(d: float, n: int, alpha: float) -> float:
    """statsmodels' power; where its lower tail is nan (scipy's noncentral t cdf gives up on a few
    points), scipy's noncentral t upper tail on both sides by symmetry: P(T' < -c) for
    noncentrality delta is P(T' > c) for -delta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = float(SM.power(effect_size=d, nobs=n, alpha=alpha, alternative="two-sided"))
        if math.isnan(got):
            c, delta = scipy.stats.t.isf(alpha / 2, n - 1), d * math.sqrt(n)
            got = float(scipy.stats.nct.sf(c, n - 1, delta) + scipy.stats.nct.sf(c, n - 1, -delta))
        return got


def sm_mde(n: int, alpha: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(SM.solve_power(effect_size=None, nobs=n, alpha=alpha, power=0.8))


def sm_tasks(d: float, alpha: float) -> int:
    """The fewest n >= 2 whose statsmodels power reaches 0.8, by walking n (a reference that does
    not rely on statsmodels' root finder, which fails where scipy's noncentral t gives nan)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = float(SM.solve_power(effect_size=d, nobs=None, alpha=alpha, power=0.8))
    n = max(2, math.ceil(est) - 3)
    while sm_power(d, n, alpha) < 0.8:
        n += 1
    return n


# ------------------------------------------------------------------------------ the distributions


@pytest.mark.parametrize("df", [1, 2, 3, 5, 14, 29, 99, 2009, 99_999])
def test_student_t_tail_and_quantile_equal_scipy(df):
    for p in (0.4, 0.025, 0.0025, 0.00025, 1e-7):
        assert power.t_isf(p, df) == pytest.approx(scipy.stats.t.isf(p, df), rel=1e-9)
    for t in (0.0, 0.3, 1.0, 2.5, 7.0, -1.5):
        assert power.t_sf(t, df) == pytest.approx(scipy.stats.t.sf(t, df), rel=1e-9, abs=1e-15)


def test_power_equals_statsmodels_on_a_grid():
    worst = 0.0
    for n, d, alpha in itertools.product(
        (2, 3, 4, 6, 11, 15, 30, 100, 2010, 50_000), (0.01, 0.1, 0.3, 0.8, 1.5, 4.0), (0.05, 0.005, 1e-5)
    ):
        want = sm_power(d, n, alpha)
        worst = max(worst, abs(power.ttest_power(d, n, alpha) - want))
    assert worst < 1e-8


@pytest.mark.parametrize("alpha", [0.05, 0.005, 0.0005])
@pytest.mark.parametrize("n", [2, 3, 5, 15, 40, 2010])
def test_mde_is_where_statsmodels_power_reaches_80_percent(n, alpha):
    d = power.min_detectable_d(n, alpha)
    assert sm_power(d, n, alpha) == pytest.approx(0.8, abs=1e-8)
    want = sm_mde(n, alpha)
    if sm_power(want, n, alpha) == pytest.approx(0.8, abs=1e-6):  # statsmodels' root finder converged
        assert d == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("alpha", [0.05, 0.005, 0.0005])
@pytest.mark.parametrize("d", [0.02, 0.1, 0.25, 0.5, 1.0, 3.0])
def test_tasks_needed_is_the_first_n_statsmodels_gives_80_percent(d, alpha):
    n = power.tasks_needed_d(d, alpha)
    assert n == sm_tasks(d, alpha)
    assert sm_power(d, n, alpha) >= 0.8
    if n > 2:
        assert sm_power(d, n - 1, alpha) < 0.8


def test_no_difference_and_too_small_a_difference_need_no_count():
    assert power.tasks_needed_d(0.0, 0.05) is None  # nothing observed to detect
    assert power.tasks_needed_d(1e-4, 0.005) is None  # more than MAX_TASKS
    pp = power.pair_power([0.2] * 10, 0.05)  # no spread: the t test is not defined, the sign test's own
    assert pp.mde is None and pp.tasks_needed == 6 and not pp.underpowered
    assert power.pair_power([0.1], 0.05).mde is None  # one task
    # a difference of 1e-300 (an agent's metrics.json may hold any finite number): too small to
    # detect, never an OverflowError that stops the report
    for tiny in (1e-300, 5e-324):
        assert power.tasks_needed_d(tiny, 0.05) is None
    pp = power.pair_power([0.3, -0.3, 1e-300], 0.05)  # a mean within float rounding of 0: none observed
    assert pp.tasks_needed is None and not pp.needed_over_max and pp.underpowered
    pp = power.pair_power([0.3, -0.3, 3e-8], 0.05)  # a mean past it: more tasks than counted
    assert pp.tasks_needed is None and pp.needed_over_max and pp.underpowered


def test_remembered_figures_are_the_computed_ones(monkeypatch):
    memo: dict[str, tuple[float, float]] = {}
    monkeypatch.setattr(stats, "_remembered", memo)
    first = (power.min_detectable_d(17, 0.005), power.tasks_needed_d(0.3, 0.005))
    assert len(memo) == 2
    assert (power.min_detectable_d(17, 0.005), power.tasks_needed_d(0.3, 0.005)) == first
    monkeypatch.setattr(stats, "_remembered", None)
    assert (power.min_detectable_d(17, 0.005), power.tasks_needed_d(0.3, 0.005)) == first


# ----------------------------------------------------------------------- the report, recorded trees


def _check_report(rep, cells) -> int:
    """Every pair's power figures against statsmodels and numpy from the cells themselves; the
    number of (pair, measure) figures checked."""
    family = [p for p in rep["paired"] if p["n"]]
    alpha = 0.05 / len(family)
    assert rep["power"]["alpha_holm"] == pytest.approx(alpha) and rep["power"]["family"] == len(family)
    floor = sign_floor_of(alpha)  # Holm's strictest step: no tasks needed below it
    assert rep["power"]["sign_floor_holm"] == floor
    # whether a pair's sign test could pass Holm at all: its untied tasks all one way, every pair so
    best = [scipy.stats.binomtest(p["wins"] + p["losses"], p["wins"] + p["losses"], 0.5).pvalue
            if p["wins"] + p["losses"] else 1.0 for p in family]  # fmt: skip
    adjusted = multipletests(best, method="holm")[1]
    checked = 0
    for p, best_p in zip(family, adjusted, strict=True):
        assert p["sign_best_holm_p"] == pytest.approx(best_p)
        for m in MEASURES:
            diffs = [
                x - y
                for t in p["tasks"]
                if (x := _score(cells[(t, p["a"])], m)) is not None
                and (y := _score(cells[(t, p["b"])], m)) is not None
            ]
            sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else None
            below = bool(diffs) and best_p > 0.05
            assert p[f"{m}_below_sign_floor"] == below
            if not sd:
                assert p[f"{m}_mde"] is None
                moved = bool(diffs) and abs(float(np.mean(diffs))) > stats.SCORE_TOL
                assert p[f"{m}_tasks_needed"] == (floor if moved else None)
                continue
            assert p[f"{m}_sd"] == pytest.approx(sd, abs=1e-4)
            if below:  # the sign test reaches the level with no difference: no MDE, underpowered
                assert p[f"{m}_mde"] is None and p[f"{m}_underpowered"]
                need = p[f"{m}_tasks_needed"]
                assert need is None or need == max(floor, sm_tasks(abs(float(np.mean(diffs))) / sd, alpha))
                checked += 1
                continue
            assert p[f"{m}_mde"] == pytest.approx(power.min_detectable_d(len(diffs), alpha) * sd, abs=1e-4)
            d = sm_power(p[f"{m}_mde"] / sd, len(diffs), alpha)
            assert d == pytest.approx(0.8, abs=2e-3)  # the MDE rounded to 4 decimals
            mean = float(np.mean(diffs))
            if mean:
                need = p[f"{m}_tasks_needed"]
                if need is None:
                    assert p[f"{m}_tasks_needed_over"] == power.MAX_TASKS
                else:
                    assert need == max(sm_tasks(abs(mean) / sd, alpha), floor)
            assert p[f"{m}_underpowered"] == (abs(mean) < p[f"{m}_mde"] - 1e-9)
            checked += 1
    return checked


def test_report_power_figures_on_the_recorded_real_trees_equal_statsmodels(core_tree):
    model = RunModel.load(core_tree)
    rep = build_report(model)
    assert _check_report(rep, model.scoped("all")) >= 1


def test_report_power_figures_on_the_handmade_tree_equal_statsmodels(handmade):
    model = RunModel.load(handmade)
    rep = build_report(model)
    assert _check_report(rep, model.scoped("all")) == 6  # 3 pairs x partial and pass rate (reward: no spread)
    pg = next(p for p in rep["paired"] if (p["a"], p["b"]) == ("plain", "goal"))
    # +0.06 over 15 tasks with sd 0.11: below what 15 tasks detect at 0.05 / 3
    assert pg["partial_underpowered"] and pg["partial_tasks_needed"] > 15
    assert {(u["a"], u["b"], u["measure"]) for u in rep["power"]["underpowered"]} == {
        ("plain", "goal", "partial"),
        ("plain", "goal", "pass_rate"),
    }


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_md_and_html_show_the_mde_beside_each_difference_and_the_underpowered_note(handmade, fmt):
    text = render(build_report(RunModel.load(handmade)), fmt)
    assert "MDE (partial / reward / pass)" in text and "tasks needed (partial / reward / pass)" in text
    assert "0.10 / - / 0.10" in text and "39 / - / 39" in text  # plain vs goal
    assert (
        "Underpowered" in text
        and "plain vs goal (n = 15): partial +0.06 below MDE 0.10 (39 tasks needed)" in text
    )
    assert "Holm-adjusted level 0.017" in text


# ----------------------------------------------------------------------------------- simulation


def _detection_rate(n: int, true_diff: float, sd: float, alpha: float, runs: int, seed: int) -> float:
    """The share of simulated paired runs whose two-sided paired t test rejects at ``alpha``."""
    rng = np.random.default_rng(seed)
    diffs = rng.normal(true_diff, sd, (runs, n))
    p = scipy.stats.ttest_1samp(diffs, 0.0, axis=1).pvalue
    return float(np.mean(p < alpha))


def test_a_planted_difference_equal_to_the_mde_is_detected_at_about_80_percent():
    n, sd, alpha, runs = 15, 0.2, 0.05 / 10, 4000
    mde = power.min_detectable_d(n, alpha) * sd
    rate = _detection_rate(n, mde, sd, alpha, runs, seed=20261203)
    se = math.sqrt(0.8 * 0.2 / runs)
    assert abs(rate - 0.8) < 4 * se, rate
    # and half of it is not: the MDE is a threshold, not a formality
    assert _detection_rate(n, mde / 2, sd, alpha, runs, seed=20261204) < 0.4


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 15, 60, 400])
def test_simulated_power_at_the_mde_and_at_the_tasks_needed(n):
    """Many seeded runs: at the MDE, and with tasks_needed tasks for a planted difference."""
    alpha, sd, runs = 0.05 / 10, 0.25, 40_000
    se = math.sqrt(0.8 * 0.2 / runs)
    mde = power.min_detectable_d(n, alpha) * sd
    assert abs(_detection_rate(n, mde, sd, alpha, runs, seed=n) - 0.8) < 4 * se
    diff = 0.1
    need = power.tasks_needed_d(diff / sd, alpha)
    assert _detection_rate(need, diff, sd, alpha, runs, seed=n + 1) >= 0.8 - 4 * se
    assert _detection_rate(need - 1, diff, sd, alpha, runs, seed=n + 2) < 0.8 + 4 * se


@pytest.mark.slow
def test_simulated_bounded_scores_are_detected_at_the_stated_power():
    """Scores as a benchmark makes them (per-task difficulty, partial scores in [0, 1], a planted
    gain for one arm): the paired t test of the per-task differences detects the planted gain at
    about the power the MDE states for the run's own spread."""
    rng = np.random.default_rng(7)
    n, runs, alpha = 40, 4000, 0.05 / 10
    difficulty = rng.uniform(0.1, 0.9, (runs, n))
    gain = 0.08
    a = np.clip(difficulty + rng.normal(0, 0.15, (runs, n)) + gain, 0, 1)
    b = np.clip(difficulty + rng.normal(0, 0.15, (runs, n)), 0, 1)
    diffs = a - b
    true_diff, true_sd = float(diffs.mean()), float(diffs.std())
    stated = power.ttest_power(true_diff / true_sd, n, alpha)
    rate = float(np.mean(scipy.stats.ttest_1samp(diffs, 0.0, axis=1).pvalue < alpha))
    assert abs(rate - stated) < 0.03, (rate, stated)


def test_float_rounding_is_neither_a_win_nor_a_spread():
    """Found by a probe: with repeats, a task's mean (0.1 and 0.7: 0.39999999999999997) and the
    other arm's equal score (0.4) read as a loss, six such ties as a significant 0/6 with an MDE of
    0.00; a difference of 0.10 on every task (0.1 - 0.0, 0.4 - 0.3, ...) had a spread of 1e-17 and
    an MDE of 0.00 with two tasks needed, where the report says "-" for no spread."""
    from runner.results import clusters, planning

    plain = [[0.05, 0.35], [0.1, 0.7], [0.15, 0.95], [0.2, 0.7], [0.35, 0.95], [0.85, 0.95]]
    goal = [[0.2, 0.2], [0.4, 0.4], [0.55, 0.55], [0.45, 0.45], [0.65, 0.65], [0.9, 0.9]]
    pairs = list(zip(clusters.task_means(plain), clusters.task_means(goal), strict=True))
    assert any(x != y for x, y in pairs)  # the rounding the rule must see through
    assert stats.tally(pairs) == (0, 0, 6) and stats.sign_test(0, 0) == 1.0
    diffs = clusters.paired_differences(plain, goal)
    pp = power.pair_power(diffs, 0.05)
    assert pp.mde is None and pp.tasks_needed is None
    constant = [x - y for x, y in ((0.1, 0.0), (0.4, 0.3), (0.7, 0.6), (0.9, 0.8), (0.3, 0.2))]
    assert power.sd(constant) != 0.0 and power.pair_power(constant, 0.05).mde is None
    # plan-size says what the report says: no difference, nothing to plan ("-"); a difference with
    # no spread, what the sign test needs (6 at 0.05), not 2 tasks or more than a million
    cases = (
        (plain, goal, None),
        ([[x] for x, _ in ((0.1, 0.0), (0.4, 0.3))], [[0.0], [0.3]], 6),
    )
    for ca, cb, want in cases:
        plan = planning.plan_pair("a", "b", ca, cb, target=None, alpha=0.05, pw=0.8, repeats=(1, 4))
        assert [(p.low, p.high, p.over) for p in plan.plans] == [(want, want, False)] * 2
        diffs = clusters.paired_differences(ca, cb)
        assert power.pair_power(diffs, 0.05).tasks_needed == want  # the report's figure
    # a real difference still plans
    real = planning.plan_pair("a", "b", plain, [[0.0, 0.1]] * 6, target=0.2, alpha=0.05, pw=0.8, repeats=(1,))
    assert real.plans[0].low is not None


def test_a_difference_of_float_rounding_alone_needs_no_count():
    """Found by a probe: partials 0.3 / 0.0 against 0.1 / 0.2 differ by +0.2 and -0.2, a mean of
    -1.4e-17 in floats; the report said ">1,000,000 tasks needed" (and "underpowered") where plan-size,
    which sees through rounding, said "-". 91 % of simulated 15-task pairs of tenths with a true
    difference of 0 read so."""
    diffs = [0.3 - 0.1, 0.0 - 0.2] * 4  # 8 tasks: past the sign test's floor at 0.05 (6)
    assert math.fsum(diffs) / 8 != 0.0  # the rounding the rule must see through
    pp = power.pair_power(diffs, 0.05)
    assert pp.mde is not None  # a spread: the MDE stands
    assert pp.tasks_needed is None and not pp.needed_over_max
    assert pp.underpowered == power.pair_power([0.2, -0.2] * 4, 0.05).underpowered  # as an exact zero
    # and it reads as the table's zero in the underpowered line and in plan-size (both read -0.00)
    row = {
        "a": "plain",
        "b": "goal",
        "n": 8,
        "partial_n": 8,
        "partial_diff": pp.diff,
        **pp.as_dict("partial"),
    }
    row.update(
        {
            f"{m}_{k}": None
            for m in ("reward", "pass_rate")
            for k in ("mde", "tasks_needed", "tasks_needed_over")
        }
    )
    (line,) = power.underpowered_lines(power.block([row]))
    assert "partial +0.00 below MDE" in line and "(no difference observed)" in line, line
    assert power.fmt_signed(pp.diff, 3) == "+0.000"


def test_the_underpowered_line_gives_each_measure_its_own_n_when_they_differ():
    """Found by a probe: the line gave one n per pair, the last measure's: "plain vs goal (n = 3):
    partial ..." where the partial's n was 4 (a task without a pass rate for one arm)."""
    rows = [{"a": "plain", "b": "goal", "n": 4}]
    for m, n, diff in (("partial", 4, 0.05), ("reward", 4, 0.0), ("pass_rate", 3, 0.1)):
        rows[0].update({f"{m}_n": n, f"{m}_diff": diff, f"{m}_mde": 0.9, f"{m}_tasks_needed": 10 if diff else None,
                        f"{m}_tasks_needed_over": None, f"{m}_underpowered": True})  # fmt: skip
    (line,) = power.underpowered_lines(power.block(rows))
    assert line.startswith("plain vs goal: partial +0.05 below MDE 0.90 (n = 4, 10 tasks needed)"), line
    assert "pass_rate +0.10 below MDE 0.90 (n = 3, 10 tasks needed)" in line, line
    rows[0]["pass_rate_n"] = 4
    (line,) = power.underpowered_lines(power.block(rows))
    assert line.startswith("plain vs goal (n = 4): partial +0.05 below MDE 0.90 (10 tasks needed)"), line


def test_an_mde_past_the_scores_range_reads_as_none_detectable():
    """Every measure is in [0, 1]: a probe read an MDE of 3.11 in the report and plan-size."""
    from runner.results import power as P

    assert [P.fmt_mde(v) for v in (None, 0.126, 1.0, 1.0001, 3.11)] == ["-", "0.13", "1.00", ">1", ">1"]


@pytest.mark.parametrize("alpha", [0.5, 0.05, 0.05 / 3, 0.005, 1e-6])
def test_the_sign_floor_is_where_scipys_exact_sign_test_first_reaches_the_level(alpha):
    assert power.sign_floor(alpha) == sign_floor_of(alpha)


def test_a_pair_whose_sign_test_could_not_pass_holm_detects_nothing_and_plans_no_fewer():
    """Found by a probe and two reviews: one common task read "+0.30 [+0.30, +0.30]" with no caution;
    plan-size said 5-6 tasks for 3 arms at 0.05, where the report's Holm-adjusted sign test cannot
    pass its first step with fewer than 7 (six tasks one way: p 0.031 > 0.05 / 3); three arms of six
    tasks each, every pair 6/0 (Holm p 0.094 at best), read an MDE of 0.13 and no caution; and a
    6-task pair beside two 13-task pairs, which can pass (Holm p 0.031), was said to detect nothing.
    The rule is Holm's own: every pair's untied tasks one way, the family adjusted."""
    level = 0.05 / 3
    assert [round(p, 4) for p in power.best_holm([6, 6, 6])] == [0.0938] * 3  # none can pass
    assert power.best_holm([13, 13, 6])[2] == pytest.approx(0.03125)  # beside two 13s it can
    assert power.best_holm([13, 13, 0])[2] == 1.0  # all ties: nothing to count
    one = power.pair_power([0.3], level, reachable=False)
    assert one.underpowered and one.below_floor and one.mde is None and one.tasks_needed == 7
    six = power.pair_power([0.5, 0.6, 0.4, 0.5, 0.55, 0.45], level, reachable=False)
    assert six.underpowered and six.mde is None and six.tasks_needed == 7
    assert power.fmt_mde(six.mde, six.below_floor) == ">1"
    can = power.pair_power([0.5, 0.6, 0.4, 0.5, 0.55, 0.45], level, reachable=True)
    assert can.mde is not None and not can.underpowered and can.tasks_needed == 7  # never below 7
    same = power.pair_power([0.3] * 6, level, reachable=True)  # no spread: the sign test's own
    assert same.mde is None and same.tasks_needed == 7 and not same.underpowered
    row = {"a": "plain", "b": "goal", "n": 1, "partial_n": 1, "partial_diff": 0.3, "wins": 1, "losses": 0,
           "sign_best_holm_p": 1.0, **one.as_dict("partial")}  # fmt: skip
    row.update(
        {
            f"{m}_{k}": None
            for m in ("reward", "pass_rate")
            for k in ("mde", "tasks_needed", "tasks_needed_over")
        }
    )
    (line,) = power.underpowered_lines(power.block([row]))
    assert (
        "undetectable, its 1 untied task(s) all one way (every pair at its best) would give Holm p 1, above 0.05: partial +0.30 ("
        in line
    ), line
