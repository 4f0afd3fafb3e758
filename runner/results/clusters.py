"""Per-task clusters: the unit every mean, interval and paired difference is taken over.

A benchmark samples tasks, not attempts. When a (task, arm) pair has several attempts (harbor's
``-k``, marathon's coming ``--repeats K``), the attempts of one task are not independent draws of
the arm's ability: they share the task. So every figure here averages within a task first and then
treats the task means as the sample: the mean is the mean of task means, an interval resamples
tasks (the cluster bootstrap), and a paired comparison pairs the two arms' task means task by task
(Miller, "Adding Error Bars to Evals", 2024: clustered standard errors; the cluster bootstrap is
its resampling form). A run without repeats has one attempt per pair (K = 1): a cluster is
``[value]`` and every figure is what it was; with ``marathon run --repeats K`` a cluster is the task's
K values (``runner.results.cells.scored_values``) and nothing else changes.

``pass_at_k`` and ``pass_hat_k`` are the estimators a report with repeats shows beside the means:
the chance that at least one (pass@k) or every one (pass^k) of k attempts solves a task, unbiased
from n >= k attempts of which c solved it (Chen et al. 2021; Yao et al. 2024, tau-bench).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from runner.results import stats

#: one task's values of one measure: its attempts' values (one per repeat)
Cluster = Sequence[float]


def task_mean(cluster: Cluster) -> float:
    """The task's value: the mean of its attempts' values."""
    return math.fsum(cluster) / len(cluster)


def task_means(clusters: Sequence[Cluster]) -> list[float]:
    """Each non-empty cluster's mean, in order (empty clusters are tasks without a value: skipped)."""
    return [task_mean(c) for c in clusters if len(c)]


def mean(clusters: Sequence[Cluster]) -> float | None:
    """The mean of task means (each task weighs the same, however many attempts it had)."""
    means = task_means(clusters)
    return math.fsum(means) / len(means) if means else None


def paired_differences(a: Sequence[Cluster], b: Sequence[Cluster]) -> list[float]:
    """Per task, a's task mean minus b's (the same tasks, in the same order); a task where either
    arm has no value is left out."""
    if len(a) != len(b):
        raise ValueError("paired clusters must list the same tasks")
    return [task_mean(x) - task_mean(y) for x, y in zip(a, b, strict=True) if len(x) and len(y)]


def bootstrap_ci(
    clusters: Sequence[Cluster],
    *,
    pooled: bool = False,
    resamples: int = stats.BOOTSTRAP_RESAMPLES,
    seed: int = stats.BOOTSTRAP_SEED,
    confidence: float = stats.CONFIDENCE,
) -> tuple[float, float] | None:
    """The cluster bootstrap's percentile interval of the mean: tasks resampled with replacement,
    each bringing its task mean. With one attempt per task it is the plain bootstrap of the values
    (the same interval as ``stats.bootstrap_mean_ci`` of them).

    ``pooled``: the interval of the **pooled** mean instead (every value weighs the same, so a task
    of more values weighs more), each resample's mean taken over all its values. The total row of
    `status` shows the pooled mean of every arm's cells; its interval was of the mean of task means,
    another figure when tasks have unequal cells (a probe's "0.24 [0.00, 0.15]"). With equal
    clusters the two intervals are the same."""
    full = [c for c in clusters if len(c)]
    return stats.bootstrap_mean_ci(
        task_means(full),
        resamples=resamples,
        seed=seed,
        confidence=confidence,
        weights=[len(c) for c in full] if pooled else None,
    )


def spread(cluster: Cluster) -> float | None:
    """How much one task's attempts differ: the sample standard deviation of its values; None with
    fewer than two (a pair without repeats has no spread to show)."""
    k = len(cluster)
    if k < 2:
        return None
    m = math.fsum(cluster) / k
    return math.sqrt(math.fsum((v - m) ** 2 for v in cluster) / (k - 1))


def within_variance(clusters: Sequence[Cluster]) -> float | None:
    """The pooled within-task variance of single attempts (how much attempts of one task differ),
    over the tasks with at least two attempts; None when no task has two (K = 1: unknown)."""
    num = 0.0
    dof = 0
    for c in clusters:
        k = len(c)
        if k < 2:
            continue
        m = math.fsum(c) / k
        num += math.fsum((v - m) ** 2 for v in c)
        dof += k - 1
    return num / dof if dof else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k attempts solves the task), unbiased from n attempts with c solved:
    1 - C(n - c, k) / C(n, k)."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """P(all of k attempts solve the task) (pass^k), unbiased from n attempts with c solved:
    C(c, k) / C(n, k)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
