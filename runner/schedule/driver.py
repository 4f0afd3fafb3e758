"""``marathon run``: the queue of (task, arm) pairs, claims, the network gate, passes and voiding.

Why: a full run is 15-20 tasks x 5 arms for a day, up to 12 jobs at once. The driver must be
restartable at any moment without losing or duplicating work, treat every arm the same way, and
keep infrastructure failures from posing as differences in capability. So, per pair and pass:

  done?  (runner.results.rules.is_done on the job result.json)        -> skip
  claim  (O_CREAT|O_EXCL; stale taken over; orphan job adopted) -> else skip
  gate   (runner.ops.docker_pool.verdict; reclaim while waiting)   -> wait, with events
  start  harbor run ... in its own session, registered          -> one job = one trial
  after: done -> next; infrastructure -> void + retry next pass; other error -> retry next pass

Every step is an event in ``<out>/.runner/events.jsonl``. On SIGTERM/SIGINT/SIGHUP the driver stops
starting, TERMs its harbor jobs (harbor cancels and tears its environments down), removes what is
left of this run's compose projects, voids the cancelled attempts, releases its claims, exits 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from modes.naming import compose_project
from modes.profiles import mode_for
from runner.errors import UserError
from runner.ops.held import start_held
from runner.ops.procs import DEFAULT_GRACE_SEC, ProcIdentity, Registry, alive, signal_process
from runner.ops.void import Verdict, act_void, classify_job, plan_void
from runner.results.events import EventKind, EventLog, new_run_id
from runner.results.model import (  # the model's reading of done: the runner never disagrees with status
    pair_done,
)
from runner.results.records import read_job
from runner.results.rules import engine_outage
from runner.results.tree import iter_trial_dirs, job_dir, jobs_dir, runner_dir
from runner.schedule import claims as claimsmod
from runner.schedule.breaker import EXIT_PAUSED, SCOPE_INFRA, Attempt, Breaker, Trip, is_outcome, signature
from runner.schedule.config import (
    ArmSpec,
    RunConfig,
    agent_timeout_mult,
    as_dict,
    list_tasks,
    project_pythonpath,
    write_driver_env,
)
from runner.schedule.lock import RunnerLock, me
from runner.secrets import screen_all

HARBOR_LOG = "harbor-run.log"
BUILD_OVERLAY = "compose-build-network-host.yaml"
#: compose overlay: build ``main`` on the host network. BuildKit's cache key includes the network
#: mode (proxy build args are exempt), so prebuild and harbor's own build must both use it.
BUILD_OVERLAY_TEXT = "services:\n  main:\n    build:\n      network: host\n"
ROLE_HARBOR = "harbor"


def harbor_bin() -> str:
    """The ``harbor`` of this interpreter's environment (the pinned 0.25.0), else PATH's."""
    cand = Path(sys.executable).with_name("harbor")
    if cand.exists():
        return str(cand)
    found = shutil.which("harbor")
    if not found:
        raise UserError("harbor is not installed in this environment (uv sync)")
    return found


def new_stamp(arm_dir: Path) -> str:
    """A fresh jobs-dir name under ``<out>/<task>/<arm>``: UTC time, unique."""
    base = datetime.now(UTC).strftime("%Y-%m-%d__%H-%M-%S")
    stamp, n = base, 1
    while (arm_dir / stamp).exists():
        n += 1
        stamp = f"{base}-{n}"
    return stamp


def builds_from_dockerfile(task_dir: Path) -> bool:
    """harbor builds this task's image with compose's build file (no prebuilt ``docker_image``)."""
    import tomllib

    if not (task_dir / "environment" / "Dockerfile").is_file():
        return False
    try:
        cfg = tomllib.loads((task_dir / "task.toml").read_text())
    except (OSError, ValueError):
        return True
    return not (cfg.get("environment") or {}).get("docker_image")


def build_overlay(out: Path) -> Path:
    """The compose overlay that makes harbor build with the host network, exactly as prebuild does
    (the network mode is part of BuildKit's cache key; proxy build args are not)."""
    path = runner_dir(out) / BUILD_OVERLAY
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BUILD_OVERLAY_TEXT)
    return path


def arm_mounts(cfg: RunConfig, arm: ArmSpec) -> str | None:
    """harbor ``--mounts`` JSON for an arm: ``--mounts`` when given, else what a real arm needs
    staged (codex; plus the LoopX parts for LoopX arms: ``agents.loopx_staging.mounts_for_arm``)."""
    if cfg.mounts:
        return cfg.mounts
    if not arm.real:
        return None
    import json

    from agents.loopx_staging import mounts_for_arm
    from agents.staging import StagingError

    try:
        mounts = mounts_for_arm(arm.name)
    except StagingError as exc:
        raise UserError(f"arm {arm.name}: {exc}") from None
    return json.dumps(mounts) if mounts else None


#: harbor 0.25.0's flag (hidden in its help) that passes ``-m`` to the agent unparsed
SKIP_MODEL_PARSING = "--skip-model-parsing-and-provider-mapping"


def harbor_argv(cfg: RunConfig, task: str, arm: ArmSpec, jdir: Path, mounts: str | None = None) -> list[str]:
    """The ``harbor run`` command of one (task, arm) job. No secret is ever in it: --ae values are
    ``${VAR}`` references that harbor resolves from its environment."""
    assert cfg.tasks_dir is not None
    argv = [
        harbor_bin(), "run",
        "-p", str(cfg.tasks_dir / task),
        "-a", arm.agent,
        "-o", str(jdir),
        "--job-name", arm.name,
        "-n", "1",
        "-y",
        "-e", cfg.env,
        "--agent-timeout-multiplier", str(agent_timeout_mult(cfg, task, arm)),
        "--verifier-timeout-multiplier", str(cfg.verifier_mult),
    ]  # fmt: skip
    if cfg.env == "docker":
        argv += ["--ek", "auto_mounting=true"]
        if cfg.build_network == "host" and builds_from_dockerfile(cfg.tasks_dir / task):
            argv += ["--extra-docker-compose", str(build_overlay(cfg.out))]
    if cfg.model:
        argv += ["-m", cfg.model]
    if mounts:
        argv += ["--mounts", mounts]
    for item in cfg.agent_env + cfg.agent_env_literal:
        argv += ["--ae", item]
    if not arm.builtin:
        # the arms take -m as given (agents.base_codex): harbor's preflight would import LiteLLM to
        # parse it, 3-6 s of CPU per attempt (agents/litellm_map.py says why that matters)
        argv += [SKIP_MODEL_PARSING]
        argv += ["--ak", f"goal_timeout_sec={cfg.goal_timeout_sec}"]
        mode = mode_for(arm.name) if arm.real else None
        if mode is not None and mode.loopx:
            argv += ["--ak", f"mode={arm.name}"]
    for item in cfg.agent_kwargs:
        argv += ["--ak", item]
    return argv


def job_env() -> dict[str, str]:
    """The environment of a ``harbor run``: this process's own (secrets by name resolve from it),
    no cost-map fetch, no telemetry, the agents importable."""
    env = dict(os.environ)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no start-up fetch of the cost map
    env.setdefault("HARBOR_TELEMETRY", "0")  # harbor 0.25.0 posts to PostHog at exit otherwise
    env["PYTHONPATH"] = project_pythonpath(env)
    return env


@dataclass
class Job:
    task: str
    arm: ArmSpec
    stamp: str
    pid: int
    ident: ProcIdentity | None  # None: an adopted job recorded without identity (never signalled)
    claim: claimsmod.Claim
    started: float  # monotonic
    proc: subprocess.Popen | None = None  # None for an adopted job (started by a dead runner)
    returncode: int | None = None
    terminated: bool = False

    claim_out: str = ""

    @property
    def stamp_dir(self) -> Path:
        return jobs_dir(Path(self.claim_out), self.task, self.arm.name, self.stamp)

    def poll(self) -> bool:
        """True once the harbor process has exited."""
        if self.proc is not None:
            self.returncode = self.proc.poll()
            return self.returncode is not None
        return not alive(self.ident)

    def signal(self, sig: signal.Signals, group: bool = False) -> None:
        """Signal our harbor process (identity re-checked); ``group`` = its whole session group."""
        if not alive(self.ident):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group and os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                signal_process(self.ident, sig)


@dataclass
class Stats:
    started: int = 0
    done: int = 0
    voided: int = 0
    errored: int = 0
    gate_waits: int = 0
    reclaimed: list[str] = field(default_factory=list)


class Driver:
    """One run over an output tree. ``run()`` returns the process exit code."""

    def __init__(
        self,
        cfg: RunConfig,
        *,
        listeners: list | None = None,
        poll_sec: float = 0.2,
        gate_recheck_sec: float = 2.0,
        stop_grace_sec: float = DEFAULT_GRACE_SEC,
        resumed: bool = False,
        retry: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.retry = retry  # what the preflight tells the operator to run once a problem is fixed
        self.out = cfg.out
        self.run_id = new_run_id()
        self.log = EventLog(self.out, self.run_id)
        self.log.listeners.extend(listeners or [])
        self.poll_sec = poll_sec
        self.gate_recheck_sec = gate_recheck_sec
        self.stop_grace_sec = stop_grace_sec
        self.resumed = resumed
        self.holder = me(self.run_id)
        self.registry = Registry(self.out)
        self.running: list[Job] = []
        self.finished: list[Job] = []
        self.stop_reason: str | None = None
        self.stats = Stats()
        self.specs = {s.name: s for s in cfg.arm_specs()}
        self._gate_waiting_since: float | None = None
        self._gate_next_check = 0.0
        self._job_env = job_env()
        self._mounts: dict[str, str | None] = {}
        self.preflight_notes: list = []
        self.breaker = Breaker(cfg.breaker_k)
        self._failed: dict[str, tuple[Job, Verdict]] = {}  # stamp -> a failed attempt the breaker may void
        self._cleanup_pending: set[str] = set()  # trials whose leftovers could not be removed yet
        self.fleet = None  # runner.schedule.fleet.cluster.Fleet with --cluster: attempts run as Ray jobs
        self.deaths = None  # runner.ops.container_deaths.DeathWatch on the runner's own engine
        self.RayJob: type = Job

    # --- setup ---------------------------------------------------------------------------------

    def tasks(self) -> list[str]:
        assert self.cfg.tasks_dir is not None
        available = list_tasks(self.cfg.tasks_dir)
        if not self.cfg.tasks:
            return available
        unknown = [t for t in self.cfg.tasks if t not in available]
        if unknown:
            raise UserError(f"unknown task(s) in {self.cfg.tasks_dir}: {', '.join(unknown)}")
        return list(self.cfg.tasks)

    def pairs(self, tasks: list[str]) -> list[tuple[str, str]]:
        arms = list(self.specs)
        if self.cfg.arm_major:
            return [(t, a) for a in arms for t in tasks]
        return [(t, a) for t in tasks for a in arms]

    def preflight(self, retry: str | None = None) -> list[str]:
        """Everything that can be refused before touching the tree (``runner.schedule.preflight``, the
        same check ``health --fix``, the console and the demo run); returns the tasks to run."""
        from runner.schedule import preflight

        hint = retry or self.retry or preflight.retry_run(self.out, self.resumed)
        self.preflight_notes = preflight.require(self.cfg, os.environ, retry=hint)
        tasks = self.tasks()
        self._mounts = {s.name: arm_mounts(self.cfg, s) for s in self.specs.values()}
        return tasks

    def check_dataset(self, tasks: list[str]) -> list[str]:
        """The selected tasks that differ from dataset.toml (the preflight refused them unless
        --allow-modified), to be recorded in .driver_env and every report."""
        from runner.schedule.preflight import modified_tasks

        return modified_tasks(self.cfg, tasks)

    # --- main loop -------------------------------------------------------------------------------

    def run(self) -> int:
        tasks = self.preflight()
        modified = self.check_dataset(tasks)
        if self.cfg.cluster:
            from runner.schedule.fleet.cluster import Fleet
            from runner.schedule.fleet.launch import ray_job_class

            self.fleet = Fleet.connect(self.cfg.cluster)
            self.RayJob = ray_job_class(Job)
        self.out.mkdir(parents=True, exist_ok=True)
        lock = RunnerLock(self.out, self.run_id)
        lock.acquire()
        old_handlers = self._install_signals()
        try:
            if modified:
                from runner.schedule.config import with_changes

                self.cfg = with_changes(self.cfg, modified_tasks=tuple(modified))
            write_driver_env(self.cfg)
            self.registry.register(os.getpid(), "runner", list(sys.argv))
            all_pairs = self.pairs(tasks)
            already = {a: [t for t in tasks if pair_done(self.out, t, a)] for a in self.specs}
            self.log.emit(
                EventKind.RUNNER_START,
                pid=os.getpid(),
                host=self.holder.host,
                resumed=self.resumed,
                took_over_lock=lock.took_over.describe() if lock.took_over else None,
                arms=list(self.specs),
                tasks=tasks,
                n_pairs=len(all_pairs),
                pairs_per_arm={a: len(tasks) for a in self.specs},
                already_done=already,
                concurrency=self.cfg.concurrency,
                config=as_dict(self.cfg),
            )
            if modified:
                self.log.emit(EventKind.DATASET_MODIFIED, tasks=modified, allow_modified=True)
            for note in self.preflight_notes:
                self.log.emit(EventKind.PREFLIGHT_NOTE, check=note.check, what=note.what, todo=note.todo)
            self._watch_deaths()
            self._adopt_orphans(set(all_pairs))
            reason = self._passes(all_pairs)
            return self._shutdown(reason, all_pairs)
        finally:
            if self.deaths is not None:
                self.deaths.stop()
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            with contextlib.suppress(Exception):
                self.registry.unregister(os.getpid())
            lock.release()

    def _deaths_for(self, job):
        """The engine's account of the job's container deaths: the runner's own watch, or for a
        Ray job the record its job made of the host's engine (``runner.results.deaths``)."""
        if self.fleet is not None and isinstance(job, self.RayJob):
            from runner.results.deaths import read_deaths

            return read_deaths(job.stamp_dir)
        return self.deaths

    def _watch_deaths(self) -> None:
        """Follow the engine's container deaths before the first attempt starts, so a trial container
        killed under harbor's verifier is voided, not scored (``runner.ops.container_deaths``)."""
        if self.cfg.env != "docker" or self.fleet is not None:
            return
        from runner.ops.container_deaths import DeathWatch

        self.deaths = DeathWatch().start()

    def _install_signals(self) -> dict:
        old = {}

        def handler(signum, _frame):
            if self.stop_reason is None:
                self.stop_reason = signal.Signals(signum).name

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            old[sig] = signal.signal(sig, handler)
        return old

    def _release_stale_claims_of_done_pairs(self, all_pairs: list[tuple[str, str]]) -> None:
        """A dead runner's claim on a pair that is done: its orphan harbor finished the pair before a
        restarted runner could adopt it (after ``kill -9`` and ``health --fix``). Nothing will run
        the pair again, so the claim is released here, as ``health --fix`` would (only while it is
        still exactly that claim and still stale)."""
        wanted = set(all_pairs)
        for c in claimsmod.list_claims(self.out):
            if (
                (c.task, c.arm) in wanted
                and c.state == claimsmod.STALE
                and pair_done(self.out, c.task, c.arm)
            ):
                if claimsmod.remove_stale(self.out, c):
                    self.log.emit(
                        EventKind.CLAIM_RELEASE, task=c.task, arm=c.arm, stale_of=c.holder.describe()
                    )

    def _passes(self, all_pairs: list[tuple[str, str]]) -> str:
        for pass_no in range(1, self.cfg.max_passes + 1):
            self._release_stale_claims_of_done_pairs(all_pairs)
            queue = [p for p in all_pairs if not pair_done(self.out, *p) and not self._is_running(p)]
            if not queue and not self.running:
                return "all pairs done"
            self.log.emit(EventKind.PASS_START, pass_no=pass_no, n_pairs=len(queue))
            failed: list[tuple[str, str, str]] = []
            while (queue or self.running) and self.stop_reason is None:
                failed += self._reap()
                if self.breaker.tripped is not None and not self.running:
                    break  # paused: the in-flight pairs have finished
                self._fill(queue)
                if self.stop_reason is None and (queue or self.running):
                    time.sleep(self.poll_sec)
            if self.stop_reason is not None:
                return f"stopped by {self.stop_reason}"
            if self.breaker.tripped is not None:
                return f"paused by the circuit breaker: {self.breaker.tripped.reason()}"
            left = [p for p in all_pairs if not pair_done(self.out, *p)]
            self.log.emit(
                EventKind.PASS_END, pass_no=pass_no, done=len(all_pairs) - len(left), left=len(left)
            )
            for task, arm, why in failed:
                if pass_no < self.cfg.max_passes:
                    self.log.emit(EventKind.RETRY, task=task, arm=arm, next_pass=pass_no + 1, reason=why)
            if not left:
                return "all pairs done"
        return f"max passes ({self.cfg.max_passes}) reached"

    def _is_running(self, pair: tuple[str, str]) -> bool:
        return any((j.task, j.arm.name) == pair for j in self.running)

    # --- starting ---------------------------------------------------------------------------------

    def _fill(self, queue: list[tuple[str, str]]) -> None:
        while (
            queue
            and len(self.running) < self.cfg.concurrency
            and self.stop_reason is None
            and self.breaker.tripped is None
        ):
            task, arm = queue[0]
            if pair_done(self.out, task, arm):
                queue.pop(0)
                self.log.emit(EventKind.SKIP_DONE, task=task, arm=arm)
                continue
            if self._runs_on_cluster(task, arm):
                queue.pop(0)
                self.log.emit(
                    EventKind.CLAIM_HELD, task=task, arm=arm, holder="a Ray job of this tree", state="live"
                )
                continue
            if not self._gate_ok():
                return
            res = claimsmod.try_claim(self.out, task, arm, self.holder)
            queue.pop(0)
            if not res.acquired:
                assert res.claim is not None
                self.log.emit(
                    EventKind.CLAIM_HELD,
                    task=task,
                    arm=arm,
                    holder=res.claim.holder.describe(),
                    state=res.claim.state,
                )
                continue
            assert res.claim is not None
            if res.replaced is not None:
                self.log.emit(
                    EventKind.CLAIM_TAKEOVER, task=task, arm=arm, was=res.replaced.holder.describe()
                )
            try:
                self._start(task, self.specs[arm], res.claim)
            except Exception as exc:  # noqa: BLE001 - e.g. disk full: release, retry next pass, go on
                self.log.emit(
                    EventKind.INTERNAL_ERROR,
                    task=task,
                    arm=arm,
                    error=f"could not start: {type(exc).__name__}: {exc}",
                )
                claimsmod.release(self.out, res.claim)

    def _runs_on_cluster(self, task: str, arm: str) -> bool:
        """A Ray job of this tree already runs (or waits for a slot) for the pair: never a second."""
        if self.fleet is None:
            return False
        from runner.schedule.fleet.launch import active_pairs

        return (task, arm) in active_pairs(self.fleet, self.out)

    def _start(self, task: str, arm: ArmSpec, claim: claimsmod.Claim) -> None:
        if self.fleet is not None:
            from runner.schedule.fleet import launch

            self.running.append(launch.start(self, task, arm, claim))
            self.stats.started += 1
            return
        adir = self.out / task / arm.name
        stamp = new_stamp(adir)
        jdir = jobs_dir(self.out, task, arm.name, stamp)
        jdir.mkdir(parents=True)
        argv = harbor_argv(self.cfg, task, arm, jdir, self._mounts.get(arm.name))
        screen_all(("harbor argv", a) for a in argv)  # e.g. staged mounts: nothing unscreened starts
        # held at a gate until the registry and the claim name it (runner.ops.held): a runner killed
        # in between leaves no harbor that nothing recorded, so a restart never starts a duplicate
        with open(jdir / HARBOR_LOG, "ab") as logfh:
            held = start_held(
                argv, stdout=logfh, stderr=subprocess.STDOUT, cwd=str(self.out), env=self._job_env
            )
        proc = held.proc
        try:
            with contextlib.suppress(ProcessLookupError):
                self.registry.register(proc.pid, ROLE_HARBOR, argv, task=task, arm=arm.name)
            ref = claimsmod.job_ref(proc.pid, stamp)  # our unreaped child: present even if it exited
            claim = claimsmod.set_job(self.out, claim, ref)
        except BaseException:
            held.abort()  # it exits without running harbor
            proc.wait()
            raise
        held.release()
        job = Job(
            task, arm, stamp, proc.pid, ref.ident, claim, time.monotonic(), proc, claim_out=str(self.out)
        )
        self.running.append(job)
        self.stats.started += 1
        self.log.emit(EventKind.JOB_START, task=task, arm=arm.name, stamp=stamp, pid=proc.pid, argv=argv)

    def _adopt_orphans(self, pairs: set[tuple[str, str]]) -> None:
        """A dead runner's harbor jobs that still run: wait for them instead of starting duplicates."""
        if self.fleet is not None:
            from runner.schedule.fleet.launch import reattach

            reattach(self, pairs)
            return
        for c in claimsmod.list_claims(self.out):
            if (c.task, c.arm) not in pairs or c.state != claimsmod.ORPHAN or c.job is None:
                continue
            res = claimsmod.try_claim(self.out, c.task, c.arm, self.holder, adopt=True)
            if not res.acquired or res.claim is None or res.claim.job is None:
                continue
            j = res.claim.job
            job = Job(
                c.task,
                self.specs[c.arm],
                j.stamp,
                j.pid,
                j.ident,
                res.claim,
                time.monotonic(),
                claim_out=str(self.out),
            )
            self.running.append(job)
            self.log.emit(
                EventKind.ADOPT, task=c.task, arm=c.arm, stamp=j.stamp, pid=j.pid, was=c.holder.describe()
            )

    # --- the network gate -----------------------------------------------------------------------

    def _job_dir(self, j: Job) -> Path:
        return job_dir(self.out, j.task, j.arm.name, j.stamp)

    def _pending_networks(self, status: Any) -> int:
        """Our running jobs whose compose network does not exist yet (still building/starting)."""
        have = {n.project for n in status.networks if n.project}
        pending = 0
        for j in self.running:
            trials = list(iter_trial_dirs(job_dir(self.out, j.task, j.arm.name, j.stamp)))
            if not trials or not any(compose_project(t.name) in have for t in trials):
                pending += 1
        return pending

    def _gate_ok(self) -> bool:
        if self.cfg.env != "docker" or self.fleet is not None:  # on a cluster: each host's job gates
            return True
        now = time.monotonic()
        if self._gate_waiting_since is not None and now < self._gate_next_check:
            return False
        from runner.ops.docker_pool import pool_status, reclaim_empty_ours, verdict

        try:
            status = pool_status(self.out)
            v = verdict(
                status, 1 + self._pending_networks(status), cap=self.cfg.net_cap, margin=self.cfg.net_margin
            )
        except Exception as exc:  # noqa: BLE001 - engine down or a bad answer: wait and say so, never crash
            self._gate_wait_start(now)
            self.log.emit(EventKind.GATE_ERROR, error=f"{type(exc).__name__}: {exc}")
            return False
        self._retry_cleanups()  # the engine answers again
        if v.ok:
            if self._gate_waiting_since is not None:
                self.log.emit(
                    EventKind.GATE_OPEN, waited_sec=round(now - self._gate_waiting_since, 1), reason=v.reason
                )
                self._gate_waiting_since = None
            return True
        if self._gate_waiting_since is None:
            self.stats.gate_waits += 1
            self.log.emit(
                EventKind.GATE_WAIT,
                reason=v.reason,
                used=status.used,
                used_ours=status.used_ours,
                cap=v.cap,
                margin=v.margin,
            )
        self._gate_wait_start(now)
        running = {compose_project(t.name) for j in self.running for t in iter_trial_dirs(self._job_dir(j))}
        empty = {n.project for n in status.networks if n.ours and n.empty}
        # an empty network of a running trial may be one compose is about to attach to: leave them all
        if empty and not (empty & running):
            try:
                removed = reclaim_empty_ours(self.out)
            except UserError as exc:
                self.log.emit(EventKind.GATE_ERROR, error=str(exc))
                removed = []
            if removed:
                self.stats.reclaimed += removed
                self.log.emit(EventKind.RECLAIM, networks=removed)
        return False

    def _gate_wait_start(self, now: float) -> None:
        if self._gate_waiting_since is None:
            self._gate_waiting_since = now
        self._gate_next_check = now + self.gate_recheck_sec

    # --- finishing ----------------------------------------------------------------------------------

    def _reap(self) -> list[tuple[str, str, str]]:
        """Handle every job that exited; return the pairs to retry next pass with the reason."""
        failed = []
        for job in [j for j in self.running if j.poll()]:
            self.running.remove(job)
            try:
                why = self._finish(job)
            except Exception as exc:  # noqa: BLE001 - one job's bookkeeping must not stop the run
                why = f"runner error while finishing the job: {type(exc).__name__}: {exc}"
                self.log.emit(EventKind.INTERNAL_ERROR, task=job.task, arm=job.arm.name, stamp=job.stamp,
                              error=why, traceback=traceback.format_exc()[-4000:])  # fmt: skip
                with contextlib.suppress(Exception):
                    claimsmod.release(self.out, job.claim)
            if why is not None:
                failed.append((job.task, job.arm.name, why))
        return failed

    def _finish(self, job: Job, *, stopping: bool = False) -> str | None:
        """Record the outcome of one ended job; void it if infrastructure. Returns a retry reason or None."""
        self.finished.append(job)
        with contextlib.suppress(Exception):
            self.registry.unregister(job.pid)
        jdir = job_dir(self.out, job.task, job.arm.name, job.stamp)
        done = read_job(jdir).done  # the one reader of harbor's job result (runner.results.records)
        elapsed = round(time.monotonic() - job.started, 1)
        retry: str | None = None
        if not stopping:
            # harbor takes its environment down itself, unless the engine was away at that moment:
            # what it left is removed now (or once the engine answers again)
            self._cleanup(trials={t.name for t in iter_trial_dirs(jdir)})
        if done:
            self.stats.done += 1
            detail = self._score_detail(jdir)
            self.log.emit(EventKind.JOB_FINISH, task=job.task, arm=job.arm.name, stamp=job.stamp, status="done",
                          elapsed_sec=elapsed, returncode=job.returncode, detail=detail)  # fmt: skip
            if not stopping:
                self.breaker.success()
                self._failed.clear()
        else:
            # the voiding table (runner.results.rules.VOIDING) decides, the runner's own stop included
            v = classify_job(
                jdir,
                job.stamp_dir / HARBOR_LOG,
                stopped_by=(self.stop_reason or "stop") if stopping else None,
                deaths=self._deaths_for(job),
            )
            if self.fleet is not None and isinstance(job, self.RayJob):
                from runner.schedule.fleet.launch import classify

                v = classify(self.fleet, job, v)
            status = "void" if v.kind == "infra" else "errored"
            self.log.emit(EventKind.JOB_FINISH, task=job.task, arm=job.arm.name, stamp=job.stamp, status=status,
                          elapsed_sec=elapsed, returncode=job.returncode, detail=v.reason)  # fmt: skip
            if v.kind == "infra":
                self._void(job, v)
            else:
                self.stats.errored += 1
            if not stopping:
                self._breaker_observe(job, v)
            retry = v.reason
        if claimsmod.release(self.out, job.claim):
            self.log.emit(EventKind.CLAIM_RELEASE, task=job.task, arm=job.arm.name)
        return retry

    # --- the circuit breaker (runner.schedule.breaker) ------------------------------------------------------

    def _breaker_observe(self, job: Job, v: Verdict) -> None:
        """Feed one failed attempt to the breaker; pause the run when it trips, and void (on an
        infrastructure trip) every attempt of the wall, including those finishing after the trip."""
        if v.kind == "infra" and (engine_outage("\n".join(v.evidence)) or not self._engine_answers()):
            return  # the engine was down or restarted: the gate waits for it; no streak either way
        cls, msg = failure_of(v)
        if is_outcome(cls):  # a timeout or exhausted budget is the arm's result, not a wall
            self.breaker.success()
            self._failed.clear()
            return
        sig = signature(cls, msg, (job.task, v.trial or ""))
        att = Attempt(job.task, job.arm.name, job.stamp, sig, f"{cls}: {msg}"[:300])
        if v.kind != "infra":
            self._failed[job.stamp] = (job, v)
        before = self.breaker.tripped
        trip = self.breaker.failure(att)
        if trip is not None:
            self._pause(trip)
        elif before is not None and att in before.attempts and before.scope == SCOPE_INFRA:
            self._breaker_void(before, att)

    def _engine_answers(self) -> bool:
        """Does the Docker engine answer right now? An infrastructure failure while it does not is an
        outage (the gate waits it out), never evidence of a wall that should pause the run."""
        if self.cfg.env != "docker" or self.fleet is not None:
            return True
        from runner.ops.dockerapi import connect

        try:
            connect(timeout=10).close()
        except Exception:  # noqa: BLE001 - Unavailable or any engine error: it does not answer
            return False
        return True

    def _pause(self, trip: Trip) -> None:
        if trip.scope == SCOPE_INFRA:
            for att in trip.attempts:
                self._breaker_void(trip, att)
        self.log.emit(
            EventKind.RUN_PAUSED,
            reason=trip.reason(),
            failure=trip.signature,
            message=trip.message,
            scope=trip.scope,
            arms=trip.arms,
            pairs=trip.pairs,
            attempts=[{"task": a.task, "arm": a.arm, "stamp": a.stamp} for a in trip.attempts],
            k=self.breaker.k,
            voided=trip.scope == SCOPE_INFRA,
            n_running=len(self.running),
        )

    def _breaker_void(self, trip: Trip, att: Attempt) -> None:
        """Void one errored attempt of an infrastructure wall (infra ones are voided already)."""
        found = self._failed.pop(att.stamp, None)
        if found is None:
            return
        job, v = found
        if not job.stamp_dir.exists():
            return
        reason = f"circuit breaker ({len(trip.attempts)} alike in a row across arms): {att.message}"
        self._void(job, Verdict("infra", reason[:500], v.evidence, v.trial))
        self.stats.errored -= 1

    def _score_detail(self, jdir: Path) -> str:
        """The event's score line, from the results reader: a refused or tampered metrics file
        says so instead of its (forgeable) figures."""
        from runner.results import records as results

        for t in iter_trial_dirs(jdir):
            rec = results.read_trial(t)
            parts = [f"reward={rec.reward}"]
            m = rec.metrics
            if m.state in (results.TAMPERED, results.REFUSED):
                parts.append(f"{'tampered' if m.state == results.TAMPERED else 'unreadable'}: {m.error}")
            elif m.partial is not None:
                parts.append(f"partial={m.partial}")
            if m.build_failed:
                parts.append("BUILD FAILED (scored)")
            return " ".join(parts)
        return ""

    def _void(self, job: Job, v: Verdict) -> None:
        """Remove leftovers of the trial (so they do not vanish from cleanup's view), then move it aside."""
        jdir = job_dir(self.out, job.task, job.arm.name, job.stamp)
        self._cleanup(trials={t.name for t in iter_trial_dirs(jdir)})
        if not job.stamp_dir.exists():
            return
        plan = plan_void(self.out, jdir, v.reason, v.evidence)  # one trial per job: the whole attempt
        dest = act_void(plan, run_id=self.run_id)
        self.stats.voided += 1
        self.log.emit(EventKind.VOID, task=job.task, arm=job.arm.name, stamp=job.stamp, reason=v.reason, dest=str(dest),
                      evidence=v.evidence[:6])  # fmt: skip

    def _retry_cleanups(self) -> None:
        """Remove what an engine outage kept the void-time cleanup from removing. The trials may
        have been voided meanwhile: their projects stay ours (``runner.ops.docker_pool.our_projects``
        reads the voided attempts too)."""
        if self._cleanup_pending:
            self._cleanup(set(self._cleanup_pending))

    def _cleanup(self, trials: set[str]) -> None:
        """Remove this run's leftover containers/networks of the given trials (plan, then act).
        A failure here is reported as an event and never stops the runner."""
        if self.cfg.env != "docker" or not trials or self.fleet is not None:
            return  # on a cluster, each attempt's job removes its leftovers on its own host
        from runner.ops.cleanup import act_cleanup, plan_cleanup

        try:
            plan = plan_cleanup(self.out, trials=trials)
            if plan.empty:
                return
            self.log.emit(EventKind.CLEANUP_PLAN, plan=plan.render())
            report = act_cleanup(plan)
        except Exception as exc:  # noqa: BLE001 - Docker down, a safety-module change: report, go on
            self._cleanup_pending |= trials  # tried again once the engine answers, and at exit
            self.log.emit(
                EventKind.CLEANUP_ERROR, error=f"{type(exc).__name__}: {exc}", trials=sorted(trials)
            )
            return
        self._cleanup_pending -= trials
        self.log.emit(
            EventKind.CLEANUP,
            containers=len(report.removed_containers),
            networks=len(report.removed_networks),
            removed=report.removed_containers + report.removed_networks,
        )

    # --- stopping -----------------------------------------------------------------------------------

    def _shutdown(self, reason: str, all_pairs: list[tuple[str, str]]) -> int:
        if self.stop_reason is not None and self.running:
            self.log.emit(EventKind.STOP_REQUESTED, signal=self.stop_reason, n_running=len(self.running))
            for job in self.running:
                job.terminated = True
                job.signal(signal.SIGTERM)  # harbor maps SIGTERM to cancellation + environment teardown
            deadline = time.monotonic() + self.stop_grace_sec
            while any(not j.poll() for j in self.running) and time.monotonic() < deadline:
                time.sleep(0.2)
            for job in self.running:
                if not job.poll():
                    self.log.emit(EventKind.JOB_KILL, task=job.task, arm=job.arm.name, pid=job.pid)
                    job.signal(signal.SIGKILL, group=True)
            deadline = time.monotonic() + 10
            while any(not j.poll() for j in self.running) and time.monotonic() < deadline:
                time.sleep(0.1)
            ended = list(self.running)
            self.running.clear()
            trials = set()
            for job in ended:
                trials |= {
                    t.name for t in iter_trial_dirs(job_dir(self.out, job.task, job.arm.name, job.stamp))
                }
            self._cleanup(trials)
            for job in ended:
                try:
                    self._finish(job, stopping=True)
                except Exception as exc:  # noqa: BLE001 - finish the others, release every claim
                    self.log.emit(
                        EventKind.INTERNAL_ERROR,
                        task=job.task,
                        arm=job.arm.name,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    with contextlib.suppress(Exception):
                        claimsmod.release(self.out, job.claim)
        self._retry_cleanups()
        done = sum(1 for p in all_pairs if pair_done(self.out, *p))
        self.log.emit(
            EventKind.RUNNER_EXIT,
            reason=reason,
            done=done,
            total=len(all_pairs),
            started=self.stats.started,
            voided=self.stats.voided,
            errored=self.stats.errored,
            gate_waits=self.stats.gate_waits,
            paused=self.breaker.tripped.reason() if self.breaker.tripped else None,
        )
        if self.breaker.tripped is not None and self.stop_reason is None:
            return EXIT_PAUSED
        return 0


def failure_of(v: Verdict) -> tuple[str, str]:
    """(failure class, message) of a failed attempt: the trial's exception type and first message
    line when harbor recorded one, else the runner's own verdict (e.g. no trial was started)."""
    etype = msg = ""
    for line in v.evidence:
        if line.startswith("exception_type: ") and not etype:
            etype = line.removeprefix("exception_type: ")
        elif line.startswith("exception_message: ") and not msg:
            msg = line.removeprefix("exception_message: ")
    if etype:
        return etype, (msg.strip().splitlines() or [""])[0][:300]
    return v.kind, v.reason.splitlines()[0][:300] if v.reason else ""
