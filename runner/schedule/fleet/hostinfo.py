"""Writing ``host.json`` on the host that runs an attempt (``runner.results.records.hosts`` reads it).

Why: the record must come from the host itself -- its name, its Ray node, the engine its jobs
drive -- at the moment the attempt starts there, never from the scheduler afterwards.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path

from modes import safeio
from runner.results.hosts import HOST_JSON, HostRecord


def this_host(node_id: str, node_ip: str = "") -> HostRecord:
    """The host this process runs on: its name, the given Ray node and the engine DOCKER_HOST names."""
    from runner.ops.dockerapi import connect, docker_host

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
