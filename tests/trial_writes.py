"""A trial finished again, written the way harbor writes a finishing trial, for the tests and the
console bench that change a tree under a watching console.

Why the order matters: harbor writes the verifier's files, then ``result.json`` with the verifier's
finish time. A verifier file rewritten alone is newer than that time, and the console shows the
cell as tampered (``runner.results.records.tampered``), never the new value.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path


def _replace(path: Path, data: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(data)
    os.replace(tmp, path)


def finish_trial(trial: Path, verifier: dict[str, str], reward: float | None = None) -> list[str]:
    """Write ``verifier`` (file name under ``verifier/`` -> text) atomically, then ``result.json``
    with the verifier finishing now (and ``reward`` as its reward, when given); the paths written."""
    paths = []
    for name, text in verifier.items():
        p = trial / "verifier" / name
        _replace(p, text)
        paths.append(str(p))
    result = trial / "result.json"
    r = json.loads(result.read_text())
    r.setdefault("verifier", {})["finished_at"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    if reward is not None and isinstance(r.get("verifier_result"), dict):
        r["verifier_result"]["rewards"] = {"reward": reward}
    _replace(result, json.dumps(r))
    return [*paths, str(result)]
