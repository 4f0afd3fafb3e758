"""Task digests exactly as harbor 0.25.0 computes them, and the dataset.toml check.

harbor: ``publisher/packager.py:Packager.compute_content_hash`` - collect task.toml, instruction.md,
README.md and every file under environment/, tests/, solution/, steps/; drop what the task's
.gitignore (or harbor's defaults) ignores; sort by POSIX relative path; outer sha256 over lines
``f"{rel}\\0{sha256(file)}\\n"``. A test compares this with harbor's own function.
"""

from __future__ import annotations

import fnmatch
import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

_TOP_FILES = ("task.toml", "instruction.md", "README.md")
_TOP_DIRS = ("environment", "tests", "solution", "steps")
_DEFAULT_IGNORES = ("__pycache__/", "*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")


def _ignore_patterns(task_dir: Path) -> list[str]:
    gi = task_dir / ".gitignore"
    if gi.is_file():
        lines = [ln.strip() for ln in gi.read_text().splitlines()]
        return [ln for ln in lines if ln and not ln.startswith("#")]
    return list(_DEFAULT_IGNORES)


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        if pat.endswith("/"):
            if pat.rstrip("/") in parts[:-1]:
                return True
            continue
        pat = pat.lstrip("/")
        if "/" in pat:
            if fnmatch.fnmatch(rel, pat):
                return True
        elif any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


def task_files(task_dir: Path) -> list[Path]:
    task_dir = task_dir.resolve()
    files: list[Path] = [task_dir / f for f in _TOP_FILES if (task_dir / f).is_file()]
    for d in _TOP_DIRS:
        if (task_dir / d).is_dir():
            files.extend(p for p in (task_dir / d).rglob("*") if p.is_file())
    patterns = _ignore_patterns(task_dir)
    files = [f for f in files if not _ignored(f.relative_to(task_dir).as_posix(), patterns)]
    return sorted(files, key=lambda f: f.relative_to(task_dir).as_posix())


def task_digest(task_dir: Path) -> str:
    """``sha256:<hex>`` of a task dir, as harbor's Packager computes it."""
    task_dir = task_dir.resolve()
    outer = hashlib.sha256()
    for f in task_files(task_dir):
        rel = f.relative_to(task_dir).as_posix()
        outer.update(f"{rel}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
    return "sha256:" + outer.hexdigest()


def task_name(task_dir: Path) -> str:
    cfg = tomllib.loads((task_dir / "task.toml").read_text())
    return cfg.get("task", {}).get("name") or task_dir.name


@dataclass(frozen=True)
class DigestMismatch:
    task: str
    expected: str
    actual: str | None  # None: the manifest names a task that is not in the dir


def check_dataset(tasks_dir: Path) -> list[DigestMismatch]:
    """Compare every task of ``tasks_dir`` with its ``dataset.toml`` digest; [] when all match."""
    manifest = tomllib.loads((tasks_dir / "dataset.toml").read_text())
    by_name = {}
    for d in sorted(p for p in tasks_dir.iterdir() if (p / "task.toml").is_file()):
        by_name[task_name(d)] = d
    bad = []
    for ref in manifest.get("tasks", []):
        d = by_name.get(ref["name"])
        actual = task_digest(d) if d else None
        if actual != ref["digest"]:
            bad.append(DigestMismatch(ref["name"], ref["digest"], actual))
    return bad


def write_manifest(tasks_dir: Path, name: str, description: str) -> str:
    """Render a dataset.toml for every task under ``tasks_dir`` (used to refresh the demo's)."""
    lines = [
        "[dataset]",
        f'name = "{name}"',
        f'description = "{description}"',
        "",
    ]
    for d in sorted(p for p in tasks_dir.iterdir() if (p / "task.toml").is_file()):
        lines += ["[[tasks]]", f'name = "{task_name(d)}"', f'digest = "{task_digest(d)}"', ""]
    text = "\n".join(lines)
    (tasks_dir / "dataset.toml").write_text(text)
    return text


if __name__ == "__main__":  # python -m runner.results.digest DIR: refresh DIR/dataset.toml
    import sys

    print(write_manifest(Path(sys.argv[1]), "marathon-demo/mini", "marathon's bundled mini-benchmark"))
