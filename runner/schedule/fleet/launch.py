"""The Ray launcher: each attempt a Ray job on the Docker host Ray placed it (``marathon run --cluster``).

Why: the driver keeps its one queue, its claims, passes, voiding and breaker; only *where* an
attempt runs changes. A Ray job replaces the local ``harbor run`` child: it is started by
``submission_id`` (the attempt id), followed through the job API, stopped through it, and found
again by id after the runner itself was restarted -- so a pair whose job still runs is never
started twice. Everything engine-side (the address-pool gate, the container-death watch, the
removal of leftovers) happens in the attempt's job on its host (``runner.schedule.fleet.job``), so
here those are the job's records, read back.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.ops.void import Verdict, classify_job
from runner.results.deaths import read_deaths
from runner.results.events import EventKind, EventLog, repeat_field
from runner.results.hosts import read_host
from runner.results.records import OK, read_job
from runner.results.tree import repeat_of
from runner.schedule import claims as claimsmod
from runner.schedule.attempt import Attempt, Unit, new_stamp
from runner.schedule.config import ArmSpec, RunConfig
from runner.schedule.fleet.cluster import Fleet, RayJobState
from runner.schedule.lock import Holder
from runner.schedule.task_images import TaskImage, write_attempt_image


@dataclass(kw_only=True)
class RayAttempt(Attempt):
    """An attempt running as a Ray job: followed and stopped through the job API."""

    submission_id: str
    fleet: Fleet
    last: RayJobState | None = None

    def poll(self) -> bool:
        """True once the Ray job has ended (or the cluster no longer knows it)."""
        try:
            self.last = self.fleet.job(self.submission_id) or self.last
            gone = self.fleet.job(self.submission_id) is None
        except Exception:  # noqa: BLE001 - the head does not answer this tick: still running
            return False
        return gone or (self.last is not None and not self.last.active)

    def signal(self, sig: signal.Signals, group: bool = False) -> None:
        """Ray's stop: SIGTERM to the job's process group on its host, SIGKILL after
        RAY_JOB_STOP_WAIT_TIME_S (set on each node; harbor needs time to tear down)."""
        self.fleet.stop(self.submission_id)


def active_units(fleet: Fleet, out: Path) -> dict[Unit, RayJobState]:
    """(task, arm, repeat) of every job of this tree that is pending or running on the cluster (the
    repeat is its stamp's, ``runner.results.tree.repeat_of``)."""
    return {
        (j.metadata.get("task", ""), j.metadata.get("arm", ""), repeat_of(j.metadata.get("stamp", ""))): j
        for j in fleet.ours(out)
        if j.active
    }


class RayLauncher:
    """Attempts as Ray jobs of the cluster ``cfg.cluster`` names (see the module docstring)."""

    gate_waits = 0  # each host's job waits at its own gate (its log says so)

    def __init__(self, cfg: RunConfig, log: EventLog, holder: Holder, specs: dict[str, ArmSpec]) -> None:
        assert cfg.cluster
        self.cfg, self.out, self.log, self.holder, self.specs = cfg, cfg.out, log, holder, specs
        self.fleet = Fleet.connect(cfg.cluster)

    def begin(self) -> None:
        pass  # each attempt's job watches its own host's engine

    def close(self, still_running: bool = False) -> None:
        """Each host's gateway (started by the first job of the tree that needed it there, detached
        from that job) is stopped on its own host once no attempt needs it: the run's end."""
        from runner.schedule.gateway import gateway_on

        if not gateway_on(self.cfg):
            return
        from runner.schedule.fleet.probe import ask_hosts

        assert self.cfg.cluster
        try:
            still = len(active_units(self.fleet, self.out))
            if still:  # the runner ends on an error with jobs left: the next runner adopts them
                self.log.emit(
                    EventKind.GATEWAY_STOP, result=f"kept: {still} attempt(s) of the tree still run"
                )
                return
            stages = ask_hosts(self.cfg.cluster, self.out, "gateway-stop", {})
        except Exception as exc:  # noqa: BLE001 - the head is away: say so; `marathon kill` still can
            self.log.emit(EventKind.GATEWAY_ERROR, error=f"the hosts' gateways were not stopped: {exc}")
            return
        for a in stages.get("stop", []):
            self.log.emit(
                EventKind.GATEWAY_STOP, host=a.label, result=(a.result or {}).get("result", a.error)
            )

    def prepare_image(self, task: str, started: Callable[[subprocess.Popen], None]) -> TaskImage | None:
        """Build (or verify) the task's image on one Docker host, ship it to every other one through
        the shared tree, verified by id on arrival (``runner.schedule.fleet.ship``)."""
        from runner.schedule import task_images as ti
        from runner.schedule.fleet.ship import ship

        assert self.cfg.tasks_dir is not None
        if self.cfg.env != "docker" or not ti.wants_image(self.cfg.tasks_dir / task):
            return None
        return ti.finish(self.out, self.cfg.tasks_dir, ship(self.cfg, task, ti.read_record(self.out, task)))

    def runs_elsewhere(self, task: str, arm: str, repeat: int = 1) -> bool:
        """A Ray job of this tree already runs (or waits for a slot) for the pair's repeat: never a second."""
        return (task, arm, repeat) in active_units(self.fleet, self.out)

    def may_start(self, running: list[Attempt]) -> bool:
        return True  # Ray places a job where a ``docker_slots`` is free; that host's job gates

    def start(self, task: str, arm: ArmSpec, claim: claimsmod.Claim, image: TaskImage | None) -> Attempt:
        """Submit one attempt of (task, arm) -- the claim's repeat -- under ``claim``; its job reads
        ``image`` from its stamp dir and runs harbor only once its host holds exactly that image."""
        stamp = new_stamp(self.out / task / arm.name, claim.repeat)
        att = RayAttempt(
            task, arm, stamp, claim, self.out, time.monotonic(), submission_id="", fleet=self.fleet
        )
        att.stamp_dir.mkdir(parents=True)
        if image is not None:
            write_attempt_image(att.stamp_dir, image)
        att.submission_id = self.fleet.submit(self.out, task, arm.name, stamp)
        att.claim = claimsmod.set_job(self.out, claim, claimsmod.JobRef(0, time.time(), stamp))
        att.started = time.monotonic()
        self.log.emit(EventKind.JOB_START, task=task, arm=arm.name, stamp=stamp, pid=0,
                      submission_id=att.submission_id, argv=["ray job", att.submission_id],
                      **repeat_field(claim.repeat))  # fmt: skip
        return att

    def adopt(self, units: set[Unit], running: set[Unit]) -> list[Attempt]:
        """After a restart: every Ray job of this tree still pending or running is followed again,
        under its claim (taken over from the dead runner), instead of a second start."""
        adopted: list[Attempt] = []
        for (task, arm, repeat), rj in active_units(self.fleet, self.out).items():
            if (task, arm, repeat) not in units or (task, arm, repeat) in running:
                continue
            res = claimsmod.try_claim(self.out, task, arm, self.holder, adopt=True, repeat=repeat)
            if not res.acquired or res.claim is None:
                continue
            stamp = rj.metadata.get("stamp", "")
            claim = claimsmod.set_job(self.out, res.claim, claimsmod.JobRef(0, time.time(), stamp))
            adopted.append(RayAttempt(task, self.specs[arm], stamp, claim, self.out, time.monotonic(),
                                      submission_id=rj.submission_id, fleet=self.fleet))  # fmt: skip
            was = res.replaced.holder.describe() if res.replaced else "no claim"
            self.log.emit(
                EventKind.ADOPT,
                task=task,
                arm=arm,
                stamp=stamp,
                pid=0,
                submission_id=rj.submission_id,
                was=was,
                **repeat_field(repeat),
            )
        return adopted

    def ended(self, attempt: Attempt, *, stopping: bool) -> None:
        pass  # the attempt's job removed its leftovers on its own host

    def classify(self, attempt: Attempt, stopped_by: str | None) -> Verdict:
        """The voiding table on the job's trial, with the engine's account of container deaths its
        job recorded on its host (``runner.results.deaths``); then Ray's own account."""
        v = classify_job(
            attempt.job_dir, attempt.harbor_log, stopped_by=stopped_by, deaths=read_deaths(attempt.stamp_dir)
        )
        assert isinstance(attempt, RayAttempt)
        return classify(self.fleet, attempt, v)

    def tidy(self, trials: set[str]) -> None:
        pass  # on a cluster, each attempt's job removes its leftovers on its own host

    def engine_answers(self) -> bool:
        return True  # each host's engine is its job's to ask

    def tend(self, running: list[Attempt]) -> None:
        pass  # each host's gateway is its jobs' to keep (runner.schedule.fleet.job)


def classify(fleet: Fleet, job: RayAttempt, v: Verdict) -> Verdict:
    """The verdict of an ended Ray job: a lost node or a job that ended without a harbor result
    is infrastructure (voided, rerun elsewhere) with Ray's own account as evidence."""
    rj: RayJobState | None = job.last
    if rj is None or rj.status == "SUCCEEDED" or v.kind == "done":
        return v
    host = read_host(job.stamp_dir)
    node_id = host.node_id if host else rj.node_id
    evidence = [f"ray job {rj.submission_id}: {rj.status}: {rj.message}"]
    try:
        nodes = fleet.nodes()
    except Exception as exc:  # noqa: BLE001 - the head is away: the job's own account stands
        nodes = {}
        evidence.append(f"ray nodes: not answered ({type(exc).__name__})")
    node = nodes.get(node_id or "")
    if node is not None and not node.alive:
        at = _iso(node.end_time_ms) or datetime.now(UTC).isoformat(timespec="seconds")
        name = host.short() if host else node.node_ip
        evidence += [
            f"node {node.node_id} ({node.node_ip}): {node.message}",
            *fleet.logs_tail(rj.submission_id),
        ]
        return Verdict("infra", f"node {name} lost at {at}", evidence + v.evidence, v.trial)
    harbor_result = read_job(job.job_dir)
    if harbor_result.state != OK:
        evidence += fleet.logs_tail(rj.submission_id)
        return Verdict("infra", f"the Ray job ended ({rj.status}) without a harbor result", evidence + v.evidence,
                       v.trial)  # fmt: skip
    return v


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
