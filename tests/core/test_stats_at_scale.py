"""The exact tests at the sizes of a 10,000-attempt tree, against scipy: Fisher's exact test by
the hypergeometric ratio and the sign test by exact integers built term from term."""

from __future__ import annotations

import random

import pytest
import scipy.stats

from runner.results import stats


def test_fisher_exact_equals_scipy_on_tables_of_up_to_20000_attempts():
    rng = random.Random(20261203)
    for _ in range(400):
        big = rng.choice([3, 40, 600, 5000])
        a, b, c, d = (rng.randint(0, big) for _ in range(4))
        want = scipy.stats.fisher_exact([[a, b], [c, d]]).pvalue
        got = stats.fisher_exact(a, b, c, d)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (a, b, c, d)


@pytest.mark.parametrize(("wins", "losses"), [(900, 1100), (1000, 1000), (0, 2000), (1300, 700), (5, 1995)])
def test_sign_test_equals_scipy_binomtest_at_2000_tasks(wins, losses):
    want = scipy.stats.binomtest(wins, wins + losses, 0.5).pvalue
    assert stats.sign_test(wins, losses) == pytest.approx(want, rel=1e-12, abs=1e-300)


def test_the_heatmap_of_many_tasks_is_one_image_of_bounded_height(handmade, monkeypatch):
    """Above HEATMAP_LABELLED tasks the rows are not labelled or marked one by one: 2,010 labelled
    rows drew a 600-inch figure (1.2 GB, 30 s); the height stays that of HEATMAP_LABELLED rows."""
    from runner.results import plots
    from runner.results.model import RunModel
    from runner.results.report import build_report

    rep = build_report(RunModel.load(handmade))
    labelled = plots.heatmap(rep)
    assert labelled.get_size_inches()[1] == pytest.approx(1.0 + 0.3 * 15)
    assert len(labelled.axes[0].get_yticklabels()) == 15 and labelled.axes[0].texts  # ✗ marks
    monkeypatch.setattr(plots, "HEATMAP_LABELLED", 4)
    capped = plots.heatmap(rep)
    assert capped.get_size_inches()[1] == pytest.approx(1.0 + 0.3 * 4)
    assert not capped.axes[0].get_yticklabels() and not capped.axes[0].texts
