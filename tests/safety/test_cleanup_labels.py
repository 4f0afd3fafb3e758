"""Cleanup selects by exact compose-project label: ours go, look-alikes stay. Real compose, real harbor."""

from __future__ import annotations

import json
import shutil
import subprocess

import docker
import docker.errors
import pytest
from safety_support import BASE_IMAGE, REPO, make_tree, marathon

from modes.naming import compose_project
from runner.ops.cleanup import act_cleanup, plan_cleanup
from runner.ops.docker_pool import our_projects, pool_status
from runner.ops.dockerapi import COMPOSE_PROJECT
from runner.results.tree import iter_job_dirs, iter_trial_dirs

pytestmark = pytest.mark.docker


def _by_label(client, project: str):
    """Containers and networks whose project label is exactly ``project``."""
    flt = {"label": f"{COMPOSE_PROJECT}={project}"}
    cs = [
        c for c in client.containers.list(all=True, filters=flt) if c.labels.get(COMPOSE_PROJECT) == project
    ]
    ns = [
        n
        for n in client.networks.list(filters=flt)
        if (n.attrs.get("Labels") or {}).get(COMPOSE_PROJECT) == project
    ]
    return cs, ns


def _exists(client, kind: str, oid: str) -> bool:
    try:
        (client.containers if kind == "container" else client.networks).get(oid)
        return True
    except docker.errors.NotFound:
        return False


def test_foreign_lookalikes_survive_cleanup(compose, tmp_path, uid):
    client = docker.from_env()
    out = make_tree(
        tmp_path / "out",
        {("calc", "codex"): [f"calc__{uid}A", f"calc__{uid}B"], ("words", "loopx"): [f"words__{uid}C"]},
    )
    pa, pb = compose_project(f"calc__{uid}A"), compose_project(f"calc__{uid}B")
    pc = compose_project(f"words__{uid}C")
    assert {pa, pb, pc} <= our_projects(out)
    for p in (pa, pb, pc):
        compose.up(p)
    # foreign compose projects: one character off, and ours as a substring (prefix and suffix)
    lookalikes = [pa[:-1] + ("y" if pa[-1] != "y" else "z"), f"x{pa}", f"{pa}2"]
    for p in lookalikes:
        compose.up(p)
    # foreign unlabelled objects whose names contain our project name, and a label differing in case
    extra_c, extra_n = [], []
    try:
        extra_c.append(
            client.containers.run(
                BASE_IMAGE, ["sleep", "infinity"], name=f"{pa}-main-1-copy", detach=True, init=True
            )
        )
        extra_c.append(
            client.containers.run(
                BASE_IMAGE,
                ["sleep", "infinity"],
                detach=True,
                init=True,
                labels={COMPOSE_PROJECT: pa.upper()},
            )
        )
        extra_n.append(client.networks.create(f"{pa}_default_x"))
        extra_n.append(client.networks.create(f"{pb}_default2", labels={COMPOSE_PROJECT: f"{pb} "}))

        ours = {p: _by_label(client, p) for p in (pa, pb, pc)}
        assert all(len(cs) == 1 and len(ns) == 1 for cs, ns in ours.values())
        foreign_ids = [("container", c.id) for c in extra_c] + [("network", n.id) for n in extra_n]
        for p in lookalikes:
            cs, ns = _by_label(client, p)
            assert cs and ns
            foreign_ids += [("container", c.id) for c in cs] + [("network", n.id) for n in ns]

        # dry run: the plan is exactly ours, and nothing changes
        r = marathon("cleanup", str(out), "--json")
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)["plan"]
        want_c = {c.id for cs, _ in ours.values() for c in cs}
        want_n = {n.id for _, ns in ours.values() for n in ns}
        assert {c["id"] for c in plan["containers"]} == want_c
        assert {n["id"] for n in plan["networks"]} == want_n
        assert all(_exists(client, "container", i) for i in want_c)

        # one task only
        r = marathon("cleanup", str(out), "--task", "words", "--yes", "--json")
        assert r.returncode == 0, r.stderr
        assert _by_label(client, pc) == ([], [])
        assert all(_by_label(client, p)[0] for p in (pa, pb))

        # the whole tree
        r = marathon("cleanup", str(out), "--yes")
        assert r.returncode == 0, r.stderr
        assert "removed 2 container(s)" in r.stdout and "removed 2 network(s)" in r.stdout
        for p in (pa, pb, pc):
            assert _by_label(client, p) == ([], [])
        survivors = [(k, i) for k, i in foreign_ids if _exists(client, k, i)]
        assert survivors == foreign_ids
    finally:
        for c in extra_c:
            c.remove(force=True, v=True)
        for n in extra_n:
            n.remove()


def test_rm_f_leaks_the_network_and_cleanup_removes_it(compose, tmp_path, uid):
    """`docker rm -f` on a trial's containers leaves its compose network; cleanup removes it."""
    client = docker.from_env()
    trial = f"calc__{uid}L"
    out = make_tree(tmp_path / "out", {("calc", "codex"): [trial]})
    project = compose_project(trial)
    compose.up(project)
    cs, ns = _by_label(client, project)
    subprocess.run(["docker", "rm", "-f", *[c.id for c in cs]], check=True, capture_output=True)
    cs, ns = _by_label(client, project)
    assert cs == [] and len(ns) == 1, "the leak: containers gone, network left"
    status = pool_status(out)
    assert f"{project}_default" in status.empty_ours

    r = marathon("cleanup", str(out))
    assert r.returncode == 0 and "dry run" in r.stdout
    assert f"{project}_default" in r.stdout and _by_label(client, project)[1]
    r = marathon("cleanup", str(out), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["report"]["removed_networks"] == [f"{project}_default"]
    assert _by_label(client, project) == ([], [])


def test_object_vanishing_mid_cleanup_is_not_an_error(compose, tmp_path, uid):
    client = docker.from_env()
    trial = f"calc__{uid}V"
    out = make_tree(tmp_path / "out", {("calc", "codex"): [trial]})
    project = compose_project(trial)
    compose.up(project)
    plan = plan_cleanup(out)
    assert len(plan.containers) == 1 and len(plan.networks) == 1
    client.containers.get(plan.containers[0].id).remove(force=True)  # someone else got there first
    report = act_cleanup(plan)
    assert report.ok and report.vanished == [plan.containers[0].name]
    assert report.removed_networks == [plan.networks[0].name]
    assert _by_label(client, project) == ([], [])


def test_cleanup_rejects_a_path_that_is_not_a_directory(tmp_path):
    r = marathon("cleanup", str(tmp_path / "missing"), "--yes")
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == f"marathon: {tmp_path / 'missing'} is not a directory (expected a marathon output tree)"
    )


@pytest.mark.slow
def test_a_real_harbor_trial_is_ours(docker_engine, tmp_path):
    """harbor's own compose project for a trial equals modes.naming.compose_project(trial dir name):
    a trial kept with keep_containers=true is planned and removed by cleanup."""
    if shutil.which("harbor", path=str(REPO / ".venv" / "bin")) is None:
        pytest.fail("harbor is not installed in the project venv")
    client = docker.from_env()
    out = tmp_path / "out"
    jobs = out / "calc-partial" / "oracle" / "2026-01-01__00-00-00"
    r = subprocess.run(
        [str(REPO / ".venv" / "bin" / "harbor"), "run", "-p", str(REPO / "runner/demo/tasks/calc-partial"),
         "-a", "oracle", "-o", str(jobs), "--job-name", "oracle", "-y", "--ek", "keep_containers=true"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    trials = [t.name for _, _, _, _, job in iter_job_dirs(out) for t in iter_trial_dirs(job)]
    assert len(trials) == 1, (r.stdout[-2000:], r.stderr[-2000:])
    project = compose_project(trials[0])
    cs, ns = _by_label(client, project)
    # harbor's locally built image "<project>-main": removed by that exact reference only (its ID
    # may carry other tags from other people's builds of the same task)
    images = {c.attrs["Config"]["Image"] for c in cs} & {f"{project}-main"}
    try:
        assert cs and len(ns) == 1, f"harbor left no kept project {project}: {r.stdout[-1500:]}"
        plan = plan_cleanup(out)
        assert {c.id for c in plan.containers} == {c.id for c in cs}
        assert [n.id for n in plan.networks] == [ns[0].id]
        assert [i.name for i in plan.images] == [f"{project}-main:latest"]  # compose labels what it builds
        r = marathon("cleanup", str(out), "--yes")
        assert r.returncode == 0, r.stderr
        assert _by_label(client, project) == ([], [])
        assert client.images.list(filters={"label": f"{COMPOSE_PROJECT}={project}"}) == []
    finally:
        for c in _by_label(client, project)[0]:
            c.remove(force=True, v=True)
        for n in _by_label(client, project)[1]:
            n.remove()
        for ref in images:
            try:
                client.images.remove(ref)
            except docker.errors.APIError:
                pass


def test_plan_for_a_set_of_trials(compose, tmp_path, uid):
    """The runner cleans up after the trials of one finished job: only those projects are planned."""
    a, b = f"calc__{uid}S1", f"calc__{uid}S2"
    out = make_tree(tmp_path / "out", {("calc", "codex"): [a, b]})
    for t in (a, b):
        compose.up(compose_project(t))
    plan = plan_cleanup(out, trials={a})
    assert compose_project(a) in plan.projects and compose_project(b) not in plan.projects
    assert all(p.startswith(f"calc__{uid}s1__".lower()) for p in plan.projects)
    assert {c.project for c in plan.containers} == {n.project for n in plan.networks} == {compose_project(a)}
    assert plan.scope["trials"] == a


def test_a_copy_of_a_live_tree_leaves_the_originals_containers_alone(compose, tmp_path, uid):
    """Found by a probe: ``cp -a`` of a tree while it ran, then ``cleanup`` of the copy, removed the
    original run's containers (the copy has the same trial names, so the same compose projects).
    A container that mounts its trial's dir from another tree is that tree's: left alone, named
    in the plan, its network with it; the original's own cleanup still takes it."""
    client = docker.from_env()
    trial = f"calc__{uid}K"
    out = make_tree(tmp_path / "out", {("calc", "codex"): [trial]})
    (tdir,) = [t for *_, job in iter_job_dirs(out) for t in iter_trial_dirs(job)]
    (tdir / "agent").mkdir()
    project = compose_project(trial)
    mounted = tmp_path / "mounted.yaml"  # what harbor's docker environment does: the trial's logs
    mounted.write_text(
        "services:\n  main:\n"
        f"    image: {BASE_IMAGE}\n"
        '    command: ["sleep", "infinity"]\n    init: true\n'
        f"    volumes:\n      - {tdir / 'agent'}:/logs/agent\n"
        # a task's sidecar, which harbor does not mount the trial into (a review: removed by the
        # copy's cleanup while its project's main was left alone)
        f"  db:\n    image: {BASE_IMAGE}\n"
        '    command: ["sleep", "infinity"]\n    init: true\n'
    )
    compose.projects.append(project)
    subprocess.run(["docker", "compose", "-p", project, "-f", str(mounted), "up", "-d"], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)

    plan = plan_cleanup(copy, client=client)
    assert project in plan.projects and plan.containers == [] and plan.networks == []
    assert any(f"mounts {tdir / 'agent'}" in why and "another tree" in why for why in plan.left_alone)
    assert any("db" in why and "runs another tree's trial" in why for why in plan.left_alone)
    r = marathon("cleanup", str(copy), "--yes")
    assert r.returncode == 0, r.stderr
    cs, ns = _by_label(client, project)
    assert len(cs) == 2 and {c.status for c in cs} == {"running"} and len(ns) == 1  # the original's

    mine = plan_cleanup(out, client=client)
    assert sorted(c.id for c in mine.containers) == sorted(c.id for c in cs)
    assert [n.id for n in mine.networks] == [ns[0].id]
