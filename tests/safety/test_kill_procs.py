"""`marathon kill` stops exactly the run's processes: real processes, real signals, no mocks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from safety_support import REPO, marathon, need

from runner.ops.procs import (
    ProcIdentity,
    Registry,
    act_stop,
    alive,
    identity_of,
    parse_stat,
    plan_stop,
    protected_pids,
    registry_path,
)
from runner.schedule import claims
from runner.schedule.lock import Holder, read_holder

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


def _sleeping_children(pid: int, count: int = 1, within: float = 30.0) -> list[psutil.Process]:
    """The ``count`` children of ``pid`` once each runs ``sleep`` (exec done: a child between fork
    and exec is a copy of bash), all of them; a timeout raises, saying what there was."""
    deadline = time.monotonic() + within
    while True:
        kids = psutil.Process(pid).children(recursive=True)
        names = []
        for k in kids:
            try:
                names.append(k.name())
            except psutil.Error:
                names.append(None)
        if names.count("sleep") == count and len(kids) == count:
            return kids
        if time.monotonic() > deadline:
            raise AssertionError(f"the children of {pid} never became {count} sleeps: {names}")
        time.sleep(0.05)


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


def _rewrite_entry(out: Path, pid: int, **changes) -> None:
    """Edit PID ``pid``'s registry record (start ticks, create time ...) in place."""
    path = registry_path(out)
    data = json.loads(path.read_text())
    for e in data["processes"]:
        if e["pid"] == pid:
            e.update({k: (v(e[k]) if callable(v) else v) for k, v in changes.items()})
    path.write_text(json.dumps(data))


def _ticks_and_boot(pid: int) -> tuple[int, str]:
    """Field 22 of /proc/<pid>/stat and the boot id, read here independently of runner.ops.procs
    (the test's processes have comms without spaces)."""
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return int(fields[21]), Path("/proc/sys/kernel/random/boot_id").read_text().strip()


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
    _rewrite_entry(out, recycled.pid, start_ticks=lambda t: t - 100_000)  # what a recycled PID looks like

    go, result, after = tmp_path / "go", tmp_path / "kill.json", tmp_path / "after"
    shell = spawn(
        ["bash", "-c",
         f'while [ ! -e "{go}" ]; do sleep 0.05; done; '
         f'"{sys.executable}" -m marathon.cli kill "{out}" --yes --json --grace 5 > "{result}"; '
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
        [sys.executable, "-m", "marathon.cli", "kill", str(out), "--yes", "--json", "--grace", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=120, process_group=target.pid,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["stop_report"]["signalled"] == [{"pid": target.pid, "signal": "SIGTERM", "how": "process"}]
    assert target.wait(10) == -signal.SIGTERM


def test_term_ignored_escalates_to_kill(spawn, tmp_path):
    out = tmp_path / "out"
    top = spawn(["bash", "-c", "trap '' TERM; sleep 600 & wait"], group=True)
    members = [psutil.Process(top.pid), *_sleeping_children(top.pid)]
    Registry(out).register(top.pid, "harbor", top.args)
    plan = plan_stop(out)
    assert {t.pid for t in plan.targets} == {p.pid for p in members}
    report = act_stop(plan, grace_sec=1)
    sigs = [(s.pid, s.signal, s.how) for s in report.signalled]
    assert sigs == [(top.pid, "SIGTERM", "group"), (top.pid, "SIGKILL", "group")]
    assert not report.still_alive and set(report.exited) == {p.pid for p in members}
    assert top.wait(10) == -signal.SIGKILL


def test_really_recycled_pid_is_not_signalled(spawn, tmp_path):
    """A registered PID that exited and was handed to a new process (via ns_last_pid) is skipped,
    and the old process's lock/claim records do not make the new one alive. Under CI it must run."""
    ns_last_pid = Path("/proc/sys/kernel/ns_last_pid")
    need(os.access(ns_last_pid, os.W_OK), "cannot steer PID allocation here (ns_last_pid not writable)")
    out = tmp_path / "out"
    reg = Registry(out)
    reused = first_ident = None
    for _ in range(200):
        first = spawn(["sleep", "600"])
        reg.register(first.pid, "harbor", first.args)
        first_ident = identity_of(first.pid)
        first.kill()
        first.wait()
        try:
            ns_last_pid.write_text(str(first.pid - 1))
        except OSError as exc:
            need(False, f"cannot steer PID allocation here: {exc}")
        second = spawn(["sleep", "602"])
        second_ident = identity_of(second.pid)
        # same PID, and started in a later clock tick (a reuse inside one tick is indistinguishable)
        if second.pid == first.pid and second_ident and second_ident.start_ticks != first_ident.start_ticks:
            reused = second
            break
        reg.unregister(first.pid)
    need(reused is not None, "another process took the PID every time (busy machine)")
    (entry,) = [e for e in reg.entries() if e.pid == reused.pid]
    assert entry.ident == first_ident and not alive(entry.ident) and alive(identity_of(reused.pid))
    plan = plan_stop(out)
    assert reused.pid not in {t.pid for t in plan.targets}
    assert any(s.pid == reused.pid and "PID reused" in s.why for s in plan.skipped)
    # the same rule for a lock/claim holder and a claimed job recorded for the first process
    holder = Holder(
        reused.pid, 0.0, socket.gethostname(), "", "", first_ident.start_ticks, first_ident.boot_id
    )
    job = claims.JobRef(reused.pid, 0.0, "s", first_ident.start_ticks, first_ident.boot_id)
    assert not holder.is_live() and not job.is_live(socket.gethostname())
    r = marathon("kill", str(out), "--yes")
    assert r.returncode == 0, r.stderr
    assert reused.poll() is None


def test_a_record_made_before_a_clock_step_still_matches(spawn, tmp_path):
    """Identity is PID + start ticks since boot + boot id: a wall-clock step between recording and
    checking changes nothing. The record is built from the tick value directly, with a wall-clock
    create time an hour off (what a step would make psutil report); the process is still found."""
    out = tmp_path / "out"
    out.mkdir()
    target = spawn(["sleep", "600"], group=True)
    ticks, boot = _ticks_and_boot(target.pid)
    stepped = time.time() - 3600.0
    registry_path(out).parent.mkdir(parents=True, exist_ok=True)
    registry_path(out).write_text(json.dumps({"processes": [
        {"pid": target.pid, "create_time": stepped, "role": "harbor", "argv": target.args,
         "start_ticks": ticks, "boot_id": boot},
    ]}))  # fmt: skip
    (entry,) = Registry(out).entries()
    assert entry.is_live()
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"pid": target.pid, "create_time": stepped, "host": socket.gethostname(),
                                "start_ticks": ticks, "boot_id": boot}))  # fmt: skip
    assert read_holder(lock).is_live()
    assert claims.JobRef(target.pid, stepped, "s", ticks, boot).is_live(socket.gethostname())
    # one tick off, or another boot: not the same process
    assert not alive(ProcIdentity(target.pid, ticks + 1, boot))
    assert not alive(ProcIdentity(target.pid, ticks, "00000000-0000-0000-0000-000000000000"))
    r = marathon("kill", str(out), "--yes", "--json", "--grace", "5")
    assert r.returncode == 0, r.stderr
    assert [t["pid"] for t in json.loads(r.stdout)["stop_plan"]["targets"]] == [target.pid]
    assert target.wait(10) == -signal.SIGTERM


def test_an_old_record_without_identity_is_never_signalled(spawn, tmp_path):
    """A registry/lock/claim record of an older marathon has only a wall-clock create time: it cannot
    be verified, so it is not alive -- never signalled, its lock is stale, its job never adopted."""
    out = tmp_path / "out"
    out.mkdir()
    target = spawn(["sleep", "600"], group=True)
    ct = psutil.Process(target.pid).create_time()  # exactly right, and still not trusted
    registry_path(out).parent.mkdir(parents=True, exist_ok=True)
    registry_path(out).write_text(json.dumps({"processes": [
        {"pid": target.pid, "create_time": ct, "role": "runner", "argv": target.args},
    ]}))  # fmt: skip
    (entry,) = Registry(out).entries()
    assert entry.ident is None and not entry.is_live() and Registry(out).runner_entry() is None
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"pid": target.pid, "create_time": ct, "host": socket.gethostname()}))
    assert not read_holder(lock).is_live()
    assert not claims.JobRef(target.pid, ct, "s").is_live(socket.gethostname())
    plan = plan_stop(out)
    assert plan.targets == [] and "unverifiable" in plan.skipped[0].why
    r = marathon("kill", str(out), "--yes")
    assert r.returncode == 0, r.stderr
    assert target.poll() is None


def test_identity_reads_a_comm_with_spaces_and_parens(spawn, tmp_path):
    """The comm field may hold ') (' and spaces; field 22 is counted from the last ')'."""
    line = "4242 (a) b (c) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 123 4"
    assert parse_stat(line) == ("S", 987654)
    with pytest.raises(ValueError):
        parse_stat("4242 no comm here")
    odd = tmp_path / "x) (y z"
    odd.write_bytes(Path("/bin/sleep").read_bytes())
    odd.chmod(0o755)
    p = spawn([str(odd), "600"])
    deadline = time.monotonic() + 10
    while psutil.Process(p.pid).name() != odd.name[:15] and time.monotonic() < deadline:
        time.sleep(0.02)  # exec of the copied binary has not happened yet
    assert Path(f"/proc/{p.pid}/stat").read_text().startswith(f"{p.pid} (x) (y z) ")
    ident = identity_of(p.pid)
    expected = (psutil.Process(p.pid).create_time() - psutil.boot_time()) * os.sysconf("SC_CLK_TCK")
    assert ident is not None and abs(ident.start_ticks - expected) < 2
    assert alive(ident)


def test_argv_selects_only_processes_of_the_same_user(spawn, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    want = ["sleep", "605"]
    mine = spawn(want)
    other_uid = 65534 if os.getuid() != 65534 else 65533
    need(os.getuid() == 0, "starting a process as another user needs root")
    theirs = spawn(want, user=other_uid, group=other_uid, extra_groups=[])
    r = marathon("kill", str(out), "--argv", json.dumps(want), "--yes", "--json", "--grace", "5")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [t["pid"] for t in res["stop_plan"]["targets"]] == [mine.pid]
    assert any(s["pid"] == theirs.pid and "another user" in s["why"] for s in res["stop_plan"]["skipped"])
    assert mine.wait(10) == -signal.SIGTERM
    assert theirs.poll() is None


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

    from modes.naming import compose_project
    from runner.ops.dockerapi import COMPOSE_PROJECT
    from runner.results.tree import iter_job_dirs, iter_trial_dirs

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
    (mate,) = _sleeping_children(runner.pid)
    Registry(out).register(runner.pid, "runner", runner.args)
    plan = plan_stop(out)
    plan.targets = [t for t in plan.targets if t.pid == runner.pid]
    report = act_stop(plan, grace_sec=5, by_group=False)
    assert [(s.pid, s.how) for s in report.signalled] == [(runner.pid, "process")]
    assert runner.wait(10) == -signal.SIGTERM
    assert _alive(mate)
    mate.kill()  # the test's own leftover, by the psutil handle (PID + create time)


def _registered_runner_with_a_mate(spawn, out: Path) -> tuple[subprocess.Popen, psutil.Process]:
    """A stand-in runner (exits 0 on TERM) registered as the tree's runner, leading a process group
    with one more member that a graceful stop must not touch."""
    out.mkdir()
    runner = spawn(["bash", "-c", "trap 'exit 0' TERM; sleep 600 & wait"], group=True)
    (mate,) = _sleeping_children(runner.pid)
    Registry(out).register(runner.pid, "runner", runner.args)
    return runner, mate


def test_console_stop_signals_the_runner_alone_and_says_so(spawn, tmp_path):
    """The console's Stop (T): its plan says "runner alone", and the runner's group mates survive it."""
    from console import actions

    out = tmp_path / "out"
    runner, mate = _registered_runner_with_a_mate(spawn, out)
    planned = actions.plan_action(actions.STOP, out)
    assert "runner process alone (not its process group)" in planned.text
    assert [t.pid for t in planned.plan.stop.targets] == [runner.pid]
    ok, text = actions.act(planned)
    assert ok and f"sent SIGTERM to pid {runner.pid}" in text and "process group" not in text, text
    assert runner.wait(10) == 0
    assert _alive(mate)
    mate.kill()  # the test's own leftover, by the psutil handle


def test_marathon_stop_shows_the_consoles_plan_and_signals_the_runner_alone(spawn, tmp_path):
    """``marathon stop`` is the console's T through the same plan: without --yes nothing is
    signalled; with it, SIGTERM to the runner alone (its group mate survives), exit 0."""
    out = tmp_path / "out"
    runner, mate = _registered_runner_with_a_mate(spawn, out)
    dry = marathon("stop", str(out))
    assert dry.returncode == 0, dry.stderr
    assert (
        "runner process alone (not its process group)" in dry.stdout and f"pid {runner.pid:>7}" in dry.stdout
    )
    assert "dry run" in dry.stdout and runner.poll() is None
    r = marathon("stop", str(out), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [t["pid"] for t in got["plan"]["stop_plan"]["targets"]] == [runner.pid]
    assert got["report"]["signalled"] == [{"pid": runner.pid, "signal": "SIGTERM", "how": "process"}]
    assert runner.wait(10) == 0
    assert _alive(mate)
    mate.kill()  # the test's own leftover, by the psutil handle
    none = marathon("stop", str(out))  # no live runner: nothing to do, said so
    assert none.returncode == 0 and "No runner of this tree is alive" in none.stdout


def test_a_group_mate_outside_the_targets_tree_is_planned_and_a_newcomer_is_never_reached(spawn, tmp_path):
    """Found by a review: a target leading its process group was signalled with killpg, which reached
    members the plan never showed (`marathon run OUT | tee log`: tee). They are in the plan now, and
    a group with a member the plan did not show is signalled process by process."""
    out = tmp_path / "out"
    leader = spawn(
        ["bash", "-c", "trap '(sleep 601 &)' USR1; (sleep 600 &); sleep 599 & wait; wait"], group=True
    )

    def group() -> dict[int, str]:
        members = psutil.process_iter(["cmdline"])
        return {p.pid: " ".join(p.info["cmdline"] or ()) for p in members if _pgid_of(p.pid) == leader.pid}

    def settled(*commands: str) -> dict[int, str]:
        """The group once each command runs and no forked subshell is left between fork and exec
        (a forked bash carries the leader's command line, so counting members alone races)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now = group()
            if sorted(c for pid, c in now.items() if pid != leader.pid) == sorted(commands):
                return now
            time.sleep(0.05)
        raise AssertionError(f"the group never settled on {commands}: {group()}")

    (orphan,) = [pid for pid, cmd in settled("sleep 600", "sleep 599").items() if cmd == "sleep 600"]
    assert orphan not in {c.pid for c in psutil.Process(leader.pid).children(recursive=True)}
    Registry(out).register(leader.pid, "runner", leader.args)
    plan = plan_stop(out)
    by_pid = {t.pid: t for t in plan.targets}
    assert set(by_pid) == set(group()) and by_pid[orphan].why.startswith(
        f"in the process group of {leader.pid}"
    )
    assert f"in the process group of {leader.pid}" in plan.render()
    os.kill(leader.pid, signal.SIGUSR1)  # a newcomer joins the group after the plan was shown
    late_group = settled("sleep 600", "sleep 599", "sleep 601")
    (late,) = [pid for pid, cmd in late_group.items() if cmd == "sleep 601"]
    late_proc = psutil.Process(late)
    planned = [psutil.Process(p) for p in by_pid]
    report = act_stop(plan, grace_sec=5)
    assert {s.how for s in report.signalled} == {"process"}  # never killpg: the group is not the plan's
    assert not any(_alive(p) for p in planned)
    assert _alive(late_proc)
    late_proc.kill()  # the test's own leftover, by the psutil handle


def _pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
