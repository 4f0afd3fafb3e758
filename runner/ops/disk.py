"""Disk headroom: no new attempt starts while the output tree's disk or the Docker engine's is nearly
full.

Why: a multi-day run fills disks (task images, build caches, trial logs and trajectories). On a
full disk every trial fails as infrastructure (harbor cannot write its result, the engine cannot
build or start a container, the gateway's ledger stops and its gateway with it), and each such
attempt is one more error to rerun or explain. So the runner (``runner.schedule.local``) and each
cluster job (``runner.schedule.fleet.job``) hold new starts, like the address-pool gate, while
either disk has less than ``--min-free-gb`` free, and say so in the run's events; ``health`` names
it and ``marathon run`` refuses to start below it. Running attempts are left alone.

What is measured: ``statvfs`` of the output tree and of the engine's data root
(``DockerRootDir``, from the engine), the space an unprivileged writer may use (``f_bavail``).
An engine whose data root is not on this machine (a remote ``DOCKER_HOST``) cannot be measured
here: only the tree's disk is then.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GB = 1024**3
#: the default of ``--min-free-gb`` (``MARATHON_MIN_FREE_GB``); 0 turns the check off
DEFAULT_MIN_FREE_GB = 5


@dataclass(frozen=True)
class Room:
    """The free space where one of the run's writers writes."""

    what: str  # "the output tree", "the Docker engine's data root"
    path: str
    free: int  # bytes an unprivileged writer may still use

    def text(self) -> str:
        return f"{self.free / GB:.1f} GB free on {self.path} ({self.what})"


@dataclass(frozen=True)
class DiskVerdict:
    ok: bool
    reason: str
    rooms: tuple[Room, ...] = ()


def ask_engine_root(docker_host: str | None = None) -> tuple[bool, str | None]:
    """(the engine answered, its data root when on this machine): one connection, closed."""
    from runner.errors import Unavailable
    from runner.ops.dockerapi import connect

    try:
        client = connect(docker_host, timeout=10)
    except Unavailable:
        return False, None  # the pool gate and the engine checks say what to do
    try:
        return True, engine_root(client)
    finally:
        client.close()


def engine_root(client: Any) -> str | None:
    """The engine's data root when it lies on this machine (else None: not measurable here)."""
    try:
        root = client.info().get("DockerRootDir")
    except Exception:  # noqa: BLE001 - an engine that does not answer: the pool gate says so
        return None
    return root if isinstance(root, str) and os.path.isdir(root) else None


def rooms(out: Path, docker_root: str | None) -> list[Room]:
    """The free space of the tree's file system and the engine's (once when they are the same)."""
    got: list[Room] = []
    seen: set[int] = set()
    for what, path in (("the output tree", _existing(out)), ("the Docker engine's data root", docker_root)):
        if path is None:
            continue
        try:
            dev = os.stat(path).st_dev
            st = os.statvfs(path)
        except OSError:
            continue
        if dev in seen:
            continue
        seen.add(dev)
        got.append(Room(what, path, st.f_bavail * st.f_frsize))
    return got


def _existing(path: Path) -> str:
    """The tree, or the nearest dir above it that exists (a tree the run has not made yet)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return str(p)


def verdict(out: Path, docker_root: str | None, min_free_gb: int) -> DiskVerdict:
    """Start more only when every disk the run writes has at least ``min_free_gb`` free (0: always)."""
    if min_free_gb <= 0:
        return DiskVerdict(True, "disk check off (--min-free-gb 0)")
    found = rooms(out, docker_root)
    low = [r for r in found if r.free < min_free_gb * GB]
    if low:
        return DiskVerdict(
            False,
            "disk: " + "; ".join(r.text() for r in low) + f", below --min-free-gb {min_free_gb}: free some "
            "space (docker image prune, docker builder prune, old trees) and the run goes on by itself",
            tuple(found),
        )
    return DiskVerdict(True, "disk: " + "; ".join(r.text() for r in found), tuple(found))


def check(out: Path, min_free_gb: int, *, engine: bool, docker_host: str | None = None) -> DiskVerdict:
    """``verdict`` with the engine's data root asked once (``engine``: the run uses a local Docker
    engine); for the one-off checks (``marathon run``'s preflight, ``health``)."""
    root = ask_engine_root(docker_host)[1] if engine and min_free_gb > 0 else None
    return verdict(out, root, min_free_gb)
