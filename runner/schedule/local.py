"""The local launcher: each attempt a ``harbor run`` child of this host, against this host's engine.

What is local about an attempt lives here and nowhere else in the scheduler: the held start
(``runner.ops.held``: registered in the process registry and the claim before harbor runs), the
adoption of a dead runner's harbor processes by their claims, the engine's container-death watch
(``runner.ops.death_watch``), the address-pool gate with its reclaim of empty networks of
ours (``runner.ops.docker_pool``), and the removal of what ended trials left (``runner.ops.cleanup``),
retried once an engine outage is over.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modes.naming import compose_project
from runner.errors import UserError
from runner.ops.held import start_held
from runner.ops.procs import ProcIdentity, Registry, alive, signal_process
from runner.ops.void import Verdict, classify_job
from runner.results.events import EventKind, EventLog, repeat_field
from runner.schedule import claims as claimsmod
from runner.schedule.attempt import Attempt, Unit, new_stamp
from runner.schedule.config import ArmSpec, RunConfig
from runner.schedule.gateway import end_attempt, gateway_on, key_var_of, settings_for, wire_attempt
from runner.schedule.harbor_run import ROLE_HARBOR, harbor_argv, job_env
from runner.schedule.lock import Holder
from runner.schedule.task_images import TaskImage, write_attempt_image
from runner.secrets import screen_all


@dataclass(kw_only=True)
class LocalAttempt(Attempt):
    """A harbor process of this host: our child, or (adopted) a dead runner's, known by identity."""

    ident: ProcIdentity | None = None  # None: adopted without identity (never signalled)
    proc: subprocess.Popen | None = None  # None for an adopted attempt (started by a dead runner)

    def poll(self) -> bool:
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
class LocalLauncher:
    """Attempts as this host's harbor children (see the module docstring)."""

    cfg: RunConfig
    log: EventLog
    holder: Holder
    specs: dict[str, ArmSpec]
    mounts: dict[str, str | None]  # harbor --mounts per arm (``harbor_run.arm_mounts``)
    gate_recheck_sec: float = 2.0
    gate_waits: int = 0
    reclaimed: list[str] = field(default_factory=list)
    deaths: Any = None  # runner.ops.death_watch.DeathWatch on this host's engine
    _gate_waiting_since: float | None = None
    _gate_next_check: float = 0.0
    _engine_root: str | None = None  # the engine's data root (``runner.ops.disk``), once it answered
    _engine_root_known: bool = False
    _cleanup_pending: set[str] = field(default_factory=set)  # trials whose leftovers could not be removed yet
    gateway_check_sec: float = 1.0
    _gateway_next_check: float = 0.0

    def __post_init__(self) -> None:
        self.out = self.cfg.out
        self.registry = Registry(self.out)
        self.gateway = gateway_on(self.cfg)
        if self.gateway:  # only the gateway needs the real key: no other child of the runner inherits it
            from runner.ops.gateway.process import hold_key

            hold_key(key_var_of(self.cfg))
        self._job_env = job_env()  # without the key: hold_key took it out of this environment
        self.docker = self.cfg.env == "docker"  # harbor's local Docker: the engine is this host's

    # --- a run's life ------------------------------------------------------------------------------

    def begin(self) -> None:
        """Follow the engine's container deaths before the first attempt starts, so a trial container
        killed under harbor's verifier is voided, not scored (``runner.ops.death_watch``)."""
        if self.docker:
            from runner.ops.death_watch import DeathWatch

            self.deaths = DeathWatch().start()
        if self.gateway:
            self._ensure_gateway(first=True)

    def close(self, still_running: bool = False) -> None:
        if self.deaths is not None:
            self.deaths.stop()
        if self.gateway and not still_running:  # (else their calls go on through it; the runner
            # that adopts them finds it serving: stopped here, it cut every call of the attempts a
            # runner left running when it ended on an error, a full disk's (found by a probe))
            from runner.ops.gateway.process import stop

            with contextlib.suppress(Exception):  # the attempts have ended: nothing needs it now
                self.log.emit(EventKind.GATEWAY_STOP, result=stop(self.out))

    # --- the model gateway (runner.ops.gateway) --------------------------------------------------

    def _ensure_gateway(self, first: bool = False) -> bool:
        """The tree's gateway serves: at the start, the running one or a new one; later, one that
        died without being asked to is restarted (``restart_if_failed``: the attempts it served are
        voided by the voiding table's ``gateway_failed`` row, from the outage this records)."""
        from runner.errors import UserError
        from runner.ops.gateway.process import ensure, restart_if_failed

        try:
            if first:
                st, started = ensure(self.out, settings_for(self.cfg), by="runner")
            else:
                new = restart_if_failed(self.out, settings_for(self.cfg), by="runner")
                if new is None:
                    return True
                st, started = new, True
        except UserError as exc:
            self.log.emit(EventKind.GATEWAY_ERROR, error=str(exc))
            if first:
                raise
            return False
        if first:
            self.log.emit(EventKind.GATEWAY_START, pid=st.pid, upstream=st.upstream, reused=not started)
        elif started:
            self.log.emit(EventKind.GATEWAY_RESTART, pid=st.pid, upstream=st.upstream)
        return True

    def tend(self, running: list[Attempt]) -> None:
        """Once a second: the gateway still serves (restarted if not)."""
        now = time.monotonic()
        if not self.gateway or now < self._gateway_next_check:
            return
        self._gateway_next_check = now + self.gateway_check_sec
        self._ensure_gateway()

    # --- starting -----------------------------------------------------------------------------------

    def prepare_image(self, task: str, started: Callable[[subprocess.Popen], None]) -> TaskImage | None:
        """Build (or verify) the task's image on this host's engine, once for the run."""
        from runner.schedule import task_images as ti

        assert self.cfg.tasks_dir is not None
        if not self.docker or not ti.wants_image(self.cfg.tasks_dir / task):
            return None
        made = ti.build_or_verify(self.cfg.tasks_dir, task, ti.read_record(self.out, task),
                                  build_network=self.cfg.build_network, started=started)  # fmt: skip
        return ti.finish(self.out, self.cfg.tasks_dir, made)

    def runs_elsewhere(self, task: str, arm: str, repeat: int = 1) -> bool:
        return False  # a dead runner's harbor here holds its claim: the claim says so

    def start(self, task: str, arm: ArmSpec, claim: claimsmod.Claim, image: TaskImage | None) -> Attempt:
        stamp = new_stamp(self.out / task / arm.name, claim.repeat)
        att = LocalAttempt(task, arm, stamp, claim, self.out, time.monotonic())
        att.stamp_dir.mkdir(parents=True)
        mounts, env = self.mounts.get(arm.name), self._job_env
        wiring = wire_attempt(self.cfg, task, arm, stamp) if self.gateway else None
        if wiring is not None:  # a per-attempt token and socket (runner.schedule.gateway)
            mounts, env = wiring.mounts(mounts), wiring.env(env)
        if image is not None:
            write_attempt_image(att.stamp_dir, image)
        argv = harbor_argv(self.cfg, task, arm, att.stamp_dir, mounts,
                           task_dir=Path(image.task_dir) if image else None)  # fmt: skip
        if wiring is not None:
            argv += wiring.agent_kwargs()
        screen_all(("harbor argv", a) for a in argv)  # e.g. staged mounts: nothing unscreened starts
        # held at a gate until the registry and the claim name it (runner.ops.held): a runner killed
        # in between leaves no harbor that nothing recorded, so a restart never starts a duplicate
        try:
            with open(att.harbor_log, "ab") as logfh:
                held = start_held(argv, stdout=logfh, stderr=subprocess.STDOUT, cwd=str(self.out), env=env)
        except BaseException:
            if wiring is not None:
                end_attempt(self.out, task, arm.name, stamp, "harbor did not start")
            raise
        proc = held.proc
        try:
            with contextlib.suppress(ProcessLookupError):
                self.registry.register(proc.pid, ROLE_HARBOR, argv, task=task, arm=arm.name)
            ref = claimsmod.job_ref(proc.pid, stamp)  # our unreaped child: present even if it exited
            att.claim = claimsmod.set_job(self.out, claim, ref)
            if wiring is not None:  # a killed attempt's token is refused at once
                from runner.ops.gateway.attempts import set_harbor

                set_harbor(self.out, wiring.attempt_id, proc.pid)
        except BaseException:
            held.abort()  # it exits without running harbor
            proc.wait()
            if wiring is not None:
                end_attempt(self.out, task, arm.name, stamp, "harbor did not start")
            raise
        held.release()
        att.pid, att.ident, att.proc, att.started = proc.pid, ref.ident, proc, time.monotonic()
        self.log.emit(EventKind.JOB_START, task=task, arm=arm.name, stamp=stamp, pid=proc.pid, argv=argv,
                      **repeat_field(claim.repeat))  # fmt: skip
        return att

    def adopt(self, units: set[Unit], running: set[Unit]) -> list[Attempt]:
        """A dead runner's harbor jobs that still run (their claims are orphans): wait for them."""
        adopted: list[Attempt] = []
        for c in claimsmod.list_claims(self.out):
            if c.unit not in units or c.unit in running or c.state != claimsmod.ORPHAN or c.job is None:
                continue
            res = claimsmod.try_claim(self.out, c.task, c.arm, self.holder, adopt=True, repeat=c.repeat)
            if not res.acquired or res.claim is None or res.claim.job is None:
                continue
            j = res.claim.job
            adopted.append(LocalAttempt(c.task, self.specs[c.arm], j.stamp, res.claim, self.out,
                                        time.monotonic(), pid=j.pid, ident=j.ident))  # fmt: skip
            self.log.emit(EventKind.ADOPT, task=c.task, arm=c.arm, stamp=j.stamp, pid=j.pid,
                          was=c.holder.describe(), **repeat_field(c.repeat))  # fmt: skip
        return adopted

    # --- the network gate ---------------------------------------------------------------------------

    def _pending_networks(self, status: Any, running: list[Attempt]) -> int:
        """Our running attempts whose compose network does not exist yet (still building/starting)."""
        have = {n.project for n in status.networks if n.project}
        return sum(1 for a in running if not any(compose_project(t) in have for t in a.trials()))

    def may_start(self, running: list[Attempt]) -> bool:
        """The gates, without blocking: the disks' headroom (``runner.ops.disk``), then the address
        pool (``runner.ops.docker_pool.verdict``). While the pool's waits, empty networks of ours
        are reclaimed; either is asked again every ``gate_recheck_sec``."""
        now = time.monotonic()
        if self._gate_waiting_since is not None and now < self._gate_next_check:
            return False
        if not self._disk_ok(now):
            return False
        if not self.docker:
            self._gate_opened(now, "disk: room again")
            return True
        from runner.ops.docker_pool import pool_status, reclaim_empty_ours, verdict

        try:
            status = pool_status(self.out)
            v = verdict(
                status,
                1 + self._pending_networks(status, running),
                cap=self.cfg.net_cap,
                margin=self.cfg.net_margin,
            )
        except Exception as exc:  # noqa: BLE001 - engine down or a bad answer: wait and say so, never crash
            self._gate_wait_start(now)
            self.log.emit(EventKind.GATE_ERROR, error=f"{type(exc).__name__}: {exc}")
            return False
        self.tidy(set())  # the engine answers again: what an outage kept from being removed
        if v.ok:
            self._gate_opened(now, v.reason)
            return True
        if self._gate_waiting_since is None:
            self.gate_waits += 1
            self.log.emit(
                EventKind.GATE_WAIT,
                reason=v.reason,
                used=status.used,
                used_ours=status.used_ours,
                cap=v.cap,
                margin=v.margin,
            )
        self._gate_wait_start(now)
        in_use = {compose_project(t) for a in running for t in a.trials()}
        empty = {n.project for n in status.networks if n.ours and n.empty}
        # an empty network of a running trial may be one compose is about to attach to: leave them all
        if empty and not (empty & in_use):
            try:
                removed = reclaim_empty_ours(self.out)
            except UserError as exc:
                self.log.emit(EventKind.GATE_ERROR, error=str(exc))
                removed = []
            if removed:
                self.reclaimed += removed
                self.log.emit(EventKind.RECLAIM, networks=removed)
        return False

    def _gate_opened(self, now: float, reason: str) -> None:
        if self._gate_waiting_since is not None:
            self.log.emit(
                EventKind.GATE_OPEN, waited_sec=round(now - self._gate_waiting_since, 1), reason=reason
            )
            self._gate_waiting_since = None

    def _disk_ok(self, now: float) -> bool:
        from runner.ops.disk import ask_engine_root, verdict

        if not self.cfg.min_free_gb:
            return True
        if self.docker and not self._engine_root_known:  # asked until the engine answers once
            self._engine_root_known, self._engine_root = ask_engine_root()
        v = verdict(self.out, self._engine_root, self.cfg.min_free_gb)
        if v.ok:
            return True
        if self._gate_waiting_since is None:
            self.gate_waits += 1
            self.log.emit(EventKind.GATE_WAIT, reason=v.reason)
        self._gate_wait_start(now)
        return False

    def _gate_wait_start(self, now: float) -> None:
        if self._gate_waiting_since is None:
            self._gate_waiting_since = now
        self._gate_next_check = now + self.gate_recheck_sec

    # --- finishing ----------------------------------------------------------------------------------

    def ended(self, attempt: Attempt, *, stopping: bool) -> None:
        with contextlib.suppress(Exception):
            self.registry.unregister(attempt.pid)
        if self.gateway:  # its token is refused from now on
            with contextlib.suppress(Exception):
                end_attempt(self.out, attempt.task, attempt.arm.name, attempt.stamp,
                            "stopped by the runner" if stopping else "ended")  # fmt: skip
        if not stopping:
            # harbor takes its environment down itself, unless the engine was away at that moment:
            # what it left is removed now (or once the engine answers again)
            self.tidy(attempt.trials())

    def classify(self, attempt: Attempt, stopped_by: str | None) -> Verdict:
        return classify_job(attempt.job_dir, attempt.harbor_log, stopped_by=stopped_by, deaths=self.deaths)

    def engine_answers(self) -> bool:
        """An infrastructure failure while the engine does not answer is an outage (the gate waits
        it out), never evidence of a wall that should pause the run."""
        if not self.docker:
            return True
        from runner.ops.dockerapi import connect

        try:
            connect(timeout=10).close()
        except Exception:  # noqa: BLE001 - Unavailable or any engine error: it does not answer
            return False
        return True

    def tidy(self, trials: set[str]) -> None:
        """Remove this run's leftover containers/networks of the given trials, and of those an engine
        outage kept an earlier call from removing (plan, then act). Those may have been voided
        meanwhile: their projects stay ours (``runner.ops.docker_pool.our_projects`` reads the voided
        attempts too). A failure here is reported as an event and never stops the runner."""
        trials = set(trials) | self._cleanup_pending
        if not self.docker or not trials:
            return
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
