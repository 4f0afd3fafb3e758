"""Address-pool accounting and the gate, checked against what a real daemon does.

The fill-until-refused test runs on a private dockerd (see conftest): filling the shared daemon's
pool would kill everyone else's trials.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import docker
import docker.errors
import pytest
from safety_support import REPO, make_tree, marathon

from modes.naming import compose_project
from runner.errors import UserError
from runner.ops.docker_pool import (
    BUILTIN_LOCAL_POOLS,
    host_routes,
    our_projects,
    pool_status,
    reclaim_empty_ours,
    verdict,
)
from runner.ops.dockerapi import COMPOSE_PROJECT, connect

pytestmark = pytest.mark.docker

# Docker 20.10 says the first; newer engines (and Compose relaying them) say the second.
REFUSALS = (
    "could not find an available, non-overlapping IPv4 address pool",
    "all predefined address pools have been fully subnetted",
)


def _one_char_off(name: str) -> str:
    return name[:-1] + ("y" if name[-1] != "y" else "z")


def test_fill_until_daemon_refuses(private_dockerd, tmp_path, uid):
    """`marathon net` predicts exactly how many networks the daemon still gives; the gate stops
    `margin` before that; a host route over a pool subnet counts as blocked (the daemon skips it)."""
    pd = private_dockerd
    client = pd.client
    out = make_tree(tmp_path / "out", {("calc", "codex"): [f"calc__{uid}A", f"calc__{uid}B"]})
    ours = sorted(compose_project(t) for t in (f"calc__{uid}A", f"calc__{uid}B"))
    assert set(ours) <= our_projects(out)
    foreign = _one_char_off(ours[0])

    routed = list(ipaddress.ip_network(pd.pool_base).subnets(new_prefix=pd.pool_size))[1]
    bridge = f"mbr{uid[:6]}"
    pd.nsenter("ip", "link", "add", bridge, "type", "bridge")
    created: list = []
    try:
        pd.nsenter("ip", "addr", "add", f"{routed[1]}/{pd.pool_size}", "dev", bridge)
        pd.nsenter("ip", "link", "set", bridge, "up")
        routes = host_routes(pd.pid)
        assert str(routed) in routes

        status = pool_status(out, client=client, routes=routes)
        assert status.pools_source == "daemon"
        assert status.capacity == pd.expected_capacity == 4
        assert (status.used, status.blocked, status.free) == (0, 1, 3)

        # the real CLI, run in the daemon's network namespace (as on a Docker host), agrees
        r = marathon(
            "net", str(out), "--json", "--net-margin", "1",
            env={"DOCKER_HOST": pd.host},
            prefix=["nsenter", "-t", str(pd.pid), "-n"],
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        cli = json.loads(r.stdout)
        assert (cli["status"]["capacity"], cli["status"]["free"]) == (4, status.free)
        assert cli["gate"]["ok"] is True

        margin = 1
        gate_stopped_at = refused_at = None
        refusal = ""
        expected_ours, expected_foreign = [], []
        for i in range(status.capacity + 2):
            v = verdict(pool_status(out, client=client, routes=host_routes(pd.pid)), 1, margin=margin)
            if not v.ok and gate_stopped_at is None:
                gate_stopped_at = len(created)
            project = ours[(i // 2) % 2] if i % 2 == 0 else foreign
            name = f"{project}_default"  # the name compose would give; a foreign one shares our prefix
            try:
                net = client.networks.create(name, driver="bridge", labels={COMPOSE_PROJECT: project})
            except docker.errors.APIError as exc:
                refused_at, refusal = len(created), str(exc)
                break
            created.append(net)
            (expected_ours if project in ours else expected_foreign).append(name)

        assert refused_at == status.free, f"predicted {status.free}, daemon refused after {refused_at}"
        assert any(w in refusal for w in REFUSALS), refusal
        assert gate_stopped_at == status.free - margin

        full = pool_status(out, client=client, routes=routes)
        assert full.free == 0
        assert (full.used_ours, full.used_foreign) == (len(expected_ours), len(expected_foreign))
        assert sorted(full.empty_ours) == sorted(expected_ours)
        for n in full.networks:
            if n.subnets:
                assert n.pool == str(ipaddress.ip_network(pd.pool_base))

        reclaimed = reclaim_empty_ours(out, client=client, min_age_sec=0)
        assert sorted(reclaimed) == sorted(expected_ours)
        left = {n.id for n in client.networks.list() if n.id in {c.id for c in created}}
        assert left == {c.id for c in created if c.name in expected_foreign}
        after = pool_status(out, client=client, routes=routes)
        assert (after.used_ours, after.used_foreign, after.free) == (
            0,
            len(expected_foreign),
            len(expected_ours),
        )
    finally:
        for net in created:
            try:
                net.remove()
            except docker.errors.NotFound:
                pass
        pd.nsenter("ip", "link", "del", bridge)


def test_reclaim_keeps_networks_with_containers_and_foreign_ones(private_dockerd, tmp_path, uid):
    """An empty network of ours is reclaimed; a foreign empty one and the private daemon's others stay."""
    client = private_dockerd.client
    out = make_tree(tmp_path / "out", {("t", "a"): [f"t__{uid}"]})
    ours = compose_project(f"t__{uid}")
    assert ours in our_projects(out)
    mine = client.networks.create(f"{ours}_default", labels={COMPOSE_PROJECT: ours})
    other = client.networks.create(f"x{ours}_default", labels={COMPOSE_PROJECT: f"x{ours}"})
    unlabelled = client.networks.create(f"{ours}_default_copy")
    try:
        # just created: compose may be about to attach the trial's container, so it stays
        assert reclaim_empty_ours(out, client=client) == []
        assert reclaim_empty_ours(out, client=client, min_age_sec=0) == [f"{ours}_default"]
        ids = {n.id for n in client.networks.list()}
        assert mine.id not in ids and other.id in ids and unlabelled.id in ids
    finally:
        for n in (mine, other, unlabelled):
            try:
                n.remove()
            except docker.errors.NotFound:
                pass


def test_gate_flags_override_env(private_dockerd, tmp_path, monkeypatch):
    """MARATHON_NET_CAP / MARATHON_NET_MARGIN apply unless a flag is given; bad values are one-line errors."""
    status = pool_status(None, client=private_dockerd.client, routes=[])
    assert (status.capacity, status.free) == (4, 4)
    assert verdict(status, 1).ok  # default margin 2: 0 + 1 <= 4 - 2
    assert not verdict(status, 3).ok
    monkeypatch.setenv("MARATHON_NET_CAP", "2")
    monkeypatch.setenv("MARATHON_NET_MARGIN", "2")
    v = verdict(status, 1)
    assert not v.ok and (v.cap, v.margin) == (2, 2)
    assert verdict(status, 4, cap=10, margin=0).ok  # flags win; cap is bounded by capacity
    assert not verdict(status, 5, cap=10, margin=0).ok
    monkeypatch.setenv("MARATHON_NET_MARGIN", "many")
    with pytest.raises(UserError, match="MARATHON_NET_MARGIN"):
        verdict(status, 1)

    r = marathon("net", "--json", env={"DOCKER_HOST": private_dockerd.host, "MARATHON_NET_MARGIN": "4"})
    assert r.returncode == 1 and json.loads(r.stdout)["gate"]["ok"] is False  # exit 1 = the gate would wait
    r = marathon("net", "--net-cap", "-1", env={"DOCKER_HOST": private_dockerd.host})
    assert r.returncode == 2 and r.stderr.strip() == "marathon: --net-cap must not be negative"


def test_builtin_default_pools_on_the_shared_daemon(docker_engine, uid):
    """Without DefaultAddressPools the capacity is moby's built-in 31; a new network lands in one
    of those pools and is counted there. (Only one network is created: the daemon is shared.)"""
    client = connect()
    info = client.info()
    before = pool_status(None, client=client)
    if info.get("DefaultAddressPools"):
        assert before.pools_source == "daemon"
        assert [(p.base, p.size) for p in before.pools] == [
            (str(ipaddress.ip_network(p["Base"])), p["Size"]) for p in info["DefaultAddressPools"]
        ]
    else:
        assert before.pools_source == "builtin"
        assert [(p.base, p.size) for p in before.pools] == list(BUILTIN_LOCAL_POOLS)
        assert before.capacity == 31
    net = client.networks.create(f"marathon-test-{uid}", labels={"marathon.test": uid})
    try:
        net.reload()
        subnet = ipaddress.ip_network(net.attrs["IPAM"]["Config"][0]["Subnet"])
        after = pool_status(None, client=client)
        (mine,) = [n for n in after.networks if n.id == net.id]
        assert mine.pool is not None and subnet.subnet_of(ipaddress.ip_network(mine.pool))
        assert not mine.ours and mine.empty
        pool = next(p for p in after.pools if p.base == mine.pool)
        assert pool.used >= 1
    finally:
        net.remove()


def test_unreachable_docker_is_one_clear_line(tmp_path):
    r = marathon("net", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [
        f"marathon: no Docker engine at unix://{tmp_path}/no.sock: the socket does not exist; "
        "start the engine (sudo systemctl start docker) or set DOCKER_HOST"
    ]


def test_a_docker_host_that_is_no_address_is_one_clear_line():
    """``DOCKER_HOST='tcp://['``: docker-py's ValueError was an internal error (exit 1)."""
    r = marathon("net", env={"DOCKER_HOST": "tcp://["})
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().splitlines() == [
        "marathon: DOCKER_HOST tcp://[ is not an engine address: Invalid IPv6 URL"
    ]


@pytest.mark.parametrize("argv", [["demo", "--headless"], ["verify-envs"]])
def test_unreachable_docker_is_not_a_missing_image(tmp_path, argv):
    """The demo and verify-envs build an image first: an engine that does not answer is its one line
    (exit 3), never "base image missing, run setup-machine" labelled an internal error; nothing is
    made on the way."""
    out = tmp_path / "out"
    r = marathon(*argv, *(["--out", str(out)] if argv[0] == "demo" else []),
                 env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"marathon: no Docker engine at unix://{tmp_path}/no.sock: the socket does not exist; "
        "start the engine (sudo systemctl start docker) or set DOCKER_HOST"
    ]
    assert not out.exists()


def test_permission_denied_names_the_socket(docker_engine):
    """A user outside the docker group gets one line naming the socket (real EACCES via setuid)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    code = (
        # import everything first: after dropping to nobody, the interpreter's stdlib under /root
        # may no longer be readable, nor the checkout (a clone in a 0700 dir, as `mktemp -d` makes
        # it): every module of marathon's own packages, since a command imports some lazily
        "import os, sys, json, pkgutil, importlib, docker, requests, marathon, runner, modes;"
        "[importlib.import_module(m.name) for p in (marathon, runner, modes)"
        " for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.') if not m.name.startswith('runner.demo')];"
        "import marathon.cli; marathon.cli.build_parser();"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534);"
        "sys.exit(marathon.cli.main(['net']))"
    )
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "marathon: permission denied on the Docker socket unix:///var/run/docker.sock"
    ), r.stderr
