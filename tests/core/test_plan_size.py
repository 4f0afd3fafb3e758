"""`marathon plan-size` (runner/results/planning.py): tasks and repeats needed, from a pilot tree.

The figures are checked against statsmodels (the fewest n its TTestPower gives 80 % power) for
the spread the pilot shows; repeats against the variance split written out with numpy.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from core import repeats_tree as rt
from test_power import sm_tasks

from marathon import cli
from runner.results import power
from runner.results.model import RunModel
from runner.results.planning import plan, plan_pair


def _run(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["plan-size", *args])
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_plan_from_the_handmade_pilot_equals_statsmodels(handmade, capsys):
    rc, out, _ = _run(capsys, str(handmade), "--diff", "0.05", "--repeats", "1,4", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["family"] == 3 and d["alpha_holm"] == pytest.approx(0.05 / 3) and d["target"] == 0.05
    by_pair = {(p["a"], p["b"]): p for p in d["pairs"]}
    assert set(by_pair) == {("plain", "goal"), ("plain", "heartbeat"), ("goal", "heartbeat")}
    for p in d["pairs"]:
        sd = p["sd"]
        k1, k4 = p["tasks_needed"]
        assert k1["repeats"] == 1 and k1["low"] == k1["high"] == sm_tasks(0.05 / sd, 0.05 / 3)
        # one attempt per pair: with 4 repeats, from sd / 2 (all within a task) to sd (all between)
        assert k4["low"] == sm_tasks(0.05 / (sd / 2), 0.05 / 3) and k4["high"] == k1["high"]
    assert by_pair[("plain", "goal")]["n"] == 15 and by_pair[("plain", "goal")]["pilot_repeats"] == 1.0


def test_the_holm_level_is_over_every_pair_of_the_comparisons_arms(handmade, capsys):
    """Found by a probe: a 3-arm pilot where one arm failed every task planned at 0.05 over the one
    pair left (20 tasks; 27 over 3 pairs, 35 over 10). Every arm of the pilot counts, or --arms N."""
    m = RunModel.load(handmade)
    tasks = sorted({k[0] for k in m.cells})
    arms = ["plain", "goal", "heartbeat"]
    with_ghost = plan(m.cells, [*arms, "ghost"], tasks, target=0.05)  # an arm with no finished task
    assert with_ghost.family == 6 and with_ghost.alpha_holm == pytest.approx(0.05 / 6)
    assert len(with_ghost.pairs) == 3  # the pairs it can plan from are the same three
    rc, out, _ = _run(capsys, str(handmade), "--diff", "0.05", "--arms", "5", "--json")
    d = json.loads(out)
    assert (
        rc == 0
        and d["family"] == 10
        and d["alpha_holm"] == pytest.approx(0.005)
        and d["sign_floor_holm"] == 9
    )
    for p in d["pairs"]:
        assert p["tasks_needed"][0]["high"] == max(9, sm_tasks(0.05 / p["sd"], 0.005))


def test_no_plan_is_for_fewer_tasks_than_the_sign_test_needs(handmade, capsys):
    """A large target on a quiet pilot: the t test would need 3-5 tasks, the report's sign test
    reaches 0.05 / 3 only with 7; the text says so."""
    rc, out, _ = _run(capsys, str(handmade), "--diff", "0.9", "--json")
    d = json.loads(out)
    assert rc == 0 and d["sign_floor_holm"] == 7
    assert all(p["tasks_needed"][0]["high"] == 7 for p in d["pairs"]), d["pairs"]
    assert any(sm_tasks(0.9 / p["sd"], 0.05 / 3) < 7 for p in d["pairs"])  # the t test alone: fewer
    rc, out, _ = _run(capsys, str(handmade), "--diff", "0.9")
    assert (
        "passes Holm's first step only with 7 or more untied tasks" in out
        and "could not pass Holm detects nothing" in out
    )


def test_plan_text_reads_as_a_table_and_explains_the_range(handmade, capsys):
    rc, out, _ = _run(capsys, str(handmade))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].endswith("partial; target each pair's observed difference")
    assert "80 % power at the Holm-adjusted level 0.017 (0.05 over 3 pair(s))" in lines[1]
    row = next(line for line in lines if line.startswith("plain vs goal"))
    assert row.split()[3:] == ["15", "1.0", "+0.060", "0.111", "0.10", "0.06", "39", "21-39", "15-39"]
    assert "cannot split the spread" in out


@pytest.mark.parametrize(
    "args, says",
    [
        (["--diff", "2"], "a difference of scores from 1e-06 to 1"),
        (["--diff", "x"], "not a number"),
        (["--repeats", "0"], "repeats from 1 to 100"),
        (["--power", "1"], "a power from 0.5 to 0.999"),
        # values that once reached the computation: an OverflowError, a ValueError, a loop that
        # never ended (a power of 1 - 1e-16)
        (["--diff", "1e-300"], "a difference of scores from 1e-06 to 1"),
        (["--power", "1e-17"], "a power from 0.5 to 0.999"),
        (["--power", "0.9999999999999999"], "a power from 0.5 to 0.999"),
        (["--alpha", "1e-300"], "a level from 1e-06 to 0.2"),
        (["--alpha", "0.9999999999999999"], "a level from 1e-06 to 0.2"),
        # a power below the level: met by no difference at all ("MDE >1" beside "2 tasks needed")
        (["--power", "0.2", "--alpha", "0.2"], "a power from 0.5 to 0.999"),
        (["--arms", "1"], "arms from 2 to 100"),
        (["--arms", "x"], "a whole number of arms"),
    ],
)
def test_bad_flags_say_what_is_wrong_and_exit_2(handmade, capsys, args, says):
    with pytest.raises(SystemExit) as exc:
        cli.main(["plan-size", str(handmade), *args])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_not_an_output_tree_is_one_line_and_exit_2(tmp_path, capsys):
    rc, out, err = _run(capsys, str(tmp_path / "nope"))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def _reference_split(ca, cb) -> tuple[float, float]:
    """The variance split written out with numpy: sigma_w^2 the two arms' pooled within-task
    variances added, sigma_b^2 the variance of the task-mean differences less sigma_w^2 / K_pilot,
    never below 0; the within part used is at most what the observed variance allows at K_pilot
    (so that sigma_b^2 + sigma_w^2 / K_pilot is the observed variance)."""
    pooled = lambda cl: sum(np.var(c, ddof=1) * (len(c) - 1) for c in cl) / sum(len(c) - 1 for c in cl)  # noqa: E731
    within = pooled(ca) + pooled(cb)
    diffs = np.array([np.mean(x) - np.mean(y) for x, y in zip(ca, cb, strict=True)])
    k_pilot = np.mean([len(c) for c in ca + cb])
    total = diffs.var(ddof=1)
    between = max(0.0, total - within / k_pilot)
    return between, min(within, total * k_pilot)


def test_a_pilot_with_repeats_splits_the_spread_into_between_and_within():
    """Clusters of 2-3 attempts: the within-task variance is estimated, and the tasks needed for K
    repeats follow sigma_b^2 + sigma_w^2 / K (one figure, no range). The arms' difference varies
    from task to task (sd 0.15), so sigma_b^2 is positive: the clamped case is the next test's."""
    rng = np.random.default_rng(11)
    ca, cb = [], []
    for _ in range(30):
        base, effect = rng.uniform(0.1, 0.9), rng.normal(0.1, 0.15)
        ca.append(list(np.clip(base + effect + rng.normal(0, 0.2, rng.integers(2, 4)), 0, 1)))
        cb.append(list(np.clip(base + rng.normal(0, 0.2, rng.integers(2, 4)), 0, 1)))
    alpha = 0.05 / 10
    got = plan_pair("a", "b", ca, cb, target=0.05, alpha=alpha, pw=0.8, repeats=(1, 3, 8))
    between, within_used = _reference_split(ca, cb)
    assert between > 0 and within_used == pytest.approx(got.within)  # the split needs no clamp here
    assert got.pilot_repeats == pytest.approx(np.mean([len(c) for c in ca + cb]))
    for p in got.plans:
        sd_k = math.sqrt(between + within_used / p.repeats)
        assert p.low == p.high == sm_tasks(0.05 / sd_k, alpha)
    assert got.plans[0].high > got.plans[1].high > got.plans[2].high  # repeats help here
    diffs = np.array([np.mean(x) - np.mean(y) for x, y in zip(ca, cb, strict=True)])
    assert got.mde == pytest.approx(power.min_detectable_d(30, alpha) * diffs.std(ddof=1))


def test_a_pilot_whose_task_means_vary_less_than_its_attempts_projects_the_observed_spread():
    """No spread between tasks at all (each task's arms differ by 0.1 in truth): the method of
    moments gives a negative sigma_b^2, clamped to 0. The within part is then scaled down so that
    the projection at the pilot's K is the observed spread, and repeats shrink it as 1 / K."""
    rng = np.random.default_rng(5)
    ca = [list(np.clip(0.6 + rng.normal(0, 0.25, 3), 0, 1)) for _ in range(12)]
    cb = [list(np.clip(0.5 + rng.normal(0, 0.25, 3), 0, 1)) for _ in range(12)]
    between, within_used = _reference_split(ca, cb)
    got = plan_pair("a", "b", ca, cb, target=0.1, alpha=0.05, pw=0.8, repeats=(1, 3, 6))
    assert between == 0 and within_used < got.within  # the clamped case
    assert within_used / 3 == pytest.approx(got.sd**2)
    for p in got.plans:
        sd_k = math.sqrt(within_used / p.repeats)
        assert p.low == p.high == sm_tasks(0.1 / sd_k, 0.05)
    assert got.plans[1].high == sm_tasks(0.1 / got.sd, 0.05)  # at the pilot's K: the observed spread


@pytest.fixture(scope="module", params=(2, 3), ids=lambda k: f"K{k}")
def rtree(request, tmp_path_factory):
    k = request.param
    return k, rt.build(tmp_path_factory.mktemp(f"plan-repeats{k}") / "out", k)


def _json(capsys, *args) -> dict:
    assert cli.main([*args, "--json"] if args[0] == "plan-size" else [*args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("measure", ["partial", "reward", "pass_rate"])
def test_a_pilot_with_repeats_agrees_with_the_report_and_its_own_mde_at_its_k(rtree, capsys, measure):
    """At the pilot's own K the projected spread is the observed one, so plan-size needs the tasks
    the report says (the figure statsmodels gives for the observed spread), and a target of the
    pilot's MDE needs at most the pilot's n. Once, a negative sigma_b^2 was clamped to 0 with the
    whole within variance kept: on the K = 3 tree the partial needed 15 tasks at K = 3 (the report:
    9) and 14 at the pilot's own "MDE now" of 0.19, with n = 8."""
    k, out = rtree
    (row,) = _json(capsys, "report", str(out))["paired"]
    (p,) = _json(capsys, "plan-size", str(out), "--measure", measure, "--repeats", str(k))["pairs"]
    want = row[f"{measure}_tasks_needed"]
    # the report's figure is statsmodels' for the observed spread
    assert want == sm_tasks(p["diff"] / p["sd"], 0.05)
    # at the pilot's exact K (its mean attempts per (task, arm)): the same figure
    m = RunModel.load(out)
    (at_pilot,) = plan(m.cells, rt.ARMS, rt.TASKS, measure=measure, repeats=(p["pilot_repeats"],)).pairs
    assert at_pilot.plans[0].low == at_pilot.plans[0].high == want
    # at the pilot's nominal K (at least its mean): never more than the report, and for the
    # partial the same (the figure the review found at 15 on the K = 3 tree, 24 on the K = 2 one)
    (t,) = p["tasks_needed"]
    assert t["low"] == t["high"] <= want
    if measure != "reward":
        assert t["high"] == want
    # a target of the pilot's MDE (as "MDE now" prints it, rounded up) needs at most its n
    mde_now = math.ceil(p["mde"] * 100) / 100
    (q,) = _json(
        capsys, "plan-size", str(out), "--measure", measure, "--repeats", str(k), "--diff", str(mde_now)
    )["pairs"]
    assert q["tasks_needed"][0]["high"] <= q["n"] == 8
    if (k, measure) == (3, "partial"):
        assert (want, t["high"], mde_now, q["tasks_needed"][0]["high"]) == (9, 9, 0.19, 8)


def test_fewer_arms_than_the_pilots_plan_with_the_pairs_that_help_most():
    """Found by a review: with --arms below the pilot's count, each pair was adjusted as if the
    family's others were at p = 1, so a pair with 6 untied tasks (the others 10/0) read "detects
    nothing" at --arms 3 and an MDE at --arms 4, a stricter level. A 3-arm family of the pilot's own
    pairs gives it Holm p max(3 x 2^-9, 2 x 2^-9, 1/32) = 0.031: reachable."""
    from runner.results.attempts import DONE, Figures
    from runner.results.cells import Cell

    arms, tasks = ["a0", "a1", "a2", "a3"], [f"t{i:02d}" for i in range(10)]
    base = {"a0": 0.9, "a1": 0.7, "a2": 0.5, "a3": 0.3}
    cells = {}
    for i, t in enumerate(tasks):
        for a in arms:
            v = (base["a2"] if a == "a3" and i < 4 else base[a]) + 0.01 * i  # a2 ties a3 on 4 tasks
            cells[(t, a)] = Cell(t, a, status=DONE, figures=Figures(reward=0.0, partial=v, pass_rate=v))
    below = {}
    for n in (2, 3, 4):
        (pair,) = [p for p in plan(cells, arms, tasks, compared=n).pairs if (p.a, p.b) == ("a2", "a3")]
        below[n] = pair.below_floor
    assert below == {2: False, 3: False, 4: False}
    (pair,) = [p for p in plan(cells, arms, tasks, compared=5).pairs if (p.a, p.b) == ("a2", "a3")]
    assert pair.below_floor  # over ten pairs (four at p = 1), its six untied tasks: Holm p 0.156 at best
