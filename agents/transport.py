"""The ``docker-exec`` transport: the host's app-server client reaches codex through ``docker exec -i``.

Kept for debugging (``--ak transport=docker-exec``) on harbor's local Docker environment only; the
default transport is the in-sandbox driver (agents.sandbox_host), which works on every environment.

``docker exec -i`` because harbor's own ``environment.exec`` gives no stdin (and app-server speaks
JSON-RPC over stdio). Every arm goes through the same transport, the same workdir (read from the
container, never assumed to be ``/app``), the same user (task.toml ``[agent].user``) and the same
credentials, forwarded by NAME only: ``-e NAME`` with the value in the docker client's own
environment, so a secret never appears in any command line.

Under any other harbor environment (a Podman/kata subclass of DockerEnvironment included) this
transport refuses to start, naming the default transport instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tarfile
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from modes import safeio
from modes.image_digest import image_content
from modes.naming import ENVIRONMENT_LOST, compose_project

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
MAIN_SERVICE = "main"
#: app-server stdout lines can be long (aggregated command output); asyncio's default is 64 KiB.
STREAM_LIMIT = 64 * 1024 * 1024


#: The most one evidence copy may bring out of the container (the agent controls its size).
MAX_EVIDENCE_BYTES = 1 << 30


def extract_evidence(tf: tarfile.TarFile, host_dir: Path, root: Path, top: str | None = None) -> list[str]:
    """The tar's regular files and dirs (``_evidence_filter``) into ``host_dir``, each written
    through the descriptor of its real dir below ``root`` (``safeio.open_dir_in``): the agent dir
    is the agent's ``/logs/agent`` too, so a process it left could swap a dir for a symlink between
    a check by path and a write by path (tarfile's own extraction writes by path). ``top``: only
    the members under this name (what was asked for; the tar comes from the container, where the
    agent may have replaced ``tar``). At most ``MAX_EVIDENCE_BYTES`` written in all. Returns the
    names written, relative to ``host_dir``."""
    written: list[str] = []
    base = os.path.relpath(host_dir, root)
    total = 0
    for member in tf:
        m = _evidence_filter(member, str(host_dir))
        if m is None or (top is not None and os.path.normpath(m.name).split(os.sep, 1)[0] != top):
            continue  # (outside what was asked for: the agent dir's other files are the host's)
        total += m.size
        if total > MAX_EVIDENCE_BYTES:
            raise RuntimeError(f"more than {MAX_EVIDENCE_BYTES} bytes once extracted: the rest not copied")
        rel = os.path.normpath(os.path.join(base, m.name))
        if m.isdir():
            os.close(safeio.open_dir_in(root, rel))
            continue
        src = tf.extractfile(m)
        if src is None:
            continue
        parent, name = os.path.split(rel)
        dir_fd = safeio.open_dir_in(root, parent)
        try:
            safeio.write_in(dir_fd, name, src, mode=(m.mode or 0o644) & 0o755)
        finally:
            os.close(dir_fd)
        written.append(os.path.normpath(m.name))
    return written


def _evidence_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """Regular files and dirs only, each inside ``dest``: links and special files are skipped.

    tarfile's ``data`` filter also checks the real path of every member against ``dest``, so a
    dir planted as a symlink on the host side never receives a file.
    """
    if (
        not (member.isreg() or member.isdir())
        or member.sparse is not None
        or member.type == tarfile.GNUTYPE_SPARSE
    ):
        # (a sparse member: a few KB of tar that declares a TiB, written out as zeros: a review)
        return None
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


class UnsupportedEnvironment(RuntimeError):
    """The trial's environment has no transport the codex arms can use."""


class EnvironmentLost(RuntimeError):
    """The trial's container stopped (killed, engine restarted) or its engine became unreachable
    while the agent was working. Whatever step failed then failed because of the sandbox, so the
    message starts with ``modes.naming.ENVIRONMENT_LOST`` and the runner voids and reruns the
    attempt instead of scoring it against the arm."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{ENVIRONMENT_LOST}: {what}")


@dataclass(frozen=True)
class ExecResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class Transport(ABC):
    """Runs processes inside the trial's main container as the agent user, in the agent workdir."""

    workdir: str
    user: str | None

    @abstractmethod
    async def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], secret_env: Mapping[str, str]
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` with pipes for stdin/stdout/stderr.

        ``env`` values are not secret (they may appear in a command line); ``secret_env`` values are
        passed by name only.
        """

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        user: str | None = None,
        timeout: float = 60,
    ) -> ExecResult:
        """Run a short command to completion, synchronously (also usable under cancellation)."""

    @abstractmethod
    def copy_out(self, container_path: str, host_dir: Path, root: Path | None = None) -> bool:
        """Copy a file or dir from the container into ``host_dir`` (synchronous); False if absent.

        ``root``: the trial's agent dir ``host_dir`` lies in; every dir on the way is made a real
        dir inside it (a planted symlink is moved aside). Links, FIFOs and devices in the copied
        tree are skipped, never followed; the copy stops at ``MAX_EVIDENCE_BYTES``.
        """

    @abstractmethod
    def copy_in(self, host_dir: Path, container_dir: str) -> None:
        """Copy the contents of ``host_dir`` into ``container_dir`` (synchronous); raises on failure."""

    @abstractmethod
    def describe(self) -> dict:
        """Plain data for the receipt."""

    def lost(self) -> str | None:
        """Why the trial's environment is gone (asked after a step failed), or None if it is up."""
        return None

    def image(self) -> dict[str, str] | None:
        """What the trial's container runs, for the fairness audit: ``{"id", "content_sha256"}``."""
        return None

    def container_exec(self):
        """A ``ContainerExec`` (agents.loopx_profile) over this transport: ``bash -c`` in the container."""
        from agents.loopx_profile import transport_exec

        return transport_exec(self)

    async def deliver(self, host_dir: Path, container_dir: str) -> int:
        """Copy a staged host tree in (where no mount brought it); returns the bytes copied."""
        await asyncio.to_thread(self.copy_in, host_dir, container_dir)
        return tree_bytes(host_dir)


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (what a copy of it moves)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def _docker(*args: str, timeout: float = 60, stdin: bytes | None = None, env=None) -> ExecResult:
    proc = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=timeout, env=env)
    return ExecResult(proc.returncode, proc.stdout, proc.stderr)


def image_of_container(container_id: str) -> dict[str, str] | None:
    """The container's image: the engine's id (what docker-py calls ``container.image.id``) and
    its content digest (``modes.image_digest``; the audit compares the content). Asked with
    ``docker inspect``, as the transports ask everything else."""
    try:
        res = _docker("inspect", "--format", "{{.Image}}", container_id, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    iid = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or not iid.startswith("sha256:"):
        return None
    return image_content(iid)


def find_main_container(project: str) -> str:
    """The running ``main`` service container of compose project ``project`` (labels compared exactly)."""
    res = _docker(
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        f"label={COMPOSE_PROJECT_LABEL}={project}",
        "--filter",
        f"label={COMPOSE_SERVICE_LABEL}={MAIN_SERVICE}",
    )
    ids = res.stdout.decode().split()
    # docker's label filter is exact on key=value; re-check anyway so no prefix match slips through
    for cid in ids:
        labels = json.loads(_docker("inspect", "--format", "{{json .Config.Labels}}", cid).stdout or b"{}")
        if labels.get(COMPOSE_PROJECT_LABEL) == project and labels.get(COMPOSE_SERVICE_LABEL) == MAIN_SERVICE:
            return cid
    # harbor started a Docker environment for this trial: its main container not running means the
    # environment was lost (killed, engine restarted) before the agent got to it
    raise EnvironmentLost(
        f"no running container with {COMPOSE_PROJECT_LABEL}={project} and service {MAIN_SERVICE}"
    )


def container_lost(container_id: str, settle_sec: float = 10.0) -> str | None:
    """Why the container is gone (exited, removed, its engine unreachable), or None if it runs.

    A killed container's exec'd processes die (exit 137) a moment before the engine marks the
    container exited, so "running" is re-checked for ``settle_sec`` (only ever asked after a step
    failed; a healthy container costs that wait once, on the failure path). The engine's own state,
    never words the agent could print, so a failure the agent caused itself is not voided.
    """
    deadline = time.monotonic() + settle_sec
    while True:
        try:
            res = _docker(
                "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container_id, timeout=30
            )
        except subprocess.TimeoutExpired:
            return f"docker inspect of container {container_id[:12]} timed out"
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            return f"container {container_id[:12]}: {err[-1] if err else 'docker inspect failed'}"
        status, _, code = res.stdout.decode().strip().partition(" ")
        if status != "running":
            return f"container {container_id[:12]} is {status or 'gone'} (exit code {code or '?'})"
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def container_workdir(cid: str) -> str:
    res = _docker("inspect", "--format", "{{.Config.WorkingDir}}", cid)
    return res.stdout.decode().strip() or "/"


class DockerExecTransport(Transport):
    """``docker exec -i`` into the trial's main container."""

    def __init__(self, container_id: str, workdir: str, user: str | None) -> None:
        self.container_id = container_id
        self.workdir = workdir
        self.user = user

    def _exec_args(self, env: Mapping[str, str], secret_names: Sequence[str], user: str | None) -> list[str]:
        args = ["exec", "-i", "-w", self.workdir]
        if user:
            args += ["-u", user]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        for name in secret_names:
            args += ["-e", name]  # by name: docker reads the value from its own environment
        return args + [self.container_id]

    async def spawn(self, argv, env, secret_env):
        proc_env = {**os.environ, **secret_env}
        return await asyncio.create_subprocess_exec(
            "docker",
            *self._exec_args(env, list(secret_env), self.user),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=proc_env,
            limit=STREAM_LIMIT,
        )

    def run(self, argv, *, env=None, stdin=None, user=None, timeout=60):
        args = self._exec_args(env or {}, [], user if user is not None else self.user)
        if stdin is None:
            args.remove("-i")
        return _docker(*args, *argv, stdin=stdin, timeout=timeout)

    def copy_out(self, container_path: str, host_dir: Path, root: Path | None = None) -> bool:
        """tar out of the container (runs as root so the agent user's files are readable).

        The tar streams to a temp file (never into memory) and stops at ``MAX_EVIDENCE_BYTES``.
        """
        if root is None:
            host_dir.mkdir(parents=True, exist_ok=True)
            root = host_dir
        safeio.ensure_dir(host_dir, root)
        parent, name = os.path.split(container_path.rstrip("/"))
        argv = ["docker", "exec", "-u", "0", self.container_id, "tar", "cf", "-", "-C", parent or "/", name]
        with tempfile.TemporaryFile() as fh:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            n, over = 0, False
            while chunk := proc.stdout.read(1 << 20):
                n += len(chunk)
                if n > MAX_EVIDENCE_BYTES:
                    over = True
                    proc.kill()  # our own child, by its handle
                    break
                fh.write(chunk)
            proc.stdout.close()
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return False
            if over:
                raise RuntimeError(f"{container_path}: more than {MAX_EVIDENCE_BYTES} bytes, not copied")
            if rc != 0:
                return False
            fh.seek(0)
            with tarfile.open(fileobj=fh) as tf:
                extract_evidence(tf, host_dir, root, top=name)
        return True

    def copy_in(self, host_dir: Path, container_dir: str) -> None:
        mk = _docker("exec", "-u", "0", self.container_id, "mkdir", "-p", container_dir)
        cp = _docker("cp", f"{host_dir}/.", f"{self.container_id}:{container_dir}", timeout=600)
        for res in (mk, cp):
            if res.returncode != 0:
                raise RuntimeError(
                    f"copying {host_dir} into {container_dir} failed: {res.stderr.decode()[-300:]}"
                )
        _docker("exec", "-u", "0", self.container_id, "chmod", "-R", "a+rX", container_dir)

    def lost(self, settle_sec: float = 10.0) -> str | None:
        return container_lost(self.container_id, settle_sec)

    def image(self) -> dict[str, str] | None:
        """The container's image (``image_of_container``)."""
        return image_of_container(self.container_id)

    def describe(self) -> dict:
        return {
            "kind": "docker-exec",
            "container": self.container_id[:12],
            "workdir": self.workdir,
            "user": self.user,
        }


def is_local_docker(environment) -> bool:
    """harbor's DockerEnvironment on the Docker engine itself: a Podman/kata subclass (another
    engine under the same class tree) is not, and neither is a wrapper of it."""
    from harbor.environments.docker.docker import DockerEnvironment
    from harbor.environments.docker.runtime import DOCKER_RUNTIME
    from harbor.models.environment_type import EnvironmentType

    kind = type(environment)
    return (
        isinstance(environment, DockerEnvironment)
        and kind.type() == EnvironmentType.DOCKER
        and kind.runtime() == DOCKER_RUNTIME
    )


def transport_for(environment, trial_name: str) -> Transport:
    """The transport for a harbor environment; fails fast for environments we cannot drive."""
    if not is_local_docker(environment):
        kind = type(environment).__name__
        raise UnsupportedEnvironment(
            f"--ak transport=docker-exec needs harbor's local Docker environment (docker exec -i into the "
            f"trial container); {kind} is not one. Use the default transport (sandbox-driver), which "
            "runs on every harbor environment."
        )
    cid = find_main_container(compose_project(trial_name))
    cfg = getattr(environment, "task_env_config", None)
    workdir = getattr(cfg, "workdir", None) or container_workdir(cid)
    user = getattr(environment, "default_user", None)
    return DockerExecTransport(cid, workdir, str(user) if user not in (None, "") else None)
