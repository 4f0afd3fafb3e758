"""What building each task image once saves per trial, and what shipping it to a second host costs.

    uv run python benchmarks/bench_images.py [--trials 3]            one host: harbor's build step
    uv run python benchmarks/bench_images.py --ship [--mb 200]       two hosts (root: a private dockerd)

One host: ``harbor run`` with harbor's ``oracle`` agent on a copy of the demo task ``calc-partial``,
``--trials`` times each way, and harbor's own account of each trial's environment start
(``environment_setup`` in its result.json: compose build when harbor builds, then up):

  * harbor builds, cached: the user's task as it is, its image's layers in BuildKit's cache (what
    every trial paid before, when nothing else built the task at the same moment);
  * harbor builds, uncached: a Dockerfile with a fresh ``RUN`` per trial, so the build really runs
    (the demo task's build is small: a real SWE-Marathon image takes minutes, all of it per trial);
  * prebuilt: the run-local copy naming the image built once (``runner.schedule.task_images``), so
    harbor composes ``image:`` and builds nothing -- what every trial of ``marathon run`` pays now.

Two hosts (``--ship``): the fleet tests' cluster (tests/fleet/two_hosts.py), and the runner's own
``runner.schedule.fleet.ship`` of (a) the demo task's image, whose base host 2 already holds, and
(b) a task image with a fresh ``--mb`` MB layer that host 2 has none of; then (c) the same again
(verified on both hosts, nothing moved). Prints the wall time of each ship (probe job included),
the ``docker save`` on host 1 and the ``docker load`` with its check on host 2. Asserts nothing; the
images it makes are removed by exact reference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "runner" / "demo" / "tasks"
TASK = "calc-partial"


def _setup_sec(job_dir: Path) -> float:
    (res,) = job_dir.glob("*/*/result.json")
    d = json.loads(res.read_text())["environment_setup"]
    t0, t1 = (datetime.fromisoformat(d[k].replace("Z", "+00:00")) for k in ("started_at", "finished_at"))
    return (t1 - t0).total_seconds()


def _harbor(task_dir: Path, out: Path) -> float:
    from runner.schedule.harbor_run import harbor_bin, job_env

    r = subprocess.run([harbor_bin(), "run", "-p", str(task_dir), "-a", "oracle", "-o", str(out), "--job-name", "j",
                        "-n", "1", "-y", "-e", "docker"], capture_output=True, text=True, env=job_env())  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
    return _setup_sec(out)


def one_host(trials: int) -> None:
    from runner.schedule import task_images as ti

    base = Path(tempfile.mkdtemp(prefix="bench-images-"))
    tasks = base / "tasks"
    name = f"bench-img-{uuid.uuid4().hex[:6]}"
    shutil.copytree(TASKS / TASK, tasks / name)
    refs = [f"marathon-prebuild-{name}-main"]
    rows: dict[str, list[float]] = {
        "harbor builds, cached": [],
        "harbor builds, uncached": [],
        "prebuilt": [],
    }
    try:
        t0 = time.monotonic()
        image = ti.build_or_verify(tasks, name, None, build_network="default")
        refs.append(image.tag)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        ti.build_or_verify(tasks, name, None, build_network="default")
        cached = time.monotonic() - t0
        copy = ti.run_copy(base / "out", tasks, image)
        dockerfile = tasks / name / "environment" / "Dockerfile"
        original = dockerfile.read_text()
        for i in range(trials):
            rows["prebuilt"].append(_harbor(copy, base / f"pre{i}"))
            dockerfile.write_text(original)
            rows["harbor builds, cached"].append(_harbor(tasks / name, base / f"cached{i}"))
            dockerfile.write_text(original + f"RUN echo {uuid.uuid4().hex} > /nonce\n")
            rows["harbor builds, uncached"].append(_harbor(tasks / name, base / f"uncached{i}"))
        dockerfile.write_text(original)
    finally:
        subprocess.run(["docker", "image", "rm", *refs], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; harbor oracle on {TASK}, n={trials} each"
    )
    print(f"the runner's own build of the image: {first:.1f} s (first), {cached:.1f} s (cached again)")
    for what, xs in rows.items():
        print(f"  environment start, {what:24s} median {statistics.median(xs):5.1f} s  (min {min(xs):.1f}, "
              f"max {max(xs):.1f})")  # fmt: skip
    saved = statistics.median(rows["harbor builds, cached"]) - statistics.median(rows["prebuilt"])
    saved_u = statistics.median(rows["harbor builds, uncached"]) - statistics.median(rows["prebuilt"])
    print(
        f"saved per trial: {saved:.1f} s against a cached build, {saved_u:.1f} s against this small uncached one"
    )


def ship_two_hosts(mb: int) -> None:
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "fleet")]
    from two_hosts import two_hosts

    from agents.scripted_model.image import DEMO_IMAGE
    from runner.schedule.config import resolve
    from runner.schedule.fleet.ship import ship
    from runner.schedule.task_images import TaskImage, finish

    base = Path(tempfile.mkdtemp(prefix="bench-ship-"))
    tasks = base / "tasks"
    name = f"bench-ship-{uuid.uuid4().hex[:6]}"
    shutil.copytree(TASKS / TASK, tasks / TASK)
    shutil.copytree(TASKS / TASK, tasks / name)
    df = tasks / name / "environment" / "Dockerfile"
    df.write_text(df.read_text() + f"RUN head -c {mb}M /dev/urandom > /blob-{name}\n")
    refs: list[str] = [f"marathon-prebuild-{name}-main"]
    rows = []
    try:
        with two_hosts(REPO, ("marathon-base:bookworm", DEMO_IMAGE)) as th:
            env = {"tasks_dir": str(tasks), "cluster": th.cluster, "build_network": "default"}
            cfg = resolve(base / "out", env, environ={})
            os.environ.pop("DOCKER_HOST", None)
            recorded: dict[str, TaskImage] = {}
            for label, task in ((f"{TASK} (base on host 2)", TASK), (f"fresh {mb} MB layer", name),
                                (f"{TASK} again (verified)", TASK), (f"fresh {mb} MB again", name)):  # fmt: skip
                t0 = time.monotonic()
                img = ship(cfg, task, recorded.get(task))
                wall = time.monotonic() - t0
                recorded[task] = finish(cfg.out, tasks, img)
                if task == name:
                    refs.append(img.tag)
                size = (
                    os.path.getsize(base / "out" / ".runner" / "images" / f"{task}-{img.short}.tar") / 2**20
                )
                rows.append((label, img.how, wall, img.seconds, img.ship_sec, size, img.not_on))
    finally:
        subprocess.run(["docker", "image", "rm", *refs], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; two hosts (tests/fleet/two_hosts.py)"
    )
    for label, how, wall, build, ship_sec, size, not_on in rows:
        print(f"  {label:28s} {how:8s} ship {wall:5.1f} s wall (build {build:.1f} s); archive {size:.0f} MiB; "
              f"per host {ship_sec} {not_on or ''}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ship", action="store_true", help="two hosts: shipping time per image (root)")
    ap.add_argument("--mb", type=int, default=200, help="size of the fresh layer of the second image")
    a = ap.parse_args()
    if a.ship:
        ship_two_hosts(a.mb)
    else:
        one_host(a.trials)


if __name__ == "__main__":
    main()
