"""Fixtures for the LoopX arms: staged parts (once, cached on disk) and real containers.

Containers are started FROM marathon-base:bookworm with ``--network none`` and the staged parts mounted
read-only, exactly as a trial sees them; each carries a unique label and is removed by its ID.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from container_exec import docker_exec

from agents.loopx_profile import install_profile
from agents.loopx_staging import CONTAINER_PARTS_ROOT, StagedLoopx, stage_loopx

BASE_IMAGE = "marathon-base:bookworm"
LABEL = "marathon.test"
RUN_ID = uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def staged_loopx() -> StagedLoopx:
    return stage_loopx()


def _start(mount_source: Path, name_hint: str) -> str:
    cid = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--network",
            "none",
            "--label",
            f"{LABEL}=arms-loopx-{RUN_ID}-{name_hint}",
            "-v",
            f"{mount_source}:{CONTAINER_PARTS_ROOT}:ro",
            "-w",
            "/app",
            BASE_IMAGE,
            "sleep",
            "infinity",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    subprocess.run(["docker", "exec", cid, "mkdir", "-p", "/app"], check=True, timeout=60)
    return cid


def _remove(cid: str) -> None:
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=120)


@pytest.fixture
def container_factory(docker_engine, staged_loopx):
    """Start containers with the staged parts (or a given parts dir) mounted; removed by ID after."""
    started: list[str] = []

    def make(parts_root: Path | None = None, hint: str = "c") -> str:
        cid = _start(parts_root or staged_loopx.root, hint)
        started.append(cid)
        return cid

    yield make
    for cid in started:
        _remove(cid)


@pytest.fixture(scope="session")
def installed_container(docker_engine, staged_loopx):
    """One container with the profile installed (shared by the read-only checks)."""
    cid = _start(staged_loopx.root, "installed")
    try:
        run = docker_exec(cid)
        profile = asyncio.run(install_profile(run, staged_loopx.container_paths()))
        yield cid, run, profile
    finally:
        _remove(cid)


@pytest.fixture
def parts_without_node(staged_loopx, tmp_path) -> Path:
    """A copy of the staged parts with ``node/bin/node`` left out (wheels hard-linked)."""
    root = tmp_path / "parts"
    (root / "wheels").mkdir(parents=True)
    for whl in (staged_loopx.root / "wheels").iterdir():
        try:
            (root / "wheels" / whl.name).hardlink_to(whl)
        except OSError:
            shutil.copy2(whl, root / "wheels" / whl.name)
    (root / "node" / "bin").mkdir(parents=True)
    return root


# --- real harbor trials of the three LoopX arms (run once per session, concurrently) -----------------

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import zipfile  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import arm_gateway  # noqa: E402

from agents.scripted_model.image import ensure_demo_image  # noqa: E402
from agents.staging import CONTAINER_CODEX_ROOT, stage_codex  # noqa: E402
from runner.schedule.harbor_run import SKIP_MODEL_PARSING  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CALC = REPO / "runner" / "demo" / "tasks" / "calc-partial"
AGENT = "agents.codex_loopx_agent:CodexLoopxAgent"
KEY_VAR = "MARATHON_TEST_MODEL_KEY"
MAX_PARALLEL_JOBS = 4
#: GOAL_TIMEOUT_SEC of the never-finish trials: model time from the first model request (the LoopX
#: preparation is outside it), long enough for the plan's first step on a loaded machine
DEADLINE_SEC = 30
#: an id the "future LoopX" wheel requires but does not deliver (see parts_variant)
FUTURE_SKILL = "loopx-future-skill"


@dataclass
class Job:
    key: str
    model: str = "scripted/loopx"
    ak: dict = field(default_factory=dict)
    ae: dict = field(default_factory=dict)
    parts: str | None = None  # a parts variant name (see parts_variant), else the staged parts
    agent: str = AGENT


@dataclass
class Outcome:
    job: Job
    job_dir: Path
    returncode: int
    log: Path
    attempt: str = ""  # the job's attempt at the model gateway ("" on the docker-exec transport)
    out: Path | None = None

    @property
    def trial(self) -> Path:
        trials = [p for p in self.job_dir.iterdir() if p.is_dir()] if self.job_dir.is_dir() else []
        assert len(trials) == 1, self.log.read_text(errors="replace")[-2000:]
        return trials[0]

    def result(self) -> dict:
        return json.loads((self.trial / "result.json").read_text())

    def receipt(self) -> dict:
        return json.loads((self.trial / "agent" / "goal_receipt.json").read_text())

    def requests(self) -> list[dict]:
        """What the scripted model received from this job's trial, from its own log: on the host
        (through the gateway, by the job's attempt), or in the trial's container (docker-exec)."""
        if self.attempt:
            assert self.out is not None
            return arm_gateway.requests(self.out, self.attempt)
        path = self.trial / "agent" / "scripted-model" / "requests.jsonl"
        assert path.is_file(), "the scripted model's request log was not saved"
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def commands(self) -> list[dict]:
        """Completed commandExecution items from the raw app-server stdout."""
        out = []
        for line in (
            (self.trial / "agent" / "appserver.stdout.jsonl").read_text(errors="replace").splitlines()
        ):
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            item = (msg.get("params") or {}).get("item") or {}
            if msg.get("method") == "item/completed" and item.get("type") == "commandExecution":
                out.append(item)
        return out


def parts_variant(staged: StagedLoopx, kind: str, dest: Path) -> Path:
    """A hard-linked copy of the staged parts, broken one way; files are replaced, never edited in place."""
    subprocess.run(["cp", "-al", str(staged.root), str(dest)], check=True)
    node = dest / "node" / "bin" / "node"
    if kind == "no-node":
        node.unlink()
    elif kind == "old-node":
        node.unlink()
        node.write_text("#!/bin/sh\necho v20.11.1\n")
        node.chmod(0o755)
    elif kind == "future-skill":
        # a loopx whose required-skill constant names a skill it does not deliver: only a gate that
        # reads the constant from the installed package (not a hand-written list) can catch it
        wheel = dest / "wheels" / staged.loopx_wheel.name
        target = "loopx/capabilities/benchmark_toolkit/native_codex_profile.py"
        tmp = wheel.with_suffix(".tmp")
        with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info in src.infolist():
                data = src.read(info)
                if info.filename == target:
                    text = data.decode()
                    old = "    *PACKAGED_HOST_SKILL_IDS,\n)"
                    assert old in text
                    data = text.replace(
                        old, f'    *PACKAGED_HOST_SKILL_IDS,\n    "{FUTURE_SKILL}",\n)', 1
                    ).encode()
                out.writestr(info, data)
        os.replace(tmp, wheel)
    else:
        raise ValueError(kind)
    return dest


def _harbor() -> str:
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def _run(job: Job, out: Path, codex_root: Path, parts_root: Path, env: dict) -> Outcome:
    mounts = [
        {"type": "bind", "source": str(codex_root), "target": CONTAINER_CODEX_ROOT, "read_only": True},
        {"type": "bind", "source": str(parts_root), "target": CONTAINER_PARTS_ROOT, "read_only": True},
    ]
    iss, gateway_ak = None, []
    if job.ak.get("transport") != "docker-exec":  # the debugging transport cannot run the relay
        budget = float(job.ae["GOAL_TIMEOUT_SEC"]) if "GOAL_TIMEOUT_SEC" in job.ae else None
        iss, env, gateway_ak = arm_gateway.wire(out, CALC.name, job.key, budget, env, KEY_VAR)
        mounts.append(iss.mount)
    cmd = [
        _harbor(),
        "run",
        "-p",
        str(CALC),
        "-a",
        job.agent,
        "-m",
        f"openai/{job.model}",
        "-o",
        str(out / job.key),
        "--job-name",
        "job",
        "-n",
        "1",
        "-y",
        SKIP_MODEL_PARSING,  # as the runner starts the arms (runner.schedule.driver.harbor_argv)
        # harbor's own limit is only a safety net here (every job ends by its model or its
        # GOAL_TIMEOUT_SEC): 3x (360 s) cut LoopX trials whose preparation took minutes on a loaded
        # 2-core machine; the runner raises it by the preparation allowance the same way
        "--agent-timeout-multiplier",
        "10",
        "--mounts",
        json.dumps(mounts),
        "--ak",
        f"api_key_var={KEY_VAR}",
        *gateway_ak,
    ]
    for k, v in job.ak.items():
        cmd += ["--ak", f"{k}={v}"]
    for k, v in job.ae.items():
        cmd += ["--ae", f"{k}={v}"]
    log = out / f"{job.key}.log"
    with log.open("wb") as fh:
        rc = subprocess.run(
            cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=900
        ).returncode
    if iss is None:
        return Outcome(job, out / job.key / "job", rc, log)
    arm_gateway.end(out, iss, rc)
    return Outcome(job, out / job.key / "job", rc, log, iss.record.id, out)


JOBS = [
    Job("ssh-goal", ak={"mode": "ssh-goal"}),
    Job("codex-cli", ae={"WEN_MODE": "codex-cli"}),  # the compatibility route: mode from WEN_MODE
    Job("heartbeat", ak={"mode": "heartbeat"}),
    Job("block-ungated", model="scripted/block", ak={"mode": "ssh-goal"}),
    Job("block-gated", model="scripted/block", ak={"mode": "codex-cli", "ungated": "false"}),
    Job(
        "block-before-instruction",
        model="scripted/block",
        # the ordering is pinned on the host's session object: the docker-exec transport
        ak={"mode": "ssh-goal", "transport": "docker-exec"},
        agent="tests.arms_loopx.race_agent:InstructionAfterGoalTurnAgent",
    ),
    Job(
        "never-ssh-goal",
        model="scripted/never-finish",
        ak={"mode": "ssh-goal"},
        ae={"GOAL_TIMEOUT_SEC": str(DEADLINE_SEC)},
    ),
    Job(
        "never-heartbeat",
        model="scripted/never-finish",
        ak={"mode": "heartbeat"},
        ae={"GOAL_TIMEOUT_SEC": str(DEADLINE_SEC)},
    ),
    Job("no-node", ak={"mode": "ssh-goal"}, parts="no-node"),
    Job("old-node", ak={"mode": "codex-cli"}, parts="old-node"),
    Job("future-skill", ak={"mode": "heartbeat"}, parts="future-skill"),
]


@pytest.fixture(scope="session")
def parts_variants(staged_loopx, tmp_path_factory) -> dict[str, Path]:
    """The broken parts variants (hard-linked copies), made once per session."""
    base = tmp_path_factory.mktemp("loopx_parts")
    variants = {
        k: parts_variant(staged_loopx, k, base / f"parts-{k}")
        for k in ("no-node", "old-node", "future-skill")
    }
    yield variants
    for v in variants.values():
        shutil.rmtree(v, ignore_errors=True)


@pytest.fixture(scope="session")
def loopx_runs(docker_engine, staged_loopx, parts_variants, tmp_path_factory) -> dict[str, Outcome]:
    """Every LoopX-arm harbor job of this area, run once, at most MAX_PARALLEL_JOBS at a time."""
    ensure_demo_image()
    codex = stage_codex()
    out = tmp_path_factory.mktemp("arms_loopx") / "out"
    out.mkdir()
    key = "sk-loopx-test"
    # the docker-exec job's model is in its container and takes the key from harbor's environment;
    # every other job's harbor gets its attempt's token instead (arm_gateway.wire)
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True", **{KEY_VAR: key})
    env.pop("WEN_MODE", None)
    arm_gateway.start(out, KEY_VAR, key, [CALC.parent])
    try:
        with ThreadPoolExecutor(MAX_PARALLEL_JOBS) as pool:
            futures = {
                j.key: pool.submit(
                    _run, j, out, codex.root, parts_variants.get(j.parts, staged_loopx.root), env
                )
                for j in JOBS
            }
            return {k: f.result() for k, f in futures.items()}
    finally:
        arm_gateway.stop(out)
