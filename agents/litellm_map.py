"""What the arms need of LiteLLM's model map, read as data: without ``import litellm``.

Why: ``import litellm`` costs 3-6 s of CPU, and harbor 0.25.0 does it in every harbor process that
runs an arm: its preflight parses ``-m`` into a provider, and its codex rollout converter (rollouts ->
ATIF ``trajectory.json``) parses the name again and prices each API call. On a run of hundreds of
attempts that was the largest share of the runner host's CPU per trial (benchmarks/ci_cost.py;
docs/benchmarks.md). The map is LiteLLM's bundled copy, read from the installed package (the runner
keeps ``LITELLM_LOCAL_MODEL_COST_MAP=True``, so LiteLLM itself reads that same file). Here:

- ``split_model_name``: ``provider/model`` as LiteLLM splits a name whose prefix is a provider it
  knows, else the name whole with no provider (what LiteLLM gives for a name it cannot resolve);
- ``converter``: harbor's own converter, with two changes that keep its output: the model name is
  not parsed again (``skip_model_parsing``; the trajectory records the name as given, as before);
- a call is priced by harbor's own LiteLLM pricing only when LiteLLM's model cost map has the model
  (the same two keys harbor tries); a model it does not have gets ``None`` without the import,
  exactly as harbor gives it after the import. The map is read by ``modes.cost_map`` (the one
  reader; the results price the gateway's ledger from it too).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from modes.cost_map import cost_map as _cost_map
from modes.cost_map import lookup


def cost_map_models() -> frozenset[str]:
    """The model keys of the map."""
    return frozenset(_cost_map())


@cache
def providers() -> frozenset[str]:
    """Every ``litellm_provider`` the map names."""
    return frozenset(str(v["litellm_provider"]) for v in _cost_map().values() if v.get("litellm_provider"))


def split_model_name(model_name: str) -> tuple[str | None, str]:
    """(provider, model) as LiteLLM resolves the names the arms take: ``provider/model`` with a
    provider the map knows; a bare model the map lists, with its provider; else (None, the name)."""
    provider, sep, model = model_name.partition("/")
    if sep and model and provider in providers():
        return provider, model
    entry = _cost_map().get(model_name) if not sep else None
    if entry and entry.get("litellm_provider"):
        return str(entry["litellm_provider"]), model_name
    return None, model_name


def priceable(model_name: str | None) -> bool:
    """Would harbor's pricing find ``model_name`` in LiteLLM's map (as given, or after its first /)?"""
    return lookup(model_name) is not None


def converter(logs_dir: Path, model_name: str) -> Any:
    """harbor's codex converter for ``logs_dir`` (``convert_trajectory(logs_dir)``), as above."""
    from harbor.agents.installed.codex import Codex

    class RolloutConverter(Codex):
        def _compute_cost_from_pricing(self, *args: Any, **kwargs: Any) -> float | None:
            if not priceable(kwargs.get("model_name") or self.model_name):
                return None
            return super()._compute_cost_from_pricing(*args, **kwargs)

    return RolloutConverter(logs_dir=logs_dir, model_name=model_name, skip_model_parsing=True)
