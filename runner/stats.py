"""Small exact tests in the standard library: Fisher's exact test and the sign test.

Why exact tests: a comparison run has a handful of tasks per arm (15-20), far too few for
normal approximations; and the report must not pull scipy into the runner.
"""

from __future__ import annotations

from math import comb


def _hypergeom_pmf(k: int, row1: int, col1: int, n: int) -> float:
    return comb(col1, k) * comb(n - col1, row1 - k) / comb(n, row1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test for the 2x2 table [[a, b], [c, d]].

    Sums the probabilities of every table with the same margins that is no more likely than the
    observed one (the usual two-sided definition, as in R's fisher.test and scipy).
    """
    if min(a, b, c, d) < 0:
        raise ValueError("counts must be non-negative")
    row1, col1, n = a + b, a + c, a + b + c + d
    if n == 0 or row1 in (0, n) or col1 in (0, n):
        return 1.0
    lo, hi = max(0, row1 + col1 - n), min(row1, col1)
    p_obs = _hypergeom_pmf(a, row1, col1, n)
    eps = p_obs * 1e-7
    p = sum(pk for k in range(lo, hi + 1) if (pk := _hypergeom_pmf(k, row1, col1, n)) <= p_obs + eps)
    return min(1.0, p)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (binomial, p = 1/2) on paired wins vs losses; ties are dropped."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    p = 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, p)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
