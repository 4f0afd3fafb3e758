"""`marathon kill` stops exactly the run's processes: real processes, real signals, no mocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from safety_support import REPO, marathon

from runner.procs import Registry, act_stop, plan_stop, protected_pids, registry_path

pytestmark = pytest.mark.docker  # `kill --yes` ends with a Docker cleanup of the run


@pytest.fixture(autouse=True)
def _engine(docker_engine):
    """`kill --yes` exits 0 only when its Docker cleanup succeeded too."""


class Spawner:
    """Starts processes for a test; at teardown kills what is left, by the PIDs/groups it made."""

    def __init__(self) -> None:
        self.started: list[tuple[subprocess.Popen, bool]] = []

    def __call__(self, argv: list[str], *, group: bool = False, **kw) -> subprocess.Popen:
        if group:
            kw.setdefault("process_group", 0)
        else:
            kw.setdefault("start_new_session", True)
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        self.started.append((p, group or kw.get("start_new_session", False)))
        return p

    def teardown(self) -> None:
        for p, leads_group in self.started:
            if p.poll() is None or leads_group:
                # not yet reaped, so neither the PID nor the group id can have been reused
                try:
                    os.killpg(p.pid, signal.SIGKILL) if leads_group else p.kill()
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def spawn():
    s = Spawner()
    yield s
    s.teardown()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tree(spawn, out: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """bash -> (sleep, bash -> sleep): a child and a grandchild, in its own process group."""
    top = spawn(
        ["bash", "-c", "sleep 600 & bash -c 'sleep 600 & wait' & wait", "harbor-tree", str(out)], group=True
    )
    deadline = time.monotonic() + 10
    while True:
        kids = psutil.Process(top.pid).children(recursive=True)
        if len([k for k in kids if k.name() == "sleep"]) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(kids) == 3, kids
    return top, [psutil.Process(top.pid), *kids]


def _rewrite_create_time(out: Path, pid: int, delta: float) -> None:
    """Make the registry say PID ``pid`` started at another time: what a recycled PID looks like."""
    path = registry_path(out)
    data = json.loads(path.read_text())
    for e in data["processes"]:
        if e["pid"] == pid:
            e["create_time"] -= delta
    path.write_text(json.dumps(data))


def test_kill_stops_the_tree_and_spares_decoys_shell_and_parent(spawn, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    reg = Registry(out)
    top, tree = _tree(spawn, out)
    reg.register(top.pid, "harbor", top.args, task="calc", arm="codex")

    decoys = [
        spawn(["sleep", "600"]),  # same argv as tree members
        spawn(
            ["bash", "-c", "sleep 600; : harbor run marathon kill", str(out)]
        ),  # argv holds the target strings
        spawn(list(top.args)),  # exactly the registered argv, but not a registered PID
    ]
    recycled = spawn(["sleep", "601"])
    reg.register(recycled.pid, "harbor", recycled.args)
    _rewrite_create_time(out, recycled.pid, 1000.0)

    go, result, after = tmp_path / "go", tmp_path / "kill.json", tmp_path / "after"
    shell = spawn(
        ["bash", "-c",
         f'while [ ! -e "{go}" ]; do sleep 0.05; done; '
         f'"{sys.executable}" -m runner.cli kill "{out}" --yes --json --grace 5 > "{result}"; '
         f'echo "$?" > "{after}"', "marathon-kill-shell", str(out)],
        cwd=REPO,
    )  # fmt: skip
    # the caller's own shell and its parent (this pytest process) are registered too: never signalled
    reg.register(shell.pid, "runner", shell.args)
    reg.register(os.getpid(), "runner", psutil.Process().cmdline())
    go.touch()
    assert shell.wait(120) == 0
    assert after.read_text().strip() == "0", result.read_text()[-3000:]

    res = json.loads(result.read_text())
    planned = {t["pid"] for t in res["stop_plan"]["targets"]}
    assert planned == {p.pid for p in tree}
    skipped = {s["pid"]: s["why"] for s in res["stop_plan"]["skipped"]}
    assert skipped[shell.pid].startswith("protected") and skipped[os.getpid()].startswith("protected")
    assert "PID reused" in skipped[recycled.pid]
    assert res["stop_report"]["signalled"][0] == {"pid": top.pid, "signal": "SIGTERM", "how": "group"}
    assert not res["stop_report"]["still_alive"]

    assert top.wait(10) == -signal.SIGTERM
    assert not any(_alive(p) for p in tree), "the whole tree, grandchild included, is stopped"
    assert all(d.poll() is None for d in decoys), "decoys survive"
    assert recycled.poll() is None, "a recycled PID is never signalled"


def test_never_signals_a_group_holding_the_caller(spawn, tmp_path):
    """A registered group leader whose group also holds the kill command itself is signalled
    alone, never by group -- killpg would have killed the caller."""
    out = tmp_path / "out"
    out.mkdir()
    target = spawn(["sleep", "600"], group=True)
    Registry(out).register(target.pid, "harbor", target.args)
    r = subprocess.run(
        [sys.executable, "-m", "runner.cli", "kill", str(out), "--yes", "--json", "--grace", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=120, process_group=target.pid,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["stop_report"]["signalled"] == [{"pid": target.pid, "signal": "SIGTERM", "how": "process"}]
    assert target.wait(10) == -signal.SIGTERM


def test_term_ignored_escalates_to_kill(spawn, tmp_path):
    out = tmp_path / "out"
    top = spawn(["bash", "-c", "trap '' TERM; sleep 600 & wait"], group=True)
    time.sleep(0.3)
    members = [psutil.Process(top.pid), *psutil.Process(top.pid).children(recursive=True)]
    Registry(out).register(top.pid, "harbor", top.args)
    plan = plan_stop(out)
    assert {t.pid for t in plan.targets} == {p.pid for p in members}
    report = act_stop(plan, grace_sec=1)
    sigs = [(s.pid, s.signal, s.how) for s in report.signalled]
    assert sigs == [(top.pid, "SIGTERM", "group"), (top.pid, "SIGKILL", "group")]
    assert not report.still_alive and set(report.exited) == {p.pid for p in members}
    assert top.wait(10) == -signal.SIGKILL


def test_really_recycled_pid_is_not_signalled(spawn, tmp_path):
    """A registered PID that exited and was handed to a new process (via ns_last_pid) is skipped."""
    ns_last_pid = Path("/proc/sys/kernel/ns_last_pid")
    if not os.access(ns_last_pid, os.W_OK):
        pytest.skip("cannot steer PID allocation here (ns_last_pid not writable)")
    out = tmp_path / "out"
    reg = Registry(out)
    reused = None
    for _ in range(100):
        first = spawn(["sleep", "600"])
        reg.register(first.pid, "harbor", first.args)
        time.sleep(0.05)  # create times tick in 1/100 s: a reuse inside one tick is indistinguishable
        first.kill()
        first.wait()
        try:
            ns_last_pid.write_text(str(first.pid - 1))
        except OSError:
            pytest.skip("cannot steer PID allocation here")
        second = spawn(["sleep", "602"])
        if second.pid == first.pid:
            reused = second
            break
        reg.unregister(first.pid)
    if reused is None:
        pytest.skip("another process took the PID every time (busy machine)")
    (entry,) = [e for e in reg.entries() if e.pid == reused.pid]
    assert entry.create_time != psutil.Process(reused.pid).create_time()
    plan = plan_stop(out)
    assert reused.pid not in {t.pid for t in plan.targets}
    assert any(s.pid == reused.pid and "PID reused" in s.why for s in plan.skipped)
    r = marathon("kill", str(out), "--yes")
    assert r.returncode == 0, r.stderr
    assert reused.poll() is None


def test_expected_argv_matches_whole_lists_only(spawn, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    want = ["sleep", "603"]
    exact = spawn(want)
    longer = spawn(["sleep", "603", "604"])
    joined = spawn(["bash", "-c", "sleep 600 # sleep 603", "sleep 603"])  # "sleep 603" only as text
    r = marathon("kill", str(out), "--argv", json.dumps(want), "--yes", "--json", "--grace", "5")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [t["pid"] for t in res["stop_plan"]["targets"]] == [exact.pid]
    assert exact.wait(10) == -signal.SIGTERM
    assert longer.poll() is None and joined.poll() is None


def test_plan_without_yes_changes_nothing(spawn, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    top = spawn(["sleep", "600"], group=True)
    Registry(out).register(top.pid, "harbor", top.args, task="calc", arm="codex")
    r = marathon("kill", str(out))
    assert r.returncode == 0, r.stderr
    assert f"pid {top.pid:>7}" in r.stdout and '["sleep", "600"]' in r.stdout and "dry run" in r.stdout
    time.sleep(0.3)
    assert top.poll() is None


def test_protected_set_is_self_and_ancestors():
    prot = protected_pids()
    me = psutil.Process()
    assert prot == {me.pid, *(p.pid for p in me.parents())}
    assert 1 in prot or not psutil.pid_exists(1)


def test_registry_roundtrip_and_runner_entry(spawn, tmp_path):
    out = tmp_path / "out"
    reg = Registry(out)
    runner = spawn(["sleep", "600"])
    e = reg.register(runner.pid, "runner", runner.args)
    assert reg.runner_entry() == e
    runner.kill()
    runner.wait()
    assert reg.runner_entry() is None  # exited: no live runner, whatever the file says
    assert [x.pid for x in reg.prune()] == [runner.pid] and reg.entries() == []


@pytest.mark.slow
def test_kill_a_real_harbor_run_leaves_nothing(spawn, tmp_path):
    """A registered `harbor run` mid-trial: `marathon kill --yes` stops it and its compose project
    (containers and network) is gone afterwards, whether harbor's own `compose down` ran or not."""
    import shutil

    import docker

    from runner.dockerapi import COMPOSE_PROJECT
    from runner.tree import compose_project, iter_job_dirs, iter_trial_dirs

    task = tmp_path / "tasks" / "sleepy"
    shutil.copytree(REPO / "runner/demo/tasks/calc-partial", task)
    solve = task / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace("set -e\n", "set -e\nsleep 300\n", 1))
    out = tmp_path / "out"
    jobs = out / "sleepy" / "oracle" / "2026-01-01__00-00-00"
    harbor = spawn(
        [str(REPO / ".venv/bin/harbor"), "run", "-p", str(task), "-a", "oracle", "-o", str(jobs),
         "--job-name", "oracle", "-y"],
        group=True, cwd=REPO, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip
    Registry(out).register(harbor.pid, "harbor", harbor.args, task="sleepy", arm="oracle")
    client = docker.from_env()
    project = None
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and harbor.poll() is None:
            trials = [t.name for *_, job in iter_job_dirs(out) for t in iter_trial_dirs(job)]
            if trials:
                project = compose_project(trials[0])
                flt = {"label": f"{COMPOSE_PROJECT}={project}", "status": "running"}
                if client.containers.list(filters=flt):
                    break
            time.sleep(0.5)
        assert project and harbor.poll() is None, "harbor never got its trial container running"
        r = marathon("kill", str(out), "--yes", "--json", "--grace", "30", timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        res = json.loads(r.stdout)
        assert harbor.pid in {t["pid"] for t in res["stop_plan"]["targets"]}
        assert harbor.wait(30) is not None
        flt = {"label": f"{COMPOSE_PROJECT}={project}"}
        assert client.containers.list(all=True, filters=flt) == []
        assert client.networks.list(filters=flt) == []
        assert client.images.list(filters=flt) == []
    finally:
        if project:
            flt = {"label": f"{COMPOSE_PROJECT}={project}"}
            for c in client.containers.list(all=True, filters=flt):
                if c.labels.get(COMPOSE_PROJECT) == project:
                    c.remove(force=True, v=True)
            for n in client.networks.list(filters=flt):
                if (n.attrs.get("Labels") or {}).get(COMPOSE_PROJECT) == project:
                    n.remove()
            try:
                client.images.remove(f"{project}-main")  # exact reference; harbor's --rmi local may have run
            except docker.errors.APIError:
                pass


def test_the_runner_is_signalled_first(spawn, tmp_path):
    """So it starts nothing new while its harbor processes are being stopped."""
    out = tmp_path / "out"
    harbor = spawn(["sleep", "600"], group=True)  # started first: the lower PID (barring wrap-around)
    runner = spawn(["sleep", "601"], group=True)
    reg = Registry(out)
    reg.register(harbor.pid, "harbor", harbor.args)
    reg.register(runner.pid, "runner", runner.args)
    plan = plan_stop(out)
    assert [t.pid for t in plan.targets] == [runner.pid, harbor.pid]
    report = act_stop(plan, grace_sec=5)
    assert [s.pid for s in report.signalled] == [runner.pid, harbor.pid]
    assert runner.wait(10) == -signal.SIGTERM and harbor.wait(10) == -signal.SIGTERM


def test_by_group_false_signals_only_the_planned_process(spawn, tmp_path):
    """The console's "stop the runner only": the runner's group mates are not signalled."""
    out = tmp_path / "out"
    runner = spawn(["bash", "-c", "sleep 600 & wait"], group=True)
    time.sleep(0.3)
    (mate,) = psutil.Process(runner.pid).children()
    Registry(out).register(runner.pid, "runner", runner.args)
    plan = plan_stop(out)
    plan.targets = [t for t in plan.targets if t.pid == runner.pid]
    report = act_stop(plan, grace_sec=5, by_group=False)
    assert [(s.pid, s.how) for s in report.signalled] == [(runner.pid, "process")]
    assert runner.wait(10) == -signal.SIGTERM
    assert _alive(mate)
    mate.kill()  # the test's own leftover, by the psutil handle (PID + create time)
