"""A task's image on every Docker host of a cluster: built once on one host, shipped to the others.

Why: each host building the same Dockerfile writes different bytes (a ``WORKDIR`` or a ``RUN``
stamps its time into a layer), so a run over two hosts gave the arms two images, split by host, and
the fairness audit said so on every multi-host run. No image registry is reachable here, so the
image travels through the shared output tree: the building host ``docker save``s it into
``<out>/.runner/images/<task>-<id12>.tar`` and every other alive Docker host ``docker load``s it
and checks it by id and content digest (``runner.schedule.task_images.ensure_here``), each in a
task pinned to that host inside one probe job (``runner.schedule.fleet.probe``, op ``images``). A
host where it did not arrive is named (``TaskImage.not_on``); an attempt Ray places there loads it
itself before harbor starts, or does not run (``runner.schedule.fleet.job``). The building host is
one that held the recorded image already (a resumed run verifies instead of rebuilding), else the
first alive one.
"""

from __future__ import annotations

from dataclasses import replace

from runner.schedule.config import RunConfig
from runner.schedule.task_images import ImageError, TaskImage


def ship(cfg: RunConfig, task: str, recorded: TaskImage | None) -> TaskImage:
    """Build (or verify) ``task``'s image on one host and ship it to every other alive Docker host;
    the image with the hosts that hold it, verified. Raises ``ImageError`` when it could not be
    made on any host."""
    from runner.schedule.fleet.probe import BUILD_SEC, SHIP_SEC, ask_hosts

    assert cfg.cluster and cfg.tasks_dir is not None
    params = {"tasks_dir": str(cfg.tasks_dir), "task": task, "build_network": cfg.build_network,
              "recorded": recorded.to_json() if recorded else None}  # fmt: skip
    stages = ask_hosts(cfg.cluster, cfg.out, "images", params, job_sec=BUILD_SEC + SHIP_SEC + 600)
    build = stages.get("build") or []
    if not build:
        raise ImageError(f"the image of {task}: no Docker host of the cluster is alive to build it")
    b = build[0]
    if not b.ok or b.result is None:
        raise ImageError(f"the image of {task} on host {b.label}: {b.error or 'down'}")
    image = TaskImage.from_json(b.result.get("image"))
    if image is None:
        raise ImageError(f"the image of {task}: host {b.label} answered no image record")
    answers = stages.get("ship") or []
    return replace(
        image,
        hosts={a.node_id: a.label for a in answers if a.ok},
        not_on={a.label: a.error or "down" for a in answers if not a.ok},
        ship_sec={a.label: float(a.result.get("seconds", 0.0)) for a in answers if a.ok and a.result},
    )
