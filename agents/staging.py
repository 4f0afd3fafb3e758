"""Offline codex staging: the whole vendor tree of ``@openai/codex@<ver>-linux-x64``, cached by version.

Why the whole tree: ``bin/codex`` finds ``codex-code-mode-host`` *next to itself* and prepends
``codex-path/`` (``rg``) to the agent's PATH; a bare copy of ``bin/codex`` loses both, and the field
saw every tool call fail silently without the sidecar. Trials get the staged tree read-only through
a bind mount at ``/opt/codex`` (harbor ``--mounts``), not a 450 MB copy per container.

Layout: ``<cache>/codex/<version>/`` holds the contents of ``vendor/x86_64-unknown-linux-musl/``
(``bin/codex``, ``bin/codex-code-mode-host``, ``codex-path/rg``, ``codex-resources/``,
``codex-package.json``) plus ``staged.json``. The cache root is ``$MARATHON_CACHE`` or
``~/.cache/marathon``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

#: The one place the default codex version is pinned (verified on this machine kind).
DEFAULT_CODEX_VERSION = "0.171.0"
TRIPLE = "x86_64-unknown-linux-musl"
#: Where the staged tree appears inside a trial container.
CONTAINER_CODEX_ROOT = "/opt/codex"
CONTAINER_CODEX_BIN = f"{CONTAINER_CODEX_ROOT}/bin/codex"
SIDECAR = "codex-code-mode-host"
STAMP = "staged.json"


class StagingError(RuntimeError):
    """Staging failed or a staged tree is incomplete; the message says what is missing."""


@dataclass(frozen=True)
class StagedCodex:
    """A staged, checked codex vendor tree on the host."""

    version: str
    root: Path  # the vendor tree (bin/, codex-path/, codex-resources/)
    reported_version: str  # what `codex --version` printed

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "codex"

    def mount(self, target: str = CONTAINER_CODEX_ROOT) -> dict:
        """The harbor ``--mounts`` entry that gives a trial this tree read-only."""
        return {"type": "bind", "source": str(self.root), "target": target, "read_only": True}


def cache_root() -> Path:
    env = os.environ.get("MARATHON_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "marathon"


def codex_dir(version: str = DEFAULT_CODEX_VERSION, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "codex" / version


def check_tree(root: Path) -> str:
    """Check a vendor tree: the sidecar next to ``bin/codex`` and ``codex --version`` runs.

    Returns the version line. Raises StagingError naming what is missing (never an empty run later).
    """
    binary = root / "bin" / "codex"
    sidecar = root / "bin" / SIDECAR
    if not binary.is_file():
        raise StagingError(f"staged codex is incomplete: {binary} is missing")
    if not sidecar.is_file():
        raise StagingError(
            f"staged codex is incomplete: {sidecar} is missing (codex runs tools through this sidecar "
            "next to bin/codex; re-stage with `marathon stage codex`)"
        )
    if not (root / "codex-path" / "rg").is_file():
        raise StagingError(f"staged codex is incomplete: {root / 'codex-path' / 'rg'} is missing")
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StagingError(f"staged codex does not run: {binary} --version: {exc}") from exc
    if proc.returncode != 0:
        raise StagingError(f"staged codex does not run: {binary} --version exited {proc.returncode}")
    return proc.stdout.strip()


def load_staged(version: str = DEFAULT_CODEX_VERSION, cache: Path | None = None) -> StagedCodex:
    """The staged tree of ``version``, checked now; StagingError if absent or incomplete."""
    root = codex_dir(version, cache)
    if not (root / STAMP).is_file():
        raise StagingError(f"codex {version} is not staged under {root}; run `marathon stage codex`")
    reported = check_tree(root)
    return StagedCodex(version=version, root=root, reported_version=reported)


def _pack(version: str, dest: Path) -> Path:
    """``npm pack @openai/codex@<ver>-linux-x64`` into ``dest``; the tarball path."""
    if shutil.which("npm") is None:
        raise StagingError("npm is not on PATH; it is needed once to fetch @openai/codex from the registry")
    spec = f"@openai/codex@{version}-linux-x64"
    proc = subprocess.run(
        ["npm", "pack", spec, "--pack-destination", str(dest), "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise StagingError(f"npm pack {spec} failed: {' / '.join(tail)}")
    tarballs = sorted(dest.glob("*.tgz"))
    if not tarballs:
        raise StagingError(f"npm pack {spec} produced no tarball")
    return tarballs[0]


def _extract_vendor(tarball: Path, into: Path) -> None:
    prefix = f"package/vendor/{TRIPLE}/"
    with tarfile.open(tarball, "r:gz") as tf:
        members = []
        for m in tf.getmembers():
            if not m.name.startswith(prefix) or m.name == prefix.rstrip("/"):
                continue
            m.name = m.name[len(prefix) :]
            members.append(m)
        if not members:
            raise StagingError(f"{tarball.name} has no vendor/{TRIPLE} tree")
        tf.extractall(into, members=members, filter="tar")


def publish(tree: Path, root: Path, stamp: dict, stamp_name: str = STAMP) -> None:
    """Finish a staging: write its stamp (with ``staged_at``) into ``tree``, then move it to ``root``.

    The stamp is written last and the rename is atomic, so a reader sees a complete tree or none.
    """
    stamp = {**stamp, "staged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tree / stamp_name).write_text(json.dumps(stamp, indent=2) + "\n")
    if root.exists():
        shutil.rmtree(root)
    tree.rename(root)


def stage_codex(
    version: str = DEFAULT_CODEX_VERSION, cache: Path | None = None, force: bool = False
) -> StagedCodex:
    """Stage codex ``version`` into the cache (idempotent, safe against concurrent stagers)."""
    root = codex_dir(version, cache)
    root.parent.mkdir(parents=True, exist_ok=True)
    lock_path = root.parent / f".{version}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (root / STAMP).is_file():
            return load_staged(version, cache)
        with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{version}.tmp-") as tmp:
            tmpdir = Path(tmp)
            tarball = _pack(version, tmpdir)
            tree = tmpdir / "tree"
            tree.mkdir()
            _extract_vendor(tarball, tree)
            reported = check_tree(tree)
            if version not in reported:
                raise StagingError(f"staged binary reports {reported!r}, expected version {version}")
            publish(
                tree,
                root,
                {
                    "version": version,
                    "package": f"@openai/codex@{version}-linux-x64",
                    "reported_version": reported,
                },
            )
        return StagedCodex(version=version, root=root, reported_version=reported)


def describe(staged: StagedCodex) -> dict:
    d = asdict(staged)
    d["root"] = str(staged.root)
    d["sidecar"] = str(staged.root / "bin" / SIDECAR)
    d["mount"] = staged.mount()
    return d


def file_sha256(path: Path, cache: Path | None = None) -> str:
    """sha256 of a staged file, computed once per (path, size, mtime_ns) and kept on disk.

    Why cached: every trial's receipt records the sha256 of the codex binary it ran (the fairness
    audit compares it across arms), and hashing ~150 MB per trial would cost seconds each time on a
    loaded machine. A re-staged file has a new size or mtime, so it is hashed anew.
    """
    import hashlib

    st = path.stat()
    key = {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32] + ".json"
    entry = (cache or cache_root()) / "sha256" / name
    try:
        known = json.loads(entry.read_text())
        if {k: known.get(k) for k in key} == key and isinstance(known.get("sha256"), str):
            return known["sha256"]
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**key, "sha256": digest}))
        os.replace(tmp, entry)
    except OSError:
        pass  # a read-only cache only costs the next trial another hash
    return digest
