"""prebuild and the task image built once: the proxy comes from the environment (never a command
line: it carries credentials) and reaches the build only; running containers have no proxy
variables; ``marathon prebuild`` records the image by digest, and ``marathon run`` gives every
trial exactly that image through harbor's prebuilt path (no trial builds: each trial's container is
created from the image's id), recorded in each attempt; a resumed run's recorded image is verified,
a changed task is built anew, and an image shipped as an archive is checked by digest on arrival.

The tasks here are made per test (unique names), so the images they make are removed by exact
reference at the end; no other test uses them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from runner_support import done_jobs, events, run_marathon

from modes.naming import compose_project

pytestmark = [pytest.mark.docker]
PROXY = "http://user:secretpw@127.0.0.1:9"  # nothing listens there: the Dockerfile needs no network


def _task(root, name):
    t = root / name
    (t / "environment").mkdir(parents=True)
    (t / "solution").mkdir()
    (t / "tests").mkdir()
    (t / "task.toml").write_text(
        f'schema_version = "1.4"\n[task]\nname = "marathon-test/{name}"\n[agent]\ntimeout_sec = 120.0\n'
        "[verifier]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 300.0\n"
    )
    (t / "instruction.md").write_text("Nothing to do.\n")
    (t / "environment" / "Dockerfile").write_text(
        "FROM marathon-base:bookworm\n"
        'RUN date +%s%N > /stamp && echo "[$HTTP_PROXY]" > /proxy-at-build\n'
        "WORKDIR /app\n"
    )
    (t / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho stamp=$(cat /stamp)\nenv | grep -i _proxy || echo no-proxy-env\n"
    )
    (t / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return t


def _docker(*args) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _remove_images(*refs: str) -> None:
    """Our own images, by exact reference (an image goes once its last tag does)."""
    for ref in refs:
        if ref:
            subprocess.run(["docker", "image", "rm", ref], capture_output=True, timeout=120)


def _digest(root: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]


def test_prebuild_proxy_only_at_build_and_every_trial_runs_the_image_built_once(
    docker_engine, out_tree, tmp_path
):
    name = f"probe-{uuid.uuid4().hex[:6]}"
    tasks = tmp_path / "tasks"
    _task(tasks, name)
    image = f"marathon-prebuild-{name}-main"
    tag = ""
    watch = None
    try:
        pb = run_marathon(
            "prebuild", "--tasks-dir", str(tasks), "--proxy-env", "MARATHON_TEST_PROXY", "--json",
            timeout=600, MARATHON_TEST_PROXY=PROXY,
        )  # fmt: skip
        assert pb.returncode == 0, pb.stdout + pb.stderr
        assert "secretpw" not in pb.stdout + pb.stderr
        (built,) = json.loads(pb.stdout)
        tag, image_id = built["tag"], built["image_id"]
        # recorded by digest: the id, the content digest the receipts record, a tag named for both
        assert built["image"] == image and image_id.startswith("sha256:") and built["content_sha256"]
        assert tag == f"marathon-task-{name}:{image_id[7:19]}"
        assert _docker("image", "inspect", "--format", "{{.Id}}", tag).strip() == image_id
        # the proxy was there during the build ...
        assert _docker("run", "--rm", tag, "cat", "/proxy-at-build").strip() == f"[{PROXY}]"
        # ... and is nowhere in the image's config or a running container's environment
        cfg_env = json.loads(_docker("image", "inspect", tag))[0]["Config"]["Env"] or []
        assert not [e for e in cfg_env if "proxy" in e.lower()]
        assert "proxy" not in _docker("run", "--rm", tag, "env").lower()
        stamp = _docker("run", "--rm", tag, "cat", "/stamp").strip()

        before = _digest(tasks)
        # every container created while the run runs, from the engine's own account
        watch = subprocess.Popen(["docker", "events", "--filter", "type=container", "--filter", "event=create",
                                  "--format", "{{json .}}"], stdout=subprocess.PIPE, text=True)  # fmt: skip
        r = run_marathon("run", str(out_tree), "--tasks-dir", str(tasks), "--arms", "oracle,nop",
                         "--concurrency", "2", "--plain")  # fmt: skip
        watch.terminate()
        created, _ = watch.communicate(timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _digest(tasks) == before  # the user's tasks dir is never edited

        # the run's image of the task is the prebuild's (its cached build), made once
        (ready,) = events(out_tree, "image_ready")
        assert (ready["task"], ready["image_id"], ready["tag"], ready["how"]) == (
            name,
            image_id,
            tag,
            "built",
        )
        assert ready["content_sha256"] == built["content_sha256"]
        assert f"image   {name}: {tag} built" in r.stdout
        copy = Path(ready["task_dir"])
        assert copy.is_relative_to(out_tree / ".runner" / "tasks") and copy.name == name
        assert f'docker_image = "{image_id}"' in (copy / "task.toml").read_text()

        done = done_jobs(out_tree)
        assert set(done) == {(name, "oracle"), (name, "nop")}
        projects = set()
        for (_t, _arm), (job,) in done.items():
            assert json.loads((job.parent / "image.json").read_text())["image_id"] == image_id
            (trial,) = [p for p in job.iterdir() if p.is_dir()]
            projects.add(compose_project(trial.name))
            assert json.loads((trial / "config.json").read_text())["task"]["path"] == str(copy)
        # no trial built: each trial's main container was created from the image's id
        images = {}
        for line in created.splitlines():
            attrs = json.loads(line)["Actor"]["Attributes"]
            if (
                attrs.get("com.docker.compose.project") in projects
                and attrs.get("com.docker.compose.service") == "main"
            ):
                images[attrs["com.docker.compose.project"]] = attrs.get("image")
        assert images == dict.fromkeys(projects, image_id), images
        (job,) = done[(name, "oracle")]
        (trial,) = [p for p in job.iterdir() if p.is_dir()]
        said = (trial / "agent" / "oracle.txt").read_text()
        assert f"stamp={stamp}" in said  # the prebuild's RUN layer, byte for byte
        assert "no-proxy-env" in said  # the trial's running container has no proxy variables
        # harbor's teardown (compose down --rmi local) leaves an image given by `image:` alone
        assert _docker("image", "inspect", "--format", "{{.Id}}", tag).strip() == image_id
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        _remove_images(tag, image)


def test_a_recorded_image_is_verified_a_changed_task_rebuilt_and_a_shipped_one_checked_on_arrival(
    docker_engine, tmp_path
):
    from runner.schedule import task_images as ti

    name = f"ship-{uuid.uuid4().hex[:6]}"
    tasks = tmp_path / "tasks"
    t = _task(tasks, name)
    refs: list[str] = [f"marathon-prebuild-{name}-main"]
    try:
        first = ti.build_or_verify(tasks, name, None, build_network="host")
        refs.append(first.tag)
        assert first.how == ti.BUILT and ti.present(first)
        again = ti.build_or_verify(tasks, name, first, build_network="host")
        assert (again.how, again.image_id, again.content_sha256) == (ti.VERIFIED, first.image_id,
                                                                      first.content_sha256)  # fmt: skip

        (t / "environment" / "Dockerfile").write_text(
            (t / "environment" / "Dockerfile").read_text() + "RUN touch /v2\n"
        )
        second = ti.build_or_verify(tasks, name, first, build_network="host")
        refs.append(second.tag)
        assert second.how == ti.BUILT and second.source != first.source
        assert second.image_id != first.image_id and second.tag != first.tag

        # shipped: saved into the tree, gone from the engine, loaded back and checked by digest
        out = tmp_path / "out"
        archive = ti.archive_path(out, first)
        assert ti.save(first, archive) and not ti.save(first, archive)  # once
        _remove_images(first.tag)
        assert not ti.present(first)
        assert ti.ensure_here(first, archive)[0] == "loaded" and ti.present(first)
        assert ti.ensure_here(first, archive)[0] == "present"
        # an archive holding other bytes under the expected name is refused on arrival
        _remove_images(first.tag)
        archive.unlink()
        assert ti.save(second, ti.archive_path(out, second))
        shutil.copy(ti.archive_path(out, second), archive)
        with pytest.raises(ti.ImageError, match="does not hold"):
            ti.ensure_here(first, archive)
        assert not ti.present(first)
    finally:
        _remove_images(*reversed(refs))
