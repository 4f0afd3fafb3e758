"""Cases for tests/test_tiers.py, run in an inner pytest (the name keeps them out of the suite)."""

from __future__ import annotations

import os

import docker
import pytest


def test_uses_the_engine_fixture_but_is_unmarked(docker_engine):
    pass


def test_talks_to_docker_but_is_unmarked():
    docker.from_env().ping()


@pytest.mark.docker
def test_marked(docker_engine):
    pass


def test_plain():
    assert os.environ["DOCKER_HOST"].startswith("unix:///nonexistent/")
