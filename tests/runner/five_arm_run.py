"""One real five-arm run read by several test modules: equal budgets, the canary leak search (and
later the model gateway's wire checks). Made once per session (tests/runner/conftest.py
``five_arm_run``); its modules share one xdist group (tests/conftest.py ``SHARED_GROUPS``).

``marathon run`` drives the five real arms (real harbor, Docker, codex, LoopX) on one mini task with
the scripted ``never-finish`` model and a 30 s GOAL_TIMEOUT_SEC, all five at once. The credential is
a canary given to the runner by name only (``--ae VAR``), and while the arms run, samplers search
every process command line on the machine, ``docker inspect`` of the run's containers and their
exec instances, and the live registry for it.

The task copy sets its own agent timeout to 40 s: less than a LoopX arm's preparation (33 s on a
quiet machine) plus the budget, so without the runner raising harbor's timeout the LoopX arms'
budgets would be clamped (tests/runner/test_equal_budgets.py). Its image is built FROM a demo image
tagged for this run alone: the shared demo tag is rebuilt by any checkout whose scripted model
differs, and one such rebuild in the middle of a run gave one arm another image (the fairness audit
rightly flagged it). The runner builds the task image from it once and every arm runs that image
(runner.schedule.task_images); that image is not removed here: its content is calc-partial's on the
current demo image, the same image (and tag) another module's run of calc-partial may be using.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from leak_search import CmdlineScan, DockerScan, Sampler, needles
from runner_support import DEMO_TASKS, done_jobs, start_marathon, trial_names

from modes.naming import compose_project
from modes.profiles import DEFAULT_ARMS

TASK = "calc-partial"
BUDGET = 30
#: the task copy's own agent timeout: shorter than a LoopX preparation plus BUDGET (see above)
TASK_AGENT_TIMEOUT_SEC = 40.0
PROJECT_LABEL = "com.docker.compose.project"


def canary() -> str:
    """Unique per run, and changed by URL-encoding ('+', '/', ':')."""
    return f"mcanary{secrets.token_hex(8)}+{secrets.token_urlsafe(12)}/{secrets.token_hex(4)}:z"


@dataclass
class FiveArmRun:
    out: Path
    rc: int
    console: str
    #: arm -> its done attempt's goal_receipt.json
    receipts: dict[str, dict]
    var: str
    found: dict[str, bytes]
    cmdlines: CmdlineScan
    docker: DockerScan
    samplers: list[Sampler]


def make(base: Path) -> FiveArmRun:
    from agents.loopx_staging import stage_loopx
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    image = ensure_demo_image(f"marathon-demo-base:five-{uuid.uuid4().hex[:10]}")
    try:
        return _run(base, _tasks(base / "tasks", image))
    finally:
        subprocess.run(["docker", "image", "rm", image], capture_output=True, timeout=120)  # our tag only


def _tasks(tasks: Path, image: str) -> Path:
    from agents.scripted_model.image import DEMO_IMAGE

    shutil.copytree(DEMO_TASKS / TASK, tasks / TASK)
    dockerfile = tasks / TASK / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace(f"FROM {DEMO_IMAGE}", f"FROM {image}", 1))
    assert f"FROM {image}" in dockerfile.read_text()
    toml = tasks / TASK / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[agent]\ntimeout_sec = 120.0", f"[agent]\ntimeout_sec = {TASK_AGENT_TIMEOUT_SEC}", 1
        )
    )
    assert f"timeout_sec = {TASK_AGENT_TIMEOUT_SEC}" in toml.read_text()
    return tasks


def _run(base: Path, tasks: Path) -> FiveArmRun:
    out = base / "out"  # the output tree; its voided sibling lands in base too
    secret = canary()
    var = f"MARATHON_CANARY_KEY_{secrets.token_hex(3).upper()}"
    found = needles(secret)
    cmdlines = CmdlineScan(
        found,
        {
            "harbor": b"harbor\x00run",
            "app-server": b"app-server",
            "loopx": b"loopx",
            "heartbeat": b"heartbeat",
        },
    )
    docker = DockerScan(found, PROJECT_LABEL, lambda: {compose_project(t) for t in trial_names(out)})
    registry = out / ".runner" / "registry.json"

    def registry_now() -> list[str]:
        try:
            data = registry.read_bytes()
        except OSError:
            return []
        return [f"registry.json (live): {k}" for k, n in found.items() if n in data]

    samplers = [Sampler(cmdlines), Sampler(docker), Sampler(registry_now)]
    for s in samplers:
        s.start()
    log = base / "runner.console.log"
    try:
        proc = start_marathon(
            "run", str(out), "--tasks-dir", str(tasks), "--tasks", TASK,
            "--arms", ",".join(DEFAULT_ARMS), "--model", "scripted/never-finish",
            "--ak", f"api_key_var={var}", "--ae", var,  # by name only: the arm reads it, harbor resolves it
            "--goal-timeout-sec", str(BUDGET),
            # the five at once: the preparations overlap (the allowance holds a slow one), and the
            # five budgets run side by side; a second pass is the runner's own answer to an errored pair
            "--concurrency", "5", "--max-passes", "2", "--plain",
            log=log, **{var: secret},
        )  # fmt: skip
        rc = proc.wait(timeout=3300)
    finally:
        for s in samplers:
            s.stop()
    receipts = {}
    for (task, arm), jobs in done_jobs(out).items():
        if task == TASK and len(jobs) == 1:
            (path,) = jobs[0].glob("*/agent/goal_receipt.json")
            receipts[arm] = json.loads(path.read_text())
    return FiveArmRun(
        out, rc, log.read_text(errors="replace"), receipts, var, found, cmdlines, docker, samplers
    )
