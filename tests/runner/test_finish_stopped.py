"""The runner's bookkeeping of a job it stopped itself, on harbor's own files.

Seen once in a fresh-clone CI run (tests/runner/test_runner_signals.py): after the runner's SIGTERM,
harbor wrote a job result counting a trial it was cancelling as completed, without an exception and
without a verifier, and the runner recorded the pair as done with ``reward=None``. The race is
harbor's and could not be reproduced on demand, so the files it leaves are made here from a real
recorded attempt (tests/core/recorded) and handed to the runner's real ``Driver._finish`` through
its real local launcher: the job result says done; the trial's verifier never finished.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from runner.results import tree
from runner.results.events import read_events
from runner.schedule import claims as claimsmod
from runner.schedule.config import RunConfig
from runner.schedule.driver import Driver
from runner.schedule.local import LocalAttempt, LocalLauncher

RECORDED = Path(__file__).resolve().parents[1] / "core" / "recorded" / "partial"
STAMP = "20261201T081523Z"
TASK, ARM = "calc-partial", "plain"


def _stopped_attempt(out: Path, *, verifier_finished: bool) -> tuple[Driver, LocalAttempt]:
    """A driver over ``out`` and one of its attempts whose harbor process has exited after the
    runner stopped it, its files as harbor left them."""
    stamp_dir = out / TASK / ARM / STAMP
    shutil.copytree(RECORDED / STAMP, stamp_dir, symlinks=True)
    (stamp_dir / "partial").rename(stamp_dir / ARM)
    (trial,) = tree.list_dirs(stamp_dir / ARM)
    res = stamp_dir / ARM / trial / "result.json"
    d = json.loads(res.read_text())
    if not verifier_finished:  # harbor's race: a clean trial result with no verifier run
        d["verifier"] = None
        d["verifier_result"] = None
    res.write_text(json.dumps(d, indent=4))  # as harbor writes it (records.verifier_finished reads it so)

    cfg = RunConfig(out=out, arms=(ARM,), gateway=False)
    drv = Driver(cfg)
    drv.stop_reason = "SIGTERM"
    drv.launcher = LocalLauncher(cfg=cfg, log=drv.log, holder=drv.holder, specs=drv.specs, mounts={})
    got = claimsmod.try_claim(out, TASK, ARM, drv.holder)
    assert got.acquired and got.claim is not None
    job = LocalAttempt(task=TASK, arm=drv.specs[ARM], stamp=STAMP, claim=got.claim, out=out, started=time.monotonic(),
                       returncode=-15, terminated=True)  # fmt: skip
    return drv, job


def _finish_event(out: Path) -> dict:
    (e,) = [e for e in read_events(out) if e["event"] == "job_finish"]
    return e


@pytest.mark.parametrize("verifier_finished", [False, True])
def test_a_stopped_job_harbor_called_done_is_scored_only_with_a_finished_verifier(
    tmp_path: Path, verifier_finished: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    drv, job = _stopped_attempt(out, verifier_finished=verifier_finished)

    retry = drv._finish(job, stopping=True)

    e = _finish_event(out)
    if verifier_finished:  # it finished before the stop: its result stands
        assert (e["status"], retry) == ("done", None)
        assert e["detail"].startswith("reward=0.0")
        assert (out / TASK / ARM / STAMP).is_dir()
        return
    # the runner stopped it before its verifier finished: no score, voided and retried, its
    # dir moved out of the tree's scored attempts with the reason
    assert e["status"] == "void", e
    assert "stopped by the runner before its verifier finished" in e["detail"]
    assert retry is not None
    assert not (out / TASK / ARM / STAMP).exists()
    readme = tree.voided_root(out) / TASK / ARM / STAMP / tree.VOID_README
    assert "verifier" in readme.read_text()
    assert claimsmod.list_claims(out) == []  # the pair is free for its rerun


@pytest.mark.parametrize("left", ["no result", "the agent's own failure"])
def test_a_stale_claims_abandoned_attempt_is_voided_when_the_table_says_infrastructure(
    tmp_path: Path, left: str
) -> None:
    """Found by a probe: after a full disk ended a run, the resumed runner took the dead runner's
    claims over and ran those units again, leaving the dead attempts where they were: `status`
    read them as "unreadable" forever, no arm's void count had them, and `health` found nothing.
    At the takeover the voiding table now decides the abandoned attempt: harbor gone before its
    trial finished is the infrastructure's (moved aside, journalled); an attempt that finished with
    the agent's own failure stays, as its runner would have left it."""
    from runner_support import dead_holder

    from runner.results.model import RunModel

    out = tmp_path / "out"
    out.mkdir()
    drv, job = _stopped_attempt(out, verifier_finished=True)
    claimsmod.release(out, job.claim)
    trial = next(t for t in tree.iter_trial_dirs(job.job_dir))
    if left == "no result":
        (trial / "result.json").unlink()
        (job.job_dir / "result.json").unlink()
    else:
        res = json.loads((trial / "result.json").read_text())
        res["exception_info"] = {"exception_type": "NonZeroAgentExitCodeError", "exception_message": "exit 1"}
        (trial / "result.json").write_text(json.dumps(res, indent=4))
    stale = claimsmod.try_claim(out, TASK, ARM, dead_holder()).claim
    assert stale is not None
    harbor = subprocess.Popen(["sleep", "0.1"])  # the dead runner's harbor: a real process, exited
    stale = claimsmod.set_job(out, stale, claimsmod.job_ref(harbor.pid, STAMP))
    harbor.wait()
    assert stale.state == claimsmod.STALE
    got = claimsmod.try_claim(out, TASK, ARM, drv.holder)
    assert got.acquired and got.replaced is not None

    # a Ray job's claim names no local harbor (pid 0): its host's job may still run it, never voided
    ray = dataclasses.replace(got.replaced, job=dataclasses.replace(got.replaced.job, pid=0))
    drv._void_abandoned(TASK, ARM, ray)
    assert [e for e in read_events(out) if e["event"] == "void"] == [] and (out / TASK / ARM / STAMP).is_dir()

    drv._void_abandoned(TASK, ARM, got.replaced)

    voids = [e for e in read_events(out) if e["event"] == "void"]
    if left == "the agent's own failure":
        assert voids == [] and (out / TASK / ARM / STAMP).is_dir()
        return
    (e,) = voids
    assert (e["task"], e["arm"], e["stamp"]) == (TASK, ARM, STAMP) and "dead-run" in e["abandoned_by"]
    assert "harbor ended before the trial finished" in e["reason"]
    assert not (out / TASK / ARM / STAMP).exists()
    assert (tree.voided_root(out) / TASK / ARM / STAMP / tree.VOID_README).is_file()
    cell = RunModel.load(out).cells[(TASK, ARM)]
    assert cell.n_voided == 1 and not cell.unreadable
    # the void is the new runner's event, the attempt not its run's (a review: the last event won)
    assert [a.run_id for a in cell.attempts] != [drv.run_id] and e["run_id"] == drv.run_id


def test_a_working_runner_says_it_is_alive_every_alive_sec(tmp_path: Path, monkeypatch) -> None:
    """The run's rates count a runner that died without its exit line as working until its last
    event; hours can pass with no line while attempts run, so the runner writes ``runner_alive``
    every ``ALIVE_SEC`` (here 0: at each look)."""
    from runner.schedule import driver as drivermod

    out = tmp_path / "out"
    out.mkdir()
    drv = Driver(RunConfig(out=out, arms=(ARM,), gateway=False))
    drv._alive()
    assert [e for e in read_events(out) if e["event"] == "runner_alive"] == []  # not before ALIVE_SEC
    monkeypatch.setattr(drivermod, "ALIVE_SEC", 0.0)
    drv._alive()
    drv._alive()
    alive = [e for e in read_events(out) if e["event"] == "runner_alive"]
    assert len(alive) == 2 and alive[0]["n_running"] == 0 and alive[0]["run_id"] == drv.run_id
