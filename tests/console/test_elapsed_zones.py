"""A running pair's elapsed time in the grid, whatever the host's time zone.

harbor writes a job's ``started_at`` without a zone, in the local time of the host it runs on
(``datetime.now()``); the console read it as UTC, so on a UTC+8 host (the field's) every running
pair showed 0 s for the first eight hours of its job, and on a UTC-5 host five hours too many. The
tree here is a real recorded attempt (tests/core/recorded) made running (its trial's result and
the job's end taken away), its job started ten minutes ago in the zone under test.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from console import view
from runner.results import tree
from runner.results.model import RunModel

RECORDED = Path(__file__).resolve().parents[1] / "core" / "recorded" / "partial" / "20261201T081523Z"


@pytest.fixture
def zone(request):
    """This process's local time zone set to ``request.param`` for the test, then restored (POSIX
    zone strings: no zone database needed; ``CST-8`` is UTC+8, ``EST5`` UTC-5)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def _running(out: Path, started_ago: float, harbor_zone_offset: float = 0.0) -> tuple[str, float]:
    """A running attempt of calc-partial/plain stamped now (UTC, as the runner stamps), its job
    started ``started_ago`` s ago in this host's local time (shifted by ``harbor_zone_offset``: a
    harbor host in another zone); returns (stamp, now)."""
    now = time.time()
    stamp = datetime.fromtimestamp(now - started_ago - 2, UTC).strftime("%Y-%m-%d__%H-%M-%S")
    job = out / "calc-partial" / "plain" / stamp / "plain"
    shutil.copytree(RECORDED / "partial", job, symlinks=True)
    (trial,) = tree.list_dirs(job)
    (job / trial / "result.json").unlink()
    d = json.loads((job / "result.json").read_text())
    local = datetime.fromtimestamp(now - started_ago + harbor_zone_offset)  # naive, as harbor's
    d.update(started_at=local.isoformat(), updated_at=local.isoformat(), finished_at=None)
    d["stats"].update(n_completed_trials=0, n_running_trials=1)
    (job / "result.json").write_text(json.dumps(d, indent=4))
    return stamp, now


@pytest.mark.parametrize("zone", ["CST-8", "EST5", "UTC0"], indirect=True)
def test_a_running_pairs_elapsed_time_is_its_jobs_in_any_zone(tmp_path, zone):
    out = tmp_path / "out"
    _running(out, started_ago=600)
    m = RunModel.load(out, index=False)
    cell = m.cells[("calc-partial", "plain")]
    assert cell.wall_sec is None  # not done: the grid shows the time since its job started
    assert view.elapsed_sec(cell, time.time()) == pytest.approx(600, abs=30)


@pytest.mark.parametrize("zone", ["CST-8"], indirect=True)
@pytest.mark.parametrize("harbor_zone_offset", [-5 * 3600.0, 3 * 3600.0])
def test_a_job_start_in_another_hosts_zone_falls_back_to_the_runners_stamp(
    tmp_path, zone, harbor_zone_offset
):
    out = tmp_path / "out"
    _running(out, started_ago=600, harbor_zone_offset=harbor_zone_offset)
    cell = RunModel.load(out, index=False).cells[("calc-partial", "plain")]
    assert view.elapsed_sec(cell, time.time()) == pytest.approx(602, abs=30)
