"""Benchmark of the results model on a 10,000-trial tree made of real harbor trial files.

Measures, side by side in one run:
  1. cold load of the whole tree into the model (``RunModel.load``);
  2. re-reading one changed trial (``model.update([path])``);
  3. the way a user would otherwise do it: parse every job and trial ``result.json`` with harbor's
     own pydantic models (``JobResult``, ``TrialResult``) and read each ``metrics.json``.
Targets: (1) <= 1.0 s and >= 3x faster than (3); (2) <= 5 ms.

    uv run python benchmarks/bench_model.py [--source OUT] [--trials 10000] [--keep DIR]

Without --source it first makes a real tree with harbor's oracle and nop on the mini-benchmark
(needs Docker; about a minute). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.results import tree  # noqa: E402
from runner.results.model import RunModel  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from naive_pydantic import naive  # noqa: E402


def make_source(dst: Path) -> Path:
    """A real output tree: oracle and nop on the 4 demo tasks (one harbor job per pair)."""
    out = dst / "source"
    env = dict(os.environ, HARBOR_TELEMETRY="0", LITELLM_LOCAL_MODEL_COST_MAP="True")
    harbor = str(Path(sys.executable).parent / "harbor")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    procs = []
    for arm in ("oracle", "nop"):
        for task in tree.list_dirs(REPO / "runner/demo/tasks"):
            cmd = [harbor, "run", "-p", str(REPO / "runner/demo/tasks" / task), "-a", arm, "-o"]
            cmd += [str(out / task / arm / stamp), "--job-name", arm, "-n", "1", "-y"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if any(p.wait() != 0 for p in procs):
        sys.exit("harbor run failed while making the source tree")
    return out


def recorded_source(dst: Path) -> Path:
    """The real harbor trees recorded in tests/data/trees (oracle, nop and the test agents: errored
    trials, a receipt), copied with harbor's order of writes restored; no Docker needed."""
    sys.path.insert(0, str(REPO))
    from tests.real_trees import copy_recorded, manifest

    out = dst / "source"
    for name in manifest()["trees"]:
        copy_recorded(name, out)
    return out


def source_trials(src: Path) -> list[tuple[Path, Path]]:
    """(job dir, trial dir) of every finished trial in a real tree."""
    found = []
    for _task, _arm, _arm_dir, _stamp, job in tree.iter_job_dirs(src):
        for trial in tree.iter_trial_dirs(job):
            if (trial / "result.json").exists():
                found.append((job, trial))
    if not found:
        sys.exit(f"{src}: no finished harbor trials to replicate")
    return found


#: the two shapes of the scan benchmarks: few tasks with many attempts (50 tasks x 5 arms x 40
#: stamps) and many tasks with one (2,010 tasks x 5 arms: a 500-task benchmark with repeats)
SHAPES = {"few-tasks": 50, "many-tasks": 2010}


def build(src: Path, out: Path, n: int, n_tasks: int = SHAPES["few-tasks"]) -> int:
    """Replicate real trials into ``n`` jobs of one trial: ``n_tasks`` tasks x 5 arms x as many
    stamps as it takes (50 tasks: n/250 stamps; 2,010 tasks and n = 10,050: one)."""
    trials = source_trials(src)
    arms = ["plain", "goal", "ssh-goal", "codex-cli", "heartbeat"]
    width = max(2, len(str(n_tasks - 1)))
    made = 0
    s = 0
    while made < n:
        stamp = f"20261129T{s // 60:02d}{s % 60:02d}00Z"
        for t in range(n_tasks):
            for arm in arms:
                if made == n:
                    return made
                job_src, trial_src = trials[made % len(trials)]
                job = out / f"task-{t:0{width}d}" / arm / stamp / arm
                job.mkdir(parents=True)
                shutil.copy2(job_src / "result.json", job / "result.json")
                shutil.copytree(trial_src, job / trial_src.name, symlinks=True)
                # harbor writes a trial's result.json last; so must the copy, or on a slow machine the
                # verifier files' ctimes come out later than result.json's and read as tampered
                shutil.copy2(trial_src / "result.json", job / trial_src.name / "result.json")
                made += 1
        s += 1
    return made


def bench_tree(
    keep: Path | None,
    tmp: Path,
    trials: int,
    source: Path | None = None,
    fresh: bool = False,
    tasks: int = SHAPES["few-tasks"],
) -> Path:
    """The benchmark tree: ``keep`` when already built there, else built (in ``keep`` or ``tmp``)."""
    out = keep or tmp / "out"
    if not (out.exists() and any(out.iterdir())):
        src = source or (make_source(tmp) if fresh else recorded_source(tmp))
        t = time.perf_counter()
        made = build(src, out, trials, tasks)
        print(
            f"built {made} trials from {len(source_trials(src))} real ones in {time.perf_counter() - t:.1f} s"
        )
    return out


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each run (CPU too: the machine is shared, wall time moves with load)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--source", type=Path, help="a real output tree to replicate (default: the recorded trees)"
    )
    ap.add_argument("--fresh", action="store_true", help="make the source with harbor now (needs Docker)")
    ap.add_argument("--trials", type=int, default=10_050)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the tree here and keep it")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-model-"))
    try:
        out = bench_tree(args.keep, tmp, args.trials, args.source, args.fresh)
        RunModel.load(out)  # warm the page cache: every measure below reads the same warm files

        cold, cold_cpu = timed(lambda: RunModel.load(out, index=False), args.repeat)
        model = RunModel.load(out)
        n_trials = sum(len(a.trials) for a in model.attempts())
        # cells whose trial went through its verifier (an errored trial has no verifier block to rerun)
        keys = sorted(k for k, c in model.cells.items() if c.status == "done")
        rng = random.Random(time.time_ns())
        upd = []
        while len(upd) < 200:
            task, arm = rng.choice(keys)
            att = model.cells[(task, arm)].attempts[-1]
            (trial,) = att.trials
            metrics = Path(att.job_dir) / trial / "verifier" / "metrics.json"
            res = metrics.parent.parent / "result.json"
            ver = json.loads(res.read_text()).get("verifier")
            if not isinstance(ver, dict) or not ver.get("finished_at"):
                continue  # a trial that never reached its verifier has none to rerun
            fin = ver["finished_at"]
            before = int((datetime.fromisoformat(fin.replace("Z", "+00:00")).timestamp() - 0.5) * 1e9)
            metrics.write_text(
                json.dumps({"passed": rng.randint(0, 5), "total": 5, "partial_score": rng.random()})
            )
            # harbor's order (a verifier rerun): the verifier's file, then result.json; a verifier
            # file changed after the trial's result.json would be flagged tampered
            os.utime(metrics, ns=(before, before))
            res.write_bytes(res.read_bytes())
            t = time.perf_counter()
            changed = model.update([metrics])
            upd.append(time.perf_counter() - t)
            assert changed == {(task, arm)}, changed
        nv, nv_cpu = timed(lambda: naive(out), args.repeat)

        best_cold, best_naive = min(cold), min(nv)
        cpu_cold, cpu_naive = min(cold_cpu), min(nv_cpu)
        upd_ms = sorted(x * 1000 for x in upd)
        med = statistics.median(upd_ms)
        rows = [
            ("cold load into the model", f"{best_cold:.3f} s", f"{cpu_cold:.3f} s", "<= 1.0 s", best_cold <= 1.0),
            ("naive: harbor pydantic models", f"{best_naive:.3f} s", f"{cpu_naive:.3f} s", "", None),
            ("speed-up over naive", f"{best_naive / best_cold:.1f}x", f"{cpu_naive / cpu_cold:.1f}x", ">= 3x",
             best_naive / best_cold >= 3),
            ("one-trial update, median", f"{med:.2f} ms", "", "<= 5 ms", med <= 5),
            ("one-trial update, p95", f"{upd_ms[int(len(upd_ms) * 0.95)]:.2f} ms", "", "", None),
        ]  # fmt: skip
        print(
            f"\ntree: {n_trials} trials in {len(model.attempts())} jobs, {len(model.cells)} cells; best of {args.repeat}"
        )
        print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
              f"load avg {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(f"{'measure':<32} {'wall':>10} {'cpu':>9}  {'target':<9} ok")
        for name, fig, cpu, target, ok in rows:
            print(
                f"{name:<32} {fig:>10} {cpu:>9}  {target:<9} {'' if ok is None else ('yes' if ok else 'NO')}"
            )
        runs = ", ".join(f"{x:.3f}" for x in cold)
        print(f"(cold runs: {runs} s; naive runs: {', '.join(f'{x:.3f}' for x in nv)} s; 200 updates)")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
