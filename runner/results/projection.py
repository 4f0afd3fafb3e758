"""Where the run's money is going: spend so far, spend rate, projected total at completion with an
interval, and the time to a cap. One pure function (``project``) and its reading of a model
(``projection_of``), used by ``marathon status`` and the console alike.

Why per arm: the arms' costs per attempt differ several-fold (the field's cells: $368-$973 per arm
on 15 tasks), so a run-wide mean would project the cheap arm's pairs at the dear arm's price. Each
arm's pairs left are projected at the mean ledger cost of that arm's done attempts
(``runner.results.prices``); a running attempt is projected at that mean less what it already
spent (never less than nothing), so its spend so far is not counted twice.

Why a bootstrap for the interval: per-attempt costs are skewed (a few long attempts cost most), so a
t interval on the mean would be symmetric where the uncertainty is not. Each arm's done costs are
resampled (percentile bootstrap, ``stats.BOOTSTRAP_RESAMPLES`` draws, fixed seed, numpy), the total
recomputed per draw over all arms at once, and the 2.5/97.5 percentiles taken: one interval for the
sum, not a sum of per-arm intervals (which would be too wide). An arm with pairs left and fewer than
two done attempts has no spread yet: the total then has no interval (and no projection at all when
an arm with pairs left has no done attempt).

What it does not know: errored and voided pairs are counted as left (the runner's next pass retries
them), and a retry's cost is projected like a done attempt's; attempts without a ledger (no gateway)
add nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runner.results import stats
from runner.results.attempts import DONE, ERRORED, PENDING, RUNNING, VOIDED
from runner.results.prices import finite_costs
from runner.results.runs import span_sec

#: fewer done attempts than this give a projection but no interval
MIN_FOR_INTERVAL = 2


@dataclass(frozen=True)
class ArmSpend:
    """One arm's inputs: what it spent (every attempt), its done attempts' costs, the pairs not
    started (or to be retried), and what each running attempt has spent so far."""

    spent: float
    done_costs: Sequence[float] = ()
    pending: int = 0
    running_spent: Sequence[float] = ()


@dataclass(frozen=True)
class ArmProjection:
    arm: str
    spent: float
    done: int
    mean: float | None
    left: int  # pending + running
    projected: float | None
    interval: tuple[float, float] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "spent_usd": _r(self.spent),
            "done": self.done,
            "mean_usd": _r(self.mean),
            "left": self.left,
            "projected_usd": _r(self.projected),
            "projected_interval": [_r(v) for v in self.interval] if self.interval else None,
        }


@dataclass(frozen=True)
class Projection:
    spent: float | None
    rate_per_hour: float | None
    projected: float | None
    interval: tuple[float, float] | None
    arms: dict[str, ArmProjection] = field(default_factory=dict)
    cap: float | None = None
    time_to_cap_sec: float | None = None  # at the current rate; 0 when reached
    cap_before_completion: bool | None = None  # the projected total passes the cap
    unpriced: tuple[str, ...] = ()
    elapsed_sec: float | None = None
    #: the tokens per hour the current run's own attempts spent (``rate_per_hour``'s tokens)
    tokens_per_hour: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "spent_usd": _r(self.spent),
            "rate_usd_per_hour": _r(self.rate_per_hour),
            "rate_tokens_per_hour": None if self.tokens_per_hour is None else round(self.tokens_per_hour),
            "projected_usd": _r(self.projected),
            "projected_interval": [_r(v) for v in self.interval] if self.interval else None,
            "interval_method": f"percentile bootstrap of each arm's done costs, {stats.BOOTSTRAP_RESAMPLES} draws, "
            f"seed {stats.BOOTSTRAP_SEED}, {stats.CONFIDENCE:.0%}",
            "cap_usd": self.cap,
            "time_to_cap_sec": None if self.time_to_cap_sec is None else round(self.time_to_cap_sec, 1),
            "cap_before_completion": self.cap_before_completion,
            "elapsed_sec": None if self.elapsed_sec is None else round(self.elapsed_sec, 1),
            "unpriced": list(self.unpriced),
            "arms": {a: p.as_dict() for a, p in self.arms.items()},
        }

    def text(self) -> str:
        """One line for a terminal or the console's bar."""
        if self.unpriced:
            return "spend: unpriced (" + "; ".join(self.unpriced) + ")"
        if self.spent is None:
            return "spend: no ledger yet"
        out = f"spend ${self.spent:.2f}"
        if self.rate_per_hour is not None:
            out += f" (${self.rate_per_hour:.2f}/h)"
        if self.projected is not None:
            out += f"; projected ${self.projected:.2f}"
            if self.interval:
                out += f" [{self.interval[0]:.2f}, {self.interval[1]:.2f}]"
            out += " at completion"
        elif any(p.projected is None for p in self.arms.values()):
            out += "; projection: an arm with pairs left has no done attempt yet"
        if self.cap is not None:
            if self.time_to_cap_sec == 0:
                out += f"; cap ${self.cap:.2f} reached"
            elif self.time_to_cap_sec is not None:
                out += f"; cap ${self.cap:.2f} in {self.time_to_cap_sec / 3600:.1f} h at this rate"
            else:
                out += f"; cap ${self.cap:.2f}"
        return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def project(
    arms: Mapping[str, ArmSpend],
    elapsed_sec: float | None = None,
    cap: float | None = None,
    in_run: tuple[float, int] | None = None,
) -> Projection:
    """The projection of a run from each arm's spend (pure: the same inputs, the same figures).
    ``in_run``: the USD and tokens the current run's own attempts spent in its ``elapsed_sec`` (the
    rates); without it, every arm's spend is taken as the run's."""
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    draws = stats.BOOTSTRAP_RESAMPLES
    spent_total = math.fsum(a.spent for a in arms.values() if math.isfinite(a.spent) and a.spent >= 0)
    per: dict[str, ArmProjection] = {}
    boot = np.full(draws, spent_total)
    complete, with_interval = True, True
    for name, a in arms.items():
        costs, running = finite_costs(a.done_costs), np.array(finite_costs(a.running_spent))
        left = a.pending + len(running)
        spent = a.spent if math.isfinite(a.spent) and a.spent >= 0 else 0.0
        if not costs:
            complete = complete and left == 0
            with_interval = with_interval and left == 0
            per[name] = ArmProjection(name, spent, 0, None, left, spent if left == 0 else None, None)
            continue
        mean = math.fsum(costs) / len(costs)
        projected = spent + mean * a.pending + float(np.maximum(mean - running, 0).sum())
        interval = None
        if left and len(costs) >= MIN_FOR_INTERVAL:
            arr = np.array(costs)
            means = stats.bootstrap_means(arr, draws, rng)  # chunked: bounded memory for any arm
            more = means * a.pending + np.maximum(means[:, None] - running[None, :], 0).sum(axis=1)
            boot += more
            lo, hi = np.percentile(spent + more, [50 * (1 - stats.CONFIDENCE), 50 * (1 + stats.CONFIDENCE)])
            interval = (float(lo), float(hi))
        elif left:
            with_interval = False
        else:
            interval = (spent, spent)
        per[name] = ArmProjection(name, spent, len(costs), mean, left, projected, interval)
    total = spent_total + math.fsum(p.projected - p.spent for p in per.values() if p.projected is not None)
    total_iv = None
    if complete and with_interval:
        lo, hi = np.percentile(boot, [50 * (1 - stats.CONFIDENCE), 50 * (1 + stats.CONFIDENCE)])
        total_iv = (float(lo), float(hi))
    rate = tok_rate = None
    if elapsed_sec and elapsed_sec > 0:
        usd_in_run, tok_in_run = in_run if in_run is not None else (spent_total, None)
        rate = usd_in_run * 3600.0 / elapsed_sec
        tok_rate = tok_in_run * 3600.0 / elapsed_sec if tok_in_run is not None else None
    to_cap = None
    if cap is not None:
        if spent_total >= cap:
            to_cap = 0.0
        elif rate:
            to_cap = (cap - spent_total) / rate * 3600.0
    return Projection(
        spent=spent_total,
        rate_per_hour=rate,
        projected=total if complete else None,
        interval=total_iv,
        arms=per,
        cap=cap,
        time_to_cap_sec=to_cap,
        cap_before_completion=(total > cap) if cap is not None and complete else None,
        elapsed_sec=elapsed_sec,
        tokens_per_hour=tok_rate,
    )


def projection_of(
    model: Any, money: Any, scope: str = "run", cap: float | None = None, now: float | None = None
) -> Projection:
    """The projection of a ``RunModel``'s cells (``scope``) priced by ``money``
    (``runner.results.prices.Money``): per arm, every attempt's ledger cost as spent, each done
    repeat's scoring attempt as a done cost, pending/errored/voided repeats as left, running ones
    with what they spent. Unpriced tokens anywhere: no figure, the reasons instead."""
    import time

    cells = model.scoped(scope)
    inputs: dict[str, dict[str, Any]] = {}
    unpriced: list[str] = []
    for (_task, arm), c in sorted(cells.items()):
        d = inputs.setdefault(arm, {"spent": [], "done": [], "pending": 0, "running": []})
        for a in c.attempts:
            cost = money.attempt(a)
            if cost is None:
                continue
            if cost.usd is None:
                unpriced += cost.unpriced
            else:
                d["spent"].append(cost.usd)
        for p in c.parts:
            if p.status == DONE:
                att = next((a for a in p.attempts if a.stamp == p.scored_by), None)
                cost = money.attempt(att) if att is not None else None
                if cost is not None and cost.usd is not None:
                    d["done"].append(cost.usd)
            elif p.status == RUNNING:
                live = [money.attempt(a) for a in p.attempts if a.status == RUNNING]
                d["running"].append(math.fsum(x.usd for x in live if x is not None and x.usd is not None))
            elif p.status in (PENDING, ERRORED, VOIDED):
                d["pending"] += 1
    elapsed = span_sec(model.run_pieces, now if now is not None else time.time())
    if unpriced:
        return Projection(
            None, None, None, None, cap=cap, unpriced=tuple(dict.fromkeys(unpriced)), elapsed_sec=elapsed
        )
    arms = {
        a: ArmSpend(math.fsum(finite_costs(d["spent"])), d["done"], d["pending"], d["running"])
        for a, d in inputs.items()
    }
    usd, tokens = model.run_spend(money)
    return project(arms, elapsed, cap, (usd or 0.0, tokens or 0))
