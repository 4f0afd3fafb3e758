"""The run-local task copy harbor runs on the image built once, the image records, harbor's command
and the background worker -- no Docker (tests/runner/test_runner_prebuild.py runs them for real).

The copy is checked with harbor's own reading of a task (``TaskConfig.model_validate_toml`` and
``should_use_prebuilt_docker_image``): what decides that harbor builds nothing is harbor's code.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
from runner_support import DEMO_TASKS

from runner.schedule.config import resolve
from runner.schedule.harbor_run import BUILD_OVERLAY, harbor_argv
from runner.schedule.image_prep import FAILED, PENDING, READY, ImagePrep
from runner.schedule.task_images import (
    TaskImage,
    read_attempt_image,
    read_record,
    run_copy,
    wants_image,
    write_attempt_image,
    write_record,
)

IMAGE_ID = "sha256:" + "ab" * 32
CONTENT = "sha256:" + "cd" * 32


def _image(task: str = "calc-partial", image_id: str = IMAGE_ID) -> TaskImage:
    return TaskImage(task, "e" * 64, image_id, CONTENT, f"marathon-task-{task}:{image_id[7:19]}")


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def tasks(tmp_path) -> Path:
    dest = tmp_path / "tasks"
    shutil.copytree(DEMO_TASKS, dest)
    return dest


def test_the_copy_names_the_image_harbor_takes_prebuilt_and_the_users_task_is_untouched(tasks, tmp_path):
    from harbor.environments.definition import should_use_prebuilt_docker_image
    from harbor.models.task.config import TaskConfig

    out = tmp_path / "out"
    before = _tree_digest(tasks)
    copy = run_copy(out, tasks, _image())
    assert _tree_digest(tasks) == before  # the user's tasks dir is never edited
    assert copy.name == "calc-partial" and copy.is_relative_to(out / ".runner" / "tasks")
    # harbor's own reading of the copy: it runs the image by id and builds nothing
    cfg = TaskConfig.model_validate_toml((copy / "task.toml").read_text())
    assert cfg.environment.docker_image == IMAGE_ID
    assert should_use_prebuilt_docker_image(copy / "environment", docker_image=IMAGE_ID, force_build=False)
    assert not wants_image(copy) and wants_image(tasks / "calc-partial")
    # everything else of the task is as the user wrote it
    mine, theirs = (tomllib.loads((d / "task.toml").read_text()) for d in (copy, tasks / "calc-partial"))
    assert mine["environment"].pop("docker_image") == IMAGE_ID and mine == theirs
    for rel in ("instruction.md", "tests/test.sh", "environment/Dockerfile", "environment/plan.json"):
        assert (copy / rel).read_bytes() == (tasks / "calc-partial" / rel).read_bytes(), rel


def test_a_copy_is_made_once_and_a_changed_task_or_image_gets_its_own(tasks, tmp_path):
    out = tmp_path / "out"
    first = run_copy(out, tasks, _image())
    stamp = (first / "task.toml").stat().st_mtime_ns
    assert run_copy(out, tasks, _image()) == first and (first / "task.toml").stat().st_mtime_ns == stamp
    other_image = run_copy(out, tasks, _image(image_id="sha256:" + "12" * 32))
    assert other_image != first and other_image.name == first.name
    (tasks / "calc-partial" / "tests" / "test.sh").write_text("#!/bin/bash\necho changed\n")
    changed = run_copy(out, tasks, _image())
    assert changed not in (first, other_image)
    assert (changed / "tests" / "test.sh").read_text().endswith("changed\n")
    assert (first / "tests" / "test.sh").read_text() != (
        changed / "tests" / "test.sh"
    ).read_text()  # kept as run


def test_harbor_runs_the_copy_without_the_build_overlay(tasks, tmp_path):
    cfg = resolve(tmp_path / "out", {"tasks_dir": str(tasks), "arms": "oracle"}, environ={})
    (arm,) = cfg.arm_specs()
    copy = run_copy(cfg.out, tasks, _image())
    argv = harbor_argv(cfg, "calc-partial", arm, tmp_path / "j", task_dir=copy)
    assert argv[argv.index("-p") + 1] == str(copy)
    assert not any(a.endswith(BUILD_OVERLAY) for a in argv)  # nothing to build
    plain = harbor_argv(cfg, "calc-partial", arm, tmp_path / "j")
    assert plain[plain.index("-p") + 1] == str(tasks / "calc-partial")
    assert any(a.endswith(BUILD_OVERLAY) for a in plain)


def test_records_round_trip_and_junk_is_no_record(tmp_path):
    out = tmp_path / "out"
    img = TaskImage(
        **{**_image().to_json(), "hosts": {"n1": "vm/10.0.0.1"}, "ship_sec": {"vm/10.0.0.2": 1.5}}
    )
    write_record(out, img)
    assert read_record(out, "calc-partial") == img
    stamp = tmp_path / "stamp"
    write_attempt_image(stamp, img)
    assert read_attempt_image(stamp) == img
    assert read_record(out, "other") is None
    for junk in ("[]", '{"task": 1}', "{", '{"task": "t", "source": "s", "image_id": "latest", '
                 '"content_sha256": "c", "tag": "x"}'):  # fmt: skip
        (stamp / "image.json").write_text(junk)
        assert read_attempt_image(stamp) is None, junk


def _wait(prep: ImagePrep, task: str, sec: float = 10.0) -> str:
    deadline = time.monotonic() + sec
    while (state := prep.state(task)[0]) == PENDING and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


def test_images_are_made_one_at_a_time_in_the_order_wanted_and_a_failure_waits_for_the_next_pass():
    order, at_once, busy = [], [], threading.Lock()
    broken = {"b"}

    def prepare(task, started):
        if not busy.acquire(blocking=False):
            at_once.append(task)
        else:
            time.sleep(0.05)
            busy.release()
        order.append(task)
        if task in broken:
            raise RuntimeError(f"the image of {task} did not build:\nstep 3 failed")
        return _image(task) if task != "c" else None

    prep = ImagePrep(prepare)
    try:
        prep.want(["a", "b", "c", "a"])
        assert [_wait(prep, t) for t in "abc"] == [READY, FAILED, READY]
        assert order == ["a", "b", "c"] and at_once == []
        assert prep.state("c")[1].image is None  # a task harbor runs as it is
        news = prep.news()
        assert [(o.task, o.state) for o in news] == [("a", READY), ("b", FAILED), ("c", READY)]
        assert news[1].error.startswith("the image of b did not build") and prep.news() == []
        broken.clear()
        assert prep.retry_failed() == ["b"] and prep.state("b")[0] == PENDING
        assert _wait(prep, "b") == READY and order == ["a", "b", "c", "b"]
    finally:
        prep.close()


def test_closing_ends_a_build_in_progress():
    procs = []

    def prepare(task, started):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        procs.append(proc)
        started(proc)
        proc.wait()
        raise RuntimeError("build ended")

    prep = ImagePrep(prepare)
    prep.want(["a"])
    deadline = time.monotonic() + 10
    while not procs and time.monotonic() < deadline:
        time.sleep(0.01)
    prep.close()
    # ended by a signal (a negative return code), not waited out: its sleep was a minute
    assert procs and procs[0].poll() is not None and procs[0].returncode < 0, procs
