"""A cluster run's process registry: a PID means something on its own host only.

Each Ray job registers its harbor under its host's Ray node; ``marathon kill`` on each host selects
only what that host registered (``runner.ops.procs``). Real processes (``sleep``), no Docker.
"""

from __future__ import annotations

import subprocess

import pytest

from runner.ops.procs import Registry, plan_stop


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait(10)


def test_each_host_plans_and_forgets_only_what_it_registered(sleeper, tmp_path):
    reg = Registry(tmp_path)
    # the same PID number under two hosts (hosts share no PID space; this machine plays both)
    reg.register(sleeper.pid, "harbor", ["harbor", "run"], task="t", arm="a", node="node-1")
    reg.register(sleeper.pid, "harbor", ["harbor", "run"], task="t", arm="a", node="node-2")
    assert sorted(e.node for e in reg.entries()) == ["node-1", "node-2"]

    assert [t.pid for t in plan_stop(tmp_path, node="node-1").targets] == [sleeper.pid]
    assert plan_stop(tmp_path).targets == []  # the runner's host registered nothing of the jobs'
    assert reg.live_entries() == [] and [e.node for e in reg.live_entries("node-2")] == ["node-2"]

    reg.unregister(sleeper.pid, node="node-1")
    assert [e.node for e in reg.entries()] == ["node-2"]
    sleeper.kill()
    sleeper.wait(10)
    assert reg.prune() == []  # another host's dead-looking entry is that host's to judge
    assert [e.node for e in reg.prune("node-2")] == ["node-2"]
    assert reg.entries() == []
