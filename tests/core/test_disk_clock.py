"""The tamper rule on an output disk whose clock is not the host's (the field report: "the mtime on
the NAS output disk lags the host by about 2 minutes").

A verifier file's mtime is the disk's clock, the verifier's end (``verifier.finished_at``) harbor's.
The rule compares them (``runner.results.records.tampered``) after moving the verifier's end by the
disk's offset, read from the trial's own result.json: harbor stamps the trial's ``finished_at`` and
writes the file at once. Here a real recorded attempt (tests/core/recorded) is given the times a disk
that far ahead or behind would have given its files, and both readers of a trial (each trial's
result.json, and the job summary the scan takes for a finished one-trial job) are asked.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from runner.results import records, tree

RECORDED = Path(__file__).resolve().parent / "recorded" / "partial" / "20261201T081523Z" / "partial"


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _job(tmp_path: Path, offset: float, late: float | None, early: float | None = None) -> tuple[Path, Path]:
    """The recorded job with its files' times as a disk ``offset`` s from harbor's clock records
    them; ``late``: metrics.json rewritten that many seconds (harbor's clock) after the verifier
    finished, before harbor wrote result.json (a process the agent left running, during teardown)."""
    job = tmp_path / "job"
    shutil.copytree(RECORDED, job, symlinks=True)
    (trial,) = tree.list_dirs(job)
    t = job / trial
    res = json.loads((t / "result.json").read_text())
    ver_fin, trial_fin = _t(res["verifier"]["finished_at"]), _t(res["finished_at"])
    for f in (t / "verifier").iterdir():  # written by the verifier, just before it finished
        at = ver_fin - 0.5 + offset
        os.utime(f, (at, at))
    if late is not None:
        at = ver_fin + late + offset
        os.utime(t / "verifier" / "metrics.json", (at, at))
    if (
        early is not None
    ):  # planted during the agent's run: last written ``early`` s before the verifier began
        at = _t(res["verifier"]["started_at"]) - early + offset
        os.utime(t / "verifier" / "metrics.json", (at, at))
    at = trial_fin + offset  # harbor writes result.json last (its ctime the newest, as harbor's is)
    (t / "result.json").write_bytes((t / "result.json").read_bytes())
    os.utime(t / "result.json", (at, at))
    return job, t


def _verdicts(job: Path, t: Path) -> tuple[str, str]:
    """The metrics' state as each reader of a trial sees it."""
    by_trial = records.read_trial(t).metrics.state
    summary = records.trial_from_job_summary(json.loads((job / "result.json").read_text()), str(job))
    assert summary is not None  # a finished one-trial job: the scan's fast path applies
    return by_trial, summary.metrics.state


@pytest.mark.parametrize("offset", [0.0, 120.0, -120.0, 3600.0])
def test_the_verifiers_own_files_are_never_tampered_whatever_the_disks_clock(tmp_path, offset):
    # a disk two minutes ahead of its host flagged every cell of the run as tampered (a failure
    # against its arm) before the verifier's end was moved by the disk's offset
    job, t = _job(tmp_path, offset, late=None)
    assert _verdicts(job, t) == (records.OK, records.OK)


@pytest.mark.parametrize("offset", [0.0, 120.0, -120.0])
def test_a_write_after_the_verifier_finished_is_caught_whatever_the_disks_clock(tmp_path, offset):
    # on the field's NAS (two minutes behind) a write up to two minutes after the verifier was
    # dated before its end and passed
    job, t = _job(tmp_path, offset, late=60.0)
    assert _verdicts(job, t) == (records.TAMPERED, records.TAMPERED)
    assert "metrics.json written 60.0 s after the verifier finished" in records.read_trial(t).metrics.error


@pytest.mark.parametrize("offset", [0.0, 120.0, -120.0])
def test_a_file_planted_before_the_verifier_started_is_caught_whatever_the_disks_clock(tmp_path, offset):
    """Found by a probe (2026-12-07): harbor removes the reward files before it verifies, not a
    metrics.json, so one the agent wrote during its run read as the verifier's (and, in a task whose
    verifier writes none, made every other arm's cell of the task a hole)."""
    job, t = _job(tmp_path, offset, late=None, early=60.0)
    assert _verdicts(job, t) == (records.TAMPERED, records.TAMPERED)
    assert (
        "metrics.json written at least 59.5 s before the verifier started"
        in records.read_trial(t).metrics.error
    )


def test_a_multi_step_trials_earlier_verifier_files_are_not_judged_by_the_last_start(tmp_path):
    # a multi-step trial's verifier runs once a step: a file of an earlier step's run predates the
    # start its result.json gives
    _job_dir, t = _job(tmp_path, 0.0, late=None, early=60.0)
    res = json.loads((t / "result.json").read_text())
    res["step_results"] = [{"step_name": "one"}, {"step_name": "two"}]
    st = os.stat(t / "result.json")
    (t / "result.json").write_text(json.dumps(res, indent=4))
    os.utime(t / "result.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert records.read_trial(t).metrics.state == records.OK


@pytest.mark.parametrize("offset", [0.0, -120.0])
def test_a_file_planted_before_the_verifier_started_is_caught_in_a_reward_json_task(tmp_path, offset):
    """Found by a probe: the start was dated by reward.txt alone, so in a task whose verifier writes
    reward.json (harbor's other reward file, removed before it verifies too) a metrics.json the agent
    planted scored its arm, and failed every other arm's cell of the task for lacking one."""
    job, t = _job(tmp_path, offset, late=None, early=60.0)
    txt = t / "verifier" / "reward.txt"
    st = os.stat(txt)
    (t / "verifier" / "reward.json").write_text(json.dumps({"reward": float(txt.read_text())}))
    os.utime(t / "verifier" / "reward.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    txt.unlink()
    res = t / "result.json"  # harbor writes it last (the verifier dir's change before it)
    rst = os.stat(res)
    res.write_bytes(res.read_bytes())
    os.utime(res, ns=(rst.st_atime_ns, rst.st_mtime_ns))
    assert _verdicts(job, t) == (records.TAMPERED, records.TAMPERED)
    assert (
        "metrics.json written at least 59.5 s before the verifier started"
        in records.read_trial(t).metrics.error
    )
    _, t2 = _job(tmp_path / "clean", offset, late=None)  # the verifier's own reward.json: never tampered
    txt2 = t2 / "verifier" / "reward.txt"
    st2 = os.stat(txt2)
    (t2 / "verifier" / "reward.json").write_text("{}")
    os.utime(t2 / "verifier" / "reward.json", ns=(st2.st_atime_ns, st2.st_mtime_ns))
    txt2.unlink()
    res2 = t2 / "result.json"
    rst2 = os.stat(res2)
    res2.write_bytes(res2.read_bytes())
    os.utime(res2, ns=(rst2.st_atime_ns, rst2.st_mtime_ns))
    assert records.read_trial(t2).metrics.state == records.OK
