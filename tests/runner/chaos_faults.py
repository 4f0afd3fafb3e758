"""The chaos test's fault injector: real faults against a real run on a private dockerd.

Every target is found by something the run itself recorded -- the runner's lock and registry (PID,
checked against the create time seen when it was first found), the compose-project label of a
trial of the output tree (compared exactly) -- never by a process or object name. Times and
targets come from one seeded ``random.Random`` so a failing seed can be replayed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from modes.naming import compose_project
from runner.ops.docker_pool import our_projects
from runner.ops.procs import Registry
from runner.results.events import read_events
from runner.results.tree import iter_job_dirs, iter_trial_dirs, voided_root
from runner.schedule.lock import lock_holder

COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"
FOREIGN_LABEL = "org.marathon.chaos.foreign"


@dataclass
class Fault:
    """One row of the fault table."""

    fault: str
    t_sec: float = 0.0  # since the run started
    target: str = ""
    outcome: str = ""
    pair: tuple[str, str] | None = None
    trial: str | None = None
    data: dict = field(default_factory=dict)

    def row(self) -> dict:
        d = asdict(self)
        d["pair"] = "/".join(self.pair) if self.pair else None
        return d


@dataclass(frozen=True)
class Proc:
    """A process as first seen: PID + create time (a recycled PID is another process)."""

    pid: int
    create_time: float
    what: str

    @staticmethod
    def of(pid: int, what: str) -> Proc | None:
        try:
            return Proc(pid, psutil.Process(pid).create_time(), what)
        except psutil.Error:
            return None

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            return abs(p.create_time() - self.create_time) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def signal(self, sig: int) -> bool:
        if self.pid in (os.getpid(), os.getppid()) or not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False


def trial_index(out: Path) -> dict[str, tuple[str, str, str]]:
    """compose project -> (task, arm, trial name), over the tree and its voided attempts."""
    idx = {}
    for root in (out, voided_root(out)):
        for task, arm, _ad, _stamp, job in iter_job_dirs(root):
            for t in iter_trial_dirs(job):
                idx[compose_project(t.name)] = (task, arm, t.name)
    return idx


class Sampler(threading.Thread):
    """Every second: the run's processes (runner by its lock, harbor jobs by the registry) and all
    their descendants, so the end of the test can say none of them is left."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.seen: dict[tuple[int, float], Proc] = {}
        self.stop_evt = threading.Event()

    def _add(self, pid: int, what: str) -> None:
        p = Proc.of(pid, what)
        if p is None or (p.pid, p.create_time) in self.seen:
            return
        self.seen[(p.pid, p.create_time)] = p

    def sample(self) -> None:
        roots: list[tuple[int, str]] = []
        h = lock_holder(self.out)
        if h is not None:
            roots.append((h.pid, "runner"))
        try:
            roots += [(e.pid, f"{e.role} {e.task or ''}/{e.arm or ''}") for e in Registry(self.out).entries()]
        except Exception:  # noqa: BLE001 - a registry being rewritten: next second
            pass
        for pid, what in roots:
            if pid == os.getpid():
                continue
            self._add(pid, what)
            try:
                kids = psutil.Process(pid).children(recursive=True)  # parents listed before children
            except psutil.Error:
                continue
            tree = {pid}
            for k in kids:
                # a PID listed as the root's descendant may exit and be reused before it is read (seen:
                # a restarted container's ``runc:[2:INIT]``, then that container's own process, taken
                # for a leftover of harbor): read it once, and keep it only if its parent is in the tree
                try:
                    with k.oneshot():
                        ppid, created, name = k.ppid(), k.create_time(), k.name()
                except psutil.Error:
                    continue
                if ppid not in tree:
                    continue
                tree.add(k.pid)
                if (k.pid, created) not in self.seen:
                    self.seen[(k.pid, created)] = Proc(k.pid, created, f"child of {what}: {name}")

    def run(self) -> None:
        while not self.stop_evt.wait(1.0):
            self.sample()

    def left(self, grace: float = 60.0) -> list[Proc]:
        """The processes seen that still run ``grace`` seconds after the run ended. The run's end is
        its runner's lock released, which is the runner's last act, not its exit: a runner that
        ``health --fix`` restarted (not our child, nothing to wait on) was seen still exiting when
        this was read at once on a loaded machine. Each is waited for until it has ended (a zombie
        has), never longer than ``grace``."""
        t0 = time.monotonic()
        while (running := [p for p in self.seen.values() if p.alive()]) and time.monotonic() < t0 + grace:
            time.sleep(0.2)
        print(f"the run's processes all ended {time.monotonic() - t0:.1f} s after the run's end" if not running
              else f"still running after {grace:.0f} s: {running}")  # fmt: skip
        return running


class Injector:
    """Runs the faults one after another at seeded times while the run goes on."""

    def __init__(self, out: Path, pd, seed: int, env: dict[str, str], log: Callable[[str], None]) -> None:
        self.out = out
        self.pd = pd
        self.rng = random.Random(seed)
        self.env = env
        self.log = log
        self.t0 = time.monotonic()
        self.faults: list[Fault] = []
        self.hit_pairs: set[tuple[str, str]] = set()
        self.hit_attempts: set[tuple[str, str, str]] = set()  # (task, arm, stamp) a fault hit
        self.foreign_nets: list[str] = []
        self.runners: list[Proc] = []
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def run_is_over(self) -> bool:
        return any(
            e["event"] == "runner_exit" and e.get("done") == e.get("total") for e in read_events(self.out)
        )

    def wait_until(self, pred: Callable[[], object], timeout: float, what: str, step: float = 0.5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = pred()
            if v:
                return v
            if self.run_is_over():
                raise AssertionError(f"the run ended before {what}: lengthen it or inject earlier")
            time.sleep(step)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    # --- targets ------------------------------------------------------------------------------------

    def running_trial_containers(self) -> list[tuple[str, tuple[str, str, str]]]:
        """(container id, (task, arm, trial)) of the run's running ``main`` containers, label exact."""
        projects = our_projects(self.out)
        idx = trial_index(self.out)
        found = []
        try:
            cs = self.pd.client.api.containers(filters={"label": COMPOSE_PROJECT, "status": "running"})
        except Exception:  # noqa: BLE001 - the engine restarting: nothing to pick now
            return []
        for c in cs:
            labels = c.get("Labels") or {}
            proj = labels.get(COMPOSE_PROJECT)
            if proj in projects and labels.get(COMPOSE_SERVICE) == "main" and proj in idx:
                found.append((c["Id"], idx[proj]))
        return sorted(found)

    def agent_running(self, trial: tuple[str, str, str]) -> bool:
        """The trial's agent has started (harbor's agent dir exists) and its verifier has not scored
        it yet: a kill hits the agent (or the verifier), not setup or the wind-down."""
        for task, arm, _ad, _stamp, job in iter_job_dirs(self.out):
            if (task, arm) != trial[:2]:
                continue
            for t in iter_trial_dirs(job):
                if t.name != trial[2] or not (t / "agent").is_dir() or (t / "result.json").exists():
                    continue
                # not yet scored: once the verifier wrote its reward a kill changes nothing
                return not any((t / "verifier" / n).exists() for n in ("reward.txt", "reward.json"))
        return False

    def live_harbor_jobs(self) -> list[tuple[Proc, str, str]]:
        jobs = []
        for e in Registry(self.out).entries():
            if e.role != "harbor" or not e.task or not e.arm:
                continue
            p = Proc.of(e.pid, f"harbor run {e.task}/{e.arm}")
            if p is not None and p.alive():
                jobs.append((p, e.task, e.arm))
        return sorted(jobs, key=lambda j: j[0].pid)

    def stamp_of_pid(self, pid: int) -> str | None:
        """The jobs dir of the harbor job with this PID, from the runner's job_start/adopt events."""
        stamp = None
        for e in read_events(self.out):
            if e["event"] in ("job_start", "adopt") and e.get("pid") == pid:
                stamp = e.get("stamp")
        return stamp

    def stamp_of_trial(self, trial: str) -> str | None:
        for _task, _arm, _ad, stamp, job in iter_job_dirs(self.out):
            if any(t.name == trial for t in iter_trial_dirs(job)):
                return stamp
        return None

    def current_runner(self) -> Proc | None:
        h = lock_holder(self.out)
        if h is None:
            return None
        return Proc.of(h.pid, "runner")

    # --- the faults ---------------------------------------------------------------------------------

    def docker_kill(self) -> Fault:
        f = Fault("docker kill of a trial container")

        def pick():
            cands = [
                (cid, tr)
                for cid, tr in self.running_trial_containers()
                if tr[:2] not in self.hit_pairs and self.agent_running(tr)
            ]
            return cands

        cands = self.wait_until(pick, 300, "a running trial container to kill")
        cid, (task, arm, trial) = self.rng.choice(cands)
        f.t_sec, f.pair, f.trial = self.now(), (task, arm), trial
        f.target = f"container {cid[:12]} of {task}/{arm} trial {trial}"
        self.hit_pairs.add((task, arm))
        stamp = self.stamp_of_trial(trial)
        if stamp:
            self.hit_attempts.add((task, arm, stamp))
        r = self.pd.docker("kill", cid, check=False)
        # once the kill is done (the CLI may take seconds under load, and the verifier may write
        # the trial's reward in them: written before the container died)
        f.data["killed_at"] = time.time()
        f.data["kill_rc"] = r.returncode
        f.data["container"] = cid
        return f

    def pool_fill(self) -> Fault:
        """Foreign networks up to the gate's limit (cap - margin), counting the run's networks and
        the ones its started jobs are about to create, topped up as the run's own networks go: the
        gate must wait at the next free slot, while the margin still holds the networks of jobs
        already started (the pool itself is never exhausted). Removed once the gate waited."""
        from runner.ops.docker_pool import gate_limits, pool_status

        f = Fault("foreign networks fill the address pool")
        f.t_sec = self.now()
        waits_before = sum(1 for e in read_events(self.out) if e["event"] == "gate_wait")
        tag = f"{os.getpid()}-{int(time.time())}"

        def waited() -> bool:
            return sum(1 for e in read_events(self.out) if e["event"] == "gate_wait") > waits_before

        # no clock: the gate waits when the next job is due, which is when a running one ends -- on
        # a loaded machine a LoopX trial can take minutes (a fixed 400 s failed the test under load);
        # the run ending first (the test's own limit bounds it) means the gate never waited
        while not waited():
            if self.run_is_over():
                raise AssertionError("the pool gate never waited on the foreign networks")
            st = pool_status(self.out, client=self.pd.client, routes=[])
            cap, margin = gate_limits(capacity=st.capacity)
            pending = max(0, len(self.live_harbor_jobs()) - st.used_ours)
            if st.used + pending < cap - margin:
                name = f"chaos-fill-{tag}-{len(self.foreign_nets)}"
                r = self.pd.docker("network", "create", "--label", f"{FOREIGN_LABEL}=fill", name, check=False)
                if r.returncode != 0:
                    raise AssertionError(f"creating a foreign network failed: {r.stderr.strip()[-300:]}")
                self.foreign_nets.append(r.stdout.strip())
                continue
            time.sleep(0.3)
        f.target = f"{len(self.foreign_nets)} foreign network(s) (label {FOREIGN_LABEL}=fill)"
        f.data["gate_wait_at"] = self.now()
        f.data["gate_wait"] = [e for e in read_events(self.out) if e["event"] == "gate_wait"][waits_before]
        time.sleep(self.rng.uniform(8, 15))
        for nid in self.foreign_nets:
            self.pd.docker("network", "rm", nid, check=False)
        f.data["removed_at"] = self.now()
        f.data["n_networks"] = len(self.foreign_nets)
        self.foreign_nets.clear()
        return f

    def sigstop_harbor(self, seconds: float = 30.0) -> Fault:
        f = Fault(f"SIGSTOP/SIGCONT of one harbor run for {seconds:.0f} s")

        def pick():
            return [j for j in self.live_harbor_jobs() if (j[1], j[2]) not in self.hit_pairs]

        proc, task, arm = self.rng.choice(self.wait_until(pick, 300, "a live harbor job to stop"))
        f.t_sec, f.pair = self.now(), (task, arm)
        f.target = f"harbor PID {proc.pid} ({task}/{arm})"
        self.hit_pairs.add((task, arm))
        stamp = self.stamp_of_pid(proc.pid)
        if stamp:
            self.hit_attempts.add((task, arm, stamp))
        if not proc.signal(signal.SIGSTOP):
            f.data["stopped"] = False
            return f
        f.data["stopped"] = True
        try:
            time.sleep(seconds)
        finally:
            f.data["continued"] = proc.signal(signal.SIGCONT)
        return f

    def kill_runner(self, first_runner: subprocess.Popen) -> Fault:
        f = Fault("kill -9 of the runner, then marathon health --fix")
        runner = self.wait_until(self.current_runner, 120, "a runner holding the lock")
        f.t_sec = self.now()
        f.target = f"runner PID {runner.pid}"
        running = [f"{j[1]}/{j[2]}" for j in self.live_harbor_jobs()]
        f.data["jobs_running_at_kill"] = running
        assert runner.signal(signal.SIGKILL), f"could not SIGKILL runner {runner.pid}"
        if runner.pid == first_runner.pid:
            first_runner.wait(30)  # our child: reap it, so it is gone (not a zombie) for health
        self.wait_until(lambda: not runner.alive(), 30, "the killed runner to be gone")
        time.sleep(self.rng.uniform(3, 10))
        check = marathon_cli("health", str(self.out), "--json", env=self.env)
        f.data["health_rc"] = check.returncode
        try:
            f.data["health_findings"] = [x["kind"] for x in json.loads(check.stdout)["findings"]]
        except (ValueError, KeyError):
            f.data["health_findings"] = [check.stdout[-300:]]
        fix = marathon_cli("health", str(self.out), "--fix", env=self.env)
        f.data["fix_rc"] = fix.returncode
        f.data["fixes"] = [ln.strip() for ln in fix.stdout.splitlines() if "FIXED" in ln]
        new = self.wait_until(self.current_runner, 60, "the restarted runner to hold the lock")
        f.data["new_runner"] = new.pid
        f.data["recovered_at"] = self.now()
        return f

    def restart_dockerd(self) -> Fault:
        f = Fault("restart of the (private) dockerd")
        self.wait_until(self.running_trial_containers, 300, "running trials before the engine restart")
        f.t_sec = self.now()
        hit = sorted({tr[:2] for _cid, tr in self.running_trial_containers()})
        f.data["trials_running"] = ["/".join(p) for p in hit]
        self.hit_pairs |= set(hit)
        # hit: the attempts whose environment is up now (a job still before compose up meets the
        # engine again after the restart; if its start fails, that is a Docker failure anyway)
        for _cid, (task, arm, trial) in self.running_trial_containers():
            stamp = self.stamp_of_trial(trial)
            if stamp:
                self.hit_attempts.add((task, arm, stamp))
        old = self.pd.dockerd_pid
        self.pd.restart()
        f.target = f"dockerd PID {old} -> {self.pd.dockerd_pid}"
        f.data["back_at"] = self.now()
        return f

    # --- the schedule -------------------------------------------------------------------------------

    def plan(self, first_runner: subprocess.Popen) -> list[tuple[float, Callable[[], Fault]]]:
        """Seeded gaps before each fault; the order keeps every fault inside the run (the gate fault
        needs pairs still queued, so it comes early)."""
        steps: list[Callable[[], Fault]] = [
            self.docker_kill,
            self.pool_fill,
            self.sigstop_harbor,
            lambda: self.kill_runner(first_runner),
            self.docker_kill,
            self.restart_dockerd,
        ]
        return [(self.rng.uniform(5, 25), s) for s in steps]

    def run(self, first_runner: subprocess.Popen) -> None:
        try:
            for gap, step in self.plan(first_runner):
                time.sleep(gap)
                f = step()
                self.log(f"[chaos {f.t_sec:7.1f}s] {f.fault}: {f.target}")
                self.faults.append(f)
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which fails with it
            self.error = exc
        finally:
            for nid in self.foreign_nets:
                self.pd.docker("network", "rm", nid, check=False)
            self.finished.set()


def diagnose(out: Path, pd, path: Path) -> str:
    """What a run that did not end was doing, for the failure message and ``path``: the live
    registered processes (with their age), each unfinished trial's last driver phase, the engine's
    containers, the last events and the runner log's tail. Every read is bounded."""
    lines: list[str] = []
    now = time.time()
    for e in Registry(out).entries():
        live = e.is_live()
        lines.append(f"registered {e.role} pid {e.pid} {e.task or ''}/{e.arm or ''} "
                     f"{'LIVE' if live else 'gone'} age {now - e.registered_at:.0f} s")  # fmt: skip
    for status in sorted(out.glob("*/*/*/*/*/agent/driver-status.json")):
        with contextlib.suppress(OSError, ValueError):
            st = json.loads(status.read_text()[:20_000])
            if st.get("done"):
                continue
            age = now - status.stat().st_mtime
            lines.append(f"trial {status.parents[1].name}: phase {st.get('phase')} "
                         f"seq {st.get('seq')} (status file {age:.0f} s old)")  # fmt: skip
    r = pd.docker("ps", "-a", "--format", "{{.ID}} {{.Names}} {{.Status}}", check=False, timeout=30)
    lines.append("engine containers:\n" + (r.stdout.strip() or r.stderr.strip()[-500:]))
    events = out / ".runner" / "events.jsonl"
    with contextlib.suppress(OSError):
        lines.append("last events:\n" + "\n".join(ln[:300] for ln in events.read_text().splitlines()[-25:]))
    log = out / ".runner" / "runner.log"
    with contextlib.suppress(OSError):
        lines.append(
            "runner.log tail:\n"
            + "\n".join(ln[:300] for ln in log.read_text(errors="replace").splitlines()[-40:])
        )
    text = "\n".join(lines)
    path.write_text(text + "\n")
    return text


def marathon_cli(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
