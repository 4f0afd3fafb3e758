"""Main-container deaths as the engine reported them, and ``container-deaths.json``, the record a
cluster job leaves of its own host's engine.

Why: the voiding row ``container_died`` (``runner.results.rules.VOIDING``) asks one question of
the engine: did this trial's main container die without a stop request before the trial ended?
On one host the runner follows its own engine (``runner.ops.death_watch.DeathWatch``). In a
cluster run the trial ran on another host's engine, which the runner does not watch; the attempt's
Ray job watches that engine while harbor runs and records what it saw of its own trials' main
containers in the attempt's stamp dir, beside ``host.json``. The runner then asks the record the
question it would have asked its own watch (``Deaths.death_before``). Only the job writes the file
(the stamp dir is above any dir an agent can write into); it is read with the safe-open rules of
every tree file all the same, and a malformed record is no record.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from runner.results import records

DEATHS_JSON = "container-deaths.json"
#: deaths kept in one record at most (one per trial container is the usual count)
MAX_RECORDED = 64


@dataclass
class Death:
    """One main container's end as the engine reported it."""

    project: str
    container: str
    at: float  # the engine's event time, epoch seconds
    exit_code: str
    stopped: bool = False  # a ``stop`` event followed: docker stop / compose stop or down (harbor's)
    oom: bool = False

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.at, UTC).strftime("%H:%M:%S")
        why = "killed by the OOM killer" if self.oom else f"exit code {self.exit_code}"
        if self.stopped:
            return (
                f"the engine saw main container {self.container[:12]} stopped at {when} UTC ({why}) while "
                "the trial's last phase still ran (harbor stops it only after that phase)"
            )
        return f"the engine saw main container {self.container[:12]} die at {when} UTC ({why}) without a stop request"


class Deaths(Protocol):
    """What the voiding rules ask of an engine's account: the live watch or a job's record."""

    def death_before(self, project: str, end: float, under: float | None = None) -> Death | None: ...


def first_unstopped(deaths: list[Death], end: float, under: float | None = None) -> Death | None:
    """The one rule: the first death before the trial's ``end`` that was no teardown of harbor's:
    without a stop request, or, stopped or not, before ``under`` (when the trial's last phase, its
    verifier, finished: harbor stops the container only after it). A stop under the verifier is
    someone else's: an engine restart stops every container with the same ``kill``/``die``/``stop``
    events as harbor's teardown, and ``docker stop`` by an operator does too."""
    for d in deaths:
        if d.at < end and (not d.stopped or (under is not None and d.at < under)):
            return d
    return None


@dataclass(frozen=True)
class RecordedDeaths:
    """A cluster job's record of its host's engine (``container-deaths.json``)."""

    deaths: tuple[Death, ...]
    engine: str = ""  # the engine address the job watched (its host's DOCKER_HOST)

    def death_before(self, project: str, end: float, under: float | None = None) -> Death | None:
        return first_unstopped([d for d in self.deaths if d.project == project], end, under)


def write_deaths(stamp_dir: Path, deaths: list[Death], engine: str = "") -> None:
    """The job's record (atomic: a reader sees the old file or the new one)."""
    doc = {"engine": engine, "deaths": [asdict(d) for d in deaths[:MAX_RECORDED]]}
    tmp = stamp_dir / f".{DEATHS_JSON}.tmp"
    tmp.write_text(json.dumps(doc) + "\n")
    os.replace(tmp, stamp_dir / DEATHS_JSON)


def read_deaths(stamp_dir: Path | str) -> RecordedDeaths | None:
    """The attempt's record, or None when absent (a single-host run, a job that ended before it
    wrote one) or unreadable."""
    path = os.path.join(os.fspath(stamp_dir), DEATHS_JSON)
    if not os.path.lexists(path):
        return None
    loaded = records.load_json(path)
    d = loaded.data
    if not loaded.ok or d is None or not isinstance(d.get("deaths"), list):
        return None
    got: list[Death] = []
    for item in d["deaths"][:MAX_RECORDED]:
        if not isinstance(item, dict):
            return None
        project, container, exit_code = (item.get(k) for k in ("project", "container", "exit_code"))
        at = item.get("at")
        if not all(isinstance(v, str) for v in (project, container, exit_code)):
            return None
        if type(at) not in (int, float) or not (0 < at < 1e11):
            return None
        got.append(Death(project, container, float(at), exit_code, item.get("stopped") is True,
                         item.get("oom") is True))  # fmt: skip
    engine = d.get("engine")
    return RecordedDeaths(tuple(got), engine if isinstance(engine, str) else "")
