"""The model gateway for the arm tests that run harbor directly: every arm reaches its model as in a
real run (sandbox -> relay -> gateway -> the scripted model on the host), each harbor job an attempt.

Why here: tests/arms_codex and tests/arms_loopx start ``harbor run`` themselves (no runner), so they
wire each job the way ``runner.schedule.gateway.wire_attempt`` wires a run's attempt: a token in
harbor's environment instead of the key, the attempt's socket mounted, ``--ak gateway=local``.
The key is only in the gateway's environment; the scripted model's own log names each call's attempt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from waiting import wait_for

from modes.gateway import SCRIPTED_UPSTREAM
from runner.ops.gateway import attempts, process
from runner.results.caps import attempt_cut_path
from runner.results.tree import gateway_dir
from runner.schedule.gateway import Wiring


def start(out: Path, key_var: str, key: str, tasks_dirs: list[Path]) -> None:
    """The tree's gateway with the scripted model on the host as its upstream (``tasks_dirs``: the
    plans it finds each call's task in); the key in its environment only, by name."""
    os.environ[key_var] = key
    try:
        tasks = os.pathsep.join(str(d) for d in tasks_dirs)
        process.start_detached(out, process.GatewaySettings(SCRIPTED_UPSTREAM, key_var, tasks))
    finally:
        del os.environ[key_var]


def stop(out: Path) -> None:
    process.stop(out)


def wire(
    out: Path, task: str, key: str, budget_sec: float | None, env: dict[str, str], key_var: str
) -> tuple[attempts.Issued, dict[str, str], list[str]]:
    """One harbor job as one attempt: its record (socket bound before harbor starts), harbor's
    environment (the token, never the key) and the ``--ak`` that points the arm at the relay, both
    from the runner's own ``Wiring``; the socket's mount is ``issued.mount``."""
    iss = attempts.issue(out, task, key, key, budget_sec=budget_sec)
    wait_for(attempts.socket_path(out, iss.record.id).exists, 30, f"the gateway to bind {key}'s socket")
    w = Wiring(iss, key_var, cut=str(attempt_cut_path(out, iss.record.id)))
    return iss, w.env(env), w.agent_kwargs()


def end(out: Path, iss: attempts.Issued, rc: int) -> None:
    attempts.end(out, iss.record.id, f"harbor exited with {rc}")


def requests(out: Path, attempt: str, task: str | None = None) -> list[dict]:
    """The scripted model's own log lines of one attempt (of one task, when given)."""
    log = gateway_dir(out) / "scripted" / "requests.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("attempt") == attempt and (task is None or r.get("task") == task)]
