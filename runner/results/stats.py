"""The statistics behind the report: exact tests, bootstrap intervals and the Holm correction.

Why exact tests and the bootstrap: a comparison run has a handful of tasks per arm (15-20), far
too few for normal approximations. Why a fixed seed: the same tree must give the same report, so
a reader can reproduce every interval; the seed is recorded in the report. Why Holm: five arms
make ten pairs, and the smallest of ten sign-test p-values is small by chance alone. numpy only:
the runner does not pull scipy in (the tests check these figures against scipy).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from math import fsum
from typing import Any

#: Resamples of every bootstrap interval (the field's usual 10,000).
BOOTSTRAP_RESAMPLES = 10_000
#: The bootstrap's seed: fixed so that a report is reproducible; recorded in the report.
BOOTSTRAP_SEED = 20_261_201
CONFIDENCE = 0.95
#: two scores (or differences, or a spread) closer than this are equal: scores live in [0, 1] and a
#: task's mean of its repeats carries float rounding (the mean of 0.1 and 0.7 is
#: 0.39999999999999997, not 0.4): compared exactly, tied tasks read as wins and losses and a
#: constant difference had a spread (found by a probe)
SCORE_TOL = 1e-9
#: resampled values held at once by a bootstrap (8 MiB of indices, as much again of values)
CHUNK_VALUES = 1 << 20


def tally(pairs: Sequence[tuple[float, float]]) -> tuple[int, int, int]:
    """(wins, losses, ties) of the first of each pair over the second, equal within ``SCORE_TOL``."""
    wins = sum(1 for x, y in pairs if x - y > SCORE_TOL)
    losses = sum(1 for x, y in pairs if y - x > SCORE_TOL)
    return wins, losses, len(pairs) - wins - losses


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test for the 2x2 table [[a, b], [c, d]].

    Sums the probabilities of every table with the same margins that is no more likely than the
    observed one (the usual two-sided definition, as in R's fisher.test and scipy), with scipy's
    relative tolerance of 1e-7 for "no more likely".

    The probabilities are taken relative to the most likely table, each from its neighbour's by
    the hypergeometric ratio P(k+1) / P(k) = (row1 - k)(col1 - k) / ((k + 1)(n - row1 - col1 + k + 1)):
    exact binomials of a 10,000-attempt tree are numbers of thousands of digits (that took seconds),
    and a log-probability per table took 9 lgamma calls each.
    """
    if min(a, b, c, d) < 0:
        raise ValueError("counts must be non-negative")
    row1, col1, n = a + b, a + c, a + b + c + d
    if n == 0 or row1 in (0, n) or col1 in (0, n):
        return 1.0
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    rest = n - row1 - col1
    mode = min(max((row1 + 1) * (col1 + 1) // (n + 2), lo), hi)
    rel = {mode: 1.0}
    r = 1.0
    for k in range(mode, hi):  # upwards from the mode
        r *= (row1 - k) * (col1 - k) / ((k + 1) * (rest + k + 1))
        if r == 0.0:
            break
        rel[k + 1] = r
    r = 1.0
    for k in range(mode, lo, -1):  # downwards
        r *= k * (rest + k) / ((row1 - k + 1) * (col1 - k + 1))
        if r == 0.0:
            break
        rel[k - 1] = r
    limit = rel.get(a, 0.0) * (1 + 1e-7)
    p = fsum(v for v in rel.values() if v <= limit) / fsum(rel.values())
    return min(1.0, p)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (binomial, p = 1/2) on paired wins vs losses; ties are dropped."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    # C(n, i) built from C(n, i - 1): the same exact integers as comb(n, i), without computing each
    # anew (a 2,000-task pair took 30 ms)
    total, term = 0, 1
    for i in range(k + 1):
        total += term
        term = term * (n - i) // (i + 1)
    return min(1.0, 2 * total / 2**n)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bootstrap_mean_ci(
    values: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    weights: Sequence[float] | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values``; None when there are none.

    For a paired comparison pass the per-task differences: resampling tasks with replacement and
    averaging their differences is the paired bootstrap (``scipy.stats.bootstrap(..., paired=True,
    method="percentile")`` draws the same indices from the same generator). A fresh generator per
    call makes each interval independent of which other arms or pairs are in the report.

    ``weights``: each value's weight in the mean of a resample (a task's mean weighted by its cells:
    the pooled mean of the cells of the resampled tasks, what the total row shows); equal weights
    are the plain mean, the same interval as without them.
    """
    if weights is not None and len(set(weights)) <= 1:
        weights = None
    key = None
    memo = _remembered  # read once: another thread may leave its remembered_intervals meanwhile
    if memo is not None:
        key = interval_key(values, resamples, seed, confidence, weights)
        got = memo.get(key)
        if got is not None:
            return got
    import numpy as np  # here, not at the top: `marathon status` with remembered intervals never needs it

    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return None
    w = None if weights is None else np.asarray(weights, dtype=float)
    means = bootstrap_means(x, resamples, np.random.default_rng(seed), w)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    if memo is not None and key is not None:
        memo[key] = (float(lo), float(hi))
    return float(lo), float(hi)


def bootstrap_means(x: Any, resamples: int, rng: Any, w: Any = None) -> Any:
    """The means of ``resamples`` resamples of the array ``x`` with replacement, drawn from ``rng``
    (a numpy ``Generator``), as an array: the one resampling of every bootstrap here.

    In chunks of resamples: one (resamples x n) index array is 1.6 GB for 10,000 values (and 320 MB
    for an arm's 2,010 tasks, which `marathon status` once held for the spend projection); drawn
    row after row from one generator, the chunks are the same draws (scipy's ``batch``)."""
    import numpy as np

    n = x.size
    rows = max(1, CHUNK_VALUES // n)
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        k = min(rows, resamples - start)
        idx = rng.integers(0, n, (k, n))
        if w is None:
            means[start : start + k] = x[idx].mean(axis=-1)
        else:  # the weighted mean of each resample (``bootstrap_mean_ci``'s ``weights``)
            means[start : start + k] = (x * w)[idx].sum(axis=-1) / w[idx].sum(axis=-1)
    return means


#: Intervals already computed, by their inputs (``interval_key``); the scan index installs its own
#: (``runner.results.index.remembered_intervals``). An interval is a pure function of its inputs and
#: numpy's generator, so a remembered one is the same interval.
_remembered: dict[str, tuple[float, float]] | None = None


def interval_key(
    values: Sequence[float],
    resamples: int,
    seed: int,
    confidence: float,
    weights: Sequence[float] | None = None,
) -> str:
    """What a bootstrap interval depends on: the values in order, the parameters, numpy's version
    (and the weights, when there are: an unweighted interval keeps the key it always had)."""
    import hashlib

    global _NUMPY
    if _NUMPY is None:
        _NUMPY = _numpy_version()
    parts: tuple = ([float(v) for v in values], resamples, seed, confidence, _NUMPY)
    if weights is not None:
        parts += ([float(v) for v in weights],)
    text = repr(parts)
    return hashlib.sha256(text.encode()).hexdigest()


_NUMPY: str | None = None


def _numpy_version() -> str:
    """numpy's version file, found without importing numpy (or importlib.metadata: 40 ms)."""
    from importlib.util import find_spec

    spec = find_spec("numpy")
    if spec is None or spec.origin is None:
        return "none"
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return spec.origin


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (same order as given).

    The k-th smallest p is multiplied by (m - k + 1), then made monotone and capped at 1; it
    controls the chance of any false "significant" pair across all pairs, without assuming the
    pairs are independent (they share arms).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
