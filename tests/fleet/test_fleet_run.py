"""One run over two Docker hosts on a Ray cluster (tests/fleet/two_hosts.py).

Host 1 is this machine's engine, host 2 a private dockerd in a network namespace the test creates,
joined by a Ray head here and a Ray worker there, two ``docker_slots`` each. ``marathon run
--cluster`` submits one Ray job per pair (its runner killed and restarted by ``health --fix`` on
the way: ``fixed_run``); every pair must be done exactly once, on a host its ``host.json`` names,
both hosts must have worked, the scored cells must equal what the same arms score on one host (the
recorded expected rewards of the mini-benchmark); ``marathon net`` must show each host's own pools,
and one ``marathon cleanup --yes`` from the runner host must plan and remove on each host what the
run left on its engine while a foreign look-alike on each survives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from runner_support import DEMO_TASKS, REPO, done_jobs, write_task
from two_hosts import HEAD_IP, WORKER_IP, two_hosts

from agents.scripted_model.image import DEMO_IMAGE
from runner.results.events import read_events
from runner.results.hosts import read_host
from runner.schedule.fleet.cluster import Fleet

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ("calc-partial", "words-passrate")
ARMS = ("oracle", "nop")
IMAGES = ("marathon-base:bookworm", DEMO_IMAGE)
#: what harbor's stand-ins score on the mini-benchmark on one host (README: oracle solves each,
#: nop fails each with a defined partial)
EXPECTED = {
    ("calc-partial", "oracle"): (1.0, 1.0),
    ("words-passrate", "oracle"): (1.0, None),
    ("calc-partial", "nop"): (0.0, 0.2),
    ("words-passrate", "nop"): (0.0, None),
}
FOREIGN = "marathon.test.foreign"


def cli(*args: str, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marathon.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def labelled(docker, project: str, name: str, *labels: str) -> tuple[str, str]:
    """A running container and its network, both labelled with compose project ``project``."""
    marks = [x for lab in (f"com.docker.compose.project={project}", *labels) for x in ("--label", lab)]
    net = docker("network", "create", *marks, f"{name}_default").stdout.strip()
    ctr = docker("run", "-d", "--name", name, "--network", net, *marks, "marathon-base:bookworm",
                 "sleep", "infinity").stdout.strip()  # fmt: skip
    return ctr, net


def lookalike(docker, tag: str) -> tuple[str, str]:
    """A container and a network labelled like a trial's compose project, of no trial of the tree."""
    return labelled(docker, f"calc-partial__{tag}__env", f"calc-partial__{tag}__env", f"{FOREIGN}=1")


def host_blocks(text: str) -> dict[str, str]:
    """A cluster's ``marathon net`` output by host IP: each block starts ``host NAME/IP: ...``."""
    blocks: dict[str, str] = {}
    ip = ""
    for line in text.splitlines():
        if line.startswith("host "):
            ip = line.split()[1].rstrip(":").rpartition("/")[2]
        if ip:
            blocks[ip] = blocks.get(ip, "") + line + "\n"
    return blocks


def shared_docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return subprocess.run(
        ["docker", *args], env=env, capture_output=True, text=True, check=check, timeout=120
    )


def compose_objects(docker, projects: set[str]) -> list[str]:
    got = []
    for kind in ("ps", "network ls"):
        lines = docker(*kind.split(), "-a" if kind == "ps" else "-q", "--filter", "label=com.docker.compose.project",
                       "--format", '{{.ID}} {{.Label "com.docker.compose.project"}}').stdout.split("\n")  # fmt: skip
        got += [ln for ln in lines if ln.strip() and ln.split()[-1] in projects]
    return got


@pytest.fixture(scope="module")
def cluster(docker_engine):
    """One two-host cluster for this module; the node-loss test, which kills host 2, runs last."""
    if os.geteuid() != 0:
        pytest.skip("a private dockerd needs root")
    with two_hosts(REPO, IMAGES, {"RAY_JOB_STOP_WAIT_TIME_S": "120"}) as th:
        yield th


def run_argv(out: Path, th) -> list[str]:
    return [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(DEMO_TASKS),
            "--tasks", ",".join(TASKS), "--arms", ",".join(ARMS), "--concurrency", "4", "--cluster", th.cluster,
            "--plain", "--agent-timeout-mult", "10", "--verifier-mult", "10"]  # fmt: skip


def runner_env() -> dict[str, str]:
    """The runner host's environment: host 1's engine (no DOCKER_HOST), the repo importable."""
    return {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"} | {"PYTHONPATH": str(REPO)}


FIVE_ARMS = ("plain", "goal", "ssh-goal", "codex-cli", "heartbeat")


@pytest.mark.timeout(3600)
def test_the_five_codex_arms_run_over_both_hosts_and_score_as_on_one(cluster, tmp_path):
    """The real arms (the staged codex binary, LoopX's three modes, the scripted model behind each
    host's gateway) as Ray jobs on both hosts: every pair done once, each solves calc-partial as it
    does on one host (``marathon demo --simple``: reward 1, partial 1), and the fairness audit finds
    the same codex binary, transport, config and image on both engines: the task image built once
    and shipped to host 2."""
    from marathon.commands.demo import DEMO_KEY_VAR, DEMO_MODEL
    from runner.secrets import DECLARED_NON_SECRETS

    th = cluster
    out = tmp_path / "out"
    env = runner_env()
    argv = [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(DEMO_TASKS),
            "--tasks", "calc-partial", "--arms", ",".join(FIVE_ARMS), "--concurrency", "4",
            "--cluster", th.cluster, "--model", DEMO_MODEL, "--ak", f"api_key_var={DEMO_KEY_VAR}",
            "--ae-literal", f"{DEMO_KEY_VAR}={DECLARED_NON_SECRETS[DEMO_KEY_VAR]}", "--plain",
            "--agent-timeout-mult", "10", "--verifier-mult", "10"]  # fmt: skip
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    done = done_jobs(out)
    assert set(done) == {("calc-partial", a) for a in FIVE_ARMS}, r.stdout[-3000:]
    assert {p: len(j) for p, j in done.items() if len(j) != 1} == {}
    hosts = {p: read_host(j[0].parent) for p, j in done.items()}
    assert all(h is not None for h in hosts.values()), hosts
    assert {h.node_ip for h in hosts.values()} == {HEAD_IP, WORKER_IP}, (
        f"both hosts must have worked: {hosts}"
    )

    rep = json.loads(cli("report", str(out), "--format", "json", env=env).stdout)
    for a in FIVE_ARMS:
        cell = rep["cells"]["calc-partial"][a]
        assert (cell["status"], cell["reward"], cell["partial"]) == ("done", 1.0, 1.0), (a, cell)
        assert cell["host"] == hosts[("calc-partial", a)].short()
    au = rep["audit"]
    for fact in ("codex_sha256", "image_digest", "transport"):
        assert all(fact in facts for facts in au["compared"].values()), (fact, au["compared"])
    # One image on both hosts: the runner built the task image once (on host 1), shipped it to host 2
    # through the tree (docker save | docker load, checked by id there), and every trial on either
    # host ran exactly it through harbor's prebuilt path -- the same engine id in every receipt.
    from runner.schedule.task_images import archive_path, read_record

    image = read_record(out, "calc-partial")
    assert image is not None and set(image.hosts) == {n["node_id"] for n in th.nodes()}, image
    assert archive_path(out, image).is_file() and image.not_on == {}
    (ready,) = [e for e in read_events(out) if e["event"] == "image_ready"]
    assert sorted(ready["hosts"]) == sorted(image.hosts.values()) and ready["image_id"] == image.image_id
    receipts = {a: json.loads(next(j[0].glob("*/agent/goal_receipt.json")).read_text())
                for (_t, a), j in done.items()}  # fmt: skip
    assert {r["extra"]["image_id"] for r in receipts.values()} == {image.image_id}
    assert {r["image_digest"] for r in receipts.values()} == {image.content_sha256}
    assert [d for d in au["differences"] if d["fact"] == "image_digest"] == [], au["lines"]
    assert not any("image digest" in line for line in au["lines"]), au["lines"]
    # a LoopX preparation that outlasts its allowance on a loaded machine clamps that trial's budget
    # (the audit then says budget_sec differs, as it should); nothing else may differ across hosts
    assert [d for d in au["differences"] if d["fact"] != "budget_sec"] == [], au["lines"]
    # Each host's gateway (started detached by the first job there) was stopped on its host at the
    # run's end: none is left serving a finished run, and the events say so per host.
    from runner.ops.gateway.process import read_state
    from runner.ops.procs import alive

    states = [read_state(out, n["node_id"]) for n in th.nodes()]
    assert all(st is not None for st in states), "a gateway served on each host"
    assert [st.pid for st in states if alive(st.ident)] == [], "a host's gateway outlived the run"
    from runner.results.ledger import read_ledger

    starts = [g["host"] for g in read_ledger(out).gateways if g["kind"] == "gateway_start"]
    assert sorted(starts) == sorted(n["node_id"] for n in th.nodes()), "one gateway per host, not two"
    stops = [e for e in read_events(out) if e["event"] == "gateway_stop"]
    assert len(stops) == 2 and all(e["result"].startswith("stopped the gateway") for e in stops), stops
    print(f"calc-partial's image {image.tag}: {image.how} in {image.seconds} s, shipped {image.ship_sec}")


PLANTED_ARMS = FIVE_ARMS[:4]  # four at once on 2 + 2 slots: two on each host, necessarily


@pytest.mark.timeout(3600)
def test_a_different_image_planted_on_one_host_is_named_by_the_audit(cluster, tmp_path):
    """The audit still catches images that differ by host: a task naming its own prebuilt image
    (``docker_image``, a tag harbor is given as it is) whose tag holds other bytes on host 2. Four
    arms at once on two slots per host run two on each host; the audit's image-digest line names
    the task and splits the arms exactly by host."""
    from marathon.commands.demo import DEMO_KEY_VAR, DEMO_MODEL
    from runner.secrets import DECLARED_NON_SECRETS

    th, out, env = cluster, tmp_path / "out", runner_env()
    name = f"planted-{os.getpid()}"
    planted = f"marathon-test-{name}:1"
    mine, other = f"marathon-test-{name}:a", f"marathon-test-{name}:b"
    ctx = tmp_path / "ctx"
    shutil.copytree(DEMO_TASKS / "calc-partial" / "environment", ctx)
    task = tmp_path / "tasks" / name
    shutil.copytree(DEMO_TASKS / "calc-partial", task)
    with open(task / "task.toml", "a") as fh:
        fh.write(f'docker_image = "{planted}"\n')  # the last table of the file is [environment]
    try:
        shared_docker("build", "-q", "-t", mine, str(ctx), check=True)
        (ctx / "Dockerfile").write_text((ctx / "Dockerfile").read_text() + "RUN touch /planted-on-host-2\n")
        shared_docker("build", "-q", "-t", other, str(ctx), check=True)
        th.engine2.load_images(other)
        th.engine2.docker("tag", other, planted)
        shared_docker("tag", mine, planted)
        argv = [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(task.parent),
                "--arms", ",".join(PLANTED_ARMS), "--concurrency", "4", "--cluster", th.cluster,
                "--model", DEMO_MODEL, "--ak", f"api_key_var={DEMO_KEY_VAR}",
                "--ae-literal", f"{DEMO_KEY_VAR}={DECLARED_NON_SECRETS[DEMO_KEY_VAR]}", "--plain",
                "--agent-timeout-mult", "10", "--verifier-mult", "10"]  # fmt: skip
        r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    finally:
        shared_docker("image", "rm", planted, mine, other, check=False)  # ours, by exact reference
    done = done_jobs(out)
    assert set(done) == {(name, a) for a in PLANTED_ARMS}, r.stdout[-3000:]
    assert [e for e in read_events(out) if e["event"] == "image_ready"] == []  # harbor ran it as it is
    hosts = {a: read_host(j[0].parent) for (_t, a), j in done.items()}
    by_host: dict[str, set[str]] = {}
    for a, h in hosts.items():
        assert h is not None, hosts
        by_host.setdefault(h.node_ip, set()).add(a)
    assert set(by_host) == {HEAD_IP, WORKER_IP}, by_host
    au = json.loads(cli("report", str(out), "--format", "json", env=env).stdout)["audit"]
    (diff,) = [d for d in au["differences"] if d["fact"] == "image_digest"]
    assert diff["task"] == name, diff
    groups: dict[str, set[str]] = {}
    for a, v in diff["values"].items():
        groups.setdefault(v, set()).add(a)
    assert sorted(map(sorted, groups.values())) == sorted(map(sorted, by_host.values())), au["lines"]
    assert any(line.startswith("arms differ in: image digest") and name in line for line in au["lines"]), au[
        "lines"
    ]


@dataclass
class FixedRun:
    """The tree of a run whose runner was killed (``kill -9``) while its Ray jobs ran, and restarted
    by ``marathon health --fix``: what the kill left running, and the first runner's id."""

    out: Path
    running: dict[str, str]  # submission id -> task/arm, active at the kill
    first_run: str


@pytest.fixture(scope="module")
def fixed_run(cluster, tmp_path_factory) -> FixedRun:
    """One run read by two tests (the re-attachment, then every pair once and the cleanup): ``kill
    -9`` of the runner once every pair's job is out and a trial runs, then ``health --fix``, waited
    for until the restarted runner has ended."""
    from runner.schedule.lock import lock_holder

    th, tmp, env = cluster, tmp_path_factory.mktemp("fixed"), runner_env()
    out = tmp / "out"
    with open(tmp / "runner.log", "wb") as log:
        runner = subprocess.Popen(run_argv(out, th), cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline and runner.poll() is None:
            if len([e for e in read_events(out) if e["event"] == "job_start"]) == 4 and list(
                out.glob("*/*/*/*/*__*")
            ):
                break  # every pair's job is out, and a trial runs
            time.sleep(1)
        assert runner.poll() is None, "the runner ended before it could be killed"
        runner.kill()  # SIGKILL, our own child by its Popen handle
        runner.wait(30)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(30)
    running = {
        j.submission_id: j.metadata["task"] + "/" + j.metadata["arm"]
        for j in Fleet(th.dashboard).ours(out)
        if j.active
    }
    first_run = next(iter(read_events(out)))["run_id"]
    h = cli("health", str(out), "--fix", env=env)
    assert "restarted the runner" in h.stdout, h.stdout + h.stderr

    def restarted_runner_ended() -> bool:
        # its own exit event, not "the lock is free": a restarted runner that finds every job ended
        # takes and frees the lock in seconds, possibly before `health --fix` has returned
        exits = [e for e in read_events(out) if e["event"] == "runner_exit" and e["run_id"] != first_run]
        return bool(exits) and lock_holder(out) is None

    deadline = time.monotonic() + 1500
    while not restarted_runner_ended() and time.monotonic() < deadline:
        time.sleep(1)
    assert restarted_runner_ended(), "the restarted runner did not finish"
    (last,) = [e for e in read_events(out) if e["event"] == "runner_exit" and e["run_id"] != first_run]
    assert (last["done"], last["total"]) == (4, 4), last  # it ended with every pair done
    return FixedRun(out, running, first_run)


@pytest.mark.timeout(5400)  # the shared run (fixed_run) is made in its setup
def test_runner_kill9_then_health_fix_reattaches_without_duplicates(cluster, fixed_run):
    """``kill -9`` of the runner while its Ray jobs run; ``marathon health --fix`` restarts it, and
    the new runner follows the running jobs by their ids: no pair is started a second time."""
    th, out, running = cluster, fixed_run.out, fixed_run.running
    events = list(read_events(out))
    adopted = {f"{e['task']}/{e['arm']}" for e in events if e["event"] == "adopt"}
    # a job running at the kill is re-attached, unless it ended before the new runner looked (a
    # stand-in trial is short): the new runner lists the jobs once and then emits its adopt events
    later = [e for e in events if e["run_id"] != events[0]["run_id"]]
    looked = [e for e in later if e["event"] == "adopt"][:1] or later[-1:]
    looked_at = datetime.fromisoformat(looked[0]["ts"]).timestamp() if looked else 0.0
    ended = {j.submission_id: (j.end_time_ms or 0) / 1000 for j in Fleet(th.dashboard).ours(out)}
    missed = {p for sid, p in running.items() if p not in adopted and not 0 < ended.get(sid, 0) <= looked_at}
    assert missed == set(), f"running at the kill: {running}; re-attached: {adopted}"
    starts = [(e["task"], e["arm"]) for e in events if e["event"] == "job_start"]
    assert len(starts) == len(set(starts)) == 4, f"a pair was started twice: {starts}"
    done = done_jobs(out)
    assert set(done) == {(t, a) for t in TASKS for a in ARMS}
    assert {p: len(j) for p, j in done.items() if len(j) != 1} == {}


@pytest.mark.timeout(5400)  # run alone, the shared run (fixed_run) is made in its setup
def test_two_hosts_run_every_pair_once_and_clean_up(cluster, fixed_run):
    """The killed and restarted run's tree (``fixed_run``): every pair once on a host its job names,
    scored as on one host; ``marathon net`` per host; one ``cleanup --yes`` for both hosts."""
    from runner.ops.docker_pool import our_projects
    from runner.results.tree import voided_root

    out = fixed_run.out
    tag = f"fleet{os.getpid()}"
    th = cluster
    foreign1 = lookalike(shared_docker, tag)
    foreign2 = lookalike(th.engine2.docker, tag)
    leak1: tuple[str, str] = ("", "")
    try:
        env = runner_env()
        assert f"MARATHON_CLUSTER={th.cluster}" in (out / ".driver_env").read_text()

        # every pair done exactly once, each on the host its job recorded
        pairs = {(t, a) for t in TASKS for a in ARMS}
        done = done_jobs(out)
        assert set(done) == pairs
        assert {p: len(j) for p, j in done.items() if len(j) != 1} == {}
        hosts = {p: read_host(j[0].parent) for p, j in done.items()}
        assert all(h is not None for h in hosts.values()), hosts
        nodes = {n["node_id"]: n["node_ip"] for n in th.nodes()}
        assert {h.node_id for h in hosts.values()} == set(nodes), f"both hosts must have worked: {hosts}"
        # the console's hosts panel asks the same head: both Docker hosts alive, two slots each
        from console.feeds import NodesReader

        seen, error = NodesReader(th.cluster).read()
        assert error is None and seen is not None, error
        assert {(n.node_id, n.alive, n.slots) for n in seen if n.slots > 0} == {(n, True, 2.0) for n in nodes}
        for h in hosts.values():  # each job drove its own host's engine
            assert h.node_ip == nodes[h.node_id]
            assert h.docker_host == (
                th.engine2.host if h.node_ip == WORKER_IP else "unix:///var/run/docker.sock"
            )
        starts = [e for e in read_events(out) if e["event"] == "job_start"]
        assert len({e["submission_id"] for e in starts}) == len(starts)

        # the report scores as one host does
        rep = json.loads(cli("report", str(out), "--format", "json", env=env).stdout)
        for (t, a), (reward, partial) in EXPECTED.items():
            cell = rep["cells"][t][a]
            assert cell["status"] == "done" and cell["reward"] == reward, (t, a, cell)
            if partial is not None:
                assert cell["partial"] == partial, (t, a, cell)
            assert cell["host"] == hosts[(t, a)].short()
        status = cli("status", str(out), env=env).stdout
        assert "host vm" in status or "host " in status, status

        # a trial's environment each engine still holds (its harbor killed before compose down)
        projects = our_projects(out) | our_projects(voided_root(out))
        p1, p2 = sorted(projects)[:2]
        leak1 = labelled(shared_docker, p1, f"{p1}-leak1")
        labelled(th.engine2.docker, p2, f"{p2}-leak2")  # engine 2 goes with its namespace

        # `marathon net OUT` asks each host about its own engine: one block per host
        t0 = time.monotonic()
        n = cli("net", str(out), env=env, timeout=600)
        took_net = time.monotonic() - t0
        assert n.returncode in (0, 1), n.stdout + n.stderr
        blocks = host_blocks(n.stdout)
        assert set(blocks) == {HEAD_IP, WORKER_IP}, n.stdout
        for i, ip, other in ((1, HEAD_IP, WORKER_IP), (2, WORKER_IP, HEAD_IP)):
            leak_net = f"{(p1, p2)[i - 1]}-leak{i}_default"
            assert any(ln.split()[:1] == ["ours"] and leak_net in ln for ln in blocks[ip].splitlines()), (
                n.stdout
            )
            assert leak_net not in blocks[other], n.stdout
            assert f"calc-partial__{tag}__env_default" in blocks[ip]  # the look-alike: foreign, there
            assert "foreign" in blocks[ip].splitlines()[0] and "cap" in blocks[ip].splitlines()[0]

        # ONE `marathon cleanup OUT --yes` from the runner host: the plan names each host and its
        # objects, each host removes its own; nothing of the run is left, the look-alikes survive
        t0 = time.monotonic()
        c = cli("cleanup", str(out), "--yes", env=env, timeout=600)
        took_cleanup = time.monotonic() - t0
        assert c.returncode == 0, c.stdout + c.stderr
        plan = c.stdout.split("\ndone:")[0]
        for i, ip in ((1, HEAD_IP), (2, WORKER_IP)):
            assert f"/{ip} (whole tree): " in plan, (
                plan
            )  # "cleanup plan for OUT on NAME/IP (whole tree): ..."
            lines = [ln for ln in plan.splitlines() if f"{(p1, p2)[i - 1]}-leak{i}" in ln]
            assert lines and all(ln.split()[0].endswith(f"/{ip}") for ln in lines), plan
        assert "NOT listed" not in plan and "down" not in plan, plan
        assert compose_objects(shared_docker, projects) == []
        assert compose_objects(th.engine2.docker, projects) == []
        for docker, (ctr, net) in ((shared_docker, foreign1), (th.engine2.docker, foreign2)):
            assert docker("inspect", "-f", "{{.State.Running}}", ctr).stdout.strip() == "true"
            assert docker("network", "inspect", net, check=False).returncode == 0
        print(f"two hosts: marathon net {took_net:.1f} s, marathon cleanup --yes {took_cleanup:.1f} s "
              "(one leaked environment on each)")  # fmt: skip
    finally:
        for ctr, net in (foreign1, leak1):
            if ctr:
                shared_docker("rm", "-f", ctr, check=False)
                shared_docker("network", "rm", net, check=False)


@pytest.mark.timeout(3600)
def test_kill_stops_each_hosts_trials_from_a_task_on_that_host(cluster, tmp_path):
    """The runner dies (``kill -9``) while trials run on both hosts; ``marathon kill OUT`` plans on
    each host -- the harbor process its job registered there, the tree's objects on its engine --
    and the console's Kill key (the same ``runner.schedule.fleet.hostops`` plan, shown, then acted
    on) has each host stop its own harbor and remove its own objects: nothing of the run is left
    alive or on either engine, and a foreign look-alike on each survives."""
    from runner.ops.docker_pool import our_projects
    from runner.ops.procs import ROLE_RUNNER, Registry, alive

    th, out, env = cluster, tmp_path / "out", runner_env()
    tag = f"kill{os.getpid()}"
    tasks = slow_tasks(tmp_path / "tasks", tag)
    foreign1 = lookalike(shared_docker, tag)
    foreign2 = lookalike(th.engine2.docker, tag)
    nodes = {n["node_id"]: n["node_ip"] for n in th.nodes()}
    # 4 pairs on 2 + 2 slots: a harbor on each host, in a verifier that takes ten minutes
    argv = [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(tasks), "--arms", "oracle,nop",
            "--concurrency", "4", "--cluster", th.cluster, "--plain"]  # fmt: skip
    with open(tmp_path / "runner.log", "wb") as log:
        runner = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 1200
        harbors: dict[str, list] = {}
        while time.monotonic() < deadline and runner.poll() is None:
            harbors = {}
            for e in Registry(out).entries():
                trial_dirs = list(out.glob(f"{e.task}/{e.arm}/*/{e.arm}/*__*"))
                if e.role == "harbor" and e.node in nodes and alive(e.ident) and trial_dirs:
                    harbors.setdefault(e.node, []).append(e)
            if set(harbors) == set(nodes):
                break  # a harbor in its trial on each host
            time.sleep(1)
        assert set(harbors) == set(nodes), f"no trial running on each host: {harbors}"
        runner.kill()  # SIGKILL, our own child by its Popen handle: its Ray jobs run on
        runner.wait(30)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(30)
    try:
        dry = cli("kill", str(out), "--json", env=env, timeout=900)
        assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
        plan = json.loads(dry.stdout)
        assert plan["here"]["stop_plan"]["targets"] == []  # the runner is dead: nothing here
        by_ip = {h["host"].rpartition("/")[2]: h for h in plan["hosts"]}
        assert set(by_ip) == set(nodes.values()), plan["hosts"]
        for node, entries in harbors.items():
            targets = by_ip[nodes[node]]["plan"]["stop_plan"]["targets"]
            want = {e.pid for e in entries if alive(e.ident)}
            assert want <= {t["pid"] for t in targets if t["why"].startswith("registered harbor")}, (
                nodes[node],
                want,
                targets,
            )
        assert all(alive(e.ident) for es in harbors.values() for e in es), "the dry run signalled"

        # the console's Kill key on the same tree: the same host-by-host plan, then acted on exactly
        k = subprocess.run([sys.executable, "-c", CONSOLE_KILL, str(out)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
        assert k.returncode == 0, k.stdout[-3000:] + k.stderr[-3000:]
        shown, _, acted = k.stdout.partition("\n--- act ---\n")
        for ip in nodes.values():
            assert f"/{ip}:" in shown, shown  # each host's own plan, led by its host
        assert shown.count("registered harbor") >= len(nodes), shown
        assert acted.startswith("ok True"), acted
        assert [e for es in harbors.values() for e in es if alive(e.ident)] == []
        left = [e for e in Registry(out).entries() if e.role != ROLE_RUNNER and alive(e.ident)]
        assert left == [], left
        projects = our_projects(out)
        assert projects, "the run's trials have compose projects"
        assert compose_objects(shared_docker, projects) == []
        assert compose_objects(th.engine2.docker, projects) == []
        deadline = time.monotonic() + 300
        while [j for j in Fleet(th.dashboard).ours(out) if j.active] and time.monotonic() < deadline:
            time.sleep(2)  # each job ends once its harbor has: cleanup on its host, then exit
        assert [j.submission_id for j in Fleet(th.dashboard).ours(out) if j.active] == []
        for docker, (ctr, net) in ((shared_docker, foreign1), (th.engine2.docker, foreign2)):
            assert docker("inspect", "-f", "{{.State.Running}}", ctr).stdout.strip() == "true"
            assert docker("network", "inspect", net, check=False).returncode == 0
    finally:
        for docker, (ctr, net) in ((shared_docker, foreign1), (th.engine2.docker, foreign2)):
            docker("rm", "-f", ctr, check=False)
            docker("network", "rm", net, check=False)
        # the task images the run built on host 1 (its tasks are this test's own; engine 2 goes with
        # its namespace), by exact reference
        from runner.schedule.task_images import read_record

        refs = [f"marathon-prebuild-{t.name}-main" for t in tasks.iterdir()]
        refs += [img.tag for t in tasks.iterdir() if (img := read_record(out, t.name)) is not None]
        shared_docker("image", "rm", *refs, check=False)


#: what the console does on its Kill key (console.actions), printed: the dialog's plan, then the act
CONSOLE_KILL = """
import sys
from pathlib import Path
from console import actions
planned = actions.plan_action(actions.KILL, Path(sys.argv[1]))
assert planned.possible, planned.text
print(planned.text)
ok, text = actions.act(planned)
print("\\n--- act ---")
print("ok", ok)
print(text)
sys.exit(0 if ok else 1)
"""


def slow_tasks(root: Path, tag: str) -> Path:
    """Two tasks whose verifier sleeps ten minutes (oracle's solution does nothing)."""
    for name in ("slow-a", "slow-b"):
        write_task(root, f"{name}-{tag}", f"fleet-kill/{name}-{tag}",
                   "#!/bin/bash\nsleep 600\necho 1 > /logs/verifier/reward.txt\n", base=IMAGES[0],
                   verifier_sec=900.0, solve_sh="#!/bin/bash\ntrue\n")  # fmt: skip
    return root


def lost_tasks(root: Path, tag: str) -> Path:
    """Two tasks whose verifier takes 20 s (oracle's solution does nothing): a trial runs long
    enough for a kill at its start to land inside it."""
    for name in ("lost-a", "lost-b"):
        write_task(root, f"{name}-{tag}", f"fleet-lost/{name}-{tag}",
                   "#!/bin/bash\nsleep 20\necho 1 > /logs/verifier/reward.txt\n", base=IMAGES[0],
                   verifier_sec=300.0, solve_sh="#!/bin/bash\ntrue\n")  # fmt: skip
    return root


@pytest.mark.timeout(1800)
def test_stage_runs_on_every_host_into_its_own_cache(cluster):
    """``marathon stage codex --cluster`` runs the stager in a task pinned to each Docker host:
    every host answers with its staged codex, checked there (the binary's own ``--version``)."""
    from agents.staging import DEFAULT_CODEX_VERSION

    r = cli("stage", "codex", "--cluster", cluster.cluster, "--json", env=runner_env(), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert sorted(h["host"].rpartition("/")[2] for h in got) == sorted((HEAD_IP, WORKER_IP)), got
    for h in got:
        assert h["up"] and not h["error"], h
        assert h["result"]["version"] == DEFAULT_CODEX_VERSION, h
        assert h["result"]["reported_version"] == f"codex-cli {DEFAULT_CODEX_VERSION}", h


@pytest.mark.timeout(1800)
def test_verify_envs_checks_every_host_on_its_own_engine(cluster):
    """``marathon verify-envs --cluster`` runs every check of an arm in a task pinned to each Docker
    host, against that host's staged parts and its own engine: each host answers for each arm."""
    for what in ("codex", "loopx"):  # each host's own cache (cheap when the stage test ran first)
        st = cli("stage", what, "--cluster", cluster.cluster, env=runner_env(), timeout=900)
        assert st.returncode == 0, st.stdout[-3000:] + st.stderr[-3000:]
    r = cli("verify-envs", "--cluster", cluster.cluster, "--arms", "plain,ssh-goal", "--json",
            env=runner_env(), timeout=1200)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    by_host: dict[str, list[dict]] = {}
    for ln in lines:
        by_host.setdefault(ln["host"].rpartition("/")[2], []).append(ln)
    assert sorted(by_host) == sorted((HEAD_IP, WORKER_IP)), lines
    for ip, checks in by_host.items():
        assert all(c["status"] == "ok" for c in checks), (ip, checks)
        done = {(c["arm"], c["check"]) for c in checks}
        assert {
            ("plain", "app-server"),
            ("ssh-goal", "app-server"),
            ("ssh-goal", "gate:skills/list"),
        } <= done, ip


@pytest.mark.timeout(1800)
def test_prebuild_builds_on_every_hosts_own_engine(cluster):
    """``marathon prebuild --cluster`` builds the task image on each Docker host's own engine (a
    task pinned to it): afterwards each engine holds the image, built there."""
    th = cluster
    r = cli("prebuild", "--tasks-dir", str(DEMO_TASKS), "--tasks", "calc-partial", "--cluster", th.cluster,
            "--json", env=runner_env(), timeout=1500)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert sorted(h["host"].rpartition("/")[2] for h in got) == sorted((HEAD_IP, WORKER_IP)), got
    for h in got:
        assert h["up"] and not h["error"], h
        assert [(b["task"], b["ok"]) for b in h["result"]["results"]] == [("calc-partial", True)], h
        assert h["result"]["results"][0]["steps"] > 0, h  # a build ran there (cached or not)
    images = {h["result"]["results"][0]["image"] for h in got}
    assert len(images) == 1, images  # one name on every host
    (image,) = images
    for docker in (shared_docker, th.engine2.docker):  # each engine holds it now
        assert docker("image", "inspect", image, check=False).returncode == 0, image


@pytest.mark.timeout(3600)
def test_node_loss_voids_and_reruns_on_the_first_host(cluster, tmp_path):
    """``kill -9`` of host 2's raylet while a trial runs there: that attempt is voided with "node ...
    lost at ..." as its reason, and its pair is done once, on host 1. The trials' verifier takes
    20 s (``lost_tasks``): with the demo's tasks a host-2 trial of 2 s could end in the second the
    kill takes to land (the job sees its raylet gone within ``RAYLET_POLL_SEC``), and a trial that
    ended is rightly scored, not voided: the test failed twice of three so on 2026-12-07."""
    from runner.results.tree import VOID_README, iter_job_dirs, voided_root

    th, out = cluster, tmp_path / "out"
    tasks = lost_tasks(tmp_path / "tasks", f"lost{os.getpid()}")
    names = sorted(t.name for t in tasks.iterdir())
    argv = [sys.executable, "-m", "marathon.cli", "run", str(out), "--tasks-dir", str(tasks), "--arms", ",".join(ARMS),
            "--concurrency", "4", "--cluster", th.cluster, "--plain"]  # fmt: skip
    with open(tmp_path / "runner.log", "wb") as log:
        runner = subprocess.Popen(argv, cwd=REPO, env=runner_env(), stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 1200
        victim = None
        while victim is None and time.monotonic() < deadline and runner.poll() is None:
            for p in out.glob("*/*/*/host.json"):
                h = read_host(p.parent)
                if (
                    h is not None
                    and h.node_ip == WORKER_IP
                    and any(p.parent.glob(f"{p.parent.parent.name}/*__*"))
                ):
                    victim = p.parent  # a trial dir exists: harbor is in the trial on host 2
                    break
            time.sleep(1)
        assert victim is not None, "no trial started on host 2"
        assert not list(victim.glob("*/*__*/result.json")), "the trial on host 2 ended before the kill"
        raylet = th.worker.raylet()
        raylet.kill()  # SIGKILL, by the psutil handle of the raylet our `ray start` owns
        assert runner.wait(1800) == 0, (tmp_path / "runner.log").read_text()[-3000:]
    finally:
        if runner.poll() is None:
            runner.terminate()
            runner.wait(300)
    done = done_jobs(out)
    assert set(done) == {(t, a) for t in names for a in ARMS}
    assert {p: len(j) for p, j in done.items() if len(j) != 1} == {}
    voided = [job.parent for *_, job in iter_job_dirs(voided_root(out))]
    lost = [v for v in voided if "lost at" in (v / VOID_README).read_text()]
    assert lost, f"no attempt voided as a lost node: {voided}"
    # the lost node's harbor was ended by its own job, not left to finish a voided trial (Ray leaves
    # an entrypoint running when its raylet dies)
    finished = [r for v in lost for r in v.glob("*/*__*/result.json")]
    assert finished == [], f"a voided attempt's trial ran on to its end: {finished}"
    for v in lost:
        h = read_host(v)
        assert h is not None and h.node_ip == WORKER_IP, v
        task, arm = v.parent.parent.name, v.parent.name
        again = read_host(done[(task, arm)][0].parent)
        assert again is not None and again.node_ip != WORKER_IP, f"{task}/{arm} rerun on host 2?"
    # host 2 is down now: net and cleanup say so and fail, host 1 is still asked
    n = cli("net", str(out), env=runner_env(), timeout=600)
    assert n.returncode == 1, n.stdout + n.stderr
    assert f"/{WORKER_IP}: down (not probed)" in n.stdout and f"/{HEAD_IP}: ours" in n.stdout, n.stdout
    c = cli("cleanup", str(out), env=runner_env(), timeout=600)
    assert c.returncode == 1, c.stdout + c.stderr
    assert f"/{WORKER_IP} down: its objects were not listed" in c.stdout, c.stdout
    assert f"/{HEAD_IP} (whole tree): " in c.stdout, c.stdout
