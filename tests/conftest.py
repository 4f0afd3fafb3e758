"""Shared fixtures. Real Docker, real harbor: nothing here mocks them.

With CI=true or MARATHON_REQUIRE_DOCKER=1 a missing Docker engine fails the session instead of
skipping the tests that need it.
"""

from __future__ import annotations

import os
import subprocess

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REQUIRE_DOCKER = os.environ.get("CI") == "true" or os.environ.get("MARATHON_REQUIRE_DOCKER") == "1"


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Require a reachable Docker engine: fail under CI, skip on a laptop without one."""
    if docker_available():
        return
    if REQUIRE_DOCKER:
        pytest.fail("no Docker engine reachable (CI requires one; run .ci/setup-machine)")
    pytest.skip("no Docker engine reachable")
