"""The disk gate (runner.ops.disk) on a real run: the output tree on a small tmpfs of its own, a
file filling it below ``--min-free-gb``. The runner starts nothing while the disk is short and says
why (its ``gate_wait`` event, ``marathon health``'s ``disk_low``); it goes on by itself once the
file is removed, with no one restarting it."""

from __future__ import annotations

import pytest
from runner_support import DEMO_TASKS, done_jobs, events, run_marathon, start_marathon, wait_for

from runner.ops.disk import GB, rooms
from runner.results.events import EventLog
from runner.schedule.config import RunConfig
from runner.schedule.local import LocalLauncher
from runner.schedule.lock import me

MIB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path, mount_tmpfs):
    """A 1,100 MiB tmpfs mounted for this test alone."""
    return mount_tmpfs(tmp_path / "disk", "1100m")


@pytest.mark.docker
def test_no_attempt_starts_while_the_disk_is_short_and_the_run_goes_on_once_it_is_freed(
    docker_engine, small_disk, tmp_path
):
    filler = small_disk / "filler"
    with open(filler, "wb") as fh:  # 200 MiB of 1,100: 900 MiB free, below 1 GiB
        for _ in range(200):
            fh.write(b"\0" * MIB)
    out = small_disk / "out"
    argv = ["run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", "calc-partial", "--arms", "oracle",
            "--plain", "--min-free-gb", "1"]  # fmt: skip
    proc = start_marathon(*argv, log=tmp_path / "runner.log")
    try:
        wait_for(lambda: events(out, "gate_wait"), 120, "the runner to wait at the gate")
        (wait,) = events(out, "gate_wait")
        assert wait["reason"].startswith(
            f"disk: 0.9 GB free on {out} (the output tree), below --min-free-gb 1"
        )
        health = run_marathon("health", str(out), timeout=120)
        assert f"disk_low            disk: 0.9 GB free on {out}" in health.stdout, health.stdout
        assert not events(out, "job_start")
        filler.unlink()
        assert proc.wait(timeout=300) == 0, (tmp_path / "runner.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    opened, start = events(out, "gate_open"), events(out, "job_start")
    assert opened and len(start) == 1 and start[0]["ts"] >= opened[0]["ts"]
    assert list(done_jobs(out)) == [("calc-partial", "oracle")]
    notes = [e for e in events(out, "preflight_note") if e["check"] == "disk"]
    assert notes and "below --min-free-gb 1" in notes[0]["what"]


def test_a_run_without_docker_opens_its_gate_again_once_the_disk_has_room(tmp_path):
    """Another harbor environment (no local engine): the tree's disk alone, and the gate's wait is
    closed by its ``gate_open`` once there is room (else the console would show it waiting forever)."""
    out = tmp_path / "out"
    out.mkdir()
    above = int(rooms(out, None)[0].free // GB) + 10  # more than this disk has free
    cfg = RunConfig(out=out, env="daytona", gateway=False, min_free_gb=above)
    launcher = LocalLauncher(cfg, EventLog(out, "r1"), me("r1"), {}, {}, gate_recheck_sec=0.0)
    assert not launcher.may_start([]) and not launcher.may_start([])
    (wait,) = events(out, "gate_wait")
    assert (
        wait["reason"].startswith("disk: ")
        and f"(the output tree), below --min-free-gb {above}:" in wait["reason"]
    )
    launcher.cfg = RunConfig(out=out, env="daytona", gateway=False, min_free_gb=1)
    assert launcher.may_start([])
    (opened,) = events(out, "gate_open")
    assert opened["reason"] == "disk: room again" and not launcher._gate_waiting_since
