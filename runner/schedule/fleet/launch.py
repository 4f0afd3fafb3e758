"""The driver's side of a cluster run: start an attempt as a Ray job, follow it, re-attach to it.

Why: the driver keeps its one queue, its claims, passes, voiding and breaker; only *where* an
attempt runs changes. A Ray job replaces the local ``harbor run`` child: it is started by
``submission_id`` (the attempt id), followed through the job API, stopped through it, and found
again by id after the runner itself was restarted -- so a pair whose job still runs is never
started twice.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner.ops.void import Verdict
from runner.results.events import EventKind
from runner.results.hosts import read_host
from runner.results.records import OK, read_job
from runner.results.tree import job_dir, jobs_dir
from runner.schedule import claims as claimsmod
from runner.schedule.fleet.cluster import Fleet, RayJobState

ENDED_BY_NODE = "node"


@dataclass
class RayJobMixin:
    submission_id: str = ""
    fleet: Fleet | None = None
    last: RayJobState | None = None

    def poll(self) -> bool:
        """True once the Ray job has ended (or the cluster no longer knows it)."""
        assert self.fleet is not None
        try:
            self.last = self.fleet.job(self.submission_id) or self.last
            gone = self.fleet.job(self.submission_id) is None
        except Exception:  # noqa: BLE001 - the head does not answer this tick: still running
            return False
        return gone or (self.last is not None and not self.last.active)

    def signal(self, sig: signal.Signals, group: bool = False) -> None:
        """Ray's stop: SIGTERM to the job's process group on its host, SIGKILL after
        RAY_JOB_STOP_WAIT_TIME_S (set on each node; harbor needs time to tear down)."""
        assert self.fleet is not None
        self.fleet.stop(self.submission_id)


def ray_job_class(base: type) -> type:
    """The driver's Job with polling and signalling through the job API (one class, made once)."""
    return dataclass(type("RayJob", (RayJobMixin, base), {}))


def start(driver, task: str, arm, claim: claimsmod.Claim):
    """Submit one attempt of (task, arm) under ``claim``; returns the driver's job record."""
    from runner.schedule.driver import new_stamp

    stamp = new_stamp(driver.out / task / arm.name)
    jobs_dir(driver.out, task, arm.name, stamp).mkdir(parents=True)
    sid = driver.fleet.submit(driver.out, task, arm.name, stamp)
    ref = claimsmod.JobRef(0, time.time(), stamp)
    claim = claimsmod.set_job(driver.out, claim, ref)
    job = driver.RayJob(task, arm, stamp, 0, None, claim, time.monotonic(), claim_out=str(driver.out),
                        submission_id=sid, fleet=driver.fleet)  # fmt: skip
    driver.log.emit(EventKind.JOB_START, task=task, arm=arm.name, stamp=stamp, pid=0, submission_id=sid,
                    argv=["ray job", sid])  # fmt: skip
    return job


def active_pairs(fleet: Fleet, out: Path) -> dict[tuple[str, str], RayJobState]:
    """(task, arm) of every job of this tree that is pending or running on the cluster."""
    return {(j.metadata.get("task", ""), j.metadata.get("arm", "")): j for j in fleet.ours(out) if j.active}


def reattach(driver, pairs: set[tuple[str, str]]) -> None:
    """After a restart: every Ray job of this tree still pending or running is followed again,
    under its claim (taken over from the dead runner), instead of a second start."""
    for (task, arm), rj in active_pairs(driver.fleet, driver.out).items():
        if (task, arm) not in pairs or driver._is_running((task, arm)):
            continue
        res = claimsmod.try_claim(driver.out, task, arm, driver.holder, adopt=True)
        if not res.acquired or res.claim is None:
            continue
        stamp = rj.metadata.get("stamp", "")
        claim = claimsmod.set_job(driver.out, res.claim, claimsmod.JobRef(0, time.time(), stamp))
        job = driver.RayJob(task, driver.specs[arm], stamp, 0, None, claim, time.monotonic(),
                            claim_out=str(driver.out), submission_id=rj.submission_id, fleet=driver.fleet)  # fmt: skip
        driver.running.append(job)
        was = res.replaced.holder.describe() if res.replaced else "no claim"
        driver.log.emit(
            "adopt", task=task, arm=arm, stamp=stamp, pid=0, submission_id=rj.submission_id, was=was
        )


def classify(fleet: Fleet, job, v: Verdict) -> Verdict:
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
    harbor_result = read_job(job_dir(Path(job.claim_out), job.task, job.arm.name, job.stamp))
    if harbor_result.state != OK:
        evidence += fleet.logs_tail(rj.submission_id)
        return Verdict("infra", f"the Ray job ended ({rj.status}) without a harbor result", evidence + v.evidence,
                       v.trial)  # fmt: skip
    return v


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
