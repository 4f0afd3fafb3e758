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
from pathlib import Path

from modes import safetext, values
from modes.trial_files import TrialFiles
from runner.results import records
from runner.results.records import parse_time


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


def _span(d: object) -> float | None:
    if not isinstance(d, dict):
        return None
    a, b = parse_time(d.get("started_at")), parse_time(d.get("finished_at"))
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return None
    return (b - a).total_seconds()


def _seconds(v: object, field: str) -> float | None:
    """A receipt's seconds through the values boundary (``modes.values``): a number in range, else None."""
    got = values.number(v, values.SECONDS, field)
    return got if isinstance(got, (int, float)) else None


def trial_phases(root: Path) -> dict[str, list[dict]]:
    """Per trial kind (its agent), every trial's phases in seconds. The trees were written by the
    agents under test: every file is read by the results' safe reader (``records.load_json``: a
    regular file, capped, no symlink out of its trial) and every number through ``modes.values``."""
    kinds: dict[str, list[dict]] = defaultdict(list)
    for res in root.rglob("result.json"):
        loaded = records.load_json(res, str(res.parent))
        d = loaded.data
        if not loaded.ok or d is None or "trial_name" not in d:
            continue
        t0, t1 = parse_time(d.get("started_at")), parse_time(d.get("finished_at"))
        v = d.get("verifier") if isinstance(d.get("verifier"), dict) else {}
        vend = parse_time(v.get("finished_at"))
        row = {
            "env_setup": _span(d.get("environment_setup")),
            "agent": _span(d.get("agent_execution")),
            "verifier": _span(v),
            "end": (t1 - vend).total_seconds()
            if t1 and vend and (t1.tzinfo is None) == (vend.tzinfo is None)
            else None,
            "total": (t1 - t0).total_seconds()
            if t0 and t1 and (t0.tzinfo is None) == (t1.tzinfo is None)
            else None,
        }
        info = d.get("agent_info")
        arm = info.get("name") if isinstance(info, dict) and isinstance(info.get("name"), str) else "?"
        rec = records.load_json(res.parent / TrialFiles.RECEIPT, str(res.parent))
        if rec.ok and rec.data is not None:
            r = rec.data
            arm = r["arm"] if isinstance(r.get("arm"), str) and r["arm"] else arm
            row["prep"] = _seconds(r.get("prep_sec"), "prep_sec")
            row["model"] = _seconds(r.get("budget_used_sec"), "budget_used_sec")
            loopx = (r.get("extra") or {}).get("loopx") if isinstance(r.get("extra"), dict) else None
            prof = loopx.get("profile") if isinstance(loopx, dict) else None
            row["install"] = (
                _seconds(prof.get("install_seconds"), "install_seconds") if isinstance(prof, dict) else None
            )
        kinds[safetext.clean(arm, 40)].append(row)
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
