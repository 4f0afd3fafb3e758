"""Benchmark of the trajectory reader on 1 GB trajectories made of real recorded steps.

Measures (printed, never asserted):
  1. first screen of a 1 GB ATIF trajectory.json in the reader      <= 1 s
  2. the same for a 1 GB app-server stdout (one JSON line a message)  <= 1 s
  plus the CPU seconds of (1), the time to index the whole file in the background, the reader's
  resident memory once indexed, and a search for text found only in the last step.

The files repeat the steps of tests/data/trajectories (real codex arms), written the way harbor
writes ATIF (``json.dumps(indent=2)``), each command output padded to ~16 KB. The real App runs
headless in this process (Textual's run_test) and opens the real ReaderScreen.

    uv run python benchmarks/bench_reader.py [--size-gb 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RECORDED = REPO / "tests" / "data" / "trajectories"
PAD = 16 * 1024
NEEDLE = "the-one-needle-in-the-last-step"


def _recorded(arm: str, name: str) -> Path:
    (p,) = (RECORDED / "calc-partial" / arm).glob(f"*/*/*/agent/{name}")
    return p


def make_atif(path: Path, size: int) -> int:
    doc = json.loads(_recorded("plain", "trajectory.json").read_text())
    steps = doc["steps"]
    for s in steps:
        for r in (s.get("observation") or {}).get("results") or []:
            if isinstance(r.get("content"), str):
                r["content"] += "\n" + ("output line of a busy build " * 40 + "\n") * (PAD // 1160)
    body = ",\n".join("    " + json.dumps(s, indent=2).replace("\n", "\n    ") for s in steps)
    head = json.dumps({k: v for k, v in doc.items() if k != "steps"}, indent=2)[:-2] + ',\n  "steps": [\n'
    last = dict(steps[-1], message=NEEDLE)
    tail = ",\n    " + json.dumps(last, indent=2).replace("\n", "\n    ") + "\n  ]\n}\n"
    block = (body + ",\n").encode()
    n = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(head.encode())
        while fh.tell() < size:
            fh.write(block)
            n += len(steps)
        fh.seek(fh.tell() - 2)  # drop the last ",\n"
        fh.write(tail.encode())
        fh.truncate()
    return n + 1


def make_appserver(path: Path, size: int) -> None:
    lines = _recorded("plain", "appserver.stdout.jsonl").read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        while fh.tell() < size:
            fh.write(lines)
        last = {"method": "item/completed", "params": {"item": {"type": "agentMessage", "text": NEEDLE}}}
        fh.write((json.dumps(last) + "\n").encode())


async def measure(trial: Path) -> dict:
    import psutil

    from console.app import make_app
    from console.screens.reader import ReaderScreen
    from console.widgets.stepview import StepView

    res: dict = {}
    app = make_app(RECORDED, watch=False, docker=False, offer_start=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        t, c = time.perf_counter(), time.process_time()
        app.call_later(app.push_screen, ReaderScreen(trial, "bench"))
        while not (isinstance(app.screen, ReaderScreen) and app.screen.index is not None):
            await asyncio.sleep(0.002)
        scr = app.screen
        view = scr.query_one(StepView)
        while view.virtual_size.height == 0:
            await asyncio.sleep(0.002)
        await asyncio.sleep(0)
        res["first_screen"] = time.perf_counter() - t
        res["first_screen_cpu"] = time.process_time() - c
        res["first_line"] = view.visible_text()[0].strip()[:70]
        while not scr.index.complete:
            await asyncio.sleep(0.05)
        res["index"] = time.perf_counter() - t
        res["index_cpu"] = time.process_time() - c
        res["steps"] = scr.index.count
        res["rss_mb"] = psutil.Process().memory_info().rss / 2**20
        t = time.perf_counter()
        hit = scr.index.search(NEEDLE)
        res["search"] = time.perf_counter() - t
        res["search_hit_is_last"] = hit == scr.index.count - 1
        t = time.perf_counter()
        view.goto(scr.index.count - 1)
        await pilot.pause()
        res["jump_to_end"] = time.perf_counter() - t
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = ap.parse_args()
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-reader-"))
    size = int(args.size_gb * (1 << 30))
    rows = []
    try:
        for kind in ("atif", "app-server"):
            trial = root / kind
            t = time.perf_counter()
            if kind == "atif":
                make_atif(trial / "agent" / "trajectory.json", size)
                f = trial / "agent" / "trajectory.json"
            else:
                make_appserver(trial / "agent" / "appserver.stdout.jsonl", size)
                f = trial / "agent" / "appserver.stdout.jsonl"
            print(f"wrote a {f.stat().st_size / 2**30:.2f} GB {kind} file in {time.perf_counter() - t:.1f} s")
            r = asyncio.run(measure(trial))
            print(
                f"  first line on screen: {r['first_line']!r}; search hit the last step: {r['search_hit_is_last']}"
            )
            rows += [
                (f"first screen of a {args.size_gb:g} GB {kind} trajectory", f"{r['first_screen'] * 1000:.0f} ms", "<= 1 s",
                 r["first_screen"] <= 1.0),
                ("  (CPU seconds of that)", f"{r['first_screen_cpu']:.2f} s", "", None),
                (f"  (all {r['steps']:,} steps indexed in the background)", f"{r['index']:.1f} s", "", None),
                ("  (CPU seconds of the whole index)", f"{r['index_cpu']:.1f} s", "", None),
                ("  (resident memory, indexed)", f"{r['rss_mb']:.0f} MB", "", None),
                ("  (search: text in the last step only)", f"{r['search']:.1f} s", "", None),
                ("  (jump to the last step)", f"{r['jump_to_end'] * 1000:.0f} ms", "", None),
            ]  # fmt: skip
            if not args.keep:
                shutil.rmtree(trial, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"\nmachine: {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, load avg {load:.1f}"
    )
    print(f"{'measure':56} {'figure':>9}  {'target':8} ok")
    for name, fig, target, ok in rows:
        print(f"{name:56} {fig:>9}  {target:8} {'' if ok is None else ('yes' if ok else 'NO')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
