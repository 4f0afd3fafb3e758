"""``marathon run``: the queue of (task, arm) pairs, claims, passes, voiding and the circuit breaker.

Why: a full run is 15-20 tasks x 5 arms for a day, up to 12 jobs at once. The driver must be
restartable at any moment without losing or duplicating work, treat every arm the same way, and
keep infrastructure failures from posing as differences in capability. With ``--repeats K`` the
unit of work is one repeat of a pair, ``(task, arm, repeat)``: K independent attempts per pair, each
done exactly once, queued repeat by repeat (every pair's first repeat, then every pair's second...).
So, per unit and pass:

  done?  (runner.results.rules.is_done on the job result.json)        -> skip
  claim  (O_CREAT|O_EXCL; stale taken over; orphan job adopted) -> else skip
  image  the task's image built once (runner.schedule.image_prep)    -> wait; failed -> next pass
  gate   (the launcher's: this host's address pool, or Ray's slots)  -> wait, with events
  start  one attempt through the launcher (a harbor child, a Ray job) -> one job = one trial
  after: done -> next; infrastructure -> void + retry next pass; other error -> retry next pass

*Where* an attempt runs is the launcher's (``runner.schedule.attempt.Launcher``: this host's
``runner.schedule.local`` or a cluster's ``runner.schedule.fleet.launch``), chosen once per run;
nothing below branches on it. Every step is an event in ``<out>/.runner/events.jsonl``. On
SIGTERM/SIGINT/SIGHUP the driver stops starting, asks each attempt to stop (harbor cancels and tears
its environment down), has the launcher remove what is left of them, voids the cancelled attempts,
releases its claims, exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from runner.ops.gateway.process import held, hold_key
from runner.ops.procs import DEFAULT_GRACE_SEC, Registry
from runner.ops.void import Verdict, act_void, classify_job, plan_void
from runner.results import caps as capsmod
from runner.results.events import EventKind, EventLog, new_run_id, repeat_field
from runner.results.ledger import outage_of
from runner.results.records import read_job
from runner.results.rules import engine_outage
from runner.results.scan import (
    pair_done,  # the model's reading of done: the runner never disagrees with status
)
from runner.results.tree import iter_trial_dirs, job_dir, jobs_dir, make_tree_id, unit_label
from runner.schedule import claims as claimsmod
from runner.schedule.attempt import HARBOR_LOG, Attempt, Launcher, Unit
from runner.schedule.breaker import EXIT_PAUSED, SCOPE_INFRA, Breaker, Trip, is_outcome, signature
from runner.schedule.breaker import Attempt as Failure
from runner.schedule.config import RunConfig, as_dict, chosen_tasks, write_driver_env
from runner.schedule.gateway import caps_of, gateway_on, key_var_of
from runner.schedule.harbor_run import arm_mounts
from runner.schedule.image_prep import FAILED, PENDING, ImagePrep
from runner.schedule.launchers import launcher_for
from runner.schedule.lock import RunnerLock, me
from runner.version import marathon_version


@dataclass
class Stats:
    started: int = 0
    done: int = 0
    voided: int = 0
    errored: int = 0


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
        self._alive_at = time.monotonic()  # (its start is a line of its own)
        self.gate_recheck_sec = gate_recheck_sec
        self.stop_grace_sec = stop_grace_sec
        self.resumed = resumed
        self.holder = me(self.run_id)
        self.registry = Registry(self.out)
        self.running: list[Attempt] = []
        self.finished: list[Attempt] = []
        self.stop_reason: str | None = None
        self.stats = Stats()
        self.specs = {s.name: s for s in cfg.arm_specs()}
        self._mounts: dict[str, str | None] = {}
        self.preflight_notes: list = []
        self.breaker = Breaker(cfg.breaker_k)
        #: stamp -> a failed attempt the breaker may void
        self._failed: dict[str, tuple[Attempt, Verdict]] = {}
        #: where attempts run (runner.schedule.attempt.Launcher), chosen once in ``run()``
        self.launcher: Launcher
        #: each task's image, made once by the launcher in the background (runner.schedule.image_prep)
        self.images: ImagePrep | None = None
        #: repeats of pairs that could not start this pass (their task's image failed): retried next pass
        self._unstarted: list[tuple[Unit, str]] = []
        #: the operator's purse (runner.results.caps): the caps, the spend read from the ledger, and
        #: the caps reached (the run's: nothing starts; an arm's: nothing of that arm starts)
        self.caps = caps_of(cfg)
        self.tally: capsmod.Tally | None = None
        self.capped_run: capsmod.Reached | None = None
        self.capped_arms: dict[str, capsmod.Reached] = {}
        self.spend_paused: str | None = None  # the run_paused reason when a cap paused the run

    # --- setup ---------------------------------------------------------------------------------

    def tasks(self) -> list[str]:
        assert self.cfg.tasks_dir is not None
        return chosen_tasks(self.cfg.tasks_dir, self.cfg.tasks)

    def pairs(self, tasks: list[str]) -> list[tuple[str, str]]:
        arms = list(self.specs)
        if self.cfg.arm_major:
            return [(t, a) for a in arms for t in tasks]
        return [(t, a) for t in tasks for a in arms]

    def units(self, tasks: list[str]) -> list[Unit]:
        """Every repeat of every pair, repeat by repeat: a run stopped early has its first repeats
        of every pair, not all repeats of some pairs."""
        pairs = self.pairs(tasks)
        return [(t, a, r) for r in range(1, self.cfg.repeats + 1) for t, a in pairs]

    def preflight(self, retry: str | None = None) -> list[str]:
        """Everything that can be refused before touching the tree (``runner.schedule.preflight``, the
        same check ``health --fix``, the console and the demo run); returns the tasks to run."""
        from runner.schedule import preflight

        hint = retry or self.retry or preflight.retry_run(self.out, self.resumed)
        # the key was taken out of this environment before the preflight's children (codex --version)
        # ran; the preflight still sees that it is there
        self.preflight_notes = preflight.require(self.cfg, {**os.environ, **held()}, retry=hint)
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
        if gateway_on(self.cfg):  # only the gateway needs the real key: no other child of the runner
            hold_key(key_var_of(self.cfg))  # inherits it, the preflight's probes included
        tasks = self.preflight()
        modified = self.check_dataset(tasks)
        self.launcher = launcher_for(
            self.cfg, self.log, self.holder, self.specs, self._mounts, gate_recheck_sec=self.gate_recheck_sec
        )
        self.out.mkdir(parents=True, exist_ok=True)
        lock = RunnerLock(self.out, self.run_id)
        lock.acquire()
        make_tree_id(self.out)  # a fresh tree's own id: where its voided trials go (tree.voided_root)
        old_handlers = self._install_signals()
        try:
            if modified:
                from runner.schedule.config import with_changes

                self.cfg = with_changes(self.cfg, modified_tasks=tuple(modified))
            write_driver_env(self.cfg)
            if gateway_on(self.cfg):  # before any attempt: every host's gateway keeps them too
                capsmod.write_caps(self.out, self.caps)
            if self.caps.purse:  # the attempts' own cap is their gateway's to keep
                self.tally = capsmod.Tally(self.out, self.caps.pricer())
            self.registry.register(os.getpid(), "runner", list(sys.argv))
            all_units = self.units(tasks)
            already: dict[str, list[str]] = {a: [] for a in self.specs}  # per arm: "task" / "task@r2"
            for unit in all_units:
                if _done(self.out, unit):
                    already[unit[1]].append(unit_label(unit[0], None, unit[2]))
            self.log.emit(
                EventKind.RUNNER_START,
                pid=os.getpid(),
                host=self.holder.host,
                resumed=self.resumed,
                took_over_lock=lock.took_over.describe() if lock.took_over else None,
                arms=list(self.specs),
                tasks=tasks,
                repeats=self.cfg.repeats,
                n_pairs=len(all_units),
                pairs_per_arm={a: len(tasks) * self.cfg.repeats for a in self.specs},
                already_done=already,
                concurrency=self.cfg.concurrency,
                config=as_dict(self.cfg),
                marathon=marathon_version(),
            )
            if modified:
                self.log.emit(EventKind.DATASET_MODIFIED, tasks=modified, allow_modified=True)
            for note in self.preflight_notes:
                self.log.emit(EventKind.PREFLIGHT_NOTE, check=note.check, what=note.what, todo=note.todo)
            self.launcher.begin()
            self.running += self.launcher.adopt(set(all_units), {j.unit for j in self.running})
            self.images = ImagePrep(self.launcher.prepare_image)
            self.images.want(
                list(dict.fromkeys(t for t, a, r in all_units if not _done(self.out, (t, a, r))))
            )
            reason = self._passes(all_units)
            return self._shutdown(reason, all_units)
        finally:
            if self.images is not None:
                self.images.close()
                self._image_news()
            self.launcher.close(still_running=self._any_running())
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            with contextlib.suppress(Exception):
                self.registry.unregister(os.getpid())
            lock.release()

    def _alive(self) -> None:
        """A ``runner_alive`` event every ``ALIVE_SEC`` while the runner works (hours may pass with
        no other line while attempts run): a runner that dies without its exit line (kill -9, a full
        disk) worked until its last event, and the run's rates are over the time its runners worked
        (a review found the hours to a resume the next day counted as worked)."""
        now = time.monotonic()
        if now - self._alive_at >= ALIVE_SEC:
            self._alive_at = now
            self.log.emit(EventKind.RUNNER_ALIVE, n_running=len(self.running))

    def _any_running(self) -> bool:
        """Does an attempt this runner followed still run (at its exit: after an error, a full disk)?
        When it cannot tell, yes: what they need is kept for the runner that adopts them."""
        try:
            return any(not j.poll() for j in self.running)
        except Exception:  # noqa: BLE001 - at exit, after another error
            return bool(self.running)

    def _install_signals(self) -> dict:
        old = {}

        def handler(signum, _frame):
            if self.stop_reason is None:
                self.stop_reason = signal.Signals(signum).name

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            old[sig] = signal.signal(sig, handler)
        return old

    def _release_stale_claims_of_done_units(self, all_units: list[Unit]) -> None:
        """A dead runner's claim on a repeat that is done: its orphan harbor finished it before a
        restarted runner could adopt it (after ``kill -9`` and ``health --fix``). Nothing will run
        it again, so the claim is released here, as ``health --fix`` would (only while it is
        still exactly that claim and still stale)."""
        wanted = set(all_units)
        for c in claimsmod.list_claims(self.out):
            if c.unit in wanted and c.state == claimsmod.STALE and _done(self.out, c.unit):
                if claimsmod.remove_stale(self.out, c):
                    self.log.emit(EventKind.CLAIM_RELEASE, task=c.task, arm=c.arm, stale_of=c.holder.describe(),
                                  **repeat_field(c.repeat))  # fmt: skip

    def _passes(self, all_units: list[Unit]) -> str:
        for pass_no in range(1, self.cfg.max_passes + 1):
            self._release_stale_claims_of_done_units(all_units)
            queue = [p for p in all_units if not _done(self.out, p) and not self._is_running(p)]
            if not queue and not self.running:
                return "all pairs done"
            self.log.emit(EventKind.PASS_START, pass_no=pass_no, n_pairs=len(queue))
            if self.images is not None and pass_no > 1:
                self.images.retry_failed()
            failed: list[tuple[Unit, str]] = []
            while (queue or self.running) and self.stop_reason is None:
                self._alive()
                self.launcher.tend(self.running)
                failed += self._reap()
                self._check_caps()
                if (self.breaker.tripped is not None or self.capped_run is not None) and not self.running:
                    break  # paused: the in-flight pairs have finished
                self._fill(queue)
                failed += self._unstarted
                self._unstarted = []
                if self.stop_reason is None and (queue or self.running):
                    time.sleep(self.poll_sec)
            if self.stop_reason is not None:
                return f"stopped by {self.stop_reason}"
            if self.breaker.tripped is not None:
                return f"paused by the circuit breaker: {self.breaker.tripped.reason()}"
            if self.capped_run is not None:
                return f"paused: {self.capped_run.text()}"
            left = [p for p in all_units if not _done(self.out, p)]
            if left and all(arm in self.capped_arms for _t, arm, _r in left):
                # the rest is of capped arms only: nothing more can start
                reached = [self.capped_arms[a] for a in dict.fromkeys(arm for _t, arm, _r in left)]
                self._pause_spend(reached)
                return f"paused: {'; '.join(r.text() for r in reached)}"
            self.log.emit(
                EventKind.PASS_END, pass_no=pass_no, done=len(all_units) - len(left), left=len(left)
            )
            for (task, arm, repeat), why in failed:
                if pass_no < self.cfg.max_passes:
                    self.log.emit(EventKind.RETRY, task=task, arm=arm, next_pass=pass_no + 1, reason=why,
                                  **repeat_field(repeat))  # fmt: skip
            if not left:
                return "all pairs done"
        return f"max passes ({self.cfg.max_passes}) reached"

    def _is_running(self, unit: Unit) -> bool:
        return any(j.unit == unit for j in self.running)

    # --- starting ---------------------------------------------------------------------------------

    def _image_news(self) -> None:
        """Journal what the image worker finished since the last look (from this thread only)."""
        assert self.images is not None
        for o in self.images.news():
            if o.state == FAILED:
                self.log.emit(EventKind.IMAGE_FAILED, task=o.task, error=o.error[-3000:])
            elif o.image is not None:
                i = o.image
                self.log.emit(EventKind.IMAGE_READY, task=o.task, image_id=i.image_id, tag=i.tag,
                              content_sha256=i.content_sha256, how=i.how, seconds=i.seconds,
                              task_dir=i.task_dir, hosts=sorted(i.hosts.values()) or None,
                              not_on=i.not_on or None)  # fmt: skip

    def _fill(self, queue: list[Unit]) -> None:
        if self.images is not None:
            self._image_news()
        while (
            queue
            and len(self.running) < self.cfg.concurrency
            and self.stop_reason is None
            and self.breaker.tripped is None
            and self.capped_run is None
        ):
            task, arm, repeat = queue[0]
            rep = repeat_field(repeat)
            if _done(self.out, queue[0]):
                queue.pop(0)
                self.log.emit(EventKind.SKIP_DONE, task=task, arm=arm, **rep)
                continue
            if arm in self.capped_arms:
                queue.pop(0)  # its arm's spend cap is reached: it waits for a resume with a higher cap
                continue
            if self.launcher.runs_elsewhere(task, arm, repeat):
                queue.pop(0)
                self.log.emit(EventKind.CLAIM_HELD, task=task, arm=arm, holder="a Ray job of this tree",
                              state="live", **rep)  # fmt: skip
                continue
            assert self.images is not None
            state, outcome = self.images.state(task)
            self._image_news()
            if state == PENDING:
                return  # its image is being made: the pairs behind it wait too (queue order)
            if state == FAILED:
                queue.pop(0)
                assert outcome is not None
                self._unstarted.append(
                    ((task, arm, repeat), f"no image: {outcome.error.splitlines()[0][:300]}")
                )
                continue
            image = outcome.image if outcome is not None else None
            if not self.launcher.may_start(self.running):
                return
            res = claimsmod.try_claim(self.out, task, arm, self.holder, repeat=repeat)
            queue.pop(0)
            if not res.acquired:
                assert res.claim is not None
                self.log.emit(
                    EventKind.CLAIM_HELD,
                    task=task,
                    arm=arm,
                    holder=res.claim.holder.describe(),
                    state=res.claim.state,
                    **rep,
                )
                continue
            assert res.claim is not None
            if res.replaced is not None:
                self.log.emit(
                    EventKind.CLAIM_TAKEOVER, task=task, arm=arm, was=res.replaced.holder.describe(), **rep
                )
                self._void_abandoned(task, arm, res.replaced)
            try:
                self.running.append(self.launcher.start(task, self.specs[arm], res.claim, image))
                self.stats.started += 1
            except Exception as exc:  # noqa: BLE001 - e.g. disk full: release, retry next pass, go on
                self.log.emit(
                    EventKind.INTERNAL_ERROR,
                    task=task,
                    arm=arm,
                    error=f"could not start: {type(exc).__name__}: {exc}",
                    **rep,
                )
                claimsmod.release(self.out, res.claim)

    # --- finishing ----------------------------------------------------------------------------------

    def _reap(self) -> list[tuple[Unit, str]]:
        """Handle every job that exited; return the units to retry next pass with the reason."""
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
                failed.append((job.unit, why))
        return failed

    def _finish(self, job: Attempt, *, stopping: bool = False, stopped_by: str | None = None) -> str | None:
        """Record the outcome of one ended job; void it if infrastructure. Returns a retry reason or None.
        ``stopping``: the runner stopped it (``stopped_by``: why, else the signal that stops the run)."""
        self.finished.append(job)
        self.launcher.ended(job, stopping=stopping)
        done = read_job(job.job_dir).done  # the one reader of harbor's job result (runner.results.records)
        if done and outage_of(self.out, job.task, job.arm.name, job.stamp) is not None:
            done = False  # its gateway died under it: voided by the table's gateway_failed row, not scored
        cut = capsmod.cut_of(self.out, job.task, job.arm.name, job.stamp)
        if done and cut:
            done = False  # a spend cap stopped it (--on-cap stop): voided by the spend_cap_stopped row
        stop_reason = (stopped_by or self.stop_reason or "stop") if stopping else None
        v: Verdict | None = None
        if done and stopping:
            # harbor has counted a trial it was cancelling as completed without an exception (its job
            # said done, "reward=None"): the runner stopped it, so the trials decide (the voiding
            # table's stopped_unverified row: no finished verifier, no score)
            v = self.launcher.classify(job, stop_reason)
            done = v.kind == "done"
        elapsed = round(time.monotonic() - job.started, 1)
        retry: str | None = None
        if done:
            self.stats.done += 1
            detail = self._score_detail(job.job_dir)
            self.log.emit(EventKind.JOB_FINISH, task=job.task, arm=job.arm.name, stamp=job.stamp, status="done",
                          elapsed_sec=elapsed, returncode=job.returncode, detail=detail,
                          **repeat_field(job.repeat))  # fmt: skip
            if not stopping:
                self.breaker.success()
                self._failed.clear()
        else:
            # the voiding table (runner.results.rules.VOIDING) decides, the runner's own stop included
            v = v or self.launcher.classify(job, stop_reason)
            status = "void" if v.kind == "infra" else "errored"
            self.log.emit(EventKind.JOB_FINISH, task=job.task, arm=job.arm.name, stamp=job.stamp, status=status,
                          elapsed_sec=elapsed, returncode=job.returncode, detail=v.reason,
                          **repeat_field(job.repeat))  # fmt: skip
            if v.kind == "infra":
                self._void(job, v)
            else:
                self.stats.errored += 1
            if not stopping and not cut:  # a cap's cut is the operator's, never a wall
                self._breaker_observe(job, v)
            retry = v.reason
        if claimsmod.release(self.out, job.claim):
            self.log.emit(
                EventKind.CLAIM_RELEASE, task=job.task, arm=job.arm.name, **repeat_field(job.repeat)
            )
        return retry

    # --- the circuit breaker (runner.schedule.breaker) ------------------------------------------------------

    def _breaker_observe(self, job: Attempt, v: Verdict) -> None:
        """Feed one failed attempt to the breaker; pause the run when it trips, and void (on an
        infrastructure trip) every attempt of the wall, including those finishing after the trip."""
        if v.kind == "infra" and (engine_outage("\n".join(v.evidence)) or not self.launcher.engine_answers()):
            return  # the engine was down or restarted: the gate waits for it; no streak either way
        cls, msg = failure_of(v)
        if is_outcome(cls):  # a timeout or exhausted budget is the arm's result, not a wall
            self.breaker.success()
            self._failed.clear()
            return
        sig = signature(cls, msg, (job.task, v.trial or ""))
        att = Failure(job.task, job.arm.name, job.stamp, sig, f"{cls}: {msg}"[:300])
        if v.kind != "infra":
            self._failed[job.stamp] = (job, v)
        before = self.breaker.tripped
        trip = self.breaker.failure(att)
        if trip is not None:
            self._pause(trip)
        elif before is not None and att in before.attempts and before.scope == SCOPE_INFRA:
            self._breaker_void(before, att)

    def _pause(self, trip: Trip) -> None:
        if trip.scope == SCOPE_INFRA:
            for att in trip.attempts:
                self._breaker_void(trip, att)
        self.log.emit(
            EventKind.RUN_PAUSED,
            cause="circuit breaker",
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

    def _breaker_void(self, trip: Trip, att: Failure) -> None:
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

    # --- the spend caps (runner.results.caps) ------------------------------------------------------------

    def _check_caps(self) -> None:
        """Read the ledger's new lines; at a cap reached for the first time: journal it, stop starting
        (the run's cap pauses the run now), and under ``--on-cap stop`` stop the attempts it covers."""
        if self.tally is None or self.capped_run is not None:
            return
        self.tally.update()
        for r in self.tally.reached(self.caps, self.specs):
            if r.scope == capsmod.RUN:
                self.capped_run = r
                jobs = list(self.running)
            elif r.arm not in self.capped_arms:
                self.capped_arms[r.arm or ""] = r
                jobs = [j for j in self.running if j.arm.name == r.arm]
            else:
                continue
            stop = self.caps.on_cap == capsmod.STOP
            self.log.emit(EventKind.SPEND_CAP, scope=r.scope, arm=r.arm, spent_usd=round(r.spent, 6),
                          cap_usd=r.cap, on_cap=self.caps.on_cap, text=r.text(),
                          running=[{"task": j.task, "arm": j.arm.name, "stamp": j.stamp} for j in jobs])  # fmt: skip
            if r.scope == capsmod.RUN:
                self._pause_spend([r])
            if stop and jobs:
                capsmod.write_cut(self.out, r, [(j.task, j.arm.name, j.stamp) for j in jobs])
                self._stop_jobs(jobs, r.code)
            if r.scope == capsmod.RUN:
                return

    def _pause_spend(self, reached: list[capsmod.Reached]) -> None:
        if self.spend_paused is not None:
            return
        self.spend_paused = "; ".join(r.text() for r in reached) + (
            " -- raise the cap to go on: marathon run OUT --resume --max-spend USD (or --max-spend-arm)"
        )
        self.log.emit(
            EventKind.RUN_PAUSED,
            cause="spend cap",
            reason=self.spend_paused,
            scope="spend",
            caps=[
                {"scope": r.scope, "arm": r.arm, "spent_usd": round(r.spent, 6), "cap_usd": r.cap}
                for r in reached
            ],  # fmt: skip
            on_cap=self.caps.on_cap,
            n_running=len(self.running),
        )

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

    def _void_abandoned(self, task: str, arm: str, old: claimsmod.Claim) -> None:
        """The attempt of a stale claim just taken over (its runner and its harbor both gone), by the
        voiding table, before its unit runs again: voided (moved aside, journalled) when it is the
        infrastructure's, as its runner would have. Found by a probe: after a full disk ended a run,
        the resumed run ran those units again and left the dead attempts in place, read as
        "unreadable" by status forever, in no arm's void count, and `health` found nothing."""
        if old.job is None or old.job.pid <= 0:
            return  # (a Ray job's claim names no local harbor: its host's job may still run it)
        stamp_dir = jobs_dir(self.out, task, arm, old.job.stamp)
        if not stamp_dir.is_dir():
            return  # claimed, never started
        v = classify_job(job_dir(self.out, task, arm, old.job.stamp), stamp_dir / HARBOR_LOG)
        if v.kind != "infra":
            return  # finished, or the agent's own failure: it stays, as its runner would have left it
        try:
            dest = act_void(plan_void(self.out, job_dir(self.out, task, arm, old.job.stamp), v.reason, v.evidence),
                            run_id=self.run_id)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the unit runs again all the same; health finds it
            self.log.emit(EventKind.INTERNAL_ERROR, task=task, arm=arm, stamp=old.job.stamp,
                          error=f"could not void the abandoned attempt: {type(exc).__name__}: {exc}")  # fmt: skip
            return
        self.stats.voided += 1
        self.log.emit(EventKind.VOID, task=task, arm=arm, stamp=old.job.stamp, reason=v.reason, dest=str(dest),
                      evidence=v.evidence[:6], abandoned_by=old.holder.describe(),
                      pair_done=_done(self.out, (task, arm, old.repeat)), **repeat_field(old.repeat))  # fmt: skip

    def _void(self, job: Attempt, v: Verdict) -> None:
        """Remove leftovers of the trial (so they do not vanish from cleanup's view), then move it aside."""
        self.launcher.tidy(job.trials())
        if not job.stamp_dir.exists():
            return
        plan = plan_void(self.out, job.job_dir, v.reason, v.evidence)  # one trial per job: the whole attempt
        dest = act_void(plan, run_id=self.run_id)
        self.stats.voided += 1
        self.log.emit(EventKind.VOID, task=job.task, arm=job.arm.name, stamp=job.stamp, reason=v.reason, dest=str(dest),
                      evidence=v.evidence[:6], pair_done=_done(self.out, job.unit), **repeat_field(job.repeat))  # fmt: skip

    # --- stopping -----------------------------------------------------------------------------------

    def _stop_jobs(self, jobs: list[Attempt], why: str) -> None:
        """Stop running attempts (harbor cancels and tears its environment down; a job that does not
        end within the grace is killed), then finish each as stopped by ``why``."""
        for job in jobs:
            job.terminated = True
            job.signal(signal.SIGTERM)  # harbor maps SIGTERM to cancellation + environment teardown
        deadline = time.monotonic() + self.stop_grace_sec
        while any(not j.poll() for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        for job in jobs:
            if not job.poll():
                self.log.emit(EventKind.JOB_KILL, task=job.task, arm=job.arm.name, pid=job.pid)
                job.signal(signal.SIGKILL, group=True)
        deadline = time.monotonic() + 10
        while any(not j.poll() for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for job in jobs:
            self.running.remove(job)
        self.launcher.tidy(set().union(*(job.trials() for job in jobs)))
        for job in jobs:
            try:
                self._finish(job, stopping=True, stopped_by=why)
            except Exception as exc:  # noqa: BLE001 - finish the others, release every claim
                self.log.emit(
                    EventKind.INTERNAL_ERROR,
                    task=job.task,
                    arm=job.arm.name,
                    error=f"{type(exc).__name__}: {exc}",
                )
                with contextlib.suppress(Exception):
                    claimsmod.release(self.out, job.claim)

    def _shutdown(self, reason: str, all_units: list[Unit]) -> int:
        if self.stop_reason is not None and self.running:
            self.log.emit(EventKind.STOP_REQUESTED, signal=self.stop_reason, n_running=len(self.running))
            self._stop_jobs(list(self.running), self.stop_reason)
        self.launcher.tidy(set())  # what an engine outage kept from being removed
        done = sum(1 for p in all_units if _done(self.out, p))
        self.log.emit(
            EventKind.RUNNER_EXIT,
            reason=reason,
            done=done,
            total=len(all_units),
            started=self.stats.started,
            voided=self.stats.voided,
            errored=self.stats.errored,
            gate_waits=self.launcher.gate_waits,
            paused=self.breaker.tripped.reason() if self.breaker.tripped else self.spend_paused,
        )
        if (self.breaker.tripped is not None or self.spend_paused is not None) and self.stop_reason is None:
            return EXIT_PAUSED
        return 0


#: how often a working runner says it is alive (``Driver._alive``): what a rate may count as worked
#: after its runner died without an exit line
ALIVE_SEC = 600.0


def _done(out: Path, unit: Unit) -> bool:
    """Is this repeat of the pair done (``runner.results.scan.pair_done``, the model's reading)?"""
    return pair_done(out, *unit)


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
