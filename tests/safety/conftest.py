"""Fixtures for the safety tests: a private dockerd, output trees, real compose projects.

The private dockerd is for filling an address pool until the daemon refuses: doing that on the
shared daemon would break everyone's trials. It runs in its own network namespace (``unshare -n``)
because dockerd with ``--bridge=none`` deletes the host's ``docker0`` interface -- which belongs
to the shared daemon. Everything a test creates is removed by exact ID, label or PID.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
from safety_support import BASE_IMAGE, PrivateDaemon, need


@pytest.fixture(scope="module")
def private_dockerd(docker_engine):
    """A throwaway dockerd with a 4-network pool (10.<x>.0.0/22 split into /24) in its own netns."""
    import docker

    need(os.geteuid() == 0, "a private dockerd needs root")
    need(all(shutil.which(b) for b in ("dockerd", "unshare", "nsenter")), "dockerd/unshare/nsenter missing")
    d = Path(tempfile.mkdtemp(prefix="mdk", dir="/tmp"))  # short: unix socket paths are limited
    second = 200 + os.getpid() % 50
    base, size = f"10.{second}.0.0/22", 24
    host = f"unix://{d}/docker.sock"
    log = open(d / "dockerd.log", "w")
    argv = [
        "unshare", "-n", "dockerd",
        "--data-root", str(d / "data"), "--exec-root", str(d / "exec"), "--pidfile", str(d / "pid"),
        "-H", host, "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
        "--default-address-pool", f"base={base},size={size}", "--storage-driver=vfs", "--log-level=warn",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = docker.DockerClient(base_url=host, timeout=30)
                client.ping()
                break
            except Exception as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log_tail = (d / "dockerd.log").read_text()[-2000:]
                    raise RuntimeError(f"private dockerd did not start: {log_tail}") from exc
                time.sleep(0.2)
        yield PrivateDaemon(host=host, pid=proc.pid, pool_base=base, pool_size=size, client=client)
    finally:
        kids = []
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)  # its containerd
        except psutil.NoSuchProcess:
            pass
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        psutil.wait_procs(kids, timeout=15)
        for k in kids:
            if k.is_running():
                k.kill()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:8]


class ComposeProjects:
    """Real ``docker compose`` projects (image marathon-base:bookworm, sleep infinity); every one
    this fixture brings up is taken down by its exact project label at teardown."""

    def __init__(self, workdir: Path) -> None:
        self.file = workdir / "compose.yaml"
        self.file.write_text(
            "services:\n"
            "  main:\n"
            f"    image: {BASE_IMAGE}\n"
            '    command: ["sleep", "infinity"]\n'
            "    init: true\n"
        )
        self.projects: list[str] = []

    def up(self, project: str) -> None:
        self.projects.append(project)
        subprocess.run(
            ["docker", "compose", "-p", project, "-f", str(self.file), "up", "-d", "--quiet-pull"],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def teardown(self) -> None:
        import docker

        client = docker.from_env()
        for p in self.projects:
            flt = {"label": f"com.docker.compose.project={p}"}
            for c in client.containers.list(all=True, filters=flt):
                if c.labels.get("com.docker.compose.project") == p:
                    c.remove(force=True, v=True)
            for n in client.networks.list(filters=flt):
                if (n.attrs.get("Labels") or {}).get("com.docker.compose.project") == p:
                    n.remove()


@pytest.fixture
def compose(docker_engine, tmp_path):
    cp = ComposeProjects(tmp_path)
    yield cp
    cp.teardown()
