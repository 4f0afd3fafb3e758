"""Real trials for the codex arms: real harbor, real Docker, the real codex binary, the scripted model.

Every harbor job the area's tests need is started once per session by ``arm_runs`` and run
concurrently (bounded), so the whole area costs about one slow trial plus builds. Every arm reaches
its model as in a real run: through the model gateway (``runner.ops.gateway``, started for the area
with the scripted model on the host as its upstream), each job an attempt with its own token and
socket, the relay in its sandbox (all but the codex-copy job, which stands for a sandbox that takes
no mount, so its model is in its image). The credential is a random value in the gateway's environment
only; a watcher thread scans every process command line on the machine for it while the jobs run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import arm_gateway
import psutil
import pytest

from agents.scripted_model.image import ensure_demo_image
from agents.staging import SIDECAR, StagedCodex, stage_codex
from runner.schedule.harbor_run import SKIP_MODEL_PARSING

REPO = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO / "runner" / "demo" / "tasks"
TEST_TASKS = Path(__file__).resolve().parent / "tasks"
PLAIN = "agents.codex_plain_appserver:CodexPlainAppServer"
GOAL = "agents.codex_goal_agent:CodexGoalAgent"
KEY_VAR = "MARATHON_TEST_MODEL_KEY"
MAX_PARALLEL_JOBS = 5
#: GOAL_TIMEOUT_SEC of the never-finish trials: long enough for the first plan step on a loaded machine
DEADLINE_SEC = 20


@dataclass
class Job:
    key: str
    agent: str
    path: Path
    model: str = "scripted/solve"
    n: int = 1
    ae: dict = field(default_factory=dict)
    ak: dict = field(default_factory=dict)
    codex_root: Path | None = None
    mount: bool = True  # False: no --mounts (the codex_delivery=copy route)
    #: False: the model in the trial's image, the key in harbor's environment (where no mount is
    #: possible the gateway's socket cannot be mounted either: a remote sandbox takes its TLS route)
    gateway: bool = True
    cancel_when_turn_started: bool = False


@dataclass
class JobOutcome:
    job: Job
    job_dir: Path
    returncode: int
    log: Path
    cancelled_at: float | None = None
    attempt: str = ""  # the job's attempt at the gateway (one token for its trials)
    out: Path | None = None  # the tree of the gateway's records (and the scripted model's log)

    def trials(self) -> list[Path]:
        return sorted(p for p in self.job_dir.iterdir() if p.is_dir()) if self.job_dir.is_dir() else []

    def result(self, trial: Path) -> dict:
        return json.loads((trial / "result.json").read_text())

    def receipt(self, trial: Path) -> dict:
        return json.loads((trial / "agent" / "goal_receipt.json").read_text())

    def requests(self, trial: Path) -> list[dict]:
        """What the scripted model received from this trial, from its own log: the job's attempt's
        calls (the gateway's request ids name it), of the trial's task when the job ran several."""
        if not self.attempt:  # the model in the trial's container
            path = trial / "agent" / "scripted-model" / "requests.jsonl"
            return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        assert self.out is not None
        task = trial.name.split("__")[0] if len(self.trials()) > 1 else None
        return arm_gateway.requests(self.out, self.attempt, task)

    def by_task(self) -> dict[str, Path]:
        return {t.name.split("__")[0]: t for t in self.trials()}

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


class CmdlineWatcher(threading.Thread):
    """Scans every process's command line for the secret until stopped (psutil; no process signalled)."""

    def __init__(self, secret: str) -> None:
        super().__init__(daemon=True)
        self.secret = secret
        self.offenders: list[str] = []
        self.scans = 0
        self.appserver_seen = (
            0  # scans that saw a codex app-server (client or in-container): proof of overlap
        )
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            saw = False
            for proc in psutil.process_iter(["pid", "cmdline"]):
                cmd = " ".join(proc.info.get("cmdline") or [])
                if self.secret in cmd:
                    self.offenders.append(f"{proc.info['pid']}: {cmd[:200]}")
                if "app-server" in cmd:
                    saw = True
            self.scans += 1
            self.appserver_seen += saw
            self._stop_evt.wait(0.2)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(10)


def harbor_bin() -> str:
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def _mounts(root: Path) -> list[dict]:
    return [{"type": "bind", "source": str(root), "target": "/opt/codex", "read_only": True}]


def _run_job(job: Job, out: Path, staged: StagedCodex, env: dict) -> JobOutcome:
    jobs_dir = out / job.key
    iss, gateway_ak = None, []
    if job.gateway:
        budget = float(job.ae["GOAL_TIMEOUT_SEC"]) if "GOAL_TIMEOUT_SEC" in job.ae else None
        iss, env, gateway_ak = arm_gateway.wire(out, job.path.name, job.key, budget, env, KEY_VAR)
    cmd = [
        harbor_bin(),
        "run",
        "-p",
        str(job.path),
        "-a",
        job.agent,
        "-m",
        job.model,
        "-o",
        str(jobs_dir),
        "--job-name",
        "job",
        "-n",
        str(job.n),
        "-y",
        SKIP_MODEL_PARSING,  # as the runner starts the arms (runner.schedule.driver.harbor_argv)
        "--ak",
        f"api_key_var={KEY_VAR}",
    ]
    mounts = [*(_mounts(job.codex_root or staged.root) if job.mount else []), *([iss.mount] if iss else [])]
    cmd += [*(["--mounts", json.dumps(mounts)] if mounts else []), *gateway_ak]
    for k, v in job.ae.items():
        cmd += ["--ae", f"{k}={v}"]
    for k, v in job.ak.items():
        cmd += ["--ak", f"{k}={v}"]
    log = out / f"{job.key}.log"
    job_dir = jobs_dir / "job"
    cancelled_at = None
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
        if job.cancel_when_turn_started:
            t_end = time.monotonic() + 600  # the driver's upload and start come first
            while time.monotonic() < t_end and proc.poll() is None:
                if job_dir.exists() and _turn_started(job_dir):
                    time.sleep(2)  # let a few tool calls land
                    proc.send_signal(signal.SIGTERM)  # the harbor process we started, by its handle
                    cancelled_at = time.time()
                    break
                time.sleep(0.3)
        try:
            rc = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    if iss is None:
        return JobOutcome(job, job_dir, rc, log, cancelled_at)
    arm_gateway.end(out, iss, rc)
    return JobOutcome(job, job_dir, rc, log, cancelled_at, iss.record.id, out)


def _turn_started(job_dir: Path) -> bool:
    """A turn runs: seen in the raw app-server log (docker-exec) or the driver's status mirror."""
    for raw in job_dir.glob("*/agent/appserver.stdout.jsonl"):
        if '"turn/started"' in raw.read_text(errors="replace"):
            return True
    for mirror in job_dir.glob("*/agent/driver-status.json"):
        try:
            if json.loads(mirror.read_text()).get("turns", 0) >= 1:
                return True
        except ValueError:
            continue
    return False


def _tree_copy(staged: StagedCodex, dest: Path) -> Path:
    """A hard-linked copy of the staged tree (cheap) that a test may alter without touching the cache."""
    subprocess.run(["cp", "-al", str(staged.root), str(dest)], check=True)
    return dest


@pytest.fixture(scope="session")
def staged_codex() -> StagedCodex:
    """Staged once per session; the on-disk cache makes later sessions (and CI) reuse it."""
    return stage_codex()


@pytest.fixture(scope="session")
def demo_image(docker_engine) -> str:
    return ensure_demo_image()


@pytest.fixture(scope="session")
def arm_runs(docker_engine, demo_image, staged_codex, tmp_path_factory):
    """All the area's harbor jobs, run concurrently once; returns (outcomes by key, watcher)."""
    base = tmp_path_factory.mktemp("arms_codex")
    out = base / "out"
    out.mkdir()
    noisy = _tree_copy(staged_codex, base / "codex-noisy")
    wrapper = noisy / "bin" / "codex-noisy"
    wrapper.write_text(
        "#!/bin/sh\n# a wrapper that prints a banner on stdout before app-server speaks (like a chatty profile)\n"
        'echo "welcome to the trial container (not JSON)"\nexec /opt/codex/bin/codex "$@"\n'
    )
    wrapper.chmod(0o755)
    no_sidecar = _tree_copy(staged_codex, base / "codex-no-sidecar")
    (no_sidecar / "bin" / SIDECAR).unlink()

    secret = "sk-marathon-test-" + secrets.token_hex(12)
    # the key is in harbor's environment only for the job without the gateway (arm_gateway.wire
    # takes it out of every other job's)
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True", **{KEY_VAR: secret})
    arm_gateway.start(out, KEY_VAR, secret, [DEMO_TASKS, TEST_TASKS])  # it alone gets the key
    calc = DEMO_TASKS / "calc-partial"
    jobs = [
        Job("cancel-goal", GOAL, calc, model="scripted/never-finish", cancel_when_turn_started=True),
        Job("cancel-plain", PLAIN, calc, model="scripted/never-finish", cancel_when_turn_started=True),
        Job("plain-mini", PLAIN, DEMO_TASKS, n=2),
        Job("goal-mini", GOAL, DEMO_TASKS, n=2),
        Job(
            "never-plain",
            PLAIN,
            calc,
            model="scripted/never-finish",
            ae={"GOAL_TIMEOUT_SEC": str(DEADLINE_SEC)},
        ),
        Job(
            "never-goal",
            GOAL,
            calc,
            model="scripted/never-finish",
            ae={"GOAL_TIMEOUT_SEC": str(DEADLINE_SEC)},
        ),
        Job("special-plain", PLAIN, TEST_TASKS, n=2),
        Job("special-goal", GOAL, TEST_TASKS, n=2),
        Job(
            "noise-plain",
            PLAIN,
            calc,
            model="scripted/noise",
            codex_root=noisy,
            ak={"codex_bin": "/opt/codex/bin/codex-noisy"},
        ),
        Job("no-sidecar", PLAIN, calc, codex_root=no_sidecar),
        Job("block-goal", GOAL, calc, model="scripted/block-always"),
        Job("continue-goal", GOAL, calc, model="scripted/two-turns"),
        Job("unsupported-plain", PLAIN, calc, model="scripted/unsupported"),
        Job("copy-goal", GOAL, calc, mount=False, ak={"codex_delivery": "copy"}, gateway=False),
        Job("zero-goal", GOAL, calc, model="scripted/zero-usage", ae={"GOAL_TIMEOUT_SEC": "60"}),
    ]
    watcher = CmdlineWatcher(secret)
    watcher.start()
    try:
        with ThreadPoolExecutor(MAX_PARALLEL_JOBS) as pool:
            futures = {j.key: pool.submit(_run_job, j, out, staged_codex, env) for j in jobs}
            outcomes = {k: f.result() for k, f in futures.items()}
    finally:
        watcher.stop()
        arm_gateway.stop(out)
    yield outcomes, watcher
    shutil.rmtree(noisy, ignore_errors=True)
    shutil.rmtree(no_sidecar, ignore_errors=True)
