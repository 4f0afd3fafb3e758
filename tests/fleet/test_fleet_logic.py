"""The pure parts of a cluster run: addresses, attempt ids, the job's command line, host.json."""

from __future__ import annotations

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
