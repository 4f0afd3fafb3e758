"""Per-task clusters (runner/results/clusters.py) and the chunked bootstrap (runner/results/stats.py).

The cluster bootstrap is checked against a reference written out loop by loop: draw tasks with
replacement, average within each drawn task, average the drawn tasks, take percentiles; and
against scipy's bootstrap of the task means. pass@k and pass^k against counting every k-subset.
"""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
import scipy.stats

from runner.results import clusters, stats

SEED, RESAMPLES = stats.BOOTSTRAP_SEED, stats.BOOTSTRAP_RESAMPLES
#: tasks with 1 to 4 attempts each (the shape repeats will give, with a repeat or two missing)
UNEQUAL = [[1.0, 0.0, 0.0], [0.5], [0.2, 0.4], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0], [0.9], [0.3, 0.1, 0.2]]


def reference_cluster_ci(cl: list[list[float]], resamples: int, seed: int) -> tuple[float, float]:
    """Loop by loop: each resample draws len(cl) tasks (row by row from one generator, as numpy
    fills a (resamples, n) array), averages each drawn task's attempts, then the drawn tasks."""
    rng = np.random.default_rng(seed)
    n = len(cl)
    means = []
    for _ in range(resamples):
        drawn = rng.integers(0, n, n)
        means.append(sum(sum(cl[i]) / len(cl[i]) for i in drawn) / n)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def test_cluster_bootstrap_equals_the_loop_reference_with_unequal_clusters():
    got = clusters.bootstrap_ci(UNEQUAL, resamples=2000)
    assert got == pytest.approx(reference_cluster_ci(UNEQUAL, 2000, SEED), abs=1e-12)


def test_cluster_bootstrap_equals_scipy_on_the_task_means():
    means = [sum(c) / len(c) for c in UNEQUAL]
    r = scipy.stats.bootstrap(
        (np.asarray(means),), np.mean, n_resamples=RESAMPLES, method="percentile",
        rng=np.random.default_rng(SEED), vectorized=True,
    )  # fmt: skip
    ci = clusters.bootstrap_ci(UNEQUAL)
    assert ci == pytest.approx((r.confidence_interval.low, r.confidence_interval.high), abs=1e-12)


def test_resampling_attempts_instead_of_tasks_gives_another_interval():
    """The naive bootstrap of the pooled attempts treats attempts as independent: a different (here
    narrower) interval around a different mean (tasks with more attempts weigh more)."""
    flat = [v for c in UNEQUAL for v in c]
    naive = stats.bootstrap_mean_ci(flat)
    clustered = clusters.bootstrap_ci(UNEQUAL)
    assert clusters.mean(UNEQUAL) != pytest.approx(sum(flat) / len(flat))
    assert (naive[1] - naive[0]) < (clustered[1] - clustered[0])


def test_one_attempt_per_task_is_the_plain_bootstrap():
    values = [0.1, 0.5, 0.3, 0.9, 0.0, 1.0, 0.4]
    assert clusters.bootstrap_ci([[v] for v in values]) == stats.bootstrap_mean_ci(values)
    assert clusters.mean([[v] for v in values]) == pytest.approx(sum(values) / len(values))


def test_paired_differences_average_within_each_task_first():
    a = [[1.0, 0.0], [0.5], [0.2, 0.4, 0.6]]
    b = [[0.0], [0.5, 0.5], [0.0, 0.2]]
    assert clusters.paired_differences(a, b) == pytest.approx([0.5, 0.0, 0.3])
    assert clusters.paired_differences([[1.0], []], [[0.0], [1.0]]) == [1.0]  # a task without a value drops
    with pytest.raises(ValueError):
        clusters.paired_differences([[1.0]], [])


def test_within_variance_is_the_pooled_variance_of_attempts():
    want = sum(np.var(c, ddof=1) * (len(c) - 1) for c in UNEQUAL if len(c) > 1) / sum(
        len(c) - 1 for c in UNEQUAL if len(c) > 1
    )
    assert clusters.within_variance(UNEQUAL) == pytest.approx(want)
    assert clusters.within_variance([[0.3], [0.5]]) is None  # K = 1: unknown


@pytest.mark.parametrize(
    "n,c,k", [(5, 2, 1), (5, 2, 2), (5, 2, 3), (6, 0, 2), (6, 6, 4), (8, 3, 8), (4, 3, 2)]
)
def test_pass_at_k_and_pass_hat_k_count_every_k_subset(n, c, k):
    attempts = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    at_least_one = sum(any(attempts[i] for i in s) for s in subsets) / len(subsets)
    all_of_them = sum(all(attempts[i] for i in s) for s in subsets) / len(subsets)
    assert clusters.pass_at_k(n, c, k) == pytest.approx(at_least_one)
    assert clusters.pass_hat_k(n, c, k) == pytest.approx(all_of_them)
    with pytest.raises(ValueError):
        clusters.pass_at_k(n, c, n + 1)


# -------------------------------------------------------------------------------- chunked bootstrap


def test_chunks_draw_the_same_resamples(monkeypatch):
    rng = np.random.default_rng(3)
    values = list(rng.random(37))
    whole = stats.bootstrap_mean_ci(values, resamples=999)
    monkeypatch.setattr(stats, "CHUNK_VALUES", 37 * 10 + 5)  # 10 resamples a chunk, 999 = 99 x 10 + 9
    assert stats.bootstrap_mean_ci(values, resamples=999) == whole
    monkeypatch.setattr(stats, "CHUNK_VALUES", 1)  # one resample a chunk
    assert stats.bootstrap_mean_ci(values, resamples=999) == whole


def test_a_bootstrap_of_many_tasks_holds_a_bounded_amount_of_memory():
    """20,000 tasks x 2,000 resamples: one index array would be 320 MB (and as much again for the
    values drawn); the chunks hold about 16 MB at a time."""
    values = list(np.random.default_rng(5).random(20_000))
    tracemalloc.start()
    try:
        stats.bootstrap_mean_ci(values, resamples=2000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * stats.CHUNK_VALUES * 8, f"peak {peak / 2**20:.0f} MiB"
