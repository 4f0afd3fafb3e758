"""`marathon plan-size` (runner/results/planning.py): tasks and repeats needed, from a pilot tree.

The figures are checked against statsmodels (the fewest n its TTestPower gives 80 % power) for
the spread the pilot shows; repeats against the variance split written out with numpy.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_power import sm_tasks

from marathon import cli
from runner.results import power
from runner.results.planning import plan_pair


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
        (["--power", "1"], "a power from 0.05 to 0.999"),
        # values that once reached the computation: an OverflowError, a ValueError, a loop that
        # never ended (a power of 1 - 1e-16)
        (["--diff", "1e-300"], "a difference of scores from 1e-06 to 1"),
        (["--power", "1e-17"], "a power from 0.05 to 0.999"),
        (["--power", "0.9999999999999999"], "a power from 0.05 to 0.999"),
        (["--alpha", "1e-300"], "a level from 1e-06 to 0.5"),
        (["--alpha", "0.9999999999999999"], "a level from 1e-06 to 0.5"),
    ],
)
def test_bad_flags_say_what_is_wrong_and_exit_2(handmade, capsys, args, says):
    with pytest.raises(SystemExit) as exc:
        cli.main(["plan-size", str(handmade), *args])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_not_an_output_tree_is_one_line_and_exit_2(tmp_path, capsys):
    rc, out, err = _run(capsys, str(tmp_path / "nope"))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_a_pilot_with_repeats_splits_the_spread_into_between_and_within():
    """Clusters of 2-3 attempts: the within-task variance is estimated, and the tasks needed for K
    repeats follow sigma_b^2 + sigma_w^2 / K (one figure, no range)."""
    rng = np.random.default_rng(11)
    ca, cb = [], []
    for _ in range(30):
        base = rng.uniform(0.1, 0.9)
        ca.append(list(np.clip(base + 0.1 + rng.normal(0, 0.2, rng.integers(2, 4)), 0, 1)))
        cb.append(list(np.clip(base + rng.normal(0, 0.2, rng.integers(2, 4)), 0, 1)))
    alpha = 0.05 / 10
    got = plan_pair("a", "b", ca, cb, target=0.05, alpha=alpha, pw=0.8, repeats=(1, 3, 8))
    # the reference, written out
    pooled = lambda cl: sum(np.var(c, ddof=1) * (len(c) - 1) for c in cl) / sum(len(c) - 1 for c in cl)  # noqa: E731
    within = pooled(ca) + pooled(cb)
    diffs = np.array([np.mean(x) - np.mean(y) for x, y in zip(ca, cb, strict=True)])
    k_pilot = np.mean([len(c) for c in ca + cb])
    between = max(0.0, diffs.var(ddof=1) - within / k_pilot)
    assert got.within == pytest.approx(within) and got.pilot_repeats == pytest.approx(k_pilot)
    for p in got.plans:
        sd_k = math.sqrt(between + within / p.repeats)
        assert p.low == p.high == sm_tasks(0.05 / sd_k, alpha)
    assert got.plans[0].high > got.plans[1].high > got.plans[2].high  # repeats help here
    assert got.mde == pytest.approx(power.min_detectable_d(30, alpha) * diffs.std(ddof=1))
