"""What a paired comparison could detect: minimum detectable effects and tasks needed.

The reader's question after "no significant difference between plain and goal" is whether the run
could have seen one. With 15 tasks every interval spans about 0.2, so a "no difference" is more
often a lack of power than a finding. For each paired comparison (per measure) this module gives:

- the **minimum detectable effect** (MDE): the smallest true mean difference the run detects with
  80 % power at the Holm-adjusted level, from the observed standard deviation of the per-task
  differences and the number of tasks both arms completed;
- the **tasks needed** to detect the observed difference with the same power at the same level,
  if the spread stays what it is.

Method (Miller, "Adding Error Bars to Evals", 2024, section 5; what ``statsmodels``'
``TTestPower`` computes for a paired test): the two-sided paired t test of the mean per-task
difference, its power from the noncentral t distribution with n - 1 degrees of freedom and
noncentrality d * sqrt(n), d = difference / sd. The level is the family-wise 5 % over Holm's m
pairs taken at Holm's strictest step, alpha / m: whichever pair has the smallest p is tested at that
level, so a difference as large as the MDE is detected at 80 % power whatever the other pairs show.
Tasks, not attempts, are the units: with repeats the values are averaged within a task first
(``runner.results.clusters``), and n is the number of tasks.

Why hand-written, not ``statsmodels`` (the tests check every figure against
``statsmodels.stats.power.TTestPower``): importing ``statsmodels.stats.power`` costs 1.8-3 s of
CPU and ``scipy.stats`` 1.3 s, against the 0.5 s a whole warm ``marathon report`` may take; neither
is a runtime dependency. What is written here is small: Student's t tail through the regularized
incomplete beta function (Lentz's continued fraction), and the noncentral t tail as a Simpson
integral over the chi distribution of the sample standard deviation, both in ``math`` only. The
results are remembered in the tree's index with the bootstrap intervals
(``runner.results.index.remembered_intervals``), so a warm report computes none of them again.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from runner.results import stats

#: the power every MDE and tasks-needed figure is stated at
POWER = 0.8
#: the family-wise level the Holm adjustment keeps (as the sign tests)
ALPHA = 0.05
#: tasks-needed searches stop here; beyond it the report says "more than"
MAX_TASKS = 1_000_000
#: one line for every report: what the figures mean
METHOD = (
    "two-sided paired t test of the mean per-task difference, exact power from the noncentral t "
    "distribution (as statsmodels' TTestPower), at the Holm-adjusted level alpha / m"
)
#: bumped when a figure this module computes changes for the same inputs (remembered results)
VERSION = 2  # 2: no spread within stats.SCORE_TOL (float rounding) gives no MDE

_SQRT2 = math.sqrt(2.0)


# ------------------------------------------------------------------------------------ Student's t


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if t < 0:
        return 1.0 - t_sf(-t, df)
    return 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))


def _t_logpdf(t: float, df: float) -> float:
    return (
        math.lgamma((df + 1) / 2)
        - math.lgamma(df / 2)
        - 0.5 * math.log(df * math.pi)
        - (df + 1) / 2 * math.log1p(t * t / df)
    )


def t_isf(p: float, df: float) -> float:
    """The t with P(T > t) = p (0 < p < 1): Newton's method on ``t_sf`` from the Cornish-Fisher
    expansion of the normal quantile, kept inside a bisection bracket."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p > 0.5:
        return -t_isf(1.0 - p, df)
    z = _norm_isf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    t = z + g1 / df + g2 / df**2
    lo, hi = 0.0, math.inf
    for _ in range(200):
        err = t_sf(t, df) - p
        if err > 0:
            lo = t
        else:
            hi = t
        if abs(err) <= 1e-15 * p:
            break
        step = err / math.exp(_t_logpdf(t, df))
        nxt = t + step
        if not lo < nxt < hi:  # Newton left the bracket: bisect (or double when unbounded)
            nxt = (lo + hi) / 2 if math.isfinite(hi) else max(2 * t, t + 1)
        if abs(nxt - t) <= 1e-14 * max(1.0, abs(t)):
            t = nxt
            break
        t = nxt
    return t


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT2)


def _norm_isf(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(1.0 - p) if p > 1e-300 else 38.5


# ------------------------------------------------------------------------------- noncentral t power


#: nodes per piece of the power integral
GL_NODES = 12


@lru_cache(maxsize=1)
def _gauss_legendre(k: int = GL_NODES) -> tuple[tuple[float, float], ...]:
    """Gauss-Legendre nodes and weights on [-1, 1] (Newton's method on the Legendre polynomial)."""
    out = []
    for i in range(1, k + 1):
        x = math.cos(math.pi * (i - 0.25) / (k + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, x
            for j in range(2, k + 1):
                p0, p1 = p1, ((2 * j - 1) * x * p1 - (j - 1) * p0) / j
            dp = k * (x * p1 - p0) / (x * x - 1)
            dx = p1 / dp
            x -= dx
            if abs(dx) < 1e-16:
                break
        out.append((x, 2 / ((1 - x * x) * dp * dp)))
    return tuple(out)


def ttest_power(d: float, n: int, alpha: float) -> float:
    """Power of the two-sided one-sample (paired) t test with ``n`` observations at level ``alpha``
    against a true standardized difference ``d`` (mean / sd):
    P(|T'| > t_crit), T' noncentral t with n - 1 degrees of freedom and noncentrality d sqrt(n).

    With T' = (Z + delta) / W, Z standard normal and W = sqrt(chi2_df / df) independent:
    P(T' > c) + P(T' < -c) = E_W[ Phi(delta - c W) + Phi(-delta - c W) ], integrated over W's
    density (proportional to w^(df-1) exp(-df w^2 / 2); mode near 1, spread about
    1 / sqrt(2 df)) by Gauss-Legendre on pieces cut where the integrand bends: around W's mode,
    and where each Phi turns over (w near delta / c and near 0, on a scale of 1 / c).
    """
    if n < 2:
        raise ValueError("a t test needs two observations")
    df = n - 1
    c = t_isf(alpha / 2, df)
    delta = abs(d) * math.sqrt(n)
    spread = 1.0 / math.sqrt(2.0 * df)
    mode = math.sqrt((df - 1) / df)
    lo = max(0.0, mode - 16 * spread)
    hi = mode + 16 * spread + (6.0 if df < 8 else 0.0)
    cuts = {lo, hi}
    cuts.update(mode + k * spread for k in (-6, -2, 2, 6))
    cuts.update((delta + k) / c for k in (-6, -2, 2, 6))
    cuts.update(k / c for k in (2, 6))
    pts = sorted(x for x in cuts if lo <= x <= hi)
    logc = (df / 2) * math.log(df) - (df / 2 - 1) * math.log(2) - math.lgamma(df / 2)
    cdf, exp, log = _norm_cdf, math.exp, math.log
    total = 0.0
    for a, b in zip(pts, pts[1:], strict=False):
        half, mid = (b - a) / 2, (a + b) / 2
        if half <= 0:
            continue
        for x, wt in _gauss_legendre():
            w = mid + half * x
            dens = exp(logc + (df - 1) * log(w) - df * w * w / 2)
            cw = c * w
            total += half * wt * dens * (cdf(delta - cw) + cdf(-delta - cw))
    return min(1.0, max(0.0, total))


def _remembered(kind: str, inputs: tuple, compute) -> float:
    """A figure of this module through the tree's remembered results (``stats._remembered``): a pure
    function of its inputs and this module's VERSION."""
    memo = stats._remembered
    if memo is None:
        return compute()
    key = hashlib.sha256(repr(("power", VERSION, kind, inputs)).encode()).hexdigest()
    got = memo.get(key)
    if got is not None:
        return got[0]
    value = compute()
    memo[key] = (float(value), 0.0)
    return value


def min_detectable_d(n: int, alpha: float, power: float = POWER) -> float | None:
    """The smallest standardized difference (mean / sd of the differences) that ``n`` tasks detect
    with ``power`` at ``alpha``; None below two tasks."""
    if n < 2:
        return None
    return _remembered("mde", (n, float(alpha), float(power)), lambda: _solve_d(n, alpha, power))


def _solve_d(n: int, alpha: float, power: float) -> float:
    df = n - 1
    guess = (t_isf(alpha / 2, df) + t_isf(1 - power, df)) / math.sqrt(n)  # the t approximation
    lo, hi = 0.0, max(guess, 1e-6)
    for _ in range(200):  # a power no finite difference reaches in floats: no answer, not a hang
        if ttest_power(hi, n, alpha) >= power:
            break
        lo, hi = hi, 2 * hi
    else:
        return math.inf
    # Illinois' regula falsi on power(d) - target, bracketed in [lo, hi]
    flo, fhi = ttest_power(lo, n, alpha) - power, ttest_power(hi, n, alpha) - power
    side = 0
    d = hi
    for _ in range(100):
        d = (lo * fhi - hi * flo) / (fhi - flo)
        f = ttest_power(d, n, alpha) - power
        if abs(f) < 1e-12 or hi - lo < 1e-12 * hi:
            break
        if f * fhi > 0:
            hi, fhi = d, f
            if side == 1:
                flo /= 2
            side = 1
        else:
            lo, flo = d, f
            if side == -1:
                fhi /= 2
            side = -1
    return d


def tasks_needed_d(d: float, alpha: float, power: float = POWER) -> int | None:
    """The fewest tasks (at least 2) whose paired t test detects a standardized difference ``d``
    with ``power`` at ``alpha``; None for d = 0 or when more than ``MAX_TASKS`` would be needed."""
    d = abs(d)
    if not d > 0 or not math.isfinite(d):
        return None
    got = _remembered("n", (float(d), float(alpha), float(power)), lambda: _solve_n(d, alpha, power))
    return None if got < 0 else int(got)


def _solve_n(d: float, alpha: float, power: float) -> int:
    """The smallest n >= 2 with power >= target (-1: more than MAX_TASKS), searched from Guenther's
    (1981) normal approximation with its correction, which is within a task or two of it."""

    def ok(n: int) -> bool:
        return n >= 2 and ttest_power(d, n, alpha) >= power

    za = _norm_isf(alpha / 2)
    root = (za + _norm_isf(1 - power)) / d  # inf for a d of 1e-320 (float division does not raise)
    if not root * root + za * za / 2 <= 2 * MAX_TASKS:  # (``** 2`` raised OverflowError for 1e-300)
        return -1
    guess = root * root + za * za / 2
    start = min(MAX_TASKS, max(2, math.ceil(guess)))
    step = 1
    if ok(start):  # walk down by doubling steps until a failing n brackets it
        hi, lo = start, start - 1
        while ok(lo):
            hi, step = lo, step * 2
            lo = max(1, hi - step)
    else:  # walk up
        lo, hi = start, start + 1
        while not ok(hi):
            if hi >= MAX_TASKS:
                return -1
            lo, step = hi, step * 2
            hi = min(MAX_TASKS, lo + step)
    while hi - lo > 1:  # not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ------------------------------------------------------------------------------- paired comparisons


def holm_alpha(family: int, alpha: float = ALPHA) -> float:
    """Holm's strictest level over ``family`` pairs: alpha / m (the level the smallest p meets)."""
    return alpha / max(1, family)


def sign_floor(alpha: float) -> int:
    """The fewest tasks with which the report's test, the two-sided exact sign test, can reach
    ``alpha`` at all: its smallest p, every task's difference one way, is 2 * 0.5 ** n (a tie counts
    for neither side, so a run with ties needs more). At Holm's strictest level alpha / m it is the
    fewest tasks a plan may name: with every pair at fewer, no pair passes Holm's first step (a
    probe's plan-size said 6 tasks for 3 arms at 0.05; 6 tasks one way give p 0.031 > 0.05 / 3)."""
    if not alpha > 0:
        raise ValueError(f"a level above 0: {alpha!r}")
    n = 1
    while 2.0 * 0.5**n > alpha and n < 1100:  # 0.5 ** 1075 is 0.0 in floats
        n += 1
    return n


def best_holm(untied: Sequence[int]) -> list[float]:
    """Per pair of a Holm family, the smallest Holm-adjusted sign-test p it could get: every one
    of its untied tasks one way (p = 2 * 0.5 ** n; a tie counts for neither side), and every other
    pair at its best too (a pair's adjusted p only grows when another's raw p does). Above the family
    level, no outcome of the run makes the pair significant, however large its difference: a review
    found three arms of six tasks each, every pair 6/0, Holm p 0.094, reported with an MDE of 0.13."""
    return stats.holm([stats.sign_test(n, 0) for n in untied])


def sd(values: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1 in the denominator); None below two values."""
    n = len(values)
    if n < 2:
        return None
    m = math.fsum(values) / n
    return math.sqrt(math.fsum([(v - m) * (v - m) for v in values]) / (n - 1))


@dataclass(frozen=True)
class PairPower:
    """One paired comparison's power figures (per measure), from the per-task differences."""

    n: int
    diff: float | None
    sd: float | None
    mde: float | None  # the smallest true |difference| detected with POWER at the level
    tasks_needed: int | None  # tasks to detect the observed difference (None: none observed / too many)
    needed_over_max: bool  # more than MAX_TASKS would be needed
    underpowered: bool  # |observed difference| < MDE: a "no difference" here is not evidence of none
    below_floor: bool = False  # its sign test could not pass Holm at all (``best_holm``): it detects nothing

    def as_dict(self, prefix: str) -> dict[str, float | int | bool | None]:
        return {
            f"{prefix}_sd": None if self.sd is None else round(self.sd, 4),
            f"{prefix}_mde": None if self.mde is None else round(self.mde, 4),
            f"{prefix}_tasks_needed": self.tasks_needed,
            f"{prefix}_tasks_needed_over": MAX_TASKS if self.needed_over_max else None,
            f"{prefix}_underpowered": self.underpowered,
            f"{prefix}_below_sign_floor": self.below_floor,
        }


def pair_power(
    diffs: Sequence[float], alpha: float, power: float = POWER, reachable: bool = True
) -> PairPower:
    """MDE and tasks needed of one paired comparison from its per-task differences (a - b, each
    averaged within its task first), at the Holm level ``alpha`` (alpha / m).

    ``reachable``: whether the pair's sign test could pass Holm at the family level at all
    (``best_holm``). When not, the pair detects no difference of any size: no MDE, and it is
    underpowered whatever it shows (one task's difference read "+0.30 [+0.30, +0.30]" with no
    caution). No spread (every difference equal) gives no MDE either: the t test is not defined
    there, and the tasks needed are the sign test's own at ``alpha``. No tasks needed are below that
    (``sign_floor(alpha)``: fewer cannot pass Holm's first step when every pair has as many)."""
    n = len(diffs)
    mean = math.fsum(diffs) / n if n else None
    floor = sign_floor(alpha)
    below = n > 0 and not reachable
    s = sd(diffs)
    observed = 0.0 if mean is None or abs(mean) <= stats.SCORE_TOL else mean  # rounding is no difference
    if mean is None or s is None or s <= stats.SCORE_TOL:  # no spread but float rounding's
        needed = floor if observed and n else None  # as many as the sign test needs (plan-size the same)
        return PairPower(n, mean, s, None, needed, False, below, below)
    d_min = None if below else min_detectable_d(n, alpha, power)
    mde = None if d_min is None else d_min * s
    needed = tasks_needed_d(observed / s, alpha, power) if observed else None
    if needed is not None:
        needed = max(needed, floor)
    over = observed != 0 and needed is None
    under = below or (mde is not None and abs(mean) < mde)
    return PairPower(n, mean, s, mde, needed, over, under, below)


#: the measures a paired comparison reports, in the order the report shows them
MEASURES = ("partial", "reward", "pass_rate")


def annotate(rows: list[dict], diffs: Mapping[tuple[str, str, str], Sequence[float]]) -> None:
    """Add each paired row's power figures per measure (``<measure>_sd``, ``_mde``,
    ``_tasks_needed``, ``_tasks_needed_over``, ``_underpowered``, ``_below_sign_floor``) from its
    per-task differences ``diffs[(a, b, measure)]``, at the Holm level over the rows that have a
    common task, and the row's ``sign_best_holm_p`` (``best_holm``)."""
    family = [r for r in rows if r.get("n")]
    level = holm_alpha(len(family))
    # the report's test is the sign test on partial wins and losses: whether it could pass at all
    # holds for the pair, whichever measure a figure is of
    for r, p in zip(family, best_holm([r.get("wins", 0) + r.get("losses", 0) for r in family]), strict=True):
        r["sign_best_holm_p"] = p
    for r in rows:
        reach = r.get("sign_best_holm_p", 0.0) <= ALPHA
        for m in MEASURES:
            r.update(pair_power(diffs.get((r["a"], r["b"], m)) or [], level, reachable=reach).as_dict(m))


def block(rows: list[dict]) -> dict:
    """The report's ``power`` block: method, power, alpha, the Holm family and level, and the
    differences below their MDE (``underpowered``: a "no difference" there is not evidence of none)."""
    family = sum(1 for r in rows if r.get("n"))
    under = [
        {
            "a": r["a"],
            "b": r["b"],
            "measure": m,
            "n": r.get(f"{m}_n"),
            "diff": r.get(f"{m}_diff"),
            "mde": r[f"{m}_mde"],
            "tasks_needed": r[f"{m}_tasks_needed"],
            "tasks_needed_over": r[f"{m}_tasks_needed_over"],
            "below_sign_floor": r.get(f"{m}_below_sign_floor", False),
            "untied": r.get("wins", 0) + r.get("losses", 0),
            "sign_best_holm_p": r.get("sign_best_holm_p"),
        }
        for r in rows
        for m in MEASURES
        if r.get(f"{m}_underpowered")
    ]
    return {
        "method": METHOD,
        "power": POWER,
        "alpha": ALPHA,
        "family": family,
        "alpha_holm": holm_alpha(family),
        "sign_floor_holm": sign_floor(holm_alpha(family)),  # at the strictest step: no tasks needed below it
        "max_tasks": MAX_TASKS,
        "underpowered": under,
    }


def fmt_signed(v: float | None, nd: int = 2) -> str:
    """``+0.06`` / ``\u22120.03``: a difference always carries its sign, and a zero (float rounding's
    -1e-17 too) reads ``+0.00`` (the underpowered line and plan-size read ``\u22120.00`` for it
    beside the table's ``+0.00``). Every format, `plan-size` and the report alike."""
    if v is None:
        return "-"
    t = f"{v:+.{nd}f}"
    if t.startswith("-") and float(t) == 0:
        t = "+" + t[1:]
    return t.replace("-", "\u2212")


def fmt_tasks(n: int | None, over: int | None = None) -> str:
    """Tasks needed for reading: ``52``, ``>1,000,000``, ``-`` (nothing observed to detect)."""
    if over:
        return f">{over:,}"
    return "-" if n is None else f"{n:,}"


def fmt_mde(v: float | None, below_floor: bool = False) -> str:
    """An MDE for reading: ``0.13``; ``>1`` past the scores' range (every measure is in [0, 1], so
    no true difference that large exists: the run detects none; a probe read ``3.11``), and below
    the sign test's floor (it detects none at all); ``-``."""
    if below_floor:
        return ">1"
    if v is None:
        return "-"
    return ">1" if v > 1 else f"{v:.2f}"


def fmt_level(alpha: float) -> str:
    return f"{alpha:.2g}"


def headline(block: Mapping) -> str:
    """What the MDE column means, for every format."""
    return (
        f"MDE: the smallest true difference this run detects with {block['power'] * 100:.0f} % power at the "
        f"Holm-adjusted level {fmt_level(block['alpha_holm'])} ({block['alpha']:g} over {block['family']} "
        f"pair(s)); tasks needed: to detect the observed difference at the same power and level, the "
        f"spread staying as observed. Method: {block['method']}. The report's test, the sign test, "
        f"passes Holm's first step only with {_floor_of(block)} or more untied tasks; a pair whose best "
        f"outcome could not pass Holm at {block['alpha']:g} detects nothing, and its MDE reads >1."
    )


def _floor_of(block: Mapping) -> int:
    got = block.get("sign_floor_holm")  # a report written before the floor was in it: computed now
    return got if isinstance(got, int) else sign_floor(block["alpha_holm"])


def underpowered_lines(block: Mapping, label=str) -> list[str]:
    """One line per pair with differences below its MDE: a "no difference" there is not evidence
    of none. ``label`` names a measure (``pass_rate`` -> ``pass rate``)."""
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for u in block.get("underpowered", []):
        by_pair.setdefault((u["a"], u["b"]), []).append(u)
    lines = []
    for (a, b), us in by_pair.items():
        ns = {u["n"] for u in us}
        one_n = len(ns) == 1  # else each measure says its own (a task may lack one measure's score)
        parts = []
        for u in us:
            if u["tasks_needed"] is None and not u.get("tasks_needed_over"):
                needs = "no difference observed"
            else:
                needs = f"{fmt_tasks(u['tasks_needed'], u.get('tasks_needed_over'))} tasks needed"
            n = "" if one_n else f"n = {u['n']}, "
            what = "" if u.get("below_sign_floor") else f" below MDE {fmt_mde(u['mde'])}"
            parts.append(f"{label(u['measure'])} {fmt_signed(u['diff'])}{what} ({n}{needs})")
        why = ""
        below = next((u for u in us if u.get("below_sign_floor")), None)
        if below is not None:  # the pair's own: its sign test could not pass Holm at all
            best = below.get("sign_best_holm_p")
            p = f"Holm p {best:.3g}" if isinstance(best, float) else "no p"
            why = (
                f"undetectable, its {below.get('untied', 0)} untied task(s) all one way (every pair at its "
                f"best) would give {p}, above {block['alpha']:g}: "
            )
        lines.append(
            f"{a} vs {b}" + (f" (n = {next(iter(ns))})" if one_n else "") + ": " + why + "; ".join(parts)
        )
    return lines
