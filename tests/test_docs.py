"""The docs name only what exists: every dotted `runner.`/`agents.`/`modes.`/`console.` name and every
repository path written in backticks in README.md or docs/ resolves.

Why: the README of an earlier version listed functions that had been renamed or deleted; a reader who
follows a name into the code must find it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("runner", "agents", "modes", "console")
_TICKED = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+$")
_PATH = re.compile(rf"^(?:{'|'.join(PACKAGES)}|benchmarks|tests|docs)/[\w./-]*\w$")
_FILE_SUFFIXES = (".md", ".py", ".log", ".toml", ".json", ".tcss", ".txt", ".sh", ".jsonl")


def _ticked_names() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for token in _TICKED.findall(doc.read_text()):
            token = token.strip().rstrip("()")
            if _DOTTED.match(token) and not token.endswith(_FILE_SUFFIXES):
                found.append((doc.name, token))
    return sorted(set(found))


def _ticked_paths() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for token in _TICKED.findall(doc.read_text()):
            token = token.strip().split(":", 1)[0]
            if _PATH.match(token) and "*" not in token and "<" not in token:
                found.append((doc.name, token))
    return sorted(set(found))


def resolves(dotted: str) -> bool:
    """Import the longest importable module prefix, then follow the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_docs_name_some_code():
    assert len(_ticked_names()) >= 10 and len(_ticked_paths()) >= 10


@pytest.mark.parametrize(("doc", "name"), _ticked_names())
def test_every_dotted_name_in_the_docs_exists(doc: str, name: str):
    assert resolves(name), f"{doc} names `{name}`, which does not import"


@pytest.mark.parametrize(("doc", "path"), _ticked_paths())
def test_every_repository_path_in_the_docs_exists(doc: str, path: str):
    assert (ROOT / path).exists(), f"{doc} names `{path}`, which is not in the repository"


def test_resolves_can_say_no():
    assert resolves("runner.results.rules") and not resolves("runner.results.rules.no_such_rule")
