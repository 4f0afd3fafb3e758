"""The content digest of a Docker image: what the fairness audit compares and the runner records.

Why a digest of the content and not the engine's image id: an image built by harbor's own compose
build carries the trial's compose project as a label, so two trials of one task get different ids
for the same bytes; and the runner's record of a task image built once
(``runner.schedule.task_images``) must speak of the same thing as every receipt's ``image_digest``.
Both sides ask it here (agents/ never imports runner/).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from typing import Any


def content_digest(inspect: dict[str, Any]) -> str:
    """``sha256:<hex>`` of an image's layer diff ids and runtime config (env, workdir, user,
    entrypoint, cmd), from its ``docker image inspect`` object: what a container of it runs."""
    cfg = inspect.get("Config") or {}
    content = {
        "layers": (inspect.get("RootFS") or {}).get("Layers") or [],
        **{k.lower(): cfg.get(k) for k in ("Env", "WorkingDir", "User", "Entrypoint", "Cmd")},
    }
    return "sha256:" + hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def image_content(ref: str) -> dict[str, str] | None:
    """``{"id", "content_sha256"}`` of an image on the engine of this process (``DOCKER_HOST``;
    ``ref``: an id, ``sha256:...``, or a tag), or None when it holds no such image. Asked with
    ``docker image inspect``, as the transports ask everything else."""
    try:
        r = subprocess.run(["docker", "image", "inspect", "--format", "{{json .}}", ref],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        info = json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not isinstance(info, dict) or not str(info.get("Id", "")).startswith("sha256:"):
        return None
    return {"id": str(info["Id"]), "content_sha256": content_digest(info)}
