"""The report's validity figures: cost vs spend, intervals, sign tests and Holm, against scipy and
against a hand-made 15-task tree whose answers are known.

The hand-made tree (tests/core/handmade_tree.py, the ``handmade`` fixture) needs no Docker. The statistics are checked against scipy on fixed data;
scipy is a test-only dependency.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.stats
from handmade_tree import COST, ERRORED_COST, GOAL, PLAIN, TASKS, TOKENS, VOIDED_COST, write_receipts

from marathon import cli
from runner.results import stats
from runner.results.attempts import DONE
from runner.results.model import RunModel
from runner.results.power import fmt_signed
from runner.results.report import build_report, fmt_diff, fmt_mean, fmt_p, render

SEED = stats.BOOTSTRAP_SEED


def scipy_paired_ci(x: list[float], y: list[float]) -> tuple[float, float]:
    r = scipy.stats.bootstrap(
        (np.asarray(x), np.asarray(y)),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=stats.BOOTSTRAP_RESAMPLES,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(SEED),
    )
    return float(r.confidence_interval.low), float(r.confidence_interval.high)


def scipy_mean_ci(x: list[float]) -> tuple[float, float]:
    r = scipy.stats.bootstrap(
        (np.asarray(x),),
        np.mean,
        n_resamples=stats.BOOTSTRAP_RESAMPLES,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(SEED),
    )
    return float(r.confidence_interval.low), float(r.confidence_interval.high)


# ------------------------------------------------------------------ fixed data, against scipy

FIXED_A = [0.1, 0.5, 0.3, 0.9, 0.0, 0.2, 0.7, 0.65, 0.4, 1.0, 0.0, 0.35, 0.8, 0.55, 0.25]
FIXED_B = [0.0, 0.6, 0.1, 0.5, 0.0, 0.1, 0.2, 0.65, 0.45, 1.0, 0.1, 0.3, 0.6, 0.5, 0.2]


def test_paired_bootstrap_interval_equals_scipy_paired_percentile_bootstrap():
    diffs = [a - b for a, b in zip(FIXED_A, FIXED_B, strict=True)]
    got = stats.bootstrap_mean_ci(diffs)
    assert got == pytest.approx(scipy_paired_ci(FIXED_A, FIXED_B), abs=1e-12)
    lo, hi = got
    assert lo < np.mean(diffs) < hi
    # the same indices from the same seed: only a different seed moves the interval
    assert stats.bootstrap_mean_ci(diffs, seed=SEED + 1) != got


def test_mean_interval_equals_scipy_one_sample_percentile_bootstrap():
    assert stats.bootstrap_mean_ci(FIXED_A) == pytest.approx(scipy_mean_ci(FIXED_A), abs=1e-12)
    assert stats.bootstrap_mean_ci([]) is None
    assert stats.bootstrap_mean_ci([0.4]) == pytest.approx((0.4, 0.4))  # one task: no spread to resample


@pytest.mark.parametrize(("wins", "losses"), [(0, 0), (1, 0), (8, 2), (5, 5), (15, 0), (3, 12), (40, 20)])
def test_sign_test_equals_scipy_binomtest(wins, losses):
    want = scipy.stats.binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
    assert stats.sign_test(wins, losses) == pytest.approx(want, rel=1e-12)


def test_holm_matches_published_values():
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm")
    assert stats.holm([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    # R: p.adjust(c(0.04, 0.001, 0.3, 0.012), "holm"): order kept, capped at 1
    assert stats.holm([0.04, 0.001, 0.3, 0.012]) == pytest.approx([0.08, 0.004, 0.3, 0.036])
    assert stats.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []


def test_p_values_and_differences_read_as_the_issue_says():
    assert fmt_p(2 / 2**15) == "<1e-4" and fmt_p(0.0) == "<1e-4"
    assert fmt_p(0.109375) == "0.1094" and fmt_p(1e-4) == "0.0001" and fmt_p(None) == "-"
    assert fmt_diff(15, 0.06, [-0.03, 0.15]) == "n = 15, diff +0.06 [\u22120.03, +0.15]"
    assert fmt_signed(-0.001) == "+0.00" and fmt_signed(-0.5) == "\u22120.50"
    assert fmt_mean(0.533, [0.41, 0.66]) == "0.53 [0.41, 0.66]"


# ------------------------------------------------------------------- the hand-made 15-task tree


def _pair(rep: dict, a: str, b: str) -> dict:
    return next(p for p in rep["paired"] if (p["a"], p["b"]) == (a, b))


def test_handmade_tree_reads_as_built(handmade):
    m = RunModel.load(handmade)
    assert m.tasks == TASKS and m.arms == ["plain", "goal", "heartbeat"]
    assert all(c.status == DONE for c in m.cells.values())
    assert m.cells[("t00", "goal")].build_failed and m.cells[("t00", "heartbeat")].n_errored == 1
    assert m.cells[("t01", "plain")].n_voided == 1


def test_wins_losses_ties_and_diff_on_the_handmade_tree(handmade):
    rep = build_report(RunModel.load(handmade))
    pg = _pair(rep, "plain", "goal")
    assert (pg["n"], pg["wins"], pg["losses"], pg["ties"]) == (15, 8, 2, 5)
    assert pg["partial_diff"] == pytest.approx(0.06, abs=1e-4)
    assert pg["partial_a"] == pytest.approx(np.mean(PLAIN), abs=1e-4)
    assert pg["partial_b"] == pytest.approx(np.mean(GOAL), abs=1e-4)  # build failure counted as 0
    assert pg["sign_test_p"] == pytest.approx(112 / 1024)
    assert pg["partial_diff_ci"] == pytest.approx(scipy_paired_ci(PLAIN, GOAL), abs=1e-4)
    assert pg["reward_diff"] == 0.0 and pg["reward_diff_ci"] == [0.0, 0.0]
    for a in ("plain", "goal"):
        ph = _pair(rep, a, "heartbeat")
        assert (ph["wins"], ph["losses"], ph["ties"]) == (0, 15, 0)
        assert ph["sign_test_p"] == pytest.approx(2 / 2**15)
        assert ph["reward_diff"] == -1.0 and ph["reward_diff_ci"] == [-1.0, -1.0]
    # Holm across the three pairs: 3 x 6.1e-5 (twice, made monotone) and 1 x 0.109
    holm = {(p["a"], p["b"]): p["sign_test_p_holm"] for p in rep["paired"]}
    assert holm == pytest.approx(
        {("plain", "goal"): 112 / 1024, ("plain", "heartbeat"): 6 / 2**15, ("goal", "heartbeat"): 6 / 2**15}
    )
    s = rep["arm_summary"]
    assert s["goal"]["partial_ci"] == pytest.approx(scipy_mean_ci(GOAL), abs=1e-4)
    assert s["plain"]["partial_ci"] == pytest.approx(scipy_mean_ci(PLAIN), abs=1e-4)
    assert s["heartbeat"]["partial_ci"] == [1.0, 1.0]
    assert rep["bootstrap"] == {"method": "percentile", "resamples": 10_000, "seed": SEED, "confidence": 0.95}


def test_cost_is_the_sum_of_the_cells_and_spend_counts_errored_and_voided(handmade):
    rep = build_report(RunModel.load(handmade))
    assert rep["schema"] == "marathon-report-v4"
    s = rep["arm_summary"]
    for arm in ("plain", "goal", "heartbeat"):
        cells = [rep["cells"][t][arm] for t in TASKS]
        assert (
            s[arm]["cost_usd"]
            == pytest.approx(sum(c["cost_usd"] for c in cells))
            == pytest.approx(15 * COST[arm])
        )
        assert s[arm]["n_input_tokens"] == sum(c["n_input_tokens"] for c in cells) == 15 * TOKENS[arm][0]
        assert s[arm]["n_output_tokens"] == 15 * TOKENS[arm][1]
        assert s[arm]["spend_usd"] == pytest.approx(sum(c["spend_usd"] for c in cells))
    assert s["goal"]["spend_usd"] == pytest.approx(s["goal"]["cost_usd"])
    assert s["heartbeat"]["spend_usd"] == pytest.approx(15 * 0.03 + ERRORED_COST)
    assert s["heartbeat"]["spend_input_tokens"] == 15 * 300 + 7
    assert s["plain"]["spend_usd"] == pytest.approx(15 * 0.01 + VOIDED_COST)
    assert s["plain"]["spend_output_tokens"] == 15 * 10 + 2
    assert rep["cells"]["t00"]["heartbeat"]["spend_usd"] == pytest.approx(0.03 + ERRORED_COST)
    # cost per solved: only heartbeat solves (reward 1) anything
    assert s["heartbeat"]["solved"] == 15 and s["heartbeat"]["cost_per_solved"] == pytest.approx(0.03)
    assert s["plain"]["solved"] == 0 and s["plain"]["cost_per_solved"] is None


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_markdown_and_html_show_n_diff_and_interval(handmade, fmt, capsys):
    rep = build_report(RunModel.load(handmade))
    lo, hi = _pair(rep, "plain", "goal")["partial_diff_ci"]
    text = render(rep, fmt)
    assert fmt_diff(15, 0.06, [lo, hi]) in text
    # the partial column comes first in the paired table
    row = next(
        ln
        for ln in text.replace("</td><td>", " | ").splitlines() + text.split("<tr>")
        if "plain" in ln and "goal" in ln and "n = 15" in ln
    )
    assert row.index(fmt_diff(15, 0.06, [lo, hi])) < row.index("n = 15, diff +0.00")
    assert "n = 15, diff +0.06 [" in text
    assert "<1e-4" in text or "&lt;1e-4" in text
    assert "0.0000" not in text
    assert "spend USD" in text and "cost/solved" in text


def test_status_shows_n_and_the_partial_interval(handmade, capsys):
    assert cli.main(["status", str(handmade), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ci = d["per_arm"]["goal"]["partial_ci"]
    assert ci == pytest.approx(scipy_mean_ci(GOAL), abs=1e-4)
    assert cli.main(["status", str(handmade)]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("goal "))
    assert fmt_mean(d["per_arm"]["goal"]["partial"], ci) in line and " 15 " in line


def test_fairness_audit_is_clean_when_every_arm_ran_the_same_setup(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    write_receipts(out)
    rep = build_report(RunModel.load(out))
    au = rep["audit"]
    assert au["lines"] == [] and au["differences"] == [] and au["arms_differing"] == []
    for arm in ("plain", "goal", "heartbeat"):
        assert {"codex_version", "transport", "user", "workdir", "credential", "model"} <= set(
            au["compared"][arm]
        )
        assert {"provider_base_url", "budget_sec", "goal_timeout_sec", "codex_in_container"} <= set(
            au["compared"][arm]
        )
        assert {"codex_sha256", "config_toml_sha256", "image_digest", "agent_timeout_sec"} <= set(
            au["compared"][arm]
        )
    assert "No undeclared difference between arms in: codex version" in render(rep, "md")


def test_fairness_audit_raises_the_alarm_when_one_trial_differs(handmade, tmp_path):
    from console.feeds import arm_summary as console_summary
    from console.view import summary_line

    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    write_receipts(out, **{"heartbeat/t05": {"provider": {"base_url": "http://elsewhere:9/v1"}}})
    m = RunModel.load(out)
    rep = build_report(m)
    au = rep["audit"]
    (d,) = au["differences"]
    assert (d["fact"], d["task"]) == ("provider_base_url", "t05")
    assert au["lines"] == ["arms differ in: provider base URL (plain, goal \u2260 heartbeat; task t05)"]
    assert au["arms_differing"] == ["heartbeat"]
    # a budget that differs is an alarm too (prep_sec may differ: it is outside the budget)
    write_receipts(out, **{"goal/t03": {"budget_sec": 540.0}})
    lines = build_report(RunModel.load(out))["audit"]["lines"]
    assert lines == ["arms differ in: budget_sec (plain, heartbeat \u2260 goal; task t03)"]
    assert "- **ALARM** arms differ in: provider base URL" in render(rep, "md")
    assert '<p class="alarm">ALARM arms differ in: provider base URL' in render(rep, "html")
    # the console: the alarm line and the warning mark on heartbeat's summary only
    summary, alarm = console_summary(m, "all")
    assert alarm and "arms differ in: provider base URL" in alarm
    assert summary_line(summary["heartbeat"]).startswith("\u26a0")
    assert not summary_line(summary["plain"]).startswith("\u26a0")


def test_fairness_audit_flags_a_mix_of_transports(handmade, tmp_path):
    """One arm's trial through the in-sandbox driver, the rest through docker exec: a red line."""
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    driver = {
        "kind": "sandbox-driver",
        "environment": "DockerEnvironment",
        "workdir": "/app",
        "user": "agent",
    }
    write_receipts(out, **{"goal/t02": {"transport": driver}})
    au = build_report(RunModel.load(out))["audit"]
    (d,) = au["differences"]
    assert (d["fact"], d["task"]) == ("transport", "t02")
    assert au["lines"] == ["arms differ in: transport (plain, heartbeat \u2260 goal; task t02)"]


def test_each_done_cells_wall_time_is_its_trials(handmade):
    """The time-to-finish figure is each trial's own span (UTC), not its job's (harbor's naive local
    times, an hour off across a change of daylight saving time), whichever reader took it."""
    from handmade_tree import TASKS, WALL

    m = RunModel.load(handmade, index=False)
    for i, t in enumerate(TASKS):
        for arm in ("goal", "plain", "heartbeat"):
            assert m.cells[(t, arm)].wall_sec == pytest.approx(WALL[arm][i], abs=1e-3), (t, arm)


def test_the_total_rows_interval_is_of_the_mean_it_shows_when_tasks_have_unequal_cells(handmade, tmp_path):
    """Found by a probe: `status`'s total row pools every counted cell (an arm of many tasks weighs
    more) while its interval resampled tasks by their task means, another estimator: six arms at
    1.0 on one task and one arm at 0 on 19 more read "0.24 [0.00, 0.15]". The interval now resamples
    tasks and takes the pooled mean of each resample (the cluster bootstrap of the shown figure)."""
    from marathon.status_view import status_data

    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    for task in TASKS[5:]:  # ten tasks keep plain alone: the cells per task differ (3 and 1)
        for arm in ("goal", "heartbeat"):
            shutil.rmtree(out / task / arm)
    total = status_data(RunModel.load(out), "all")["total"]
    values = PLAIN + GOAL[:5] + [1.0] * 5  # plain's 15 cells, goal's 5, heartbeat's 5 (all 1.0)
    assert total["partial"] == pytest.approx(np.mean(values))
    sums = np.array([PLAIN[i] + GOAL[i] + 1.0 if i < 5 else PLAIN[i] for i in range(15)])
    counts = np.array([3.0] * 5 + [1.0] * 10)
    idx = np.random.default_rng(stats.BOOTSTRAP_SEED).integers(0, 15, (stats.BOOTSTRAP_RESAMPLES, 15))
    ref = np.quantile(sums[idx].sum(-1) / counts[idx].sum(-1), [0.025, 0.975])
    assert total["partial_ci"] == pytest.approx(list(ref))
    assert total["partial_ci"][0] <= total["partial"] <= total["partial_ci"][1]


def test_errored_cells_out_of_the_means_are_said_with_the_means_they_would_make_as_failures(
    handmade, tmp_path
):
    """Found by a probe: an arm whose agent crashed on its three worst tasks (an agent failure the
    voiding table scores: the next pass reruns it, up to --max-passes) read a higher mean than an
    identical arm, the errored cells out of every mean and nothing but a count saying so. The
    report keeps the means over done cells and says, per arm, what they would be with its errored
    cells as failures."""
    from handmade_tree import EARLY, STAMP

    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    shutil.rmtree(out / "t00" / "heartbeat" / STAMP)  # its errored EARLY attempt is all that is left
    assert (out / "t00" / "heartbeat" / EARLY).is_dir()
    rep = build_report(RunModel.load(out))
    s = rep["arm_summary"]["heartbeat"]
    assert s["n"] == 14 and s["partial"] == pytest.approx(1.0) and s["errored_cells"] == 1
    assert s["errored_as_failures"] == pytest.approx(
        {"reward": 14 / 15, "partial": 14 / 15, "pass_rate": 14 / 15}
    )
    plain = rep["arm_summary"]["plain"]
    assert plain["errored_cells"] == 0 and plain["errored_as_failures"] is None
    for fmt in ("md", "html"):
        text = render(rep, fmt)
        assert (
            "heartbeat: 1 errored cell(s) out of its means; as failures: reward 0.93, partial 0.93" in text
        ), fmt
