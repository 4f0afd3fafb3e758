"""Fixtures for the safety tests: a private dockerd, output trees, real compose projects.

The private dockerd (tests/private_engine.py) is for filling an address pool until the daemon
refuses: doing that on the shared daemon would break everyone's trials. Everything a test creates
is removed by exact ID, label or PID.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import private_engine
import pytest
from safety_support import BASE_IMAGE, need


@pytest.fixture(scope="module")
def private_dockerd(docker_engine):
    """A throwaway dockerd with a 4-network pool (10.<x>.0.0/22 split into /24) in its own netns."""
    need(os.geteuid() == 0, "a private dockerd needs root")
    need(all(shutil.which(b) for b in ("dockerd", "unshare", "nsenter")), "dockerd/unshare/nsenter missing")
    with private_engine.private_dockerd(pool_prefix=22, pool_size=24) as pd:
        yield pd


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
