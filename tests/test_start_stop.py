"""Start and stop as the CLI and the console share them, on real processes, without Docker.

``runner.schedule.start`` decides whether a runner may start and starts it through a launcher so it
is never the caller's child; ``runner.ops.stop`` stops the runner alone. What needs the engine (a
runner that really runs trials) is in tests/console/test_actions.py and tests/runner/.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from runner.errors import UserError
from runner.ops.procs import Registry
from runner.ops.stop import RUNNER_WIND_DOWN_SEC, act_stop_runner, plan_stop_runner
from runner.schedule.config import resolve, write_driver_env
from runner.schedule.start import act_start, log_path, plan_start, start_detached

DEMO_TASKS = Path(__file__).resolve().parent.parent / "runner" / "demo" / "tasks"


def _configured(tmp_path: Path) -> tuple[Path, Path]:
    """An output tree whose .driver_env names a private copy of the demo tasks."""
    tasks, out = tmp_path / "tasks", tmp_path / "out"
    shutil.copytree(DEMO_TASKS / "calc-partial", tasks / "calc-partial")
    out.mkdir()
    write_driver_env(
        resolve(out, {"tasks_dir": str(tasks), "arms": ["oracle"], "max_passes": 1}, resume=False)
    )
    return out, tasks


def _runner_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "marathon.cli" in " ".join(p.cmdline())]


def test_start_without_a_configuration_is_refused_and_says_how(tmp_path):
    plan = plan_start(tmp_path)
    assert not plan.possible
    assert ".driver_env is missing" in plan.render() and "marathon run" in plan.render()
    with pytest.raises(UserError, match="driver_env is missing"):
        act_start(plan)


def test_a_refused_preflight_is_the_plan_and_nothing_starts(tmp_path):
    out, tasks = _configured(tmp_path)
    shutil.rmtree(tasks)  # the configured dataset is gone: the preflight refuses the start
    plan = plan_start(out)
    assert not plan.possible and plan.argv is None
    assert str(tasks) in plan.render()
    assert not log_path(out).exists()


def test_a_runner_that_exits_at_once_is_reported_with_its_log_and_was_never_our_child(tmp_path):
    out, tasks = _configured(tmp_path)
    shutil.rmtree(tasks)
    with pytest.raises(UserError, match="the runner exited at once") as exc:
        start_detached(out, wait_sec=120)
    assert str(tasks) in str(exc.value)  # the end of its log says why
    assert str(tasks) in log_path(out).read_text()
    assert _runner_children() == []  # the launcher was reaped; the runner was its child, not ours


def test_stop_without_a_runner_has_nothing_to_do(tmp_path):
    plan = plan_stop_runner(tmp_path)
    assert not plan.possible
    assert "No runner of this tree is alive" in plan.render()
    assert act_stop_runner(plan).signalled == []


def test_stop_signals_the_registered_runner_alone(tmp_path):
    out = tmp_path / "out"
    runner = subprocess.Popen(["sleep", "600"], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        reg = Registry(out)
        reg.register(runner.pid, "runner", runner.args)
        reg.register(bystander.pid, "harbor", bystander.args)
        plan = plan_stop_runner(out)
        assert plan.possible and [t.pid for t in plan.stop.targets] == [runner.pid]
        assert "SIGTERM to the runner process alone" in plan.render()
        assert f"{RUNNER_WIND_DOWN_SEC:.0f} s" in plan.render()
        report = act_stop_runner(plan)
        assert runner.wait(timeout=30) is not None
        assert report.still_alive == [] and runner.pid in report.exited
        assert bystander.poll() is None  # its trials are the runner's to stop, not ours
    finally:
        for p in (runner, bystander):
            if p.poll() is None:
                p.kill()
            p.wait()
