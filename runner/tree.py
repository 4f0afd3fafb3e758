"""The output tree's layout: where every file of a run lives, in one place.

    <out>/<task>/<arm>/<stamp>/<arm>/result.json        harbor job (jobs dir = <out>/<task>/<arm>/<stamp>,
    <out>/<task>/<arm>/<stamp>/<arm>/<trial>/...        job name = <arm>); trials below it
    <out>/.claims/<task>__<arm>.claim                   in-progress claim
    <out>/.driver_env                                   the runner's effective configuration
    <out>/.runner/                                      lock, PID registry, events.jsonl
    <out>/../marathon-voided/<out-name>/...             voided trials, moved (never deleted), with README

Everything that names a path or derives a name from one is here, so that no reader scans the
wrong depth (the field's monitors did, and reported "OK" all night).
"""

from __future__ import annotations

import re
from pathlib import Path

CLAIMS_DIR = ".claims"
DRIVER_ENV = ".driver_env"
RUNNER_DIR = ".runner"
EVENTS_FILE = "events.jsonl"
VOIDED_DIR = "marathon-voided"
VOID_README = "README.md"

# An "<arm>-<pid>" dir: the field's driver made one when "<arm>" was not writable.
_ARM_PID = re.compile(r"^(?P<arm>.+)-(?P<pid>\d+)$")


def job_dir(out: Path, task: str, arm: str, stamp: str) -> Path:
    """The harbor job dir of one attempt: jobs dir ``<out>/<task>/<arm>/<stamp>``, job name ``<arm>``."""
    return out / task / arm / stamp / arm


def jobs_dir(out: Path, task: str, arm: str, stamp: str) -> Path:
    return out / task / arm / stamp


def claim_path(out: Path, task: str, arm: str) -> Path:
    return out / CLAIMS_DIR / f"{task}__{arm}.claim"


def runner_dir(out: Path) -> Path:
    return out / RUNNER_DIR


def events_path(out: Path) -> Path:
    return out / RUNNER_DIR / EVENTS_FILE


def driver_env_path(out: Path) -> Path:
    return out / DRIVER_ENV


def voided_root(out: Path) -> Path:
    """Where voided trials of ``out`` go: a sibling ``marathon-voided/<out name>/``."""
    out = out.resolve()
    return out.parent / VOIDED_DIR / out.name


def arm_of_dir(dirname: str) -> str:
    """The arm an arm-level dir holds results for: ``<arm>`` or the field's ``<arm>-<pid>``."""
    m = _ARM_PID.match(dirname)
    return m.group("arm") if m else dirname


def is_hidden(name: str) -> bool:
    return name.startswith(".")


def compose_project(trial_name: str) -> str:
    """The Docker Compose project harbor 0.25.0 gives a trial's environment.

    harbor: session_id = f"{trial_name}__env", then
    ``environments/docker/docker.py:_sanitize_docker_compose_project_name``: lowercase, prefix "0"
    when the first char is not [a-z0-9], every char outside [a-z0-9_-] becomes "-".
    This is the one place marathon derives it; "is this project ours" compares against it exactly.
    """
    name = f"{trial_name}__env".lower()
    if not re.match(r"^[a-z0-9]", name):
        name = "0" + name
    return re.sub(r"[^a-z0-9_-]", "-", name)


def iter_job_dirs(out: Path):
    """Yield ``(task, arm, arm_dir_name, stamp, job_dir)`` for every job dir of an output tree.

    Exactly depth 4: ``<out>/<task>/<arm dir>/<stamp>/<job name>``. The job name is the arm dir's
    arm (``<arm>`` or, for the field's ``<arm>-<pid>`` dirs, ``<arm>``). Hidden dirs are skipped.
    """
    try:
        tasks = sorted(p for p in out.iterdir() if p.is_dir() and not is_hidden(p.name))
    except OSError:
        return
    for tdir in tasks:
        try:
            arm_dirs = sorted(p for p in tdir.iterdir() if p.is_dir() and not is_hidden(p.name))
        except OSError:
            continue
        for adir in arm_dirs:
            arm = arm_of_dir(adir.name)
            try:
                stamps = sorted(p for p in adir.iterdir() if p.is_dir() and not is_hidden(p.name))
            except OSError:
                continue
            for sdir in stamps:
                for name in (adir.name, arm):
                    jdir = sdir / name
                    if jdir.is_dir():
                        yield tdir.name, arm, adir.name, sdir.name, jdir
                        break


def iter_trial_dirs(job: Path):
    """Yield the trial dirs of one job dir (every subdir that is not hidden)."""
    try:
        for p in sorted(job.iterdir()):
            if p.is_dir() and not is_hidden(p.name):
                yield p
    except OSError:
        return
