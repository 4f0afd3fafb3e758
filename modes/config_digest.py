"""The two hashes of an arm's ``config.toml``: exact, and with the declared differences masked.

Why two: the exact hash says which file codex ran with; the normalised one is what the fairness
audit compares across arms. It is the sha256 of the parsed config (canonical JSON, keys sorted)
with every key that ``modes.profiles`` declares masked removed, for every arm alike, so the arms'
normalised hashes are equal exactly when they differ only where the design says they may.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from typing import Any

from modes.profiles import masked_config_keys


def _pop(table: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    """Remove a dotted key; a table it leaves empty goes too (absent and empty are one config)."""
    *parents, last = dotted.split(".")
    chain = [table]
    for p in parents:
        nxt = chain[-1].get(p)
        if not isinstance(nxt, dict):
            return False, None
        chain.append(nxt)
    if last not in chain[-1]:
        return False, None
    value = chain[-1].pop(last)
    for parent, name in zip(reversed(chain[:-1]), reversed(parents), strict=True):
        if parent[name] == {}:
            del parent[name]
    return True, value


def config_digests(text: str, masked_keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``{"sha256", "normalized_sha256", "masked_keys", "masked_values"}`` of one config.toml text.

    ``masked_values`` are the masked keys this config set (the values are config, never secrets:
    the credential appears as the name of its variable only).
    """
    keys = masked_config_keys() if masked_keys is None else tuple(masked_keys)
    data = tomllib.loads(text)
    values = {}
    for k in keys:
        found, v = _pop(data, k)
        if found:
            values[k] = v
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return {
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "normalized_sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "masked_keys": list(keys),
        "masked_values": values,
    }
