"""Two Docker hosts on one machine, joined in a Ray cluster: the offline stand-in for a fleet.

Host 1 is this machine (the shared engine). Host 2 is a private dockerd in a network namespace the
test creates (tests/private_engine.py), reached from here over a veth pair whose two addresses the
test assigns (``10.213.0.1`` here, ``10.213.0.2`` in the namespace). A Ray head runs here bound to
the veth address with ``docker_slots`` = 2; a Ray worker runs inside the namespace (``nsenter``) with
DOCKER_HOST aimed at engine 2 and ``docker_slots`` = 2 -- so a job Ray places there drives engine 2,
exactly as on a second server. Every process is started here with ``ray start --block`` (it owns
its raylet, GCS and dashboard) and torn down by exact PID, descendants included, even on failure;
``ray stop`` is never used (it selects processes by name).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from private_engine import PrivateDaemon, end_tree, private_dockerd

VETH_NET = ipaddress.ip_network("10.213.0.0/30")
HEAD_IP, WORKER_IP = "10.213.0.1", "10.213.0.2"
SLOTS = 2


def ray_cmd() -> list[str]:
    """Ray's own CLI, with a longer registration budget (tests/fleet/ray_node.py says why)."""
    return [sys.executable, str(Path(__file__).with_name("ray_node.py"))]


@dataclass
class RayNode:
    """One ``ray start --block`` we started: its PID, and every descendant seen while it ran."""

    proc: subprocess.Popen
    log: Path
    seen: set[psutil.Process] = field(default_factory=set)

    def remember(self) -> None:
        try:
            self.seen |= set(psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def raylet(self) -> psutil.Process:
        """This node's raylet (a descendant of our ``ray start``, by its executable's name)."""
        self.remember()
        for p in self.seen:
            try:
                if p.is_running() and Path(p.exe()).name == "raylet":
                    return p
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        raise RuntimeError(f"no raylet under ray start PID {self.proc.pid}")

    def stop(self) -> None:
        """SIGTERM our ``ray start --block`` (it stops its node), then SIGKILL what we saw of it."""
        self.remember()
        end_tree(self.proc, list(self.seen))


@dataclass
class TwoHosts:
    engine2: PrivateDaemon
    head: RayNode
    worker: RayNode
    dashboard: str  # http://10.213.0.1:PORT, the job submission API
    gcs: str  # 10.213.0.1:PORT, what `ray start --address` takes
    tmp: Path

    @property
    def cluster(self) -> str:
        """What ``marathon run --cluster`` takes."""
        return self.dashboard.replace("http://", "ray://")

    def nodes(self) -> list[dict]:
        from ray.util.state import list_nodes

        return [n.__dict__ if hasattr(n, "__dict__") else dict(n) for n in list_nodes(address=self.dashboard)]


def _free_veth() -> None:
    for line in subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout.splitlines():
        net = line.split()[0]
        if net != "default" and ipaddress.ip_network(net, strict=False).overlaps(VETH_NET):
            raise RuntimeError(f"{VETH_NET} is in use on this machine ({line}): a leftover of another run?")


@contextmanager
def veth_pair(pd: PrivateDaemon) -> Iterator[str]:
    """A veth pair from here into the daemon's namespace, with the test's own two addresses."""
    _free_veth()
    here, there = f"mfa{os.getpid() % 100000}", f"mfb{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", str(pd.pid)],
                   check=True, capture_output=True)  # fmt: skip
    try:
        subprocess.run(["ip", "addr", "add", f"{HEAD_IP}/30", "dev", here], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", here, "up"], check=True, capture_output=True)
        pd.nsenter("ip", "link", "set", "lo", "up")
        pd.nsenter("ip", "addr", "add", f"{WORKER_IP}/30", "dev", there)
        pd.nsenter("ip", "link", "set", there, "up")
        yield here
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)  # removes both ends


def _ports(base: int) -> dict[str, int]:
    names = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port",
             "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
             "metrics-export-port")  # fmt: skip
    return {n: base + i for i, n in enumerate(names)}


def _start_node(argv: list[str], log: Path, env: dict[str, str]) -> RayNode:
    fh = open(log, "ab")
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)  # fmt: skip
    fh.close()
    return RayNode(proc, log)


class RayletDied(RuntimeError):
    """The node's raylet exited while the node was starting."""


def _raylet_died(node: RayNode) -> bool:
    for p in node.seen:
        try:
            if p.name() == "raylet" and p.status() == psutil.STATUS_ZOMBIE:
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return False


def _wait_nodes(dashboard: str, n: int, nodes: list[RayNode], timeout: float = 240) -> None:
    from ray.util.state import list_nodes

    deadline = time.monotonic() + timeout
    last: Exception | str = "no answer"
    while time.monotonic() < deadline:
        for node in nodes:
            node.remember()
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray start exited: {node.log.read_text(errors='replace')[-3000:]}")
            if _raylet_died(node):
                raise RayletDied(f"the raylet of ray start PID {node.proc.pid} exited while starting")
        try:
            alive = [x for x in list_nodes(address=dashboard) if x.state == "ALIVE"]
            if len(alive) >= n:
                return
            last = f"{len(alive)} node(s) alive"
        except Exception as exc:  # noqa: BLE001 - the dashboard is still starting
            last = exc
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster did not come up: {last}")


#: A raylet aborts ("Check failed ... Timed out waiting for file .../dashboard_agent_listen_port_...")
#: when its Python agents take longer to start than its fixed wait allows -- seen on this 2-core
#: machine at load average 30-50. Only that exit starts a fresh node, at most this many times.
STARTS = 4


def _start_up(stack: ExitStack, argv: list[str], log: Path, env: dict[str, str], dashboard: str,
              n: int, others: list[RayNode]) -> RayNode:  # fmt: skip
    for attempt in range(1, STARTS + 1):
        node = _start_node(argv, log, env)
        stack.callback(node.stop)
        try:
            _wait_nodes(dashboard, n, [*others, node], timeout=900)
            return node
        except RayletDied:
            node.stop()
            if attempt == STARTS:
                raise
            print(f"ray start: its raylet aborted while its agents started (attempt {attempt}); a fresh node")
    raise AssertionError("unreachable")


#: An idle node's own upkeep on two shared cores, cut where the tests read nothing: the dashboard
#: agent's psutil report every 60 s (not 5 s), no metrics recorded or exported, no log monitor (job
#: logs are files the job API reads). benchmarks/bench_ray_idle.py: an idle head 7.1-7.8 -> 4.4-4.9 %
#: of a core (docs/testing.md).
IDLE_KNOBS = {"REPORTER_UPDATE_INTERVAL_MS": "60000", "METRICS_RECORD_INTERVAL_S": "60",
              "RAY_enable_metrics_collection": "0"}  # fmt: skip
IDLE_ARGS = ["--include-log-monitor", "false"]


def ray_env(repo: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A Ray node's environment: the repo importable, no usage stats, this host's own variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "DOCKER_HOST"}
    env |= {"RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(repo), "HARBOR_TELEMETRY": "0",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
            # the raylet waits for its Python agents (their port files), then aborts (a "Check
            # failed" crash); under load their imports took longer than the defaults allow
            "RAY_agent_register_timeout_ms": "600000", "RAY_raylet_start_wait_time_s": "600"}  # fmt: skip
    return env | IDLE_KNOBS | (extra or {})


@contextmanager
def two_hosts(
    repo: Path, images: tuple[str, ...], host_env: dict[str, str] | None = None
) -> Iterator[TwoHosts]:
    """Engine 2 in its namespace with ``images`` loaded, the veth pair, a Ray head here and a Ray
    worker there (each ``docker_slots`` = 2, one CPU). ``host_env`` is given to both nodes: the
    variables each host holds in its own environment (the scripted model's key, by name)."""
    tmp = Path(tempfile.mkdtemp(prefix="mrf", dir="/tmp"))  # short: Ray's unix socket paths
    base = 36000 + (os.getpid() % 200) * 20
    ports = _ports(base)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        pd = stack.enter_context(private_dockerd(pool_prefix=21, pool_size=24, storage_driver="overlay2"))
        stack.enter_context(veth_pair(pd))
        common = ["--num-cpus", "1", "--num-gpus", "0", "--resources", json.dumps({"docker_slots": SLOTS}),
                  "--disable-usage-stats", "--block", *IDLE_ARGS,
                  "--min-worker-port", str(base + 30), "--max-worker-port", str(base + 79)]  # fmt: skip
        head_argv = [*ray_cmd(), "start", "--head", "--node-ip-address", HEAD_IP, "--temp-dir", str(tmp / "h"),
                     "--dashboard-host", HEAD_IP, "--include-dashboard", "true", *common]  # fmt: skip
        for name, port in ports.items():
            head_argv += [f"--{name}", str(port)]
        env = ray_env(repo, host_env)
        dashboard = f"http://{HEAD_IP}:{ports['dashboard-port']}"
        gcs = f"{HEAD_IP}:{ports['port']}"
        head = _start_up(stack, head_argv, tmp / "head.log", env, dashboard, 1, [])
        worker_argv = ["nsenter", "-t", str(pd.pid), "-n", "--", *ray_cmd(), "start", "--address", gcs,
                       "--node-ip-address", WORKER_IP, *common]  # fmt: skip
        for name in ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
                     "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port"):  # fmt: skip
            worker_argv += [f"--{name}", str(ports[name])]
        worker = _start_up(stack, worker_argv, tmp / "worker.log", env | {"DOCKER_HOST": pd.host},
                                 dashboard, 2, [head])  # fmt: skip
        if images:  # after the nodes: a load is heavy, and ray start allows its raylet only 30 s
            pd.load_images(*images)
        yield TwoHosts(pd, head, worker, dashboard, gcs, tmp)
