"""LiteLLM's bundled model cost map, read as data: the one reader, without ``import litellm``.

Why here: the arms (``agents.litellm_map``: harbor's name parsing and pricing without the 3-6 s
import) and the results (``runner.results.prices``: the gateway's ledger priced) read the same
table, and ``modes`` is the leaf both may import. The map is LiteLLM's bundled copy in the installed
package (the runner keeps ``LITELLM_LOCAL_MODEL_COST_MAP=True``, so LiteLLM itself reads that same
file): offline, and the same on every host of a run with the same lock file. ``identity`` names it
(LiteLLM's version and the file's sha256) so a report says which prices it used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: LiteLLM's bundled cost map, in its package directory
COST_MAP_FILE = "model_prices_and_context_window_backup.json"


@dataclass(frozen=True, slots=True)
class MapIdentity:
    """Which map: LiteLLM's version (package metadata) and the file's sha256; None when missing."""

    litellm_version: str | None
    sha256: str | None
    path: str | None

    def text(self) -> str:
        if self.sha256 is None:
            return "LiteLLM's model cost map: not found (nothing priced from it)"
        return f"LiteLLM {self.litellm_version or '?'} model cost map (sha256 {self.sha256[:12]})"


@cache
def _read() -> tuple[dict[str, dict[str, Any]], MapIdentity]:
    spec = importlib.util.find_spec("litellm")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / COST_MAP_FILE
        try:
            raw = path.read_bytes()
            data = json.loads(raw)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            # here, not at the top: 20 ms of imports that `marathon status` without a ledger never needs
            from importlib import metadata

            try:
                version: str | None = metadata.version("litellm")
            except metadata.PackageNotFoundError:
                version = None
            ident = MapIdentity(version, hashlib.sha256(raw).hexdigest(), str(path))
            return {k: v for k, v in data.items() if isinstance(v, dict)}, ident
    return {}, MapIdentity(None, None, None)


def cost_map() -> dict[str, dict[str, Any]]:
    """The map (model key -> entry); empty when the package or the file is missing (then nothing is
    priced from it, as harbor does without LiteLLM). Read once per process; treat as read-only."""
    return _read()[0]


def identity() -> MapIdentity:
    return _read()[1]


def lookup(model_name: str | None) -> tuple[str, dict[str, Any]] | None:
    """(key, entry) of ``model_name`` as harbor's pricing looks it up: the name as given, else after
    its first ``/`` (``openai/gpt-5.5`` -> ``gpt-5.5``); None when the map has neither."""
    if not model_name:
        return None
    m = cost_map()
    for key in (model_name, model_name.split("/", 1)[-1]):
        if m.get(key):
            return key, m[key]
    return None


#: LiteLLM's cost-key suffix per request ``service_tier`` (its ``_SERVICE_TIER_TO_COST_KEY_SUFFIX``):
#: ``input_cost_per_token_flex`` etc.; a tier not named here is priced at the standard rates
TIER_SUFFIX = {"flex": "flex", "balanced": "balanced", "priority": "priority", "fast": "priority",
               "ultrafast": "ultrafast"}  # fmt: skip
#: the per-token rates LiteLLM raises above a prompt size (``<base>_above_<N>_tokens``)
TIERED_RATES = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost",
                "cache_creation_input_token_cost")  # fmt: skip
_ABOVE = re.compile(rf"^(?:{'|'.join(TIERED_RATES)})_above_(\d+k?)_tokens(?:_([a-z]+))?$")


def _tokens_of(threshold: str) -> int:
    return int(threshold[:-1]) * 1000 if threshold.endswith("k") else int(threshold)


def crossed_threshold(model_name: str | None, service_tier: str | None, prompt_tokens: int) -> str:
    """The prompt-size tier one call is priced at, as LiteLLM picks it: the largest ``N`` of the
    model's ``*_above_<N>_tokens`` rates (standard, or of the call's service tier) that the call's
    prompt (input tokens, cached ones included) exceeds; ``""`` below every one or without any.

    Why per call: LiteLLM prices a long prompt's whole call (input, cached and output) at the higher
    rates (e.g. above 272k tokens), so a ledger summed before pricing would under-price it."""
    for tokens, label in _thresholds(model_name, (service_tier or "").lower()):
        if prompt_tokens > tokens:
            return label
    return ""


@cache
def _thresholds(model_name: str | None, service_tier: str) -> tuple[tuple[int, str], ...]:
    """The model's prompt-size tiers for the service tier, largest first (the map is read once per
    process, so once per model and tier: a ledger of 150,000 calls asks for every one of them)."""
    found = lookup(model_name)
    if found is None:
        return ()
    suffix = TIER_SUFFIX.get(service_tier)
    tiers: dict[int, str] = {}
    for key in found[1]:
        m = _ABOVE.match(key)
        if m is None or (m.group(2) is not None and m.group(2) != suffix):
            continue
        tiers[_tokens_of(m.group(1))] = m.group(1)
    return tuple(sorted(tiers.items(), reverse=True))
