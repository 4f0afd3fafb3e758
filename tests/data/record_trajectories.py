#!/usr/bin/env python3
"""Record real trajectories of the five arms on one demo task, for the console's reader tests.

Runs ``marathon run`` (real harbor, real Docker, the real codex binary, real LoopX; the scripted
model is the only stand-in) three times, concurrently, into temporary output trees, then copies the
few files the reader and the comparison view read into ``tests/data/trajectories/`` with the
runner's own layout (``<task>/<arm>/<stamp>/<job>/<trial>/...``), so that ``runner.results.model`` reads the
copy as an output tree.

The task is the demo's ``calc-partial`` with one extra first step in the scripted model's plan: a
check that fails (``calc.sub`` does not exist yet, exit 1), so every arm has a failed command for the
reader to mark. The arms differ by scenario so the comparison has something to show:

- ``goal``, ``ssh-goal``, ``heartbeat``: ``scripted/loopx`` (the demo's model: LoopX guards, then solve);
- ``codex-cli`` (a LoopX arm): ``scripted/block`` (blocks once; LoopX's unblock resumes it);
- ``plain``: ``scripted/never-finish`` with a short deadline (two plan steps, then ticks until the
  deadline: a partial score, tests that the others pass fail here).

Usage: ``uv run python tests/data/record_trajectories.py`` (a few minutes; needs Docker). The copy
replaces ``tests/data/trajectories/`` wholesale.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEST = Path(__file__).resolve().parent / "trajectories"
TASK = "calc-partial"
KEY_VAR = "MARATHON_DEMO_MODEL_KEY"
FAILING_CHECK = "python3 -c 'import calc; print(calc.sub(3, 1))'"
#: (arms, model, goal timeout) per group; each group is one `marathon run` into its own tree
GROUPS = (
    ("goal,ssh-goal,heartbeat", "scripted/loopx", 600),
    ("codex-cli", "scripted/block", 600),
    ("plain", "scripted/never-finish", 40),
)
#: what the reader and the comparison read, relative to a trial dir (nothing else is copied)
TRIAL_FILES = (
    "result.json",
    "trial.log",
    "exception.txt",
    "agent/trajectory.json",
    "agent/appserver.stdout.jsonl",
    "agent/goal_receipt.json",
    "verifier/test-stdout.txt",
    "verifier/metrics.json",
    "verifier/reward.txt",
)


def make_task(root: Path) -> Path:
    """A copy of the demo's calc-partial whose plan starts with a failing check."""
    tasks = root / "tasks"
    shutil.copytree(REPO / "runner" / "demo" / "tasks" / TASK, tasks / TASK)
    plan_path = tasks / TASK / "environment" / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["steps"] = [FAILING_CHECK, *plan["steps"]]
    plan["partial_steps"] = 2
    plan_path.write_text(json.dumps(plan, indent=2) + "\n")
    return tasks


def run_groups(root: Path, tasks: Path) -> list[Path]:
    from agents.loopx_staging import stage_loopx
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    ensure_demo_image()
    env = {**os.environ, KEY_VAR: "scripted-record-placeholder", "HARBOR_TELEMETRY": "0"}
    procs, outs = [], []
    for i, (arms, model, timeout) in enumerate(GROUPS):
        out = root / f"out{i}"
        outs.append(out)
        argv = [
            sys.executable, "-m", "marathon.cli", "run", str(out),
            "--tasks-dir", str(tasks), "--arms", arms, "--model", model,
            "--ak", f"api_key_var={KEY_VAR}", "--max-passes", "1", "--concurrency", "3",
            "--goal-timeout-sec", str(timeout), "--allow-modified", "--plain",
        ]  # fmt: skip
        log = open(root / f"out{i}.log", "wb")  # noqa: SIM115 - closed after the wait below
        procs.append((subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait()
        log.close()
    return outs


def copy_trials(outs: list[Path]) -> int:
    if DEST.exists():
        shutil.rmtree(DEST)
    n = 0
    for out in outs:
        for arm_dir in sorted((out / TASK).iterdir()):
            for stamp in sorted(p for p in arm_dir.iterdir() if p.is_dir()):
                for job in sorted(p for p in stamp.iterdir() if p.is_dir()):
                    rel_job = job.relative_to(out)
                    if (job / "result.json").is_file():
                        (DEST / rel_job).mkdir(parents=True, exist_ok=True)
                        shutil.copy2(job / "result.json", DEST / rel_job / "result.json")
                    for trial in sorted(p for p in job.iterdir() if p.is_dir()):
                        for rel in TRIAL_FILES:
                            src = trial / rel
                            if src.is_file():
                                dst = DEST / rel_job / trial.name / rel
                                dst.parent.mkdir(parents=True, exist_ok=True)
                                shutil.copy2(src, dst)
                        n += 1
    return n


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="record-traj-"))
    tasks = make_task(root)
    outs = run_groups(root, tasks)
    n = copy_trials(outs)
    size = sum(p.stat().st_size for p in DEST.rglob("*") if p.is_file())
    print(f"recorded {n} trial(s), {size / 1e6:.2f} MB, into {DEST} (runs in {root})")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
