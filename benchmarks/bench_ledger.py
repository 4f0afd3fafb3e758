"""What a multi-day run's gateway ledger costs its readers: `marathon status --json` and `marathon
report --format json` as whole processes (CPU, peak RSS), on a tree whose ledger holds
``--calls-per-attempt`` calls for each attempt, with the ledger's sums kept by the scan before
(warm: only new lines are read, ``runner.results.ledger_memo``) and without them (cold: every line).

    uv run python benchmarks/bench_ledger.py [--tasks 30] [--calls-per-attempt 1000] [--runs 3] [--keep DIR]

The tree is benchmarks/bench_model.py's (real trials replicated: ``--tasks`` tasks x 5 arms, one
attempt each); the ledger is written by the gateway's own writer (``LedgerWriter``), one line per
call as the gateway writes it for a codex request (its parameters, usage, latencies). A codex
attempt of several hours makes a call every few seconds to tens of seconds: 1,000 per attempt is a
30-task, five-arm run's 150,000 lines (about 120 MB). Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_model import bench_tree  # noqa: E402

from runner.results import ledger as L  # noqa: E402
from runner.results.tree import INDEX_DIR, INDEX_FILE, ledger_path  # noqa: E402

PARAMS = {
    "model": "gpt-5.5", "reasoning_effort": "high", "reasoning_summary": "auto",
    "tools_sha256": "ab" * 32, "instructions_sha256": "cd" * 32, "tool_choice": "auto",
    "parallel_tool_calls": True, "text_verbosity": "medium", "n_tools": 9,
}  # fmt: skip


def write_ledger(out: Path, per: int) -> int:
    """``per`` calls for every attempt of the tree, through the gateway's own writer."""
    from runner.ops.gateway.server import LedgerWriter
    from runner.results.model import RunModel

    attempts = [(a.task, a.arm_dir, a.stamp) for c in RunModel.load(out, index=False).cells.values()
                for a in c.attempts]  # fmt: skip
    w = LedgerWriter(ledger_path(out))
    n = 0
    for task, arm, stamp in attempts:
        for i in range(per):
            n += 1
            w.write({
                "kind": L.CALL, "v": L.SCHEMA, "at": 1.78e9 + n * 0.1, "gateway": "bench", "host": None,
                "attempt": f"{task}.{arm}.{stamp}", "task": task, "arm": arm, "stamp": stamp,
                "method": "POST", "path": "/v1/responses", "request_id": f"{task}.{arm}.{stamp}.{i + 1}",
                "params": {**PARAMS, "n_input_items": 2 * i + 1}, "stream": True,
                "model_time_sec": round(i * 12.5, 3), "status": 200, "outcome": L.OK,
                "response_id": f"resp_{n:024x}", "final": "completed",
                "usage": {"input": 20_000 + 40 * i, "cached": 18_000 + 38 * i, "output": 350, "reasoning": 120},
                "first_byte_ms": 812.345, "total_ms": 6123.456,
            })  # fmt: skip
    w.close()
    return n


def forget_sums(out: Path) -> None:
    """Cold for the ledger only: the kept sums go, the scan index stays."""
    db = out / INDEX_DIR / INDEX_FILE
    if db.exists():
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM memos")


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MB) of one whole process."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({status})")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss // 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--calls-per-attempt", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the tree there (or reuse it)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = bench_tree(args.keep, Path(tmp), args.tasks * 5, tasks=args.tasks)
        if not ledger_path(out).exists():
            t = time.perf_counter()
            n = write_ledger(out, args.calls_per_attempt)
            print(
                f"ledger: {n} calls, {ledger_path(out).stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s"
            )
        else:
            print(f"ledger: {ledger_path(out).stat().st_size / 1e6:.1f} MB (kept)")
        marathon = str(Path(sys.executable).parent / "marathon")
        cmds = {
            "status --json": [marathon, "status", "--json", str(out)],
            "report --format json": [marathon, "report", str(out), "--format", "json"],
        }
        measure(cmds["status --json"])  # the scan index and the sums made once
        for name, cmd in cmds.items():
            for label, cold in (("cold (every line)", True), ("warm (new lines only)", False)):
                got = []
                for _ in range(args.runs):
                    if cold:
                        forget_sums(out)
                    else:
                        measure(cmd)  # the sums as the process before left them
                    got.append(measure(cmd))
                wall, cpu, rss = (statistics.median(x) for x in zip(*got, strict=True))
                print(f"{name:22} {label:22} median of {args.runs}: wall {wall:.2f} s, CPU {cpu:.2f} s, "
                      f"peak RSS {rss:.0f} MB (CPU {', '.join(f'{g[1]:.2f}' for g in got)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
