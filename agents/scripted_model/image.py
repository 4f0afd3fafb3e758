"""Build the mini-benchmark's base image (marathon-base + the scripted model), idempotently.

The image is keyed by the content of this directory's build files (a label holds their sha256), so
editing server.py rebuilds it and an unchanged tree is a no-op. Only local images are used: no
registry is reachable, everything is built FROM marathon-base:bookworm.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

#: the version is the scripted model's: 2 added scripted/demo (the varied demo), which the tasks need
DEMO_IMAGE = "marathon-demo-base:2"
BASE_IMAGE = "marathon-base:bookworm"
HASH_LABEL = "org.marathon.scripted-model.sha256"
_CONTEXT = Path(__file__).resolve().parent
_FILES = ("Dockerfile", "entrypoint.sh", "server.py")


def context_digest() -> str:
    h = hashlib.sha256()
    for name in _FILES:
        h.update(name.encode() + b"\0" + (_CONTEXT / name).read_bytes() + b"\0")
    return h.hexdigest()


def _label(image: str) -> str | None:
    """The image's content label; None when the engine has no such image. An engine that does not
    answer is not a missing image: its own line is raised, so nobody is sent to rebuild a base image
    that is there."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{HASH_LABEL}"}}}}', image],
        capture_output=True,
        text=True,
    )
    if proc.returncode == 0:
        return proc.stdout.strip()
    if "no such image" in proc.stderr.lower():
        return None
    lines = proc.stderr.strip().splitlines()
    raise RuntimeError(f"docker image inspect {image} failed: {lines[-1] if lines else proc.returncode}")


def ensure_demo_image(image: str = DEMO_IMAGE) -> str:
    """Build ``image`` unless it exists with the current content digest; returns the image name."""
    digest = context_digest()
    if _label(image) == digest:
        return image
    if _label(BASE_IMAGE) is None:
        raise RuntimeError(f"base image {BASE_IMAGE} is missing; run .ci/setup-machine")
    proc = subprocess.run(
        ["docker", "build", "-q", "-t", image, "--label", f"{HASH_LABEL}={digest}", str(_CONTEXT)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building {image} failed: {proc.stderr.strip()[-500:]}")
    return image


if __name__ == "__main__":
    print(ensure_demo_image())
    sys.exit(0)
