"""One attempt of a (task, arm) pair, wherever it runs: its record, its stamp, and the Launcher seam.

Why: the driver keeps one queue, one set of claims, passes, voiding and the circuit breaker; only
*where* an attempt runs differs -- a ``harbor run`` child of this host (``runner.schedule.local``)
or a Ray job on one of a cluster's Docker hosts (``runner.schedule.fleet.launch``). That difference
is a ``Launcher``, chosen once per run (``runner.schedule.launchers.launcher_for``), so the driver
holds no branch on it, and a new place to run attempts (a cloud sandbox pool, a model gateway per
host) is one new module that implements the protocol below.

An attempt's directory is ``<out>/<task>/<arm>/<stamp>``: the stamp is a UTC time made unique in
its arm dir (``new_stamp``), marked ``@r<k>`` for repeat k >= 2 of the pair (``marathon run
--repeats``); harbor's own job dir is under it, with ``harbor-run.log`` beside it. The unit of work
is one repeat of a pair, ``(task, arm, repeat)``: claimed, started, adopted, voided and rerun on its
own, as a pair is when the run has one repeat.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runner.errors import UserError
from runner.results.tree import (
    STAMP_FORMAT,
    iter_trial_dirs,
    job_dir,
    jobs_dir,
    repeat_of,
    stamp_time,
    with_repeat,
)
from runner.schedule.claims import Claim
from runner.schedule.config import ArmSpec

if TYPE_CHECKING:
    import subprocess

    from runner.ops.void import Verdict
    from runner.schedule.task_images import TaskImage

#: harbor's output (stdout and stderr) of one attempt, in its stamp dir
HARBOR_LOG = "harbor-run.log"

Pair = tuple[str, str]  # (task, arm)
Unit = tuple[str, str, int]  # (task, arm, repeat): one repeat of a pair, the runner's unit of work


def new_stamp(arm_dir: Path, repeat: int = 1) -> str:
    """A fresh jobs-dir name under ``<out>/<task>/<arm>``: UTC time to the second, marked with its
    repeat, unique, and later than every stamp already there.

    Why later: a cell orders its attempts by their stamps (the latest done one scores it, a hole in
    the latest one is never passed over), so a clock stepped back (NTP after a pause, a VM resumed)
    must not put a new attempt before an old one. Such a stamp takes the latest one's time plus a
    second instead; a collision moves on by a second too (a ``-2`` suffix sorted ``-10`` before it).
    """
    t = datetime.now(UTC).replace(microsecond=0)
    latest = latest_stamp_time(arm_dir)
    if latest is not None and t <= latest:
        try:
            t = latest.astimezone(UTC) + timedelta(seconds=1)  # (an ISO name's own offset read as UTC)
        except OverflowError:  # a dir named for the year 9999: no time after it
            raise UserError(
                f"{arm_dir}: a stamp dir names the last second of the calendar; move it out"
            ) from None
    while (arm_dir / with_repeat(stamp := t.strftime(STAMP_FORMAT), repeat)).exists():
        t += timedelta(seconds=1)
    return with_repeat(stamp, repeat)


def latest_stamp_time(arm_dir: Path) -> datetime | None:
    """The latest time a stamp in ``arm_dir`` names (any repeat; an older ``-<n>`` collision suffix
    read as its time), or None."""
    try:
        names = [e.name for e in os.scandir(arm_dir)]
    except OSError:
        return None
    times = [t for n in names if (t := stamp_time(_COLLISION.sub(r"\1\2", n))) is not None]
    return max(times, default=None)


#: the suffix an earlier ``new_stamp`` gave a stamp taken in the same second (``<stamp>-<n>``)
_COLLISION = re.compile(r"^(\d{4}-\d\d-\d\d__\d\d-\d\d-\d\d)-\d+(@r\d+)?$")


@dataclass
class Attempt:
    """One started (or adopted) attempt: which pair, under which claim, in which stamp dir. How it
    is followed and stopped (``poll``, ``signal``) is its launcher's."""

    task: str
    arm: ArmSpec
    stamp: str
    claim: Claim
    out: Path
    started: float  # monotonic
    pid: int = 0  # the harbor process on this host; 0 when it runs elsewhere
    returncode: int | None = None
    terminated: bool = False

    @property
    def pair(self) -> Pair:
        return (self.task, self.arm.name)

    @property
    def repeat(self) -> int:
        """Which repeat of its pair (its stamp says so)."""
        return repeat_of(self.stamp)

    @property
    def unit(self) -> Unit:
        return (self.task, self.arm.name, self.repeat)

    @property
    def stamp_dir(self) -> Path:
        return jobs_dir(self.out, self.task, self.arm.name, self.stamp)

    @property
    def job_dir(self) -> Path:
        """harbor's job dir of the attempt (``-o`` plus ``--job-name``)."""
        return job_dir(self.out, self.task, self.arm.name, self.stamp)

    @property
    def harbor_log(self) -> Path:
        return self.stamp_dir / HARBOR_LOG

    def trials(self) -> set[str]:
        """The names of the attempt's trial dirs (one per job in marathon's layout)."""
        return {t.name for t in iter_trial_dirs(self.job_dir)}

    def poll(self) -> bool:
        """True once the attempt has ended."""
        raise NotImplementedError

    def signal(self, sig: signal.Signals, group: bool = False) -> None:
        """Ask the attempt to stop (``group``: the whole process group, where that means something)."""
        raise NotImplementedError


class Launcher(Protocol):
    """Where attempts run. The driver calls only these, in this order of a run's life: ``begin``
    once the tree is locked; ``prepare_image`` for each task, from the image worker
    (``runner.schedule.image_prep``); then per pass ``runs_elsewhere``/``may_start``/``start`` for
    each repeat of a pair it would start once its task's image is ready, ``ended`` and ``classify``
    for each attempt that ended; ``close`` at exit."""

    #: how often starting waited for capacity (the ``runner_exit`` event's ``gate_waits``)
    gate_waits: int

    def begin(self) -> None:
        """Before the first attempt: whatever must watch the attempts from their start."""

    def close(self, still_running: bool = False) -> None:
        """At the runner's exit (also after an error). ``still_running``: the runner ends with
        attempts it started still running (an error, a full disk): what they need stays up for the
        runner that adopts them."""

    def adopt(self, units: set[Unit], running: set[Unit]) -> list[Attempt]:
        """A dead runner's attempts of ``units`` still running: claimed again and followed, never
        started twice (``running``: the units this runner follows already)."""
        ...

    def prepare_image(self, task: str, started: Callable[[subprocess.Popen], None]) -> TaskImage | None:
        """The task's image, built (or verified) once where the attempts will run, and its run-local
        task copy (``runner.schedule.task_images``); None when harbor runs the task as it is (its
        own ``docker_image``, or an environment other than Docker). Blocking; raises when it cannot
        be made. ``started`` is given a build's process (a stopping runner ends it)."""
        ...

    def runs_elsewhere(self, task: str, arm: str, repeat: int = 1) -> bool:
        """An attempt of the pair's repeat runs (or waits for a slot) beyond this runner's claims."""
        ...

    def may_start(self, running: list[Attempt]) -> bool:
        """Whether another attempt may start now (a capacity gate; False: wait and ask again)."""
        ...

    def start(self, task: str, arm: ArmSpec, claim: Claim, image: TaskImage | None) -> Attempt:
        """Start one attempt of the claim's repeat under ``claim`` (recorded in the claim before it
        can run; its stamp carries the repeat: ``new_stamp``), on ``image`` (recorded in its stamp
        dir) when the task has one."""
        ...

    def ended(self, attempt: Attempt, *, stopping: bool) -> None:
        """Bookkeeping of an attempt that ended (its process record; what it left behind, unless the
        runner is stopping and removes all of it at once with ``tidy``)."""

    def classify(self, attempt: Attempt, stopped_by: str | None) -> Verdict:
        """The voiding table's verdict on an attempt that did not finish done."""
        ...

    def tidy(self, trials: set[str]) -> None:
        """Remove what the given trials left behind (before voiding, and at the stop), and what an
        earlier call could not remove (``tidy(set())`` retries only that)."""

    def engine_answers(self) -> bool:
        """Does the engine the attempts run on answer right now (the breaker ignores an outage)?"""
        ...

    def tend(self, running: list[Attempt]) -> None:
        """Once per loop of the driver: keep alive what the running attempts depend on (this host's
        model gateway; a cluster's hosts tend their own)."""
