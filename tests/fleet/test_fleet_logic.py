"""The pure parts of a cluster run: addresses, attempt ids, the job's command line, host.json."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from runner.errors import UserError
from runner.results.hosts import HOST_JSON, HostRecord, read_host
from runner.schedule.config import resolve, write_driver_env
from runner.schedule.fleet.cluster import attempt_id, entrypoint, job_api_address
from runner.schedule.fleet.hostinfo import write_host


def test_cluster_addresses_name_the_job_api():
    assert job_api_address("ray://10.0.0.1:8265") == "http://10.0.0.1:8265"
    assert job_api_address("https://head:443") == "https://head:443"
    assert job_api_address("auto", {"RAY_ADDRESS": "http://head:8265"}) == "http://head:8265"
    with pytest.raises(UserError, match="expected ray://HEAD:PORT"):
        job_api_address("head:8265")


def test_attempt_ids_differ_per_tree_pair_and_stamp(tmp_path):
    a = attempt_id(tmp_path / "a", "calc-partial", "goal", "2026-12-01__10-00-00")
    assert a.startswith("marathon-") and a.endswith("calc-partial__goal__2026-12-01__10-00-00")
    assert a != attempt_id(tmp_path / "b", "calc-partial", "goal", "2026-12-01__10-00-00")
    assert a != attempt_id(tmp_path / "a", "calc-partial", "goal", "2026-12-01__10-00-01")


def test_the_job_command_names_the_attempt_and_no_value(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789")
    cfg = resolve(tmp_path, {"tasks_dir": str(tmp_path), "agent_env": ["SOME_KEY"]})
    write_driver_env(cfg)
    cmd = entrypoint(tmp_path, "calc-partial", "goal", "s1")
    assert "runner.schedule.fleet.job" in cmd and f"{tmp_path} calc-partial goal s1" in cmd
    assert "sk-proj" not in cmd and "sk-proj" not in (tmp_path / ".driver_env").read_text()


def test_cluster_is_recorded_in_driver_env(tmp_path):
    cfg = resolve(tmp_path, {"tasks_dir": str(tmp_path), "cluster": "ray://10.0.0.1:8265"})
    write_driver_env(cfg)
    assert "MARATHON_CLUSTER=ray://10.0.0.1:8265" in (tmp_path / ".driver_env").read_text()
    assert resolve(tmp_path, {}, resume=True).cluster == "ray://10.0.0.1:8265"


def test_host_json_round_trip_and_hostile_files(tmp_path):
    rec = HostRecord("h2", "ab" * 28, "ODBO:6ZEO", "10.0.0.2", "unix:///run/d2.sock")
    write_host(tmp_path, rec)
    assert read_host(tmp_path) == rec
    assert read_host(tmp_path / "nowhere") is None
    (tmp_path / HOST_JSON).write_text(json.dumps({"host": 1, "node_id": "x", "engine_id": "y"}))
    assert read_host(tmp_path) is None  # wrong types are no host
    (tmp_path / HOST_JSON).unlink()
    os.mkfifo(tmp_path / HOST_JSON)  # never blocks: a FIFO is not read
    assert read_host(tmp_path) is None
    (tmp_path / HOST_JSON).unlink()
    (tmp_path / HOST_JSON).symlink_to("/etc/hostname")  # a symlink out of the dir is refused
    assert read_host(tmp_path) is None


def _plan(out, *objs):
    from runner.ops.cleanup import CleanupPlan, DockerObj

    plan = CleanupPlan(str(out), {"task": None, "arm": None, "trial": None}, sorted({o[2] for o in objs}))
    for kind, name, project in objs:
        obj = DockerObj(kind, hashlib.sha256(name.encode()).hexdigest(), name, project, "running")
        {"container": plan.containers, "network": plan.networks, "image": plan.images}[kind].append(obj)
    return plan


def test_a_cluster_cleanup_plan_names_the_host_of_every_object_and_every_host_down(tmp_path):
    from runner.ops.cleanup import CleanupPlan, HostPlan, render_host_plans

    p1 = _plan(tmp_path, ("container", "calc-partial__abc__env-main-1", "calc-partial__abc__env"),
               ("network", "calc-partial__abc__env_default", "calc-partial__abc__env"))  # fmt: skip
    p2 = _plan(tmp_path, ("container", "words-passrate__xyz__env-main-1", "words-passrate__xyz__env"))
    assert CleanupPlan.from_json(json.loads(json.dumps(p1.to_json()))) == p1  # carried back as JSON
    hosts = [
        HostPlan("vm/10.213.0.1", p1),
        HostPlan("vm/10.213.0.2", p2),
        HostPlan("gpu7/10.0.0.7", None),
        HostPlan("gpu8/10.0.0.8", None, "docker engine not reachable"),
    ]
    text = render_host_plans(hosts)
    lines = text.splitlines()
    objects = [ln for ln in lines if "project=" in ln]
    assert len(objects) == 3
    assert [ln.split()[0] for ln in objects] == ["vm/10.213.0.1", "vm/10.213.0.1", "vm/10.213.0.2"]
    assert any("words-passrate__xyz__env-main-1" in ln and "vm/10.213.0.2" in ln for ln in objects)
    assert "host gpu7/10.0.0.7 down: its objects were not listed" in lines
    assert "host gpu8/10.0.0.8: its objects were not listed (docker engine not reachable)" in lines
    assert lines[-1] == "4 host(s), 3 object(s) to remove; NOT listed: gpu7/10.0.0.7, gpu8/10.0.0.8"
    assert not HostPlan("gpu7/10.0.0.7", None).listed


def test_a_cluster_net_block_per_host_and_a_host_down(tmp_path):
    from marathon.commands.net import render_host
    from runner.ops.docker_pool import NetInfo, Pool, PoolStatus, verdict
    from runner.schedule.fleet.probe import HostAnswer, _stages, emit

    status = PoolStatus(31, 2, 3, 26, [], [Pool("172.17.0.0/16", 16, 31, 5)],
                        [NetInfo("calc-partial__abc__env_default", "n1", ["172.18.0.0/16"], "172.17.0.0/16",
                                 "calc-partial__abc__env", True, False)])  # fmt: skip
    v = verdict(status, 1, cap=20, margin=2)
    assert PoolStatus.from_json(json.loads(json.dumps(status.to_json()))) == status
    up = HostAnswer("vm", "10.213.0.2", "n2", True, {"status": status.to_json(), "gate": v.to_json()})
    down = HostAnswer("gpu7", "10.0.0.7", "n7", False)
    block = render_host(up)
    assert block.splitlines()[0] == "host vm/10.213.0.2: ours 2, foreign 3, free 26 (cap 20, margin 2): OK"
    assert "calc-partial__abc__env_default" in block and "gate: OK" in block
    assert render_host(down) == "host gpu7/10.0.0.7: down (not probed)"
    # the probe job's log, with Ray's own lines around the answers, gives the answers back
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        emit("net", [up, down])
    assert _stages(f"2026 INFO worker.py -- Connecting\n{buf.getvalue()}bye\n") == {"net": [up, down]}


def test_a_tree_of_a_cluster_run_names_its_cluster(tmp_path):
    from runner.schedule.fleet.probe import tree_cluster

    cfg = resolve(tmp_path, {"tasks_dir": str(tmp_path), "cluster": "ray://10.0.0.1:8265"})
    write_driver_env(cfg)
    assert tree_cluster(tmp_path) == "ray://10.0.0.1:8265"
    assert tree_cluster(tmp_path, "ray://other:8265") == "ray://other:8265"
    assert tree_cluster(tmp_path / "none") is None and tree_cluster(None) is None


def test_a_job_reads_its_node_id_from_the_raylet_it_runs_under():
    """The id is the raylet's own ``--node_id`` argument (as Ray's ``find_node_ids`` reads it); any
    other value in that place is not taken for an id."""
    import subprocess
    import sys
    import time

    import psutil

    from runner.schedule.fleet.job import raylet_node_id

    node = "ab" * 28
    for arg, want in (
        (f"--node_id={node}", node),
        ("--node_id=../../etc", None),
        ("--node-id=" + node, None),
    ):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--x=1", arg])
        try:
            proc = psutil.Process(p.pid)
            # until the child has exec'd, its command line is still this test's (the fork's copy)
            deadline = time.monotonic() + 30
            while proc.cmdline()[-1:] != [arg] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert raylet_node_id(proc) == want
        finally:
            p.kill()
            p.wait()
