"""Where a cluster job runs: ``host.json`` on the host that runs an attempt (``runner.results.hosts`` reads it),
and the job's own Ray connection from that host.

Why: the record must come from the host itself -- its name, its Ray node, the engine its jobs
drive -- at the moment the attempt starts there, never from the scheduler afterwards.
"""

from __future__ import annotations

import json
import os
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


def facing_ip() -> str:
    """This host's address facing the cluster's control store (``RAY_ADDRESS``, set by the job's
    supervisor): Ray's own guess aims at a public resolver, which a host without internet lacks,
    and then falls back to the host name."""
    host, _, port = os.environ["RAY_ADDRESS"].rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, int(port)))  # UDP: no packet is sent, only the route is chosen
        return s.getsockname()[0]


def join_here() -> str:
    """``ray.init`` as a driver of the job this process runs in, attached to this host's node (by
    its ``facing_ip``: Ray's own guess may attach to another node); returns that IP."""
    import ray

    ip = facing_ip()
    ray.init(
        address=os.environ["RAY_ADDRESS"], _node_ip_address=ip, log_to_driver=False, logging_level="ERROR"
    )
    return ip
