"""``marathon run --dataset NAME@VERSION --registry-path registry.json``: the tasks are fetched by
harbor's own registry code (a local registry.json whose tasks live in a git repository this test
makes of the demo tasks, pinned by commit: what a published benchmark looks like, offline) into
the cache, and the run then uses that dir like any tasks dir.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from runner_support import DEMO_TASKS, run_marathon

from runner.errors import UserError
from runner.schedule.config import read_driver_env
from runner.schedule.dataset import fetch_dataset

TASKS = ("calc-partial", "words-passrate")


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", "-C", str(repo), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def registry(tmp_path) -> Path:
    """A registry.json with dataset ``mini@1.0``: two demo tasks in a local git repository."""
    repo = tmp_path / "bench-repo"
    repo.mkdir()
    for t in TASKS:
        shutil.copytree(DEMO_TASKS / t, repo / "tasks" / t)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "mini benchmark")
    sha = _git(repo, "rev-parse", "HEAD")
    tasks = [{"name": t, "git_url": repo.as_uri(), "git_commit_id": sha, "path": f"tasks/{t}"} for t in TASKS]
    reg = tmp_path / "registry.json"
    reg.write_text(
        json.dumps([{"name": "mini", "version": "1.0", "description": "two demo tasks", "tasks": tasks}])
    )
    return reg


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b, ignore=[".git"])
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_the_dataset_is_fetched_by_harbor_into_one_tasks_dir(registry, tmp_path):
    got = fetch_dataset("mini@1.0", registry_path=registry, cache=tmp_path / "cache")
    assert got.tasks == TASKS and got.tasks_dir == (tmp_path / "cache" / "mini@1.0").resolve()
    for t in TASKS:
        assert _same_tree(got.tasks_dir / t, DEMO_TASKS / t), t
    again = fetch_dataset("mini@1.0", registry_path=registry, cache=tmp_path / "cache")  # cached: same dir
    assert again == got


@pytest.mark.parametrize(
    ("ref", "registry_path", "says"),
    [
        ("mini", "registry", "give NAME@VERSION"),
        ("mini@2.0", "registry", "--dataset mini@2.0: Version 2.0 of dataset mini not found"),
        ("other@1.0", "registry", "--dataset other@1.0: Dataset other not found"),
        ("mini@1.0", None, "--dataset needs --registry-path FILE"),
        ("mini@1.0", "missing", "no such file"),
    ],
)
def test_a_bad_dataset_reference_is_one_line(registry, tmp_path, ref, registry_path, says):
    path = {"registry": registry, "missing": tmp_path / "nope.json", None: None}[registry_path]
    with pytest.raises(UserError) as err:
        fetch_dataset(ref, registry_path=path, cache=tmp_path / "cache")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_run_refuses_a_dataset_with_a_tasks_dir_and_a_registry_without_a_dataset(registry, tmp_path):
    r = run_marathon("run", str(tmp_path / "out"), "--dataset", "mini@1.0", "--registry-path", str(registry),
                     "--tasks-dir", str(DEMO_TASKS), timeout=300)  # fmt: skip
    assert r.returncode == 2 and "--dataset and --tasks-dir both name the tasks" in r.stderr, r.stderr
    r = run_marathon("run", str(tmp_path / "out"), "--registry-path", str(registry), timeout=300)
    assert r.returncode == 2 and "only go with --dataset" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.docker
def test_a_run_from_a_dataset_records_its_tasks_dir_and_scores_as_from_the_dir(
    registry, tmp_path, docker_engine
):
    out, cache = tmp_path / "out", tmp_path / "cache"
    r = run_marathon("run", str(out), "--dataset", "mini@1.0", "--registry-path", str(registry),
                     "--arms", "oracle", "--plain", "--max-passes", "1", MARATHON_CACHE=str(cache),
                     timeout=1200)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    env = read_driver_env(out)
    assert env["MARATHON_DATASET"] == "mini@1.0"
    assert Path(env["MARATHON_TASKS_DIR"]) == (cache / "datasets" / "mini@1.0").resolve()
    assert "2/2 pairs done" in r.stdout, r.stdout[-2000:]
