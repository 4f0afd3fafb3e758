"""The five arms through the in-sandbox driver: on a remote-like environment and on plain Docker.

Real harbor, real Docker, the real codex and LoopX, the scripted model. The remote-like environment
(tests.envs.remote_like) has no mounts, no container id and no stdin, delays every call and loses
execs; the arms must solve the task there with the same rewards and the same receipts (apart from
the transport) as on plain Docker, the five arms reaching the model gateway over its TLS route as a
remote sandbox does. Through it, with the all-solve model of ``marathon demo
--simple`` (every pair reward 1 on Docker): ``marathon run`` of the five arms on calc-partial, and
of ``plain`` on the other three mini tasks (every arm and every task through the environment, each
once: the arms' path through it does not depend on the task, and the tasks' verifiers do not
depend on the arm; the five arms on the four tasks on Docker are the varied demo's); and
calc-partial per arm through harbor directly on plain Docker (the gateway's local route: socket
and relay), receipt against receipt. Also:
lost execs (one in four) are retried, a deadline run through the remote-like environment ends at
the deadline and is scored; ``kill -9`` of ``harbor run`` leaves no driver and no container after
``marathon cleanup``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import arm_gateway
import pytest

from agents.loopx_staging import CONTAINER_PARTS_ROOT
from agents.loopx_staging import load_staged as load_loopx
from agents.scripted_model.image import ensure_demo_image
from agents.staging import CONTAINER_CODEX_ROOT, stage_codex
from marathon.commands.demo import DEMO_KEY_VAR, DEMO_MODEL
from modes.profiles import DEFAULT_ARMS
from runner.ops.docker_pool import our_projects
from runner.schedule.harbor_run import SKIP_MODEL_PARSING
from runner.secrets import DECLARED_NON_SECRETS

#: the shared runs are made in the first test's setup: on a loaded 2-core CI worker they take
#: longer than the suite's default per-test limit (pyproject's 1800 s)
pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO / "runner" / "demo" / "tasks"
CALC = DEMO_TASKS / "calc-partial"
REMOTE = "tests.envs.remote_like:RemoteLikeEnvironment"
KEY_VAR = "MARATHON_TEST_MODEL_KEY"
AGENTS = {
    "plain": ("agents.codex_plain_appserver:CodexPlainAppServer", {}),
    "goal": ("agents.codex_goal_agent:CodexGoalAgent", {}),
    "ssh-goal": ("agents.codex_loopx_agent:CodexLoopxAgent", {"mode": "ssh-goal"}),
    "codex-cli": ("agents.codex_loopx_agent:CodexLoopxAgent", {"mode": "codex-cli"}),
    "heartbeat": ("agents.codex_loopx_agent:CodexLoopxAgent", {"mode": "heartbeat"}),
}
#: receipt fields that must not depend on the environment
SAME = ("arm", "stop_reason", "goal_status_final", "our_turns", "deadline_hit", "errors")
#: of those, the ones that must not depend on the task either (the all-solve model)
ENDING = ("arm", "stop_reason", "goal_status_final", "deadline_hit", "errors")
MAX_PARALLEL = 3  # the shared engine's address pool and two cores


@dataclass
class Run:
    key: str
    arm: str
    env: str | None  # None: harbor's docker with the read-only mounts
    model: str = "scripted/solve"
    ae: dict = field(default_factory=dict)
    ek: dict = field(default_factory=dict)


def _harbor() -> str:
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def _cmd(run: Run, jobs_dir: Path, job_name: str, mounts: list[dict], extra: list[str] = ()) -> list[str]:
    agent, ak = AGENTS[run.arm]
    cmd = [_harbor(), "run", "-p", str(CALC), "-a", agent, "-m", f"openai/{run.model}", "-o", str(jobs_dir),
           "--job-name", job_name, "-n", "1", "-y", "--agent-timeout-multiplier", "6", SKIP_MODEL_PARSING,
           "--ak", f"api_key_var={KEY_VAR}", *extra]  # fmt: skip
    if run.env is None:
        cmd += ["--mounts", json.dumps(mounts)]
    else:
        cmd += ["-e", run.env]
    for k, v in ak.items():
        cmd += ["--ak", f"{k}={v}"]
    for k, v in run.ae.items():
        cmd += ["--ae", f"{k}={v}"]
    for k, v in run.ek.items():
        cmd += ["--ek", f"{k}={v}"]
    return cmd


@pytest.fixture(scope="session")
def sandbox_env(docker_engine, tmp_path_factory):
    ensure_demo_image()
    codex, parts = stage_codex(), load_loopx()
    mounts = [
        {"type": "bind", "source": str(codex.root), "target": CONTAINER_CODEX_ROOT, "read_only": True},
        {"type": "bind", "source": str(parts.root), "target": CONTAINER_PARTS_ROOT, "read_only": True},
    ]
    secret = "sk-marathon-test-" + secrets.token_hex(12)
    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True", **{KEY_VAR: secret})
    return tmp_path_factory.mktemp("sandbox_driver"), mounts, env


def _trial(job_dir: Path) -> Path:
    (trial,) = [p for p in job_dir.iterdir() if p.is_dir()]
    return trial


@pytest.fixture(scope="session")
def driver_runs(sandbox_env):
    base, mounts, env = sandbox_env
    runs = [Run(f"docker-{a}", a, None) for a in AGENTS]
    # one run loses one exec in four, so the retries are exercised for certain
    runs.append(Run("remote-faults", "plain", REMOTE, ek={"fault_every": 4}))
    runs.append(
        Run("remote-deadline", "plain", REMOTE, model="scripted/never-finish", ae={"GOAL_TIMEOUT_SEC": "20"})
    )

    gw_out = base / "gateway"
    gw_out.mkdir()

    def one(run: Run) -> tuple[Path, int, str]:
        jobs = base / run.key
        log = base / f"{run.key}.log"
        job_env, job_mounts, extra, iss = env, mounts, [], None
        if run.env is None:  # on Docker the arm reaches the model through the gateway, as in a run
            budget = float(run.ae["GOAL_TIMEOUT_SEC"]) if "GOAL_TIMEOUT_SEC" in run.ae else None
            iss, job_env, extra = arm_gateway.wire(gw_out, CALC.name, run.key, budget, env, KEY_VAR)
            job_mounts = [*mounts, iss.mount]
        with log.open("wb") as fh:
            rc = subprocess.run(_cmd(run, jobs, "job", job_mounts, extra), cwd=REPO, env=job_env, stdout=fh,
                                stderr=subprocess.STDOUT, timeout=1500).returncode  # fmt: skip
        if iss is not None:
            arm_gateway.end(gw_out, iss, rc)
        return jobs / "job", rc, log.read_text(errors="replace")[-2000:]

    # the remote-like runs keep the model in their container (no mount reaches a remote sandbox; the
    # TLS route is the marathon runs' below): what they test is the transport's lost execs and deadline
    arm_gateway.start(gw_out, KEY_VAR, env[KEY_VAR], [CALC.parent])
    try:
        with ThreadPoolExecutor(MAX_PARALLEL) as pool:
            futures = {r.key: pool.submit(one, r) for r in runs}
            return {k: f.result() for k, f in futures.items()}
    finally:
        arm_gateway.stop(gw_out)


def _outcome(runs, key) -> tuple[dict, dict]:
    job_dir, _rc, log = runs[key]
    return _read_trial(_trial(job_dir), log)


def _read_trial(trial: Path, log: str = "") -> tuple[dict, dict]:
    res = json.loads((trial / "result.json").read_text())
    assert (trial / "agent" / "goal_receipt.json").is_file(), log
    return res, json.loads((trial / "agent" / "goal_receipt.json").read_text())


@dataclass
class TreeRun:
    out: Path
    rc: int
    log: str

    def trials(self, task: str, arm: str) -> list[Path]:
        """Every trial dir of (task, arm) in the tree outside marathon-voided/ (OUT/TASK/ARM/STAMP/JOB/TRIAL)."""
        return [p.parent for p in self.out.glob(f"{task}/{arm}/*/*/*/result.json")]


@dataclass
class RemoteRuns:
    """The two ``marathon run`` trees through the remote-like environment: ``arms`` (the five arms
    on calc-partial) and ``tasks`` (plain on the other mini tasks)."""

    arms: TreeRun
    tasks: TreeRun
    other_tasks: list[str]
    tls: TlsRoute  # the arms' run's route to the gateway

    def pairs(self) -> list[tuple[TreeRun, str, str]]:
        return [(self.arms, "calc-partial", a) for a in DEFAULT_ARMS] + [
            (self.tasks, t, "plain") for t in self.other_tasks
        ]


@dataclass(frozen=True)
class TlsRoute:
    """The gateway's route for remote sandboxes, as an operator sets it up: a TLS listener on an
    address the sandboxes reach (here the engine's bridge, ``docker0``: traffic stays on this
    machine), a certificate for that address, its CA uploaded into each sandbox for codex."""

    ip: str
    port: int
    cert: Path
    key: Path
    ca: Path  # the private CA that signed ``cert``

    @property
    def url(self) -> str:
        return f"https://{self.ip}:{self.port}/v1"

    def argv(self) -> list[str]:
        return ["--gateway-url", self.url, "--gateway-tls-listen", f"{self.ip}:{self.port}",
                "--gateway-tls-cert", str(self.cert), "--gateway-tls-key", str(self.key),
                "--gateway-ca", str(self.ca)]  # fmt: skip


def bridge_address() -> str:
    """The host's address on the engine's default bridge: its IPAM gateway, else (an engine that
    adopted a bridge interface left by an earlier daemon lists only the subnet) the IPv4 address
    of the bridge's interface itself, which is the same thing."""
    import psutil

    fmt = '{{range .IPAM.Config}}{{.Gateway}}{{end}}|{{index .Options "com.docker.network.bridge.name"}}'
    inspect = subprocess.run(["docker", "network", "inspect", "bridge", "--format", fmt],
                             capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    gateway, _, name = inspect.stdout.strip().partition("|")
    if gateway:
        return gateway
    addrs = [
        a.address for a in psutil.net_if_addrs().get(name or "docker0", []) if a.family == socket.AF_INET
    ]
    assert addrs, f"the engine's bridge ({name or 'docker0'}) has no IPv4 address"
    return addrs[0]


def tls_route(base: Path) -> TlsRoute:
    """A private CA and its certificate for the bridge's address, and a port free on it now (the gateway
    binds it when the run starts, seconds later; the ephemeral range makes a clash unlikely)."""
    ip = bridge_address()
    with socket.socket() as s:
        s.bind((ip, 0))
        port = s.getsockname()[1]
    ca, ca_key, cert, key, csr = (base / n for n in ("ca.crt", "ca.key", "gw.crt", "gw.key", "gw.csr"))
    ext = base / "gw.ext"  # a leaf: codex's TLS (rustls) refuses a CA certificate as a server's
    ext.write_text(f"subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=marathon test CA",
         "-keyout", str(ca_key), "-out", str(ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={ip}", "-keyout", str(key), "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
         "-extfile", str(ext), "-out", str(cert)],
    ):  # fmt: skip
        subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)
    return TlsRoute(ip, port, cert, key, ca)


def _remote_run(
    out: Path, tasks_dir: Path, arms: list[str], env: dict, tls: TlsRoute | None = None
) -> subprocess.Popen:
    # The five arms' run reaches the model gateway over its TLS route (no mount, no socket: the
    # route a Daytona or Modal sandbox takes, docs/gateway.md), with the real codex trusting the
    # uploaded CA. The other tasks' run keeps --no-gateway: the debugging path, the key in the sandbox.
    route = tls.argv() if tls else ["--no-gateway"]
    argv = [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(tasks_dir),
            "--arms", ",".join(arms), "--concurrency", "2", "--env", REMOTE, *route,
            "--model", DEMO_MODEL, "--ak", f"api_key_var={DEMO_KEY_VAR}",
            "--ae-literal", f"{DEMO_KEY_VAR}={DECLARED_NON_SECRETS[DEMO_KEY_VAR]}", "--plain",
            "--agent-timeout-mult", "10", "--verifier-mult", "10"]  # fmt: skip
    log = open(out.parent / f"{out.name}.log", "wb")  # noqa: SIM115 -- closed by the caller's wait
    proc = subprocess.Popen(argv, cwd=REPO, env=env | {"HARBOR_TELEMETRY": "0"}, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    log.close()  # the child holds its own descriptor
    return proc


@pytest.fixture(scope="session")
def mini_remote(sandbox_env) -> RemoteRuns:
    """``marathon run`` through the remote-like environment, both trees at once (2 + 2 slots)."""
    base, _mounts, env = sandbox_env
    tasks = sorted(p.name for p in DEMO_TASKS.iterdir() if (p / "task.toml").is_file())
    assert len(tasks) == 4 and "calc-partial" in tasks
    others = [t for t in tasks if t != "calc-partial"]
    calc_dir, others_dir = base / "calc-task", base / "other-tasks"
    shutil.copytree(CALC, calc_dir / "calc-partial")
    for t in others:
        shutil.copytree(DEMO_TASKS / t, others_dir / t)
    tls = tls_route(base)
    procs = {
        "arms": _remote_run(base / "remote-arms", calc_dir, list(DEFAULT_ARMS), env, tls),
        "tasks": _remote_run(base / "remote-tasks", others_dir, ["plain"], env),
    }
    runs = {}
    for key, proc in procs.items():
        rc = proc.wait(timeout=3000)
        out = base / f"remote-{key}"
        runs[key] = TreeRun(out, rc, (base / f"remote-{key}.log").read_text(errors="replace")[-3000:])
    return RemoteRuns(runs["arms"], runs["tasks"], others, tls)


def _report(run: TreeRun) -> dict:
    r = subprocess.run([sys.executable, "-m", "marathon.cli", "report", str(run.out), "--format", "json"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_every_arm_and_every_task_solves_through_the_remote_like_environment(mini_remote, driver_runs):
    """Every pair done once and solved, as every pair is on Docker with this model; every receipt
    says the driver carried it over the remote-like environment, with codex uploaded, and ends as
    the same arm's receipt of calc-partial on plain Docker does."""
    assert sorted(AGENTS) == sorted(DEFAULT_ARMS)
    for run in (mini_remote.arms, mini_remote.tasks):
        assert run.rc == 0, run.log
        assert not (run.out / "marathon-voided").exists()
    reports = {id(run): _report(run) for run in (mini_remote.arms, mini_remote.tasks)}
    assert sorted(reports[id(mini_remote.tasks)]["tasks"]) == mini_remote.other_tasks
    for run, task, arm in mini_remote.pairs():
        cell = reports[id(run)]["cells"][task][arm]
        assert (cell["status"], cell["reward"]) == ("done", 1.0), (task, arm, cell)
        (trial,) = run.trials(task, arm)  # done exactly once, nothing voided
        res, rec = _read_trial(trial, run.log)
        assert res["exception_info"] is None, (task, arm, res["exception_info"])
        assert rec["transport"]["kind"] == "sandbox-driver", (task, arm)
        assert rec["transport"]["environment"] == "RemoteLikeEnvironment", (task, arm)
        assert rec["transport"]["codex_delivery"] == "uploaded", (task, arm)
        _, on_docker = _outcome(driver_runs, f"docker-{arm}")
        assert {k: rec[k] for k in ENDING} == {k: on_docker[k] for k in ENDING}, (task, arm)


def test_the_five_arms_reach_the_gateway_over_its_tls_route(mini_remote):
    """No socket and no mount reach a remote sandbox: each arm's codex called the relay on its
    sandbox's loopback (the same base URL as on the socket route) with the attempt's token, the relay
    reached the gateway at its https:// URL trusting the uploaded CA, and every call is on the
    gateway's ledger, forwarded, for each of the five attempts; the budget started at the first
    model request, as on the socket route."""
    from modes.gateway import RELAY_BASE_URL, TOKEN_VAR
    from runner.results.ledger import read_ledger

    run = mini_remote.arms
    assert run.rc == 0, run.log
    ledger = read_ledger(run.out)
    for arm in DEFAULT_ARMS:
        (trial,) = run.trials("calc-partial", arm)
        _, rec = _read_trial(trial, run.log)
        assert rec["provider"]["gateway"] == mini_remote.tls.url, (arm, rec["provider"])
        assert rec["provider"]["base_url"] == RELAY_BASE_URL, (arm, rec["provider"])
        assert rec["provider"]["api_key_var"] == TOKEN_VAR, (arm, rec["provider"])
        assert rec["extra"]["relay"]["connections"] >= 1 and rec["extra"]["relay"]["unreachable"] == 0, arm
        assert rec["extra"]["budget_anchor"] == "first model request", (arm, rec["extra"])
        stamp = trial.parent.parent.name  # OUT/TASK/ARM/STAMP/JOB/TRIAL
        usage = ledger.usage("calc-partial", arm, stamp)
        assert usage is not None and usage.forwarded >= 1 and usage.refused == {}, (arm, usage)
        assert usage.outcomes.get("ok", 0) == usage.forwarded, (arm, usage.outcomes)


@pytest.mark.parametrize("arm", list(AGENTS))
def test_every_arm_solves_through_the_remote_like_environment_as_on_docker(driver_runs, mini_remote, arm):
    docker_res, docker_rec = _outcome(driver_runs, f"docker-{arm}")
    (trial,) = mini_remote.arms.trials("calc-partial", arm)
    remote_res, remote_rec = _read_trial(trial, mini_remote.arms.log)
    for res in (docker_res, remote_res):
        assert res["exception_info"] is None, res["exception_info"]
        assert res["verifier_result"]["rewards"]["reward"] == 1.0
    assert {k: docker_rec[k] for k in SAME} == {k: remote_rec[k] for k in SAME}
    assert docker_rec["transport"]["kind"] == remote_rec["transport"]["kind"] == "sandbox-driver"
    assert docker_rec["transport"]["environment"] == "DockerEnvironment"
    assert docker_rec["provider"]["gateway"] == "local"  # the gateway's two routes: socket and TLS
    assert remote_rec["transport"]["environment"] == "RemoteLikeEnvironment"
    # no mount there: codex (and LoopX's parts) were uploaded, and the receipt says how much
    assert docker_rec["transport"]["codex_delivery"] == "mounted"
    assert remote_rec["transport"]["codex_delivery"] == "uploaded"
    assert remote_rec["transport"]["codex_bytes_copied"] > 10_000_000
    if arm not in ("plain", "goal"):
        assert docker_rec["extra"]["loopx"]["parts"]["delivery"] == "mounted"
        assert remote_rec["extra"]["loopx"]["parts"]["delivery"] == "copied"
    for rec in (docker_rec, remote_rec):
        assert rec["turns"] >= 1 and rec["token_usage"].get("totalTokens", 0) > 0
        assert {"sessions", "appserver.stdout.jsonl", "trajectory.json"} <= set(rec["evidence"])


def test_lost_execs_are_retried_and_never_end_the_driver(driver_runs):
    res, rec = _outcome(driver_runs, "remote-faults")
    assert rec["transport"]["lost_execs"] >= 1, rec["transport"]
    assert res["verifier_result"]["rewards"]["reward"] == 1.0


def test_a_deadline_run_through_the_remote_like_environment_ends_at_the_deadline_and_is_scored(driver_runs):
    res, rec = _outcome(driver_runs, "remote-deadline")
    assert res["exception_info"] is None, res["exception_info"]
    assert res["verifier_result"] is not None
    assert rec["stop_reason"] == "deadline" and rec["deadline_hit"] is True
    assert abs(rec["extra"]["deadline_after_sec"] - rec["budget_sec"]) <= 2 and rec["budget_sec"] == 20.0


def test_kill_9_of_harbor_leaves_nothing_after_cleanup(sandbox_env):
    """The driver outlives the host side (it is detached); ``marathon cleanup`` removes its container."""
    base, mounts, env = sandbox_env
    out = base / "kill-tree"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    jobs = out / "calc-partial" / "plain" / stamp
    run = Run("kill", "plain", None, model="scripted/never-finish")
    proc = subprocess.Popen(_cmd(run, jobs, "plain", mounts), cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        t_end = time.monotonic() + 600
        mirror = None
        while time.monotonic() < t_end and proc.poll() is None:
            found = list(jobs.glob("plain/*/agent/driver-status.json"))
            if found and json.loads(found[0].read_text() or "{}").get("phase") == "drive":
                mirror = found[0]
                break
            time.sleep(0.5)
        assert mirror is not None, "the driver never reached its drive phase"
    finally:
        proc.send_signal(signal.SIGKILL)  # the harbor process this test started, by its handle
        proc.wait()
    projects = our_projects(out)
    assert projects, "no compose project found for the trial"

    def containers() -> list[str]:
        ids = []
        for p in projects:
            r = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={p}"],
                               capture_output=True, text=True, check=True)  # fmt: skip
            ids += r.stdout.split()
        return ids

    alive = containers()
    assert alive, "the trial's container went away with harbor: nothing to prove"
    top = subprocess.run(["docker", "top", alive[0], "-o", "pid,args"], capture_output=True, text=True)
    assert "agents.sandbox_driver" in top.stdout, "the detached driver should outlive harbor run"
    r = subprocess.run([sys.executable, "-m", "marathon.cli", "cleanup", str(out), "--yes"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert containers() == []
