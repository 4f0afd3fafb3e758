"""``marathon view``'s costs on a 10,050-trial tree: making the jobs folder, keeping it current, and
what harbor's viewer then takes to list it. Figures printed, never asserted.

Measures (wall and CPU of this process; the machine is shared, so CPU is the steadier figure):
  - the jobs folder made from nothing (every attempt: ``--all-attempts``; and the default, one
    entry per pair), the links and copies made, the inodes it adds;
  - the watcher's full rescan when nothing changed (every 5 min), every entry walked again (a
    restart over an existing folder), and one pair's update after its result changed (what the
    watcher does per finished trial);
  - harbor 0.25.0's ``GET /api/jobs`` over the folder, in process (harbor parses every job's
    result.json and config.json with pydantic for each list request: its cost, not marathon's).

    uv run python benchmarks/bench_view.py [--keep DIR] [--trials 10050] [--repeat 3]

The tree replicates the recorded real harbor trees, as benchmarks/bench_scan.py does; no Docker.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_model import bench_tree, timed  # noqa: E402

from runner.ops.viewjobs import LiveJobsFolder  # noqa: E402


def _fmt(wall: list[float], cpu: list[float]) -> str:
    return f"wall {statistics.median(wall):.2f} s, CPU {statistics.median(cpu):.2f} s (median of {len(wall)})"


def _inodes(root: Path) -> int:
    return sum(1 + len(files) for _, _, files in os.walk(root))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="build (or reuse) the tree here")
    ap.add_argument("--trials", type=int, default=10050)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(
        f"python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        out = bench_tree(args.keep, Path(tmp), args.trials)
        for every in (True, False):
            label = "every attempt" if every else "one entry per pair"
            live = LiveJobsFolder(out, all_attempts=every)
            live.folder.remove()
            t, c = time.perf_counter(), time.process_time()
            rep = live.sync_all()
            print(
                f"{label}: made {rep.entries} entries from nothing in wall {time.perf_counter() - t:.2f} s, "
                f"CPU {time.process_time() - c:.2f} s ({rep.linked} links, {rep.copied} copies, "
                f"{_inodes(live.root)} dir entries)"
            )
            print(f"{label}: full rescan, nothing changed: {_fmt(*timed(live.refresh, args.repeat))}")
            print(f"{label}: every entry walked again: {_fmt(*timed(live.sync_all, 1))}")
            entry = next(iter(live.entries.values()))
            result = Path(entry.trials[0].path) / "result.json"

            def one_pair(live: LiveJobsFolder = live, result: Path = result) -> None:
                os.utime(result)
                live.update([result])

            print(f"{label}: one pair's result changed: {_fmt(*timed(one_pair, args.repeat))}")
        from fastapi.testclient import TestClient

        from runner.ops.viewer import build_app, load_harbor_viewer

        live = LiveJobsFolder(out)
        live.sync_all()
        client = TestClient(build_app(load_harbor_viewer(), live.root))

        def list_jobs() -> None:
            r = client.get("/api/jobs?page_size=100")
            assert r.status_code == 200, r.text

        print(
            f"harbor's GET /api/jobs over {len(live.entries)} entries: {_fmt(*timed(list_jobs, args.repeat))}"
        )
        live.folder.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
