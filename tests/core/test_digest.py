"""Task digests: ours must equal harbor 0.25.0's own (Packager.compute_content_hash)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harbor.models.dataset.manifest import DatasetManifest
from harbor.publisher.packager import Packager

from runner.results.digest import check_dataset, task_digest

DEMO = Path(__file__).resolve().parents[2] / "runner" / "demo" / "tasks"
TASKS = sorted(p for p in DEMO.iterdir() if (p / "task.toml").is_file())


@pytest.mark.parametrize("task", TASKS, ids=lambda p: p.name)
def test_digest_equals_harbors_own(task):
    assert task_digest(task) == "sha256:" + Packager.compute_content_hash(task)[0]


def test_bundled_dataset_toml_matches_and_parses_with_harbor():
    assert check_dataset(DEMO) == []
    manifest = DatasetManifest.from_toml_file(DEMO / "dataset.toml")
    assert {t.name for t in manifest.tasks} == {f"marathon-demo/{p.name}" for p in TASKS}


def test_ignored_files_and_gitignore_follow_harbor(tmp_path):
    task = tmp_path / "calc-partial"
    shutil.copytree(DEMO / "calc-partial", task)
    before = task_digest(task)
    # harbor's default ignores: caches and editor files do not change the digest
    (task / "tests" / "__pycache__").mkdir()
    (task / "tests" / "__pycache__" / "verify.cpython-311.pyc").write_bytes(b"\0")
    (task / "environment" / "notes.swp").write_text("x")
    assert task_digest(task) == before == "sha256:" + Packager.compute_content_hash(task)[0]
    # a task's own .gitignore replaces the defaults
    (task / ".gitignore").write_text("*.log\n")
    (task / "tests" / "run.log").write_text("noise")
    assert task_digest(task) == "sha256:" + Packager.compute_content_hash(task)[0]
    # any change to a hashed file changes the digest, and the manifest check names the task
    (task / "instruction.md").write_text("changed\n")
    assert task_digest(task) != before
    assert task_digest(task) == "sha256:" + Packager.compute_content_hash(task)[0]
