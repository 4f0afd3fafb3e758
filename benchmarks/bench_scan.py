"""Whole-process benchmark of `marathon status` / `marathon report` on a 10,050-trial tree, against
the obvious script (every result.json through harbor's pydantic models), measured in one run.

Measures, each as whole processes (wall and CPU of the child, from its rusage), median of --repeat:
  - `marathon status OUT --json` and `marathon report OUT --format json`, cold index (the index
    deleted before each run: every file read, the index written) and warm (index current);
  - the same without the index ever made (``MARATHON``'s pre-index path: ``--no-index`` below runs
    a one-line script over ``RunModel.load(out, index=False)``);
  - the pydantic script: ``JobResult``/``TrialResult.model_validate_json`` of every job and trial
    result.json plus each metrics.json.
Targets (issue 11): warm status/report <= 0.5 s and >= 3x faster than the pydantic script.

    uv run python benchmarks/bench_scan.py [--keep DIR] [--trials 10050] [--repeat 5]
        [--shape few-tasks|many-tasks]

The tree replicates the recorded real harbor trees (tests/data/trees) as benchmarks/bench_model.py
does; no Docker needed. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_model import SHAPES, bench_tree  # noqa: E402

from runner.results.tree import INDEX_DIR  # noqa: E402

PYDANTIC = str(REPO / "benchmarks" / "naive_pydantic.py")

NO_INDEX = """
import sys
from marathon.status_view import status_data
from runner.results.model import RunModel
from runner.results.report import dump_json
print(dump_json(status_data(RunModel.load(sys.argv[1], index=False), "run")))
"""

#: what a warm `status` cannot skip while the index promises never to serve a stale entry: open the
#: index, parse its entries, ``lstat`` every file and dir each names (``index._idents``), every task
#: and arm dir it keeps a listing of, and look for each attempt's ``host.json``; no record decoded,
#: no figure computed. The floor of this design on the machine, not a thing marathon runs.
VALIDATION = """
import os, sys
from runner.results import index as I
from runner.results.hosts import HOST_JSON
out = sys.argv[1]
ix = I.ScanIndex.open(out)
same = 0
for k, (_key, rels, idents, _records) in ix._parsed().items():
    same += I._idents(f"{out}/{k}", rels) == idents
    os.access(f"{out}/{k}/{HOST_JSON}", os.F_OK)
for rel, ident, names in ix._conn.execute("SELECT path, ident, names FROM dirs"):
    same += I._listing_ident(rel, os.lstat(f"{out}/{rel}" if rel else out), names) == ident
print(same)
"""


def child(argv: list[str], before=None) -> tuple[float, float]:
    """Wall and CPU seconds of one child process (its own rusage: user + sys)."""
    if before:
        before()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, cwd=REPO)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_050)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="build the tree here and keep it")
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="few-tasks",
        help="few-tasks: 50 tasks x 5 arms x 40 attempts; many-tasks: 2,010 tasks x 5 arms x 1",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        out = bench_tree(args.keep, Path(tmp), args.trials, tasks=SHAPES[args.shape])
        time.sleep(3)  # the index stores only files older than its racy window (RACY_NS)
        measure(out, args.trials, args.repeat)
    return 0


def measure(out: Path, trials: int, repeat: int) -> None:
    py = sys.executable
    marathon = [py, "-m", "marathon.cli"]
    drop = lambda: shutil.rmtree(out / INDEX_DIR, ignore_errors=True)  # noqa: E731
    cases = [
        ("status --json, warm index", marathon + ["status", str(out), "--json"], None),
        ("report --format json, warm index", marathon + ["report", str(out), "--format", "json"], None),
        ("status --json, cold index", marathon + ["status", str(out), "--json"], drop),
        ("report --format json, cold index", marathon + ["report", str(out), "--format", "json"], drop),
        ("status without any index", [py, "-c", NO_INDEX, str(out)], None),
        ("the index's validation alone", [py, "-c", VALIDATION, str(out)], None),
        ("pydantic script", [py, PYDANTIC, str(out)], None),
    ]
    child(cases[0][1])  # warm the page cache and the index
    got: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _ in cases}
    for _ in range(repeat):  # interleaved, so a change in the machine's load hits every case
        for name, argv, before in cases:
            w, c = child(argv, before)
            got[name][0].append(w)
            got[name][1].append(c)
        child(cases[0][1])  # leave the index warm for the next round's warm cases
    med = {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in got.items()}
    base = med["pydantic script"]
    print(
        f"\ntree: {trials} trials; median of {repeat}; machine: {platform.node()} "
        f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
        f"load avg {os.getloadavg()[0]:.1f}"
    )
    print(f"{'whole process':<34} {'wall':>8} {'cpu':>8} {'x pydantic (wall/cpu)':>22}")
    for name, (w, c) in med.items():
        print(f"{name:<34} {w:>7.3f}s {c:>7.3f}s {base[0] / w:>10.1f}x {base[1] / c:>9.1f}x")
    warm = max(med["status --json, warm index"][1], med["report --format json, warm index"][1])
    print(f"targets: warm <= 0.5 s ({'yes' if warm <= 0.5 else 'NO'} by CPU), >= 3x the pydantic script "
          f"({'yes' if base[1] / warm >= 3 else 'NO'} by CPU)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
