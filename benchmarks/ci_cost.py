"""Where the suite's time goes: per module, wall time and the CPU it cost (host and containers), from
the file ``MARATHON_CI_PROFILE`` writes (tests/ci_profile.py); and per trial, harbor's phases.

    MARATHON_CI_PROFILE=/tmp/p.jsonl uv run --frozen pytest -m docker --basetemp=/tmp/pt ...
    uv run python benchmarks/ci_cost.py /tmp/p.jsonl [--trials /tmp/pt] [--md]

The module table: wall (setup + call + teardown of its tests), host CPU (pytest and the processes it
waited for), container CPU (the containers of its trials), and ``busy``, CPU over wall: a module at
0.5 keeps half a core busy and the rest of its wall time waits (model time, budgets, sleeps, the
scripted model's pace); one near 2.0 holds both cores and gains nothing from running beside another.

``--trials DIR`` reads every trial result.json under DIR (the session's basetemp; the runner tests'
trees are removed by their teardown) and prints the median of harbor's phases per trial kind: start
(harbor's own start to the trial's), environment setup (compose build + up), the agent's
preparation and model time (from the arm's receipt when there is one), the verifier, and the end
(verifier to the trial's end: compose down). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def modules(rows: list[dict]) -> list[dict]:
    acc: dict[str, dict] = defaultdict(
        lambda: {"tests": 0, "wall": 0.0, "host_cpu": 0.0, "container_cpu": 0.0}
    )
    for r in rows:
        m = acc[module_of(r["nodeid"])]
        m["tests"] += 1
        m["failed"] = m.get("failed", 0) + bool(r.get("failed"))
        for k in ("wall", "host_cpu", "container_cpu"):
            m[k] += r.get(k, 0.0)
    out = []
    for name, m in acc.items():
        cpu = m["host_cpu"] + m["container_cpu"]
        out.append({"module": name, **m, "cpu": cpu, "busy": cpu / m["wall"] if m["wall"] else 0.0})
    return sorted(out, key=lambda m: -m["wall"])


def _ts(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        return None


def _span(d: dict | None) -> float | None:
    if not d:
        return None
    a, b = _ts(d.get("started_at")), _ts(d.get("finished_at"))
    return (b - a).total_seconds() if a and b else None


def trial_phases(root: Path) -> dict[str, list[dict]]:
    """Per trial kind (its agent), every trial's phases in seconds."""
    kinds: dict[str, list[dict]] = defaultdict(list)
    for res in root.rglob("result.json"):
        try:
            d = json.loads(res.read_text())
        except (OSError, ValueError):
            continue
        if "trial_name" not in d:
            continue
        t0, t1 = _ts(d.get("started_at")), _ts(d.get("finished_at"))
        v = d.get("verifier") or {}
        row = {
            "env_setup": _span(d.get("environment_setup")),
            "agent": _span(d.get("agent_execution")),
            "verifier": _span(v),
            "end": (t1 - _ts(v["finished_at"])).total_seconds() if t1 and v.get("finished_at") else None,
            "total": (t1 - t0).total_seconds() if t0 and t1 else None,
        }
        rec = res.parent / "agent" / "goal_receipt.json"
        arm = (d.get("agent_info") or {}).get("name") or "?"
        if rec.is_file():
            try:
                r = json.loads(rec.read_text())
                arm = r.get("arm") or arm
                row["prep"] = r.get("prep_sec")
                row["model"] = r.get("budget_used_sec")
                row["install"] = (((r.get("extra") or {}).get("loopx") or {}).get("profile") or {}).get(
                    "install_seconds"
                )
            except (OSError, ValueError):
                pass
        kinds[arm].append(row)
    return kinds


def _med(vals: list) -> str:
    vals = [v for v in vals if isinstance(v, (int, float))]
    return f"{statistics.median(vals):.1f}" if vals else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--trials", type=Path, help="a basetemp to read trial phases from")
    ap.add_argument("--md", action="store_true", help="markdown tables (for docs/testing.md)")
    a = ap.parse_args()
    rows = [json.loads(x) for x in a.profile.read_text().splitlines() if x.strip()]
    mods = modules(rows)
    sep = " | " if a.md else "  "
    head = ["module", "tests", "wall s", "host CPU s", "container CPU s", "busy"]
    if a.md:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    else:
        print(sep.join(f"{h:>14}" for h in head))
    for m in mods:
        cells = [m["module"], str(m["tests"]), f"{m['wall']:.0f}", f"{m['host_cpu']:.0f}",
                 f"{m['container_cpu']:.0f}", f"{m['busy']:.2f}"]  # fmt: skip
        print(("| " + " | ".join(cells) + " |") if a.md else sep.join(f"{c:>14}" for c in cells))
    wall = sum(m["wall"] for m in mods)
    cpu = sum(m["cpu"] for m in mods)
    print(f"\n{len(rows)} tests: wall {wall:.0f} s, CPU {cpu:.0f} s (host {sum(m['host_cpu'] for m in mods):.0f}, "
          f"containers {sum(m['container_cpu'] for m in mods):.0f}); busy {cpu / wall if wall else 0:.2f} cores")  # fmt: skip
    if a.trials:
        kinds = trial_phases(a.trials)
        cols = ["env_setup", "install", "prep", "model", "agent", "verifier", "end", "total"]
        print("\nmedian seconds per trial, by arm/agent")
        print(f"{'kind':>12} {'n':>4} " + " ".join(f"{c:>9}" for c in cols))
        for kind, rs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            print(f"{kind:>12} {len(rs):>4} " + " ".join(f"{_med([r.get(c) for r in rs]):>9}" for c in cols))


if __name__ == "__main__":
    main()
