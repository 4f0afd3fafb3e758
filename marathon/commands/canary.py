"""``marathon canary``: every arm on one short task with a tiny goal budget -- proves the timeout path.

Why: in the field a timeout was swallowed (scored) for one arm and escaped as an error for three
others, and hours of progress were lost (runbook pitfall 2). Before a day-long run, the canary runs
each arm once with a budget so small that it must run out, and checks that an exhausted budget
ends like any finished run: the verifier scores it (partial progress counts) and nothing is
errored. An arm that finished before its deadline did not exercise the path; that is said.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from modes import safetext

HELP = "timeout-path smoke test: each arm on one short task with a tiny goal budget"
DEFAULT_GOAL_SEC = 60


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", nargs="?", default=None, help="output tree (default ./marathon-canary/<UTC stamp>)")
    p.add_argument("--tasks-dir", dest="tasks_dir", help="tasks dir (default: the bundled mini-benchmark)")
    p.add_argument("--task", help="the one task (default: the first task of the tasks dir)")
    p.add_argument(
        "--arms",
        help="comma list of arms (default: the five arms; stand-ins: oracle, nop, name=module:Class)",
    )
    p.add_argument("--goal-timeout-sec", dest="goal_timeout_sec", type=int, default=DEFAULT_GOAL_SEC)
    p.add_argument("--model", "-m", help="harbor -m for every arm")
    p.add_argument("--ae", dest="agent_env", action="append", metavar="KEY=${VAR}")
    p.add_argument("--ae-literal", dest="agent_env_literal", action="append", metavar="NAME=VALUE")
    p.add_argument("--ak", dest="agent_kwargs", action="append", metavar="K=V")
    p.add_argument("--mounts", help="harbor --mounts JSON (e.g. the staged codex)")
    p.add_argument("--json-events", action="store_true")


def check_arms(out: Path, task: str, arms: list[str], goal_sec: int) -> list[dict]:
    """Per arm: done (the one rule), scored by the verifier, and whether the budget ran out."""
    from runner.results.records import read_trial
    from runner.results.scan import pair_done
    from runner.results.tree import iter_job_dirs, iter_trial_dirs

    rows = []
    for arm in arms:
        row = {"arm": arm, "done": pair_done(out, task, arm), "scored": False, "errored": None,
               "exhausted": False, "agent_sec": None, "reward": None, "partial": None}  # fmt: skip
        for t, a, _ad, _stamp, job in iter_job_dirs(out):
            if (t, a) != (task, arm):
                continue
            for trial in iter_trial_dirs(job):
                rec = read_trial(trial)  # the one reader of a trial's files (runner.results.records)
                row["errored"] = rec.exception_type
                row["reward"] = rec.reward
                row["scored"] = rec.reward is not None  # harbor's verifier wrote its reward
                row["partial"] = rec.partial
                if rec.agent_sec is not None:
                    row["agent_sec"] = round(rec.agent_sec, 1)
                    row["exhausted"] = rec.agent_sec >= goal_sec * 0.95
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    from runner.errors import UserError
    from runner.schedule.config import DEMO_TASKS, list_tasks, resolve
    from runner.schedule.display import Progress
    from runner.schedule.driver import Driver

    tasks_dir = Path(args.tasks_dir) if args.tasks_dir else DEMO_TASKS
    task = args.task or (list_tasks(tasks_dir) or [None])[0]
    if task is None:
        raise UserError(f"no tasks in {tasks_dir}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d__%H-%M-%S")
    out = Path(args.out) if args.out else Path("marathon-canary") / stamp
    flags = {
        "tasks_dir": str(tasks_dir), "tasks": [task], "goal_timeout_sec": args.goal_timeout_sec,
        "max_passes": 1, "model": args.model, "agent_env": args.agent_env, "agent_env_literal": args.agent_env_literal, "agent_kwargs": args.agent_kwargs, "mounts": args.mounts,
        "arms": [a for a in (args.arms or "").split(",") if a] or None,
    }  # fmt: skip
    cfg = resolve(out, flags, environ={})
    flags["concurrency"] = len(cfg.arms)
    cfg = resolve(out, flags, environ={})
    print(
        f"canary: {', '.join(s.name for s in cfg.arm_specs())} on {task}, goal budget {cfg.goal_timeout_sec}s -> {cfg.out}"
    )
    Driver(cfg, listeners=[Progress("json" if args.json_events else "plain")]).run()
    rows = check_arms(cfg.out, task, [s.name for s in cfg.arm_specs()], cfg.goal_timeout_sec)
    print(
        f"\n{'arm':<14} {'done':<5} {'scored':<7} {'errored':<22} {'agent s':>8} {'reward':>7} {'partial':>8}  path"
    )
    bad = 0
    for r in rows:
        ok = r["done"] and r["scored"] and not r["errored"]
        bad += not ok
        path = (
            "budget exhausted, scored"
            if r["exhausted"]
            else "finished before the deadline (path not exercised)"
        )
        if not ok:
            path = "FAILED: " + (
                "errored" if r["errored"] else "not scored" if not r["scored"] else "not done"
            )
        print(
            f"{r['arm']:<14} {str(r['done']):<5} {str(r['scored']):<7} {safetext.clean(r['errored'] or '-', 40):<22} "
            f"{str(r['agent_sec']):>8} {str(r['reward']):>7} {str(r['partial']):>8}  {path}"
        )
    exercised = sum(r["exhausted"] for r in rows)
    print(f"\ncanary {'PASSED' if not bad else 'FAILED'}: {len(rows) - bad}/{len(rows)} arms scored without error; "
          f"timeout path exercised by {exercised}")  # fmt: skip
    return 0 if not bad else 1
