"""Helpers for the runner tests: start ``marathon`` as a real process, read its events, and remove
every Docker object of a test's output trees by exact compose-project label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from waiting import wait_for  # noqa: F401 - the runner tests' import of it

from modes.naming import compose_project
from runner.results.events import read_events
from runner.results.tree import iter_job_dirs, iter_trial_dirs, voided_root

REPO = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO / "runner" / "demo" / "tasks"
AGENTS = "tests.runner.runner_agents"


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    e["HARBOR_TELEMETRY"] = "0"
    e["PYTHONPATH"] = str(REPO)
    e.update(extra)
    return e


def marathon_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "marathon.cli", *args]


def run_marathon(*args: str, timeout: float = 900, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        marathon_argv(*args), cwd=REPO, env=env(**extra_env), capture_output=True, text=True, timeout=timeout
    )


def start_marathon(*args: str, log: Path, **extra_env: str) -> subprocess.Popen:
    fh = open(log, "ab")
    return subprocess.Popen(
        marathon_argv(*args), cwd=REPO, env=env(**extra_env), stdout=fh, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def events(out: Path, kind: str | None = None) -> list[dict]:
    return [e for e in read_events(out) if kind is None or e["event"] == kind]


def trial_names(out: Path) -> set[str]:
    """Every trial name of the tree and of its voided attempts."""
    names = set()
    for root in (out, voided_root(out)):
        for *_, job in iter_job_dirs(root):
            names |= {t.name for t in iter_trial_dirs(job)}
    return names


def docker_objects(projects: set[str]) -> dict[str, list[str]]:
    """Containers and networks whose compose-project label equals one of ``projects`` (exactly)."""
    found: dict[str, list[str]] = {"containers": [], "networks": []}
    for p in sorted(projects):
        flt = f"label=com.docker.compose.project={p}"
        c = subprocess.run(
            ["docker", "ps", "-aq", "--filter", flt], capture_output=True, text=True
        ).stdout.split()
        n = subprocess.run(["docker", "network", "ls", "-q", "--filter", flt], capture_output=True, text=True)
        found["containers"] += c
        found["networks"] += n.stdout.split()
    return found


def stop_runner(out: Path, timeout: float = 180) -> None:
    """Teardown: a runner a test started for ``out`` (e.g. detached by health --fix) is stopped by
    the PID + create time in its lock, gracefully (SIGTERM), so it tears its jobs down."""
    import signal

    from runner.schedule.lock import lock_holder

    h = lock_holder(out)
    if h is None:
        return
    os.kill(h.pid, signal.SIGTERM)
    wait_for(lambda: lock_holder(out) is None, timeout, f"runner {h.pid} to stop")


def remove_objects_of(out: Path) -> None:
    """Teardown: stop the tree's runner, then remove containers and networks of its trials (exact label)."""
    stop_runner(out)
    objs = docker_objects({compose_project(t) for t in trial_names(out)})
    if objs["containers"]:
        subprocess.run(["docker", "rm", "-fv", *objs["containers"]], capture_output=True)
    for n in objs["networks"]:
        subprocess.run(["docker", "network", "rm", n], capture_output=True)


def done_jobs(out: Path, by_repeat: bool = False) -> dict[tuple, list[Path]]:
    """(task, arm) -> the job dirs whose result.json is done (runner.results.rules.is_done);
    ``by_repeat``: keyed (task, arm, repeat), the repeat its stamp names."""
    from runner.results.rules import is_done
    from runner.results.tree import repeat_of

    res: dict[tuple, list[Path]] = {}
    for task, arm, _ad, stamp, job in iter_job_dirs(out):
        try:
            stats = json.loads((job / "result.json").read_text()).get("stats")
        except (OSError, ValueError):
            continue
        if is_done(stats):
            key = (task, arm, repeat_of(stamp)) if by_repeat else (task, arm)
            res.setdefault(key, []).append(job)
    return res


def dead_holder():
    """A claim/lock holder whose process really existed and has exited (PID + identity)."""
    from runner.schedule.lock import holder_for

    p = subprocess.Popen(["sleep", "0.1"])
    holder = holder_for(p.pid, "dead-run")
    p.wait()
    return holder


def write_task(root: Path, dirname: str, name: str, test_sh: str, *, base: str, verifier_sec: float = 300.0,
               solve_sh: str | None = None) -> Path:  # fmt: skip
    """A harbor task in ``root/dirname`` on ``base`` that does nothing but run ``test_sh`` as its
    verifier (and ``solve_sh`` as oracle's solution, when given): for trials shaped by a test."""
    t = root / dirname
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    (t / "tests" / "test.sh").write_text(test_sh)
    if solve_sh is not None:
        (t / "solution").mkdir()
        (t / "solution" / "solve.sh").write_text(solve_sh)
    (t / "instruction.md").write_text("Do nothing.\n")
    (t / "task.toml").write_text(
        f'schema_version = "1.4"\n\n[task]\nname = "{name}"\n\n'
        f"[agent]\ntimeout_sec = 120.0\n\n[verifier]\ntimeout_sec = {verifier_sec}\n\n"
        "[environment]\nbuild_timeout_sec = 300.0\n"
    )
    return t
