"""Fixtures for the LoopX arms: staged parts (once, cached on disk) and real containers.

Containers are started FROM marathon-base:bookworm with ``--network none`` and the staged parts mounted
read-only, exactly as a trial sees them; each carries a unique label and is removed by its ID.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from agents.loopx_profile import docker_exec, install_profile
from agents.loopx_staging import CONTAINER_PARTS_ROOT, StagedLoopx, stage_loopx

BASE_IMAGE = "marathon-base:bookworm"
LABEL = "marathon.test"
RUN_ID = uuid.uuid4().hex[:12]


@pytest.fixture(scope="session")
def staged_loopx() -> StagedLoopx:
    return stage_loopx()


def _start(mount_source: Path, name_hint: str) -> str:
    cid = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--network",
            "none",
            "--label",
            f"{LABEL}=arms-loopx-{RUN_ID}-{name_hint}",
            "-v",
            f"{mount_source}:{CONTAINER_PARTS_ROOT}:ro",
            "-w",
            "/app",
            BASE_IMAGE,
            "sleep",
            "infinity",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    subprocess.run(["docker", "exec", cid, "mkdir", "-p", "/app"], check=True, timeout=60)
    return cid


def _remove(cid: str) -> None:
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=120)


@pytest.fixture
def container_factory(docker_engine, staged_loopx):
    """Start containers with the staged parts (or a given parts dir) mounted; removed by ID after."""
    started: list[str] = []

    def make(parts_root: Path | None = None, hint: str = "c") -> str:
        cid = _start(parts_root or staged_loopx.root, hint)
        started.append(cid)
        return cid

    yield make
    for cid in started:
        _remove(cid)


@pytest.fixture(scope="session")
def installed_container(docker_engine, staged_loopx):
    """One container with the profile installed (shared by the read-only checks)."""
    cid = _start(staged_loopx.root, "installed")
    try:
        run = docker_exec(cid)
        profile = asyncio.run(install_profile(run, staged_loopx.container_paths()))
        yield cid, run, profile
    finally:
        _remove(cid)


@pytest.fixture
def parts_without_node(staged_loopx, tmp_path) -> Path:
    """A copy of the staged parts with ``node/bin/node`` left out (wheels hard-linked)."""
    root = tmp_path / "parts"
    (root / "wheels").mkdir(parents=True)
    for whl in (staged_loopx.root / "wheels").iterdir():
        try:
            (root / "wheels" / whl.name).hardlink_to(whl)
        except OSError:
            shutil.copy2(whl, root / "wheels" / whl.name)
    (root / "node" / "bin").mkdir(parents=True)
    return root
