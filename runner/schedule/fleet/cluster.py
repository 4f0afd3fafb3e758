"""The runner's handle on a Ray cluster: the job submission API, and nothing it cannot name by id.

Why: a pair must run on exactly one host, exactly once, even across a runner restarted after
``kill -9``. Ray Jobs outlive the client that submitted them and are found again by
``submission_id`` (the attempt id), so the runner never keeps state Ray does not also hold. The
runner is only a client (HTTP to the head's job API): it never joins the cluster.

Secrets never travel through here: the entrypoint names the output tree and the attempt, never a
value; ``runtime_env`` is left empty (Ray stores it in its control store and shows it in the
dashboard), and each host's job resolves ``${NAME}`` references from that host's own environment.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import UserError
from runner.schedule.config import PROJECT_ROOT

#: The custom resource a Docker host declares when it joins (``ray start --resources``).
SLOT = "docker_slots"


def docker_slots(resources: Mapping[str, Any] | None) -> float:
    """The ``docker_slots`` a Ray node declares (0 when none)."""
    return float((resources or {}).get(SLOT, 0) or 0)


def is_docker_host(slots: float) -> bool:
    """The one rule of what a Docker host is: a node declaring ``docker_slots`` (``marathon``'s host
    join sets it; the head and plain Ray nodes do not). Used by the probe and the console alike."""
    return slots > 0


#: Metadata key naming the output tree a job belongs to (its resolved path).
META_OUT = "marathon_out"
ACTIVE = frozenset({"PENDING", "RUNNING"})
#: Ray's uv hook would zip the client's working dir into the cluster's store with every job
#: (a copy of the repo, and whatever files sit in it): never.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def job_api_address(cluster: str, environ: dict[str, str] | None = None) -> str:
    """The head's job API URL for ``--cluster``: ``ray://HEAD:PORT`` and ``http(s)://HEAD:PORT``
    name the head's job API (the dashboard port, 8265 by default); ``auto`` is the cluster this
    host belongs to (``RAY_ADDRESS`` when it is a URL, else the running node's dashboard)."""
    environ = dict(os.environ) if environ is None else environ
    if cluster.startswith("ray://"):
        return "http://" + cluster.removeprefix("ray://")
    if cluster.startswith(("http://", "https://")):
        return cluster
    if cluster == "auto":
        addr = environ.get("RAY_ADDRESS", "")
        if addr.startswith(("http://", "https://")):
            return addr
        return _local_dashboard()
    raise UserError(f"--cluster {cluster!r}: expected ray://HEAD:PORT, http://HEAD:PORT or auto")


def _local_dashboard() -> str:
    import ray

    try:
        ctx = ray.init(address="auto", log_to_driver=False, logging_level="ERROR")
    except (ConnectionError, RuntimeError) as exc:
        raise UserError(f"--cluster auto: this host is not part of a running Ray cluster ({exc})") from None
    try:
        url = ctx.dashboard_url
    finally:
        ray.shutdown()
    if not url:
        raise UserError(
            "--cluster auto: the cluster has no job API (start the head with --include-dashboard true)"
        )
    return f"http://{url}"


def tree_key(out: Path) -> str:
    """A short stable name of an output tree, for the ids of its Ray jobs."""
    return hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()[:10]


def attempt_id(out: Path, task: str, arm: str, stamp: str) -> str:
    """The Ray ``submission_id`` of one attempt: unique per tree, pair and stamp, readable in
    ``ray job list``."""
    return f"marathon-{tree_key(out)}-{task}__{arm}__{stamp}"


def module_command(module: str, *args: str) -> str:
    """The shell command of a job that runs ``python -m module args``: this interpreter and this
    checkout (the same paths on every host) -- never the value of a secret."""
    return (
        f"cd {shlex.quote(str(PROJECT_ROOT))} && exec env PYTHONPATH={shlex.quote(str(PROJECT_ROOT))} "
        + shlex.join([sys.executable, "-m", module, *args])
    )


def entrypoint(out: Path, task: str, arm: str, stamp: str) -> str:
    """The shell command of an attempt's job: the tree and the attempt."""
    return module_command("runner.schedule.fleet.job", str(out), task, arm, stamp)


@dataclass(frozen=True)
class RayJobState:
    submission_id: str
    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED
    message: str
    metadata: dict[str, str]
    node_id: str | None
    end_time_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


@dataclass(frozen=True)
class NodeState:
    node_id: str
    node_ip: str
    alive: bool
    slots: float
    end_time_ms: int | None
    message: str

    @property
    def docker_host(self) -> bool:
        """Is this node a Docker host (``is_docker_host``)?"""
        return is_docker_host(self.slots)


class Fleet:
    """A Ray cluster seen through its job API. ``jobs()`` is one HTTP call, cached for
    ``cache_sec`` so that a runner polling many jobs asks at most twice a second."""

    def __init__(self, address: str, *, cache_sec: float = 0.5) -> None:
        from ray.job_submission import JobSubmissionClient

        self.address = address
        try:
            self.client = JobSubmissionClient(address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"cannot reach the Ray job API at {address}: {exc}") from None
        self.cache_sec = cache_sec
        self._jobs: dict[str, RayJobState] = {}
        self._at = 0.0

    @classmethod
    def connect(cls, cluster: str) -> Fleet:
        return cls(job_api_address(cluster))

    # --- jobs -------------------------------------------------------------------------------------

    def submit(self, out: Path, task: str, arm: str, stamp: str) -> str:
        sid = attempt_id(out, task, arm, stamp)
        meta = {META_OUT: str(Path(out).resolve()), "task": task, "arm": arm, "stamp": stamp}
        self.client.submit_job(
            entrypoint=entrypoint(out, task, arm, stamp),
            submission_id=sid,
            entrypoint_resources={SLOT: 1},
            entrypoint_num_cpus=0,
            metadata=meta,
        )
        self._at = 0.0
        return sid

    def jobs(self, fresh: bool = False) -> dict[str, RayJobState]:
        now = time.monotonic()
        if fresh or now - self._at > self.cache_sec:
            self._jobs = {j.submission_id: j for j in (_state(d) for d in self.client.list_jobs()) if j}
            self._at = now
        return self._jobs

    def job(self, sid: str) -> RayJobState | None:
        return self.jobs().get(sid)

    def ours(self, out: Path) -> list[RayJobState]:
        """Every job of this tree the cluster knows, oldest first."""
        key = str(Path(out).resolve())
        return [j for j in self.jobs(fresh=True).values() if j.metadata.get(META_OUT) == key]

    def stop(self, sid: str) -> None:
        try:
            self.client.stop_job(sid)
        except RuntimeError:
            pass  # already ended
        self._at = 0.0

    def logs_tail(self, sid: str, n: int = 20) -> list[str]:
        try:
            return self.client.get_job_logs(sid).splitlines()[-n:]
        except RuntimeError as exc:  # e.g. the logs lived on a node that is gone
            first = (str(exc).splitlines() or [""])[0]
            return [f"(no Ray job logs: {first[:200]})"]

    # --- nodes ------------------------------------------------------------------------------------

    def nodes(self) -> dict[str, NodeState]:
        from ray.util.state import list_nodes

        got: dict[str, NodeState] = {}
        for n in list_nodes(address=self.address, detail=True, raise_on_missing_output=False):
            got[n.node_id] = NodeState(
                n.node_id,
                n.node_ip,
                n.state == "ALIVE",
                docker_slots(n.resources_total),
                getattr(n, "end_time_ms", None),
                getattr(n, "state_message", None) or "",
            )
        return got


def _state(d: Any) -> RayJobState | None:
    sid = getattr(d, "submission_id", None)
    if not sid:
        return None
    status = getattr(d, "status", "")
    return RayJobState(
        sid,
        str(getattr(status, "value", status)),
        getattr(d, "message", "") or "",
        dict(getattr(d, "metadata", None) or {}),
        getattr(d, "driver_node_id", None),
        getattr(d, "end_time", None),
    )
