"""``host.json``: which host ran an attempt (a cluster run), as the results layer reads it.

Why: per-host truth (status, report, console, cleanup routing) must be what the attempt's own job
recorded on the host where it ran, never inferred from the scheduler afterwards. The file sits in
the attempt's stamp dir beside ``harbor-run.log`` (``runner.schedule.fleet.hostinfo`` writes it) and is read
by the safe-open rules like every tree file: a FIFO, a symlink out or a malformed record is no host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runner.results import records

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


def read_host(stamp_dir: Path | str) -> HostRecord | None:
    """The attempt's host record, or None when absent (a single-host run) or unreadable."""
    path = f"{os.fspath(stamp_dir)}/{HOST_JSON}"
    # a single-host tree: one existence check per attempt (of the name itself, a link not
    # followed, as ``os.path.lexists``; no exception made when it is missing), not a safe open
    if not os.access(path, os.F_OK, follow_symlinks=False):
        return None
    loaded = records.load_json(path)
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


@dataclass(frozen=True)
class HostUse:
    """One host's share of a tree, from its attempts' ``host.json``: how many attempts it ran (by
    status) and which pairs run there now -- what ``status`` prints per host and the console's hosts
    panel shows beside the cluster's own account of the node."""

    name: str  # ``HostRecord.short()``
    node_id: str  # the Ray node id its latest attempt recorded
    attempts: int
    by_status: tuple[tuple[str, int], ...]  # (status, attempts), in the order first seen
    running: tuple[tuple[str, str], ...] = ()  # (task, arm) of its attempts still running
