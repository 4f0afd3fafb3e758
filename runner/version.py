"""Which marathon made a runner start: recorded in its ``runner_start`` event.

Why: a multi-day run is stopped and resumed, and marathon may be upgraded in between; the rules a
runner enforces (the gateway's cuts, the caps, the voiding table) change between versions. Without
a record, a run resumed by another version reads as one run (found by a probe); with it, the report
names the versions its starts were made by.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_SHA = re.compile(r"[0-9a-f]{40}")


def _git_dirs(root: Path) -> tuple[Path, Path]:
    """(the checkout's git dir, where its refs are): ``.git`` itself, or for a worktree made by
    ``git worktree add`` (its ``.git`` a file naming its git dir) that dir and the common one it
    names (a review found a worktree's starts recorded no commit)."""
    git = root / ".git"
    try:
        if git.is_file():
            line = git.read_text(encoding="utf-8", errors="replace").strip()
            if line.startswith("gitdir: "):
                git = (root / line[8:].strip()).resolve()
    except OSError:
        return git, git
    try:
        common = (git / (git / "commondir").read_text(encoding="utf-8", errors="replace").strip()).resolve()
    except OSError:
        common = git
    return git, common


def _git_commit(root: Path) -> str | None:
    """The checkout's commit, read from ``.git`` (no git process): HEAD, the ref it names, or the
    packed refs. None when ``root`` is no checkout (an installed wheel) or the files say nothing."""
    git, common = _git_dirs(root)
    try:
        head = (git / "HEAD").read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    if _SHA.fullmatch(head):
        return head
    if not head.startswith("ref: "):
        return None
    ref = head[5:].strip()
    if ".." in ref:
        return None
    try:
        sha = (common / ref).read_text(encoding="ascii", errors="replace").strip()
        return sha if _SHA.fullmatch(sha) else None
    except OSError:
        pass
    try:
        for line in (common / "packed-refs").read_text(encoding="ascii", errors="replace").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and _SHA.fullmatch(sha):
                return sha
    except OSError:
        pass
    return None


@cache
def marathon_version() -> str:
    """``0.1.0+g<12 hex>`` from a git checkout, the package's version otherwise."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("marathon")
    except PackageNotFoundError:
        v = "unknown"
    commit = _git_commit(Path(__file__).resolve().parents[1])
    return f"{v}+g{commit[:12]}" if commit else v
