"""A hostile agent through the real arms: what it plants in the output tree never hangs, exhausts or
misleads marathon.

One real `marathon run` (real harbor, Docker, codex, LoopX; the scripted model): the task
``calc-hostile`` is calc-partial whose plan makes codex run one shell command that, during the
agent phase, makes FIFOs of /logs/agent/goal_receipt.json and /logs/agent/trajectory.json, links
/logs/agent/leak -> /etc/shadow, makes a 2 GB sparse file in /logs/agent, and leaves a setsid'd
background process rewriting /logs/verifier/metrics.json with a perfect score every second. It
runs under one codex arm (plain) and one LoopX arm (ssh-goal), next to normal calc-partial pairs of
the same arms. While it runs, `marathon status` is polled (each call finishes: its timeout is a
guard, never a timed assertion) and the runner's RSS is sampled; at the end the console (Pilot)
opens the tree and its drill-down shows the planted files refused. The forger does not outlive the
agent phase (agents.leftovers): the verifier's score stands.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from runner_support import DEMO_TASKS, REPO, env, marathon_argv, run_marathon

from runner.results.model import RunModel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARMS = "plain,ssh-goal"
MODEL = "openai/scripted/loopx"  # runs LoopX's guards in the goal body (ssh-goal), then the task's plan
KEY_VAR = "MARATHON_DEMO_MODEL_KEY"
RSS_CAP = 300 * 1024 * 1024
FORGED = {"partial_score": 1.0, "passed": 999, "failed": 0, "total": 999, "forged": True}

# codex's exec policy rejects `rm -f`-style commands, so the planting is one python3 program (the
# image has python3): FIFOs renamed over the names (atomic), the link, the sparse file, and the
# forger started in its own session so it outlives codex's command and the agent phase.
_PLANT = f"""
import json, os, subprocess
os.chdir("/logs/agent")
for name in ("goal_receipt.json", "trajectory.json"):
    os.mkfifo(name + ".fifo")
    os.replace(name + ".fifo", name)
os.symlink("/etc/shadow", "leak")
with open("sparse.bin", "wb") as fh:
    fh.truncate(2 << 30)
loop = 'while :; do printf %s "$0" > /logs/verifier/metrics.json; sleep 1; done'
subprocess.Popen(["sh", "-c", loop, {json.dumps(json.dumps(FORGED))}], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("planted")
"""
HOSTILE = "python3 -c " + shlex.quote(_PLANT)


def _tasks(dst: Path) -> Path:
    """calc-partial (normal) and calc-hostile (its plan: the hostile command, no solution)."""
    shutil.copytree(DEMO_TASKS / "calc-partial", dst / "calc-partial")
    hostile = dst / "calc-hostile"
    shutil.copytree(DEMO_TASKS / "calc-partial", hostile)
    toml = hostile / "task.toml"
    toml.write_text(toml.read_text().replace("marathon-demo/calc-partial", "marathon-demo/calc-hostile"))
    plan = {"steps": [HOSTILE], "answer": "Done.", "partial_steps": 1}
    (hostile / "environment" / "plan.json").write_text(json.dumps(plan))
    # its own instruction: the scripted stand-in behind the gateway knows a request's task by the
    # instruction in it, as a model knows its task from the prompt (two tasks with one instruction
    # gave calc-partial's trials the hostile plan)
    with open(hostile / "instruction.md", "a") as fh:
        fh.write("\nThis copy of the task is calc-hostile.\n")
    return dst


def _shadow_lines() -> list[str]:
    """Lines of the host's and the base image's /etc/shadow distinctive enough to search for."""
    lines = []
    try:
        lines += Path("/etc/shadow").read_text().splitlines()
    except OSError:
        pass
    cp = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "marathon-demo-base:2", "cat", "/etc/shadow"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines += cp.stdout.splitlines()
    return sorted({ln for ln in lines if len(ln) > 12 and ":" in ln})


def _tree_text(out: Path) -> str:
    """Every regular file of the tree (symlinks never followed; big files by their first 4 MiB)."""
    chunks = []
    for dirpath, _dirs, files in os.walk(out):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            with open(p, "rb") as fh:
                chunks.append(fh.read(4 << 20).decode("utf-8", "replace"))
    return "\n".join(chunks)


@pytest.fixture(scope="module")
def hostile_run(docker_engine, module_out, tmp_path_factory):
    from agents.loopx_staging import stage_loopx
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    ensure_demo_image()
    tasks = _tasks(tmp_path_factory.mktemp("tasks"))
    out = module_out
    log = tmp_path_factory.mktemp("log") / "runner.log"
    argv = marathon_argv(
        "run", str(out), "--tasks-dir", str(tasks), "--arms", ARMS, "--model", MODEL,
        "--ak", f"api_key_var={KEY_VAR}", "--concurrency", "2", "--max-passes", "1", "--plain",
        "--goal-timeout-sec", "240", "--agent-timeout-mult", "5",
    )  # fmt: skip
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env(**{KEY_VAR: "scripted-placeholder"}), stdout=fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    runner = psutil.Process(proc.pid)
    peak_runner, peak_status, polls, planted_seen = 0, 0, 0, False
    try:
        while proc.poll() is None:
            try:
                peak_runner = max(peak_runner, runner.memory_info().rss)
            except psutil.Error:
                pass
            st = subprocess.run(
                ["/usr/bin/time", "-f", "%M", *marathon_argv("status", str(out), "--json")],
                cwd=REPO, env=env(), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            peak_status = max(peak_status, int(st.stderr.strip().splitlines()[-1]) * 1024)
            if st.returncode == 0:
                polls += 1
                planted_seen |= "not a regular file" in st.stdout
            elif st.returncode != 2:  # 2: the runner has not made the tree yet
                raise AssertionError(st.stdout + st.stderr)
            time.sleep(2)
    finally:
        if proc.poll() is None:  # a failed poll: stop our runner (registered PIDs, verified)
            run_marathon("kill", str(out), "--yes", timeout=600)
            proc.wait(timeout=120)
    return {
        "out": out,
        "rc": proc.returncode,
        "log": log.read_text(errors="replace"),
        "peak_runner": peak_runner,
        "peak_status": peak_status,
        "polls": polls,
        "planted_seen": planted_seen,
        "shadow": _shadow_lines(),
    }


def test_runner_finishes_and_status_never_blocks_within_the_rss_cap(hostile_run):
    r = hostile_run
    assert r["rc"] == 0, r["log"][-4000:]
    assert r["polls"] > 0
    # (whether a poll fell inside the few seconds the FIFOs existed is luck: printed, not asserted)
    print(f"status polls: {r['polls']}; a poll saw a planted FIFO: {r['planted_seen']}")
    print(f"runner peak RSS {r['peak_runner'] >> 20} MB; status peak RSS {r['peak_status'] >> 20} MB")
    assert r["peak_runner"] < RSS_CAP
    assert r["peak_status"] < RSS_CAP


def test_hostile_pairs_are_never_scored_from_the_forged_file(hostile_run):
    m = RunModel.load(hostile_run["out"])
    for arm in ARMS.split(","):
        c = m.cells[("calc-hostile", arm)]
        # the forger ended with the agent phase (agents.leftovers), so the verifier's own score
        # stands (calc-partial unsolved: 1 of 5), never the forgery; nor is the pair lost to it
        assert c.status == "done", (arm, c.status, c.note, _why(c))
        assert c.partial is not None and c.partial < 1.0 and c.pass_rate < 1.0, c
        (trial,) = c.attempts[-1].trials.values()
        tdir = Path(c.attempts[-1].job_dir) / trial.name
        # the hostile command did run: its link and its sparse file are there
        assert os.readlink(tdir / "agent" / "leak") == "/etc/shadow", _why(c)
        assert (tdir / "agent" / "sparse.bin").stat().st_size == 2 << 30
        receipt = tdir / "agent" / "goal_receipt.json"
        assert receipt.is_file() and not receipt.is_symlink()  # the arm's own, replaced over the FIFO
        rec = json.loads(receipt.read_text())
        assert rec["arm"] == arm
        left = rec["extra"]["left_running"]
        assert left["ended"] >= 1 and "incomplete" not in left, left  # at least the forger
        traj = tdir / "agent" / "trajectory.json"
        assert not traj.exists() or (traj.is_file() and not traj.is_symlink())


def _why(c) -> str:
    """The trial's exception tail and receipt warnings, for a failure message."""
    if not c.attempts or not c.attempts[-1].job_dir:
        return ""
    job = Path(c.attempts[-1].job_dir)
    parts = [p.read_text(errors="replace")[-1500:] for p in job.glob("*/exception.txt")]
    parts += [p.read_text(errors="replace")[-1500:] for p in job.glob("*/agent/goal_receipt.json")]
    return "\n".join(parts)


def test_normal_pairs_are_unaffected(hostile_run):
    m = RunModel.load(hostile_run["out"])
    for arm in ARMS.split(","):
        c = m.cells[("calc-partial", arm)]
        assert c.status == "done" and c.partial == pytest.approx(1.0), (arm, c.status, c.note, _why(c))


def test_nothing_from_etc_shadow_anywhere_in_the_tree(hostile_run):
    text = _tree_text(hostile_run["out"])
    assert hostile_run["shadow"], "no /etc/shadow lines to look for"
    leaked = [ln for ln in hostile_run["shadow"] if ln in text]
    assert leaked == []


async def drill_screens(out: Path, task: str, arm: str) -> list[str]:
    """The console's screen on the grid, then on each file tab of the pair's drill-down."""
    from textual_screen import screen_text

    from console.app import make_app
    from console.screens.drill import FILES, DrillScreen
    from console.widgets.grid import Grid

    app = make_app(out, docker=False, offer_start=False)
    screens = []
    async with app.run_test(size=(140, 40)) as pilot:
        deadline = time.monotonic() + 120
        while not (app.main.cells and app.main.last_change_at is not None):
            assert time.monotonic() < deadline, "no grid"
            await pilot.pause(0.2)
        app.screen.query_one(Grid).move_to(task, arm)
        await pilot.pause()
        screens.append(screen_text(app))
        await pilot.press("enter")
        for i in range(len(FILES)):
            while not (isinstance(app.screen, DrillScreen) and app.screen.source is not None):
                assert time.monotonic() < deadline, "no drill-down"
                await pilot.pause(0.2)
            await pilot.pause(0.5)
            screens.append(screen_text(app))
            if i + 1 < len(FILES):
                app.screen.source = None
                await pilot.press("tab")
    return screens


def test_console_shows_the_hostile_files_refused_and_leaks_nothing(hostile_run):
    out = hostile_run["out"]
    screens = asyncio.run(drill_screens(out, "calc-hostile", "plain"))
    screens += asyncio.run(drill_screens(out, "calc-hostile", "ssh-goal"))
    text = "\n".join(screens)
    assert "calc-hostile" in text
    leaked = [ln for ln in hostile_run["shadow"] if ln in text]
    assert leaked == []
    m = RunModel.load(out)
    a = m.cells[("calc-hostile", "plain")].attempts[-1]
    (trial,) = a.trials
    leak = Path(a.job_dir) / trial / "agent" / "leak"
    from console.fileindex import LineSource

    src = LineSource(leak, leak.parent.parent)
    assert src.error and "symlink out of the trial dir" in src.error
