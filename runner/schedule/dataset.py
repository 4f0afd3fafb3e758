"""``marathon run --dataset NAME@VERSION``: tasks named the way harbor users name them.

Why: a comparison is of a published benchmark at a version, and harbor already knows how to find
one -- a ``registry.json`` (``--registry-path``) or a git registry (``--repo``). The dataset is
resolved by harbor's own registry code (``RegistryClientFactory``, ``download_dataset`` in its flat
export layout) into marathon's cache, once, before anything else looks at the tasks. From there the
run is an ordinary tasks dir: the digest check, the preflight and every ``harbor run`` read it, and
``.driver_env`` records it (``MARATHON_TASKS_DIR``, with the dataset reference beside it), so a
resume or ``health --fix`` needs no registry.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from runner.errors import UserError


@dataclass(frozen=True)
class Fetched:
    ref: str  # NAME@VERSION as given
    tasks_dir: Path  # the one dir holding every task of the dataset
    tasks: tuple[str, ...]  # the dataset's task dir names, in the registry's order


def datasets_cache() -> Path:
    from agents.staging import cache_root

    return cache_root() / "datasets"


def fetch_dataset(
    ref: str, *, registry_path: Path | None = None, repo: str | None = None, cache: Path | None = None
) -> Fetched:
    """Resolve ``ref`` (``NAME@VERSION``) through harbor's registry into ``cache``; one-line
    ``UserError`` when the registry, the dataset or its version cannot be found."""
    name, sep, version = ref.partition("@")
    if not name or not sep or not version:
        raise UserError(f"--dataset {ref!r}: give NAME@VERSION (a pinned version: the comparison is of it)")
    if registry_path is None and repo is None:
        raise UserError("--dataset needs --registry-path FILE (a registry.json) or --repo ORG/NAME")
    if registry_path is not None and repo is None and not Path(registry_path).exists():
        raise UserError(f"--registry-path {registry_path}: no such file")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # harbor imports litellm: stay offline
    from harbor.registry.client.factory import RegistryClientFactory

    dest = (cache or datasets_cache()) / f"{name.replace('/', '__')}@{version}"
    try:
        client = RegistryClientFactory.create(registry_path=registry_path, repo=repo)
        items = asyncio.run(client.download_dataset(ref, output_dir=dest, export=True))
    except Exception as exc:  # noqa: BLE001 - harbor's and git's failures, as one line
        from runner.secrets import redact

        first = redact((str(exc).splitlines() or [type(exc).__name__])[0])[:200]  # git prints the URL
        raise UserError(f"--dataset {ref}: {first}") from None
    paths = [Path(i.downloaded_path).resolve() for i in items]
    if not paths:
        raise UserError(f"--dataset {ref}: the registry lists no tasks for it")
    parents = {p.parent for p in paths}
    if len(parents) != 1:
        shown = ", ".join(sorted(str(p) for p in parents)[:3])
        raise UserError(
            f"--dataset {ref}: its tasks are not in one directory ({shown}): give --tasks-dir instead"
        )
    return Fetched(ref, parents.pop(), tuple(p.name for p in paths))
