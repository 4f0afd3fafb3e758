"""Properties of the pure parts of the safety rules, checked against independent computations."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace

from harbor.environments.docker.docker import _sanitize_docker_compose_project_name
from harbor.trial.trial import Trial
from hypothesis import given, settings
from hypothesis import strategies as st
from safety_support import write_trial_config

from modes.naming import compose_project
from runner.ops.docker_pool import (
    Pool,
    _slots,
    is_ours,
    our_projects,
    pools_from_info,
    verifier_compose_project,
    verifier_session_id,
)
from runner.ops.dockerapi import COMPOSE_PROJECT

nets = st.builds(
    lambda addr, plen: ipaddress.ip_network(f"{ipaddress.IPv4Address(addr)}/{plen}", strict=False),
    st.integers(0, 2**32 - 1),
    st.integers(8, 30),
)
pools = st.builds(
    lambda base, extra: Pool(base=str(base), size=min(base.prefixlen + extra, 30), capacity=0),
    st.builds(
        lambda a, p: ipaddress.ip_network(f"{ipaddress.IPv4Address(a)}/{p}", strict=False),
        st.integers(0, 2**32 - 1),
        st.integers(12, 24),
    ),
    st.integers(0, 6),
)


@settings(deadline=None)  # a shared, loaded machine: no per-example time limit
@given(nets, pools)
def test_slots_are_exactly_the_overlapping_predefined_subnets(subnet, pool):
    base = ipaddress.ip_network(pool.base)
    brute = {i for i, s in enumerate(base.subnets(new_prefix=pool.size)) if s.overlaps(subnet)}
    assert _slots(subnet, pool) == brute


@settings(deadline=None)  # a shared, loaded machine: no per-example time limit
@given(st.text(min_size=1, max_size=40))
def test_our_compose_project_is_harbors(trial_name):
    """The label we compare against is the one harbor 0.25.0 itself gives the trial's project."""
    assert compose_project(trial_name) == _sanitize_docker_compose_project_name(f"{trial_name}__env")


@settings(deadline=None)  # a shared, loaded machine: no per-example time limit
@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=3))
def test_ours_is_exact_equality(project, noise):
    assert is_ours({COMPOSE_PROJECT: project}, {project})
    for other in (project + noise, noise + project, project.upper() if project.upper() != project else None):
        if other is not None and other != project:
            assert not is_ours({COMPOSE_PROJECT: other}, {project})
    assert not is_ours({"name": project}, {project}) and not is_ours(None, {project})


def test_builtin_pools_hold_31_networks():
    assert sum(p.capacity for p in pools_from_info({})) == 31
    assert [
        p.capacity for p in pools_from_info({"DefaultAddressPools": [{"Base": "10.10.0.0/16", "Size": 24}]})
    ] == [256]


@settings(deadline=None)  # a shared, loaded machine: no per-example time limit
@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=30))
def test_verifier_projects_are_harbors(trial_name, key):
    """A trial's separate verifier environment: harbor's own session id and sanitizer, called on
    a stand-in trial holding only the name (the method reads nothing else)."""
    session = Trial._separate_verifier_session_id(
        SimpleNamespace(config=SimpleNamespace(trial_name=trial_name)), key
    )
    assert verifier_session_id(trial_name, key) == session
    assert verifier_compose_project(trial_name, key) == _sanitize_docker_compose_project_name(session)


def test_our_projects_include_verifier_environments(tmp_path):
    job = tmp_path / "out" / "calc" / "codex" / "s1" / "codex"
    write_trial_config(job / "calc__AbC")
    (job / "calc__AbC" / "steps" / "build").mkdir(parents=True)
    (job / "calc__AbC" / "steps" / "grade").mkdir()
    (job / "calc__NoCfg").mkdir()  # no harbor config.json: not a trial
    write_trial_config(job / "calc__Other")
    (job / "calc__Other" / "config.json").write_text('{"trial_name": "calc__Different"}')
    assert our_projects(tmp_path / "out") == {
        "calc__abc__env",
        "calc__abc__verifier__trial",
        "calc__abc__verifier__build",
        "calc__abc__verifier__grade",
    }
