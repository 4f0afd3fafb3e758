"""Real harbor output trees: how they are made (real harbor jobs on the real engine), recorded into
``tests/data/trees/`` by ``tests/data/record.py``, copied for a test, and compared.

The fast tier reads the recordings, so the model, report, view and console tests need no Docker; the
Docker tier rebuilds the same trees with harbor and checks that they still match the recording
(``signature``), so a harbor upgrade that changes what it writes fails a test instead of leaving the
fast tier on stale data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_TASKS = REPO_ROOT / "runner" / "demo" / "tasks"
DEMO_TASK_NAMES = ("build-gate", "calc-partial", "two-stage", "words-passrate")
TREES_DIR = Path(__file__).resolve().parent / "data" / "trees"
MANIFEST = TREES_DIR / "MANIFEST.json"

TEST_AGENTS = {
    "crash": "tests.harbor_agents:CrashAgent",
    "sleeper": "tests.harbor_agents:SleepAgent",
    "exit1": "tests.harbor_agents:ExitAgent",
    "partial": "tests.harbor_agents:PartialAgent",
}


@dataclass(frozen=True)
class TreeSpec:
    """The harbor jobs of one recorded tree: (task, arm) pairs and extra ``harbor run`` arguments,
    given to the jobs of ``extra_arms`` only (None: every job); the other jobs get ``others_extra``."""

    jobs: tuple[tuple[str, str], ...]
    extra: tuple[str, ...] = ()
    about: str = ""
    extra_arms: tuple[str, ...] | None = None
    others_extra: tuple[str, ...] = ()


#: The recorded trees. ``mini``: harbor's oracle and nop over the 4 demo tasks. ``agents``: the
#: tests.harbor_agents stand-ins that crash, time out (the multiplier gives the sleeper ~3.6 s: the
#: sleeper's job alone, so the others keep the task's 120 s and a loaded machine's slow ``docker
#: exec`` never times out the half-solver), exit non-zero and half-solve. The core tests read both
#: merged (``core_tree``).
TREES: dict[str, TreeSpec] = {
    "mini": TreeSpec(
        tuple((t, a) for a in ("oracle", "nop") for t in DEMO_TASK_NAMES),
        about="oracle scores 1 everywhere; nop: calc-partial partial 0.2, words-passrate pass rate 0.4, "
        "build-gate build_failed, two-stage partial 0.0 with a test pass rate above 0",
    ),
    "agents": TreeSpec(
        (
            ("calc-partial", "crash"),
            ("words-passrate", "sleeper"),
            ("build-gate", "exit1"),
            ("calc-partial", "partial"),
        ),
        ("--agent-timeout-multiplier", "0.03"),
        extra_arms=("sleeper",),
        # the others at the task's own timeout, the multiplier still named (harbor's config.json
        # has the key only when it is given: the recording's shapes have it)
        others_extra=("--agent-timeout-multiplier", "1.0"),
        about="errored trials (RuntimeError, AgentTimeoutError, NonZeroAgentExitCodeError) and a "
        "partial score with tokens, cost and a goal receipt",
    ),
}


# ------------------------------------------------------------------------------ running harbor


def harbor_bin() -> str:
    """The harbor CLI of this environment (next to the running interpreter)."""
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def start_harbor_jobs(
    out: Path,
    jobs,
    *extra: str,
    stamp: str | None = None,
    extra_arms: tuple[str, ...] | None = None,
    others_extra: tuple[str, ...] = (),
):
    """Start one real harbor job per (task, arm), concurrently, in the output-tree layout.

    Each job: jobs dir ``<out>/<task>/<arm>/<stamp>``, job name ``<arm>``, one task (``-p <task dir>``),
    live logs (``--ek auto_mounting=true``). ``arm`` is a harbor agent name or a ``tests.harbor_agents``
    stand-in (``crash``/``sleeper``/``exit1``/``partial``). Runs from the repo root with it on PYTHONPATH
    so harbor can import the test agents. ``extra`` goes to the jobs of ``extra_arms`` (None: all),
    ``others_extra`` to the rest.
    Returns a handle for ``wait_harbor_jobs``.
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True", HARBOR_TELEMETRY="0"
    )
    procs = []
    for task, arm in jobs:
        cmd = [harbor_bin(), "run", "-p", str(DEMO_TASKS / task), "-a", TEST_AGENTS.get(arm, arm)]
        cmd += ["-o", str(out / task / arm / stamp), "--job-name", arm, "-n", "1", "-y"]
        cmd += [
            "--ek",
            "auto_mounting=true",
            *(extra if extra_arms is None or arm in extra_arms else others_extra),
        ]
        log = (out.parent / f"harbor-{task}-{arm}-{stamp}.log").open("wb")
        procs.append((task, arm, log, subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)))
    return stamp, procs


def wait_harbor_jobs(handle) -> str:
    """Wait for the jobs of ``start_harbor_jobs``; fail (the test, or the recording) if any failed."""
    stamp, procs = handle
    failed = []
    for task, arm, log, p in procs:
        try:
            rc = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()  # our own child, by its Popen handle
            rc = p.wait()
        if rc != 0:
            failed.append(f"{task}/{arm}: exit {rc} (see {log.name})")
        log.close()
    if failed:
        pytest.fail("harbor run failed: " + "; ".join(failed))
    return stamp


def run_harbor_jobs(out: Path, jobs, *extra: str, stamp: str | None = None) -> str:
    """``start_harbor_jobs`` then ``wait_harbor_jobs``; returns the stamp."""
    return wait_harbor_jobs(start_harbor_jobs(out, jobs, *extra, stamp=stamp))


def build_trees(outs: dict[str, Path]) -> None:
    """Run the harbor jobs of several recorded trees at once, each into its own (empty) output dir."""
    handles = []
    for name, out in outs.items():
        out.mkdir(parents=True, exist_ok=True)
        spec = TREES[name]
        handles.append(
            start_harbor_jobs(
                out, spec.jobs, *spec.extra, extra_arms=spec.extra_arms, others_extra=spec.others_extra
            )
        )
    for h in handles:
        wait_harbor_jobs(h)


# ------------------------------------------------------------------------------ recorded copies


def empty_dirs(root: Path) -> list[str]:
    """Directories harbor left empty (git keeps no empty dir, so the manifest lists them)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if not dirnames and not filenames and Path(dirpath) != root:
            found.append(Path(dirpath).relative_to(root).as_posix())
    return sorted(found)


def manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def copy_recorded(name: str, dst: Path) -> Path:
    """A private copy of recorded tree ``name`` at ``dst`` (merged into it if it exists), with the
    empty directories harbor made; tests may change it freely.

    The files are copied verbatim. They hold absolute paths of the machine that recorded them
    (``config.json``'s job and trials dirs, ``result.json``'s ``trial_uri``) and none of marathon's
    readers use those, so nothing is rewritten; ``test_recorded_trees`` proves it by reading a
    recording and a fresh harbor run of it to the same cells.
    """
    src = TREES_DIR / name
    if not src.is_dir():
        pytest.fail(f"recorded tree {src} missing: run `uv run --frozen python tests/data/record.py`")
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    for rel in manifest()["trees"][name]["empty_dirs"]:
        (dst / rel).mkdir(parents=True, exist_ok=True)
    restore_write_order(dst)
    return dst


def restore_write_order(root: Path) -> None:
    """Give every trial's files the times harbor's order of writes gave them.

    git keeps no file times, so a checkout of a recording has the checkout's mtimes, later than
    the ``verifier.finished_at`` the trial's result.json records: the tamper rule
    (``runner.results.records.tampered``) would then rightly call every verifier file tampered. The times
    come from the recording's own timestamps: each trial file gets an mtime just before its
    verifier finished, then result.json is rewritten last (so its ctime is the newest, as harbor
    writes it last) with the trial's ``finished_at`` as its mtime.
    """
    for res in sorted(root.rglob("result.json")):
        try:
            d = json.loads(res.read_text())
        except (OSError, ValueError):
            continue
        ver = d.get("verifier") if isinstance(d, dict) else None
        fin = _epoch((ver or {}).get("finished_at")) if isinstance(ver, dict) else None
        if fin is None:
            continue
        for f in res.parent.rglob("*"):
            if f.is_file() and not f.is_symlink() and f != res:
                os.utime(f, (fin - 1.0, fin - 1.0))
        end = _epoch(d.get("finished_at")) or fin
        res.write_bytes(res.read_bytes())
        os.utime(res, (end, end))


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.timestamp() if t.tzinfo else None


# ------------------------------------------------------------------------------ comparing trees

_STAMP = re.compile(r"\d{8}T\d{6}Z")
# harbor's trial names: "<task>__<7 random chars>" (harbor.models.trial.config: shortuuid)
_TRIAL = re.compile(r"(?<=__)[A-Za-z0-9]{7}\b")
_VOLATILE_CELL_KEYS = {"wall_sec", "scored_by", "agent_sec", "run_id"}


def _norm(s: str) -> str:
    return _TRIAL.sub("<id>", _STAMP.sub("<stamp>", s))


def _skeleton(v: Any) -> Any:
    """The shape of a JSON value: object keys (names normalised) and value types, no values."""
    if isinstance(v, dict):
        return {_norm(str(k)): _skeleton(x) for k, x in v.items()}
    if isinstance(v, list):
        return sorted({json.dumps(_skeleton(x), sort_keys=True) for x in v})
    return type(v).__name__


def signature(root: Path) -> dict[str, Any]:
    """What the recording must keep matching in a fresh harbor run of the same jobs: every file's
    path and every empty dir (stamps and trial ids normalised), the key skeleton of every JSON file harbor or a verifier
    wrote, and the cells of the report's JSON contract without the clock-dependent figures."""
    from runner.results.model import RunModel
    from runner.results.report import build_report

    files, shapes = set(), {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for fn in filenames:
            p = Path(dirpath) / fn
            rel = _norm(p.relative_to(root).as_posix())
            files.add(rel)
            if fn.endswith(".json"):
                try:
                    shapes[rel] = _skeleton(json.loads(p.read_text()))
                except ValueError:
                    shapes[rel] = "unreadable"
    rep = build_report(RunModel.load(root))
    cells = {
        f"{t}/{a}": {k: v for k, v in c.items() if k not in _VOLATILE_CELL_KEYS}
        for t, row in rep["cells"].items()
        for a, c in row.items()
    }
    empty = sorted(_norm(p) for p in empty_dirs(root))
    return {"files": sorted(files), "empty_dirs": empty, "json_shapes": shapes, "cells": cells}
