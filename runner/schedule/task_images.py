"""A run's task images: each built once, pinned by digest, and given to harbor through its own
prebuilt path.

Why: harbor builds a task's image inside every trial (``compose build`` in its Docker environment's
``start``), and its build lock is per process. The five arms of a task starting together ran five
builds of one Dockerfile at once in five harbor processes; they missed each other's cache and wrote
different layer bytes, so the receipts' ``image_digest`` differed between arms and the fairness
audit printed "arms differ in: image digest" on a fair run. On a cluster each host built its own,
and the audit split by host. So the runner builds (or verifies) each task's image once, before the
first attempt of that task, and every attempt of the run is given that one image.

harbor 0.25.0 takes a prebuilt image when a task's ``[environment] docker_image`` is set
(``harbor.environments.definition.should_use_prebuilt_docker_image``): its Docker environment then
composes with ``docker-compose-prebuilt.yaml`` (``image: ${PREBUILT_IMAGE_NAME}``) and builds
nothing. The user's tasks dir is never edited: harbor runs a run-local copy of the task,
``<out>/.runner/tasks/<key>/<task>/``, whose task.toml names the image by its id (``sha256:...``:
no tag can be moved under a trial), and whose Dockerfile stays in place (harbor then uploads no
build context into the container, as with its own build). The copy's dir is named by what it holds
(the task's content and the image id), so it is written once and never changed under a running
trial; a changed task or image gets a new one. The dataset digest check still reads the user's
tasks as they are (``runner.schedule.preflight.modified_tasks``).

Records: ``<out>/.runner/images/<task>.json`` is each task's image (``TaskImage``), read again by a
resumed runner, which reuses the image when the task's environment is unchanged and the image is
still there (``how = "verified"``) instead of building bytes that may differ from what the earlier
attempts ran; each attempt's stamp dir holds the image it was given (``image.json``), which a
cluster job reads on its host before harbor starts (``runner.schedule.fleet.job``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import tomli_w

from modes import safeio, safetext
from runner.results.tree import ATTEMPT_IMAGE, images_dir, task_copies_dir

#: how ``TaskImage`` came to be: built now (a cached build is a build), or the recorded image found
#: again on the engine with the task's environment unchanged
BUILT, VERIFIED = "built", "verified"


class ImageError(RuntimeError):
    """A task's image could not be built or verified (its message is one line, then the build's tail)."""


@dataclass(frozen=True)
class TaskImage:
    """One task's image, built once for the run."""

    task: str
    #: harbor's content hash of the user's ``<task>/environment`` when the image was made
    source: str
    #: the engine's image id, ``sha256:<64 hex>``: what harbor is given (docker save/load keep it)
    image_id: str
    #: the content digest (``modes.image_digest``): what every receipt records
    content_sha256: str
    #: ``marathon-task-<task>:<id12>`` (``runner.schedule.prebuild.task_tag``): keeps the image
    tag: str
    #: the run-local task copy harbor runs (``-p``); empty until the runner made it
    task_dir: str = ""
    how: str = BUILT
    seconds: float = 0.0
    #: on a cluster: the Docker hosts that hold it, verified by id (Ray node id -> ``NAME/IP``)
    hosts: dict[str, str] = field(default_factory=dict)
    #: on a cluster: the alive Docker hosts it could not be shipped to (``NAME/IP`` -> why)
    not_on: dict[str, str] = field(default_factory=dict)
    #: on a cluster: seconds of its ``docker save`` on the building host and of each other host's
    #: ``docker load`` with its check (``NAME/IP`` -> seconds; 0 when it was there already)
    ship_sec: dict[str, float] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.image_id.removeprefix("sha256:")[:12]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: object) -> TaskImage | None:
        """The record, or None when it is not one (written by this runner; still checked)."""
        if not isinstance(d, dict):
            return None
        known = {f.name for f in fields(cls)}
        try:
            img = cls(**{k: v for k, v in d.items() if k in known})
        except TypeError:
            return None
        ok = all(
            isinstance(getattr(img, k), str) for k in ("task", "source", "image_id", "content_sha256", "tag")
        )
        return img if ok and img.image_id.startswith("sha256:") and isinstance(img.hosts, dict) else None


# --- what a task is -----------------------------------------------------------------------------


def environment_source(task_dir: Path) -> str:
    """harbor's own content hash of ``<task>/environment`` (the identity it gives an environment,
    ``environment_content_hash``): the same files give the same source on every host."""
    from harbor.environments.definition import environment_content_hash

    return environment_content_hash(Path(task_dir) / "environment", truncate=64)


def wants_image(task_dir: Path) -> bool:
    """harbor would build this task's image from its Dockerfile (no ``docker_image`` of its own)."""
    from runner.schedule.harbor_run import builds_from_dockerfile

    return builds_from_dockerfile(Path(task_dir))


# --- the records --------------------------------------------------------------------------------


def record_path(out: Path, task: str) -> Path:
    return images_dir(out) / f"{task}.json"


def archive_path(out: Path, image: TaskImage) -> Path:
    """Where a cluster run's image is saved for the other hosts (``docker save``), in the shared tree."""
    return images_dir(out) / f"{image.task}-{image.short}.tar"


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(safetext.dumps(data, pretty=True))
    os.replace(tmp, path)


def _read_json(path: Path) -> TaskImage | None:
    """A record through the runner's safe reader (``modes.safeio.load_own_json``: a regular file,
    no symlink at the name, capped): OUT may sit under a shared parent, and a planted record must
    not hang or crash the runner. Unreadable or malformed is None (the image is built again)."""
    data = safeio.load_own_json(path)
    return None if isinstance(data, safeio.Refused) else TaskImage.from_json(data)


def read_record(out: Path, task: str) -> TaskImage | None:
    """The run's image of ``task`` (None: none made yet, or unreadable)."""
    return _read_json(record_path(out, task))


def write_record(out: Path, image: TaskImage) -> None:
    _write_json(record_path(out, image.task), image.to_json())


def write_attempt_image(stamp_dir: Path, image: TaskImage) -> None:
    """The image an attempt is given, in its stamp dir, before it starts."""
    _write_json(Path(stamp_dir) / ATTEMPT_IMAGE, image.to_json())


def read_attempt_image(stamp_dir: Path) -> TaskImage | None:
    """The image an attempt was given (read by its cluster job before harbor starts: no agent of
    the attempt has run yet), or None (a task harbor runs as it is)."""
    return _read_json(Path(stamp_dir) / ATTEMPT_IMAGE)


# --- the run-local task copy --------------------------------------------------------------------


def run_copy(out: Path, tasks_dir: Path, image: TaskImage) -> Path:
    """The run-local copy of the task that harbor runs, its task.toml naming ``image`` by id:
    ``<out>/.runner/tasks/<key>/<task>``, the key a digest of the task's whole content and the
    image id. Made once (copied aside, then renamed into place), never rewritten."""
    from harbor.environments.definition import environment_content_hash

    src = Path(tasks_dir) / image.task
    key = hashlib.sha256(
        f"{environment_content_hash(src, truncate=64)}\n{image.image_id}".encode()
    ).hexdigest()
    dest = task_copies_dir(out) / key[:16] / image.task
    if (dest / "task.toml").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{image.task}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp / image.task, symlinks=True)
        pin_image(tmp / image.task / "task.toml", image.image_id)
        try:
            os.rename(tmp / image.task, dest)
        except OSError:
            if not (dest / "task.toml").is_file():  # not another runner's identical copy: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def pin_image(task_toml: Path, image_id: str) -> None:
    """Set ``[environment] docker_image`` of a (copied) task.toml; every other setting kept."""
    cfg = tomllib.loads(task_toml.read_text())
    env = cfg.setdefault("environment", {})
    if not isinstance(env, dict):
        raise ImageError(f"{task_toml}: [environment] is not a table")
    env["docker_image"] = image_id
    task_toml.write_text(tomli_w.dumps(cfg))


# --- on this host's engine ----------------------------------------------------------------------


def present(image: TaskImage) -> bool:
    """This engine holds exactly the image (by id, and its content digest agrees)."""
    from modes.image_digest import image_content

    got = image_content(image.image_id)
    return got is not None and got == {"id": image.image_id, "content_sha256": image.content_sha256}


def build_or_verify(
    tasks_dir: Path,
    task: str,
    recorded: TaskImage | None,
    *,
    build_network: str,
    started: Callable[[subprocess.Popen], None] | None = None,
) -> TaskImage:
    """The task's image on this engine: the recorded one when the task's environment is unchanged
    and the engine still holds it (``how = "verified"``), else a build (``runner.schedule.prebuild``,
    the same build ``marathon prebuild`` runs, so a prebuilt task's cached build is its image); the
    build's proxy comes from this host's environment, as for ``marathon prebuild``. Raises
    ``ImageError`` when the build fails."""
    from runner.schedule.harbor_run import BUILD_OVERLAY_TEXT
    from runner.schedule.prebuild import DEFAULT_NO_PROXY, build_proxy, build_task

    task_dir = Path(tasks_dir) / task
    source = environment_source(task_dir)
    t0 = time.monotonic()
    if recorded is not None and recorded.source == source and present(recorded):
        tag_here(recorded)
        return TaskImage(recorded.task, source, recorded.image_id, recorded.content_sha256, recorded.tag,
                         how=VERIFIED, seconds=round(time.monotonic() - t0, 1))  # fmt: skip
    proxy, _ = build_proxy(None, None, os.environ)
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or DEFAULT_NO_PROXY
    with tempfile.TemporaryDirectory(prefix="marathon-image-") as tmp:
        overlay = None
        if build_network == "host":
            overlay = Path(tmp) / "build-network-host.yaml"
            overlay.write_text(BUILD_OVERLAY_TEXT)
        r = build_task(task_dir, overlay, proxy, no_proxy, cwd=Path(tmp), started=started)
    if not r.ok:
        raise ImageError(f"the image of {task} did not build:\n{r.error}")
    return TaskImage(task, source, r.image_id, r.content_sha256, r.tag, how=BUILT, seconds=r.seconds)


def tag_here(image: TaskImage) -> None:
    """(Re)tag the image on this engine (a tag keeps an image from being pruned as dangling)."""
    subprocess.run(["docker", "tag", image.image_id, image.tag], capture_output=True, timeout=60)


def save(image: TaskImage, path: Path) -> bool:
    """``docker save`` the image (by its tag, so a load restores the tag) into ``path``, written
    aside and renamed into place; False when ``path`` was there already."""
    if path.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        r = subprocess.run(
            ["docker", "save", "-o", tmp, image.tag], capture_output=True, text=True, timeout=3600
        )
        if r.returncode != 0:
            raise ImageError(f"docker save {image.tag}: {r.stderr.strip()[-300:]}")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return True


def ensure_here(image: TaskImage, archive: Path) -> tuple[str, float]:
    """Make sure this engine holds ``image``: present already, or loaded from ``archive`` (the
    shared tree's ``docker save``) and then verified by id and content digest. Returns (``present``
    | ``loaded``, seconds); raises ``ImageError`` when the engine does not hold it afterwards."""
    t0 = time.monotonic()
    if present(image):
        tag_here(image)
        return "present", round(time.monotonic() - t0, 2)
    if not archive.is_file():
        raise ImageError(
            f"image {image.tag} ({image.image_id}) is not on this engine and {archive} is missing"
        )
    r = subprocess.run(["docker", "load", "-i", str(archive)], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise ImageError(f"docker load -i {archive}: {r.stderr.strip()[-300:]}")
    if not present(image):
        raise ImageError(f"{archive} loaded, but this engine does not hold {image.image_id} afterwards")
    tag_here(image)
    return "loaded", round(time.monotonic() - t0, 2)


def finish(out: Path, tasks_dir: Path, image: TaskImage) -> TaskImage:
    """The runner's last step for an image made (here or on a cluster host): the run-local task
    copy that names it, and the task's record."""
    from dataclasses import replace

    done = replace(image, task_dir=str(run_copy(out, tasks_dir, image)))
    write_record(out, done)
    return done
