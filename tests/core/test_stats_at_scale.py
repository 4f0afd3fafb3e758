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
