"""Money from the gateway's ledger: each attempt's tokens priced with LiteLLM's model cost map.

Why the ledger and not harbor's ``cost_usd``: harbor's figure is priced from the agent's own logs
(low or missing on timed-out trials, and written where the agent can write); the ledger's tokens
are the responses' own ``usage`` as they passed the wire (``runner.results.ledger``).

Why LiteLLM's map: a maintained table of every provider's prices, already installed (harbor prices
with it), read offline as data by ``modes.cost_map`` (the import would cost 3-6 s of CPU); its
identity (LiteLLM's version, the file's sha256) goes into every report.

How a call is priced, by the Responses API's own semantics (``usage.input_tokens`` INCLUDES
``input_tokens_details.cached_tokens``; ``usage.output_tokens`` INCLUDES
``output_tokens_details.reasoning_tokens``; the gateway records the four as they are, the scripted
model reports the same shape), so no token is counted twice:

- input (non-cached) = input - cached, at ``input_cost_per_token``;
- cached input at ``cache_read_input_token_cost`` (LiteLLM's rule: the input rate when the map has
  none);
- output (non-reasoning) = output - reasoning, at ``output_cost_per_token``;
- reasoning at ``output_cost_per_reasoning_token`` when the map has one, else the output rate (so
  for OpenAI's models, which have none, output_tokens x the output rate: what the provider bills);
- the call's ``service_tier`` (``flex``, ``priority``) picks LiteLLM's tier rates and a prompt above
  a model's ``*_above_<N>_tokens`` threshold its higher rates (``modes.cost_map.crossed_threshold``),
  as LiteLLM does. The ledger records the tier the request asked for, not the one billed.

A model the map does not know (``scripted/...`` among them) is **unpriced**: its cost is None with
its tokens and the reason, never $0; an attempt with any unpriced token has no cost at all (a sum of
part of its calls would read as the whole). An operator override (``--price MODEL=in,cached,out``,
USD per million tokens; reasoning at the output rate) prices a private deployment or the stand-in.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from modes import cost_map
from modes.values import USD, Bad, number
from runner.results.ledger import AttemptUsage, Ledger, PriceKey

PER_MILLION = 1_000_000
#: at most this many USD per million tokens in an override (the dearest model today is ~$600)
MAX_PER_MILLION = 1e6


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token; ``reasoning`` None: at the output rate. ``source``: where they come from."""

    input: float
    cached: float
    output: float
    reasoning: float | None
    source: str


@dataclass(frozen=True, slots=True)
class Override:
    """``--price MODEL=in,cached,out``: USD per million tokens for one model."""

    model: str
    input: float
    cached: float
    output: float

    def text(self) -> str:
        return f"{self.model}={self.input:g},{self.cached:g},{self.output:g}"

    def rates(self) -> Rates:
        return Rates(self.input / PER_MILLION, self.cached / PER_MILLION, self.output / PER_MILLION, None,
                     f"--price {self.text()}")  # fmt: skip

    def matches(self, model: str) -> bool:
        """The override's model is the call's, with or without a provider prefix (``openai/gpt-5.5``
        prices a call that names ``gpt-5.5``, as harbor's pricing looks it up)."""
        return self.model == model or _bare(self.model) == _bare(model)


def _bare(model: str) -> str:
    return model.split("/", 1)[-1]


def parse_price(text: str) -> Override:
    """``MODEL=in,cached,out`` (USD per million tokens) as an ``Override``; a ``ValueError`` with a
    one-line reason otherwise (the CLI shows it as is)."""
    model, sep, nums = str(text).partition("=")
    model = model.strip()
    parts = [p.strip() for p in nums.split(",")]
    if not sep or not model or len(parts) != 3:
        raise ValueError(f"--price {text!r}: expected MODEL=in,cached,out (USD per million tokens)")
    vals = []
    for what, p in zip(("input", "cached input", "output"), parts, strict=True):
        try:
            v = float(p)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and 0 <= v <= MAX_PER_MILLION):
            raise ValueError(
                f"--price {text!r}: the {what} price is not a number of USD from 0 to {MAX_PER_MILLION:g}"
            )
        vals.append(v)
    return Override(model, vals[0], vals[1], vals[2])


def parse_prices(items: Iterable[str]) -> tuple[Override, ...]:
    """Every ``--price`` item; a model given twice is an error (which one was meant?)."""
    got: dict[str, Override] = {}
    for item in items:
        o = parse_price(item)
        if o.model in got:
            raise ValueError(f"--price: {o.model} given twice")
        got[o.model] = o
    return tuple(got.values())


@dataclass(frozen=True, slots=True)
class Cost:
    """What some calls cost: ``usd`` None when any of their tokens is unpriced (``unpriced`` says
    which model and why); the tokens are there either way (input includes cached, output reasoning)."""

    usd: float | None
    input: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    unpriced: tuple[str, ...] = ()
    #: some of the calls were priced by an operator's ``--price`` (harbor, which prices with the map
    #: alone, cannot agree with those: the reconciliation compares tokens only then)
    overridden: bool = False
    #: calls the provider may have billed whose usage the ledger never got (``AttemptUsage.unmetered``):
    #: the figure is a lower bound by those
    unmetered: int = 0
    #: USD of the tokens that could be priced, whatever the rest (``usd`` when all were): what a
    #: spend cap counts, a lower bound when some are unpriced (``runner.results.caps.Tally``)
    at_least: float = 0.0
    #: USD of the unmetered calls' estimated tokens (``AttemptUsage.estimated``): the spend caps
    #: count it beside ``at_least``; in no other figure
    estimated: float = 0.0

    @property
    def for_caps(self) -> float:
        """What the spend caps count for these calls: the priced tokens and the unmetered calls'
        estimate."""
        return self.at_least + self.estimated

    @property
    def priced(self) -> bool:
        return self.usd is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "usd": None if self.usd is None else round(self.usd, 6),
            "input_tokens": self.input,
            "cached_input_tokens": self.cached,
            "output_tokens": self.output,
            "reasoning_tokens": self.reasoning,
            "unpriced": list(self.unpriced),
            "unmetered_calls": self.unmetered,
        }


def finite_costs(vals: Iterable[object]) -> list[float]:
    """The USD figures a sum may take: a NaN, inf, negative or non-number (an agent's file, a
    pricer's odd entry) never reaches one. The projection and the run's own spend sum through it."""
    return [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0]


def money_shown(s: Mapping[str, Any]) -> tuple[Any, Any, Any, bool]:
    """An arm's (cost, cost per solved, spend) as its table shows them, and whether they are the
    ledger's: the gateway's ledger's when the arm has calls on it ("unpriced" when any token is),
    harbor's own figures (the agent's logs, priced by harbor) otherwise. With a ledger harbor's
    figures are only reconciled with it: the demo's table showed harbor's $0.0000 for every arm (a
    model harbor's map lacks) beside the ledger's $10.88. The report's table and cost figure, `status`'s and the console's."""
    if s.get("ledger_spend_usd") is not None or s.get("cost_unpriced"):
        if s.get("cost_unpriced"):
            return "unpriced", "unpriced", "unpriced", True
        return s.get("ledger_cost_usd"), s.get("ledger_cost_per_solved"), s.get("ledger_spend_usd"), True
    return s.get("cost_usd"), s.get("cost_per_solved"), s.get("spend_usd"), False


def add_costs(costs: Iterable[Cost | None]) -> Cost | None:
    """The sum of the costs there are (None when none is); unpriced when any part is."""
    got = [c for c in costs if c is not None]
    if not got:
        return None
    if len(got) == 1 and (got[0].usd is None or not got[0].unpriced):
        return got[0]  # (most cells: one attempt; a Cost is immutable, so it is its own sum)
    why = tuple(dict.fromkeys(w for c in got for w in c.unpriced))
    usd = None if why or any(c.usd is None for c in got) else math.fsum(c.usd or 0.0 for c in got)
    return Cost(usd, sum(c.input for c in got), sum(c.cached for c in got), sum(c.output for c in got),
                sum(c.reasoning for c in got), why, any(c.overridden for c in got),
                sum(c.unmetered for c in got), math.fsum(c.at_least for c in got),
                math.fsum(c.estimated for c in got))  # fmt: skip


def _rate(entry: dict[str, Any], base: str, tier: str | None, threshold: str) -> float | None:
    """One per-token rate of a map entry as LiteLLM picks it: the prompt-size tier's rate (of the
    service tier, else standard), else the service tier's, else the standard one."""
    suffix = cost_map.TIER_SUFFIX.get((tier or "").lower())
    keys = (
        [f"{base}_above_{threshold}_tokens_{suffix}", f"{base}_above_{threshold}_tokens"] if threshold else []
    )
    keys += [f"{base}_{suffix}", base]
    for k in keys:
        if "_None" in k or k not in entry:
            continue
        v = number(entry[k], USD, k)  # the map is package data; a nonsense rate is no rate all the same
        if v is not None and not isinstance(v, Bad):
            return float(v)
    return None


@dataclass
class Pricer:
    """Prices a ledger's tokens: ``overrides`` first (``--price``, the run's recorded ones then the
    command's), else LiteLLM's map; ``default_model`` (the run's ``--model``) for a call whose
    request named none."""

    overrides: Sequence[Override] = ()
    default_model: str | None = None
    _cache: dict[PriceKey, Rates | str] = field(default_factory=dict)
    #: the run's recorded ``--price`` items that no longer parse (left out, said in ``source``)
    dropped: tuple[str, ...] = ()

    def rates(self, model: str | None, tier: str | None = None, threshold: str = "") -> Rates | str:
        """The rates of one ``PriceKey``, or why there are none."""
        key = (model, tier, threshold)
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = self._rates(model or self.default_model, tier, threshold)
        return got

    def _rates(self, model: str | None, tier: str | None, threshold: str) -> Rates | str:
        if not model:
            return "calls that name no model"
        for o in reversed(self.overrides):  # the last given wins (the command's over the run's)
            if o.matches(model):
                return o.rates()
        found = cost_map.lookup(model)
        if found is None:
            # the name is the agent's (its request's "model"): quoted, so the hint is safe to paste
            return f"{model}: not in LiteLLM's model cost map (give --price {shlex.quote(model + '=in,cached,out')})"
        key, entry = found
        if "tiered_pricing" in entry:
            return f"{model}: its map entry prices by tiers this reader does not apply (give --price)"
        inp, out = (
            _rate(entry, "input_cost_per_token", tier, threshold),
            _rate(entry, "output_cost_per_token", tier, threshold),
        )
        if inp is None or out is None:
            return f"{model}: LiteLLM's map has no per-token input and output price for it (give --price)"
        cached = _rate(entry, "cache_read_input_token_cost", tier, threshold)
        reasoning = _rate(entry, "output_cost_per_reasoning_token", tier, "")
        where = key + (f", {tier} tier" if tier and cost_map.TIER_SUFFIX.get(tier.lower()) else "")
        where += f", above {threshold} tokens" if threshold else ""
        return Rates(inp, inp if cached is None else cached, out, reasoning, f"LiteLLM map: {where}")

    def cost(self, usage: AttemptUsage | None) -> Cost | None:
        """One attempt's cost from its ledger usage; None when the ledger has no answered call of it
        and none cut short (those alone: $0 and their count, a lower bound)."""
        if usage is None or not (usage.with_usage or usage.unmetered):
            return None
        usd, why, overridden = 0.0, [], False
        parts = []
        for (model, tier, threshold), (inp, cached, out, reas) in sorted(usage.by_price.items(), key=str):
            r = self.rates(model, tier, threshold)
            if isinstance(r, str):
                why.append(r)
                continue
            overridden |= r.source.startswith("--price ")
            cached_n, reas_n = min(cached, inp), min(reas, out)
            parts += [(inp - cached_n) * r.input, cached_n * r.cached, (out - reas_n) * r.output,
                      reas_n * (r.output if r.reasoning is None else r.reasoning)]  # fmt: skip
        usd = math.fsum(parts)
        est = []
        for (model, tier, threshold), (inp, out) in usage.estimated.items():
            r = self.rates(model, tier, threshold)
            if not isinstance(r, str):  # (an unpriced model's calls are refused under caps)
                est += [inp * r.input, out * r.output]
        return Cost(None if why else usd, usage.input, usage.cached, usage.output, usage.reasoning,
                    tuple(dict.fromkeys(why)), overridden, usage.unmetered, usd, math.fsum(est))  # fmt: skip

    def source(self) -> dict[str, Any]:
        """Which prices: the map's identity and every override (the report's ``prices``)."""
        ident = cost_map.identity()
        return {
            "map": {"litellm_version": ident.litellm_version, "sha256": ident.sha256},
            "overrides": [o.text() for o in self.overrides],
            "default_model": self.default_model,
            "dropped": list(self.dropped),
        }

    def source_line(self) -> str:
        line = f"Prices: {cost_map.identity().text()}"
        if self.overrides:
            line += "; operator overrides (USD per million tokens in,cached,out): "
            line += ", ".join(o.text() for o in self.overrides)
        if self.dropped:
            line += "; the run's recorded --price items that no longer parse, left out: "
            line += ", ".join(self.dropped)
        return line + "."


def pricer_of(
    run_prices: Iterable[str] = (), given: Iterable[str] = (), default_model: str | None = None
) -> Pricer:
    """The pricer of a report or status: the run's recorded ``--price`` items, then the command's
    (which win for the same model). A recorded item that no longer parses is left out (the run
    checked it when it started); a given one that does not parse raises ``ValueError``."""
    recorded, dropped = [], []
    for item in run_prices:
        try:
            recorded.append(parse_price(item))
        except ValueError:
            dropped.append(str(item)[:120])  # said with the prices, never silent (a probe's find)
    mine = parse_prices(given)
    return Pricer(tuple(recorded) + mine, default_model, dropped=tuple(dropped))


class Money:
    """The ledger's cost of attempts and cells under one pricer, each attempt priced once."""

    def __init__(
        self, ledger: Ledger, pricer: Pricer, cut: frozenset[tuple[str, str, str]] = frozenset()
    ) -> None:
        self.ledger = ledger
        self.pricer = pricer
        #: the attempts their own spend cap ended (the gateway's records, ``runner.results.caps``)
        self.cut = cut
        self._of: dict[tuple[str, str, str], Cost | None] = {}

    @property
    def exists(self) -> bool:
        return bool(self.ledger.attempts)

    def attempt(self, a: Any) -> Cost | None:
        """An attempt's cost (``runner.results.attempts.Attempt``); None without ledger usage."""
        k = (a.task, a.arm_dir, a.stamp)
        if k not in self._of:
            self._of[k] = self.pricer.cost(self.ledger.usage(*k))
        return self._of[k]

    def forget(self, attempts: Iterable[Any]) -> None:
        """Price these attempts again when next asked (their ledger lines grew): a reader that keeps
        one ``Money`` across updates re-prices only what changed."""
        for a in attempts:
            self._of.pop((a.task, a.arm_dir, a.stamp), None)

    def scored(self, c: Any) -> Cost | None:
        """A done cell's cost as its arm's: its scoring attempts' (one per done repeat)."""
        if c.status != "done" or not self.ledger.attempts:  # no ledger: no attempt has a cost from it
            return None
        stamps = {p.scored_by for p in c.parts if p.status == "done"}
        return add_costs(self.attempt(a) for a in c.attempts if a.stamp in stamps)

    def spend_capped(self, c: Any) -> bool:
        """A done cell whose scoring attempt its own spend cap ended (``--max-spend-attempt``): scored
        like a deadline, shown as such."""
        if c.status != "done" or not self.cut:
            return False
        stamps = {p.scored_by for p in c.parts if p.status == "done"}
        return any((a.task, a.arm_dir, a.stamp) in self.cut for a in c.attempts if a.stamp in stamps)

    def spend(self, c: Any) -> Cost | None:
        """What the cell cost the run: every attempt, errored, voided and running ones too."""
        if not self.ledger.attempts:
            return None
        return add_costs(self.attempt(a) for a in c.attempts)
