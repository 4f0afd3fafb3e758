"""``host.json``: which host ran an attempt, written by the attempt's own Ray job on that host.

Why: per-host truth (status, report, console, cleanup routing) must be recorded where the work
ran, never inferred from the scheduler afterwards. It sits in the attempt's stamp dir beside
``harbor-run.log`` and is read through the results layer (safe-open rules) like every tree file.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from runner import results, safeio

HOST_JSON = "host.json"


@dataclass(frozen=True)
class HostRecord:
    host: str  # the host name
    node_id: str  # the Ray node id
    engine_id: str  # the Docker engine's ``docker info`` ID
    node_ip: str = ""
    #: the engine address this host's jobs use (DOCKER_HOST, or the default socket). Engines that
    #: share /etc/docker/key.json report the same ``docker info`` ID; the address tells them apart.
    docker_host: str = ""

    def short(self) -> str:
        return f"{self.host}/{self.node_ip}" if self.node_ip else self.host


def this_host(node_id: str, node_ip: str = "") -> HostRecord:
    """The host this process runs on: its name, the given Ray node and the engine DOCKER_HOST names."""
    from runner.dockerapi import connect, docker_host

    client = connect(timeout=30)
    try:
        engine = str(client.info().get("ID") or "")
    finally:
        client.close()
    return HostRecord(socket.gethostname(), node_id, engine, node_ip, docker_host())


def write_host(stamp_dir: Path, rec: HostRecord) -> Path:
    path = Path(stamp_dir) / HOST_JSON
    safeio.write_atomic(path, json.dumps(asdict(rec), indent=1) + "\n")
    return path


def read_host(stamp_dir: Path | str) -> HostRecord | None:
    """The attempt's host record, or None when absent (a single-host run) or unreadable."""
    loaded = results.load_json(os.path.join(os.fspath(stamp_dir), HOST_JSON))
    d = loaded.data
    if not loaded.ok or d is None:
        return None
    vals = [d.get(k) for k in ("host", "node_id", "engine_id")]
    if not all(isinstance(v, str) for v in vals):
        return None
    ip, dh = d.get("node_ip"), d.get("docker_host")
    return HostRecord(
        *vals, node_ip=ip if isinstance(ip, str) else "", docker_host=dh if isinstance(dh, str) else ""
    )
