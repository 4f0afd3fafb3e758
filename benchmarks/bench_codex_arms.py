"""Figures for the codex arms' harness overhead, read from the receipts of real trials.

    uv run python benchmarks/bench_codex_arms.py <dir with trials> [...]

For every ``agent/goal_receipt.json`` below the given dirs: time from run() start to the end of the
preflight (container lookup, sidecar + version check, config write), to the first turn (app-server
start, initialize, thread/start), and the whole agent phase; grouped by arm and model (scenario).
Also times ``codex --version`` of the staged binary on the host. Prints figures; asserts nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path


def _ts(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def main(argv: list[str]) -> int:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for root in argv or ["."]:
        for path in Path(root).rglob("agent/goal_receipt.json"):
            try:
                rec = json.loads(path.read_text())
                groups[(rec["arm"], rec["model"])].append(rec)
            except (OSError, ValueError, KeyError):
                continue
    print(f"{'arm':<8} {'model':<24} {'n':>3} {'preflight s':>12} {'first turn s':>13} {'agent phase s':>14}")
    for (arm, model), recs in sorted(groups.items()):
        pre = [_ts(r["timings"]["preflight_done"]) - _ts(r["timings"]["started"])
               for r in recs if "preflight_done" in r["timings"]]  # fmt: skip
        first = [_ts(r["timings"]["first_turn"]) - _ts(r["timings"]["started"])
                 for r in recs if "first_turn" in r["timings"]]  # fmt: skip
        dur = [r["timings"].get("duration_sec", 0.0) for r in recs]

        def med(xs: list[float]) -> str:
            return f"{statistics.median(xs):.1f}" if xs else "-"

        print(f"{arm:<8} {model:<24} {len(recs):>3} {med(pre):>12} {med(first):>13} {med(dur):>14}")
    try:
        from agents.staging import load_staged

        staged = load_staged()
        t0 = time.perf_counter()
        subprocess.run([str(staged.binary), "--version"], capture_output=True, check=True)
        print(f"staged codex --version on the host: {time.perf_counter() - t0:.3f} s ({staged.root})")
    except Exception as exc:  # noqa: BLE001 - a figure script: report, do not fail
        print(f"staged codex: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
