"""A private dockerd in its own network namespace, for tests that must restart an engine or fill its
address pool: doing either to the shared daemon would break everyone else's trials.

The namespace is held by its own ``sleep`` process (``unshare -n``) and dockerd is entered into it
(``nsenter``), so the daemon can be stopped and started again -- a real engine restart -- while its
network namespace, its bridges and its data root survive, as on a host whose dockerd restarts.
``--bridge=none`` because dockerd would otherwise delete the ``docker0`` of whatever namespace it
runs in. Everything is removed by exact PID at the end; nothing here looks at process names.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass
class PrivateDaemon:
    host: str  # unix://... for DOCKER_HOST / docker-py base_url
    pid: int  # the holder of its network namespace (for nsenter and /proc/<pid>/net/route)
    pool_base: str
    pool_size: int
    client: object
    root: Path = field(default_factory=Path)
    storage_driver: str = "vfs"
    dockerd: subprocess.Popen | None = None
    restarts: int = 0

    @property
    def expected_capacity(self) -> int:
        return 2 ** (self.pool_size - ipaddress.ip_network(self.pool_base).prefixlen)

    @property
    def dockerd_pid(self) -> int | None:
        return self.dockerd.pid if self.dockerd is not None else None

    def env(self) -> dict[str, str]:
        """The environment of a process that must talk to this daemon (docker CLI, compose, docker-py)."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def nsenter(self, *cmd: str) -> subprocess.CompletedProcess:
        """Run a command in the daemon's network namespace (never the host's)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.pid), "-n", *cmd], capture_output=True, text=True, check=True
        )

    def docker(
        self, *args: str, timeout: float = 120, check: bool = True, **kw
    ) -> subprocess.CompletedProcess:
        """The docker CLI aimed at this daemon."""
        return subprocess.run(
            ["docker", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            **kw,
        )

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> None:
        """Start dockerd in the namespace and wait until it answers a ping."""
        import docker

        argv = [
            "nsenter", "-t", str(self.pid), "-n", "--",
            "dockerd",
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "pid"),
            "-H", self.host, "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
            "--default-address-pool", f"base={self.pool_base},size={self.pool_size}",
            "--storage-driver", self.storage_driver, "--log-level=warn",
        ]  # fmt: skip
        log = open(self.root / "dockerd.log", "ab")
        self.dockerd = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                client = docker.DockerClient(base_url=self.host, timeout=60)
                client.ping()
                self.client = client
                return
            except Exception as exc:
                if self.dockerd.poll() is not None or time.monotonic() > deadline:
                    tail = (self.root / "dockerd.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"private dockerd did not start: {tail}") from exc
                time.sleep(0.2)

    def stop(self, timeout: float = 60) -> None:
        """Stop dockerd as an init system does (SIGTERM; it stops its containers and its containerd),
        SIGKILL after ``timeout``; then wait for its children."""
        proc = self.dockerd
        if proc is None:
            return
        kids = []
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)  # its containerd, shims
        except psutil.NoSuchProcess:
            pass
        end_tree(proc, kids, timeout)
        self.dockerd = None

    def restart(self) -> None:
        """A real engine restart: every container stops, networks and images stay."""
        self.stop()
        self.start()
        self.restarts += 1

    def load_images(self, *images: str) -> None:
        """Copy images from the shared daemon (``docker save``, read-only there) into this one."""
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
        try:
            subprocess.run(["docker", "load", "-q"], stdin=save.stdout, env=self.env(), check=True,
                           capture_output=True, timeout=600)  # fmt: skip
        finally:
            assert save.stdout is not None
            save.stdout.close()
            if save.wait(600) != 0:
                raise RuntimeError(f"docker save {' '.join(images)} failed")


def end_tree(proc: subprocess.Popen, seen: list[psutil.Process], timeout: float = 60) -> None:
    """End a process we started (SIGTERM, SIGKILL after ``timeout``), then every descendant of it
    we recorded (``seen``: psutil handles, so a reused PID is never hit)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    # each descendant's own end, looked at by its psutil handle (not psutil.wait_procs: its
    # pidfd_open raised FileNotFoundError for a descendant that ended as it looked, and failed a
    # module's teardown in CI on 2026-12-07)
    deadline = time.monotonic() + 20
    alive = [k for k in seen if _running(k)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [k for k in alive if _running(k)]
    for k in alive:
        try:
            if k.is_running():
                k.kill()
        except psutil.NoSuchProcess:
            pass


def _running(p: psutil.Process) -> bool:
    """Still running and not a zombie (its handle's create time guards against a reused PID)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextmanager
def private_dockerd(pool_prefix: int = 22, pool_size: int = 24, storage_driver: str = "vfs"):
    """A throwaway dockerd whose only address pool is ``10.<x>.0.0/<pool_prefix>`` split into
    ``/<pool_size>`` networks, in its own network namespace; removed with everything in it."""
    d = Path(tempfile.mkdtemp(prefix="mdk", dir="/tmp"))  # short: unix socket paths are limited
    second = 200 + os.getpid() % 50
    holder = subprocess.Popen(["unshare", "-n", "--", "sleep", "infinity"], start_new_session=True)
    pd = PrivateDaemon(
        host=f"unix://{d}/docker.sock",
        pid=holder.pid,
        pool_base=f"10.{second}.0.0/{pool_prefix}",
        pool_size=pool_size,
        client=None,
        root=d,
        storage_driver=storage_driver,
    )
    try:
        # the holder has entered its namespace once its netns link differs from ours
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            if time.monotonic() > deadline or holder.poll() is not None:
                raise RuntimeError("unshare -n did not create a network namespace")
            time.sleep(0.05)
        pd.start()
        yield pd
    finally:
        pd.stop()
        holder.kill()  # our own child, by its Popen handle
        holder.wait(10)
        subprocess.run(["umount", "-R", str(d / "exec")], capture_output=True)
        subprocess.run(["umount", "-R", str(d / "data")], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
