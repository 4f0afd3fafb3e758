"""The receipt every codex arm writes to ``agent/goal_receipt.json``: what the harness did, as data.

Written in a ``finally`` (also after a deadline, an error or a harbor cancellation), so a reader can
always tell what a trial's harness did: the arm and its Mode (with disclosed substitutions), turns,
continuations, unblocks, the final goal status, token usage, errors and warnings, timings, and which
evidence files were saved. No secret is ever stored: credentials appear by variable name only.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from modes import safeio

RECEIPT_NAME = "goal_receipt.json"
SCHEMA = "marathon.goal_receipt/1"


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Receipt:
    arm: str
    mode: dict | None
    disclosures: list[str]
    agent: str
    codex_version: str
    model: str
    provider: dict  # base_url, api_key_var (name only), provider id
    schema: str = SCHEMA
    transport: dict = field(default_factory=dict)
    goal_objective: str | None = None
    goal_status_final: str | None = None
    turns: int = 0
    our_turns: int = 0  # turns started by turn/start (ours); the rest are codex's own
    continuations: int = 0
    unblocks: int = 0
    command_executions: int = 0
    token_usage: dict = field(default_factory=dict)  # app-server thread/tokenUsage/updated "total"
    stop_reason: str | None = None  # completed | goal_complete | goal_<status> | deadline | error | cancelled
    deadline_hit: bool = False
    goal_timeout_sec: float | None = None
    # The model's budget starts right before the first model request, the same for every arm:
    # what the harness did before (LoopX install, preflight, app-server start) is prep_sec.
    prep_sec: float | None = None
    budget_start: str | None = None  # UTC, when the budget started
    budget_sec: float | None = None
    budget_used_sec: float | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    noise_lines: list[str] = field(default_factory=list)
    server_requests: list[dict] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # arm-specific data (LoopX arms)

    def mark(self, name: str) -> None:
        """Record a wall-clock timing point (UTC) under ``timings[name]``."""
        self.timings[name] = utc_now()

    def write(self, logs_dir: Path) -> Path:
        """Replace the receipt atomically: a FIFO or symlink the agent planted at its name is replaced."""
        logs_dir.mkdir(parents=True, exist_ok=True)
        path = logs_dir / RECEIPT_NAME
        safeio.write_atomic(path, json.dumps(asdict(self), indent=2, sort_keys=False) + "\n")
        return path


def read_receipt(path: Path) -> dict | None:
    """A receipt as plain data, or None when absent or half-written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
