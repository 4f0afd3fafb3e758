"""The receipt: what a trial's harness did, as data, written by the arms and read back by the results.

Every codex arm writes it to ``agent/goal_receipt.json`` in a ``finally`` (also after a deadline,
an error or a harbor cancellation), so a reader can always tell what a trial's harness did: the arm
and its Mode (with disclosed substitutions), turns, continuations, unblocks, the final goal status,
token usage, errors and warnings, timings, and which evidence files were saved. No secret is ever
stored: credentials appear by variable name only.

Why here, in the shared leaf: the receipt used to be defined twice, written in ``agents/`` and read
in ``runner/results/`` under other names (``goal_status_final`` vs ``final_goal_status``), kept in
step by a test. Now ``Receipt`` names every field once and ``read_figures`` reads them back by those
names (plus the older spellings of receipts already on disk). The file sits in the agent's own
mount, so the reader is hostile-proof (``modes.values``): a count of ``10**400``, a status that is
a list or a ``deadline_hit`` of ``"yes"`` make the receipt ``Bad``, never an exception.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from modes import safeio
from modes.trial_files import TrialFiles
from modes.values import COUNT, Bad, flag, number, text

#: the receipt's name in the agent's logs dir (the trial's ``agent/``)
RECEIPT_NAME = TrialFiles.RECEIPT.removeprefix(TrialFiles.AGENT_DIR + "/")
SCHEMA = "marathon.goal_receipt/1"


def utc_now(epoch: float | None = None) -> str:
    """UTC to the second, as every receipt writes its times: now, or the moment ``epoch``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass
class Receipt:
    """The receipt as the arms write it (every field name the readers use is named here)."""

    arm: str
    mode: dict | None
    disclosures: list[str]
    agent: str
    codex_version: str
    model: str
    provider: dict  # base_url, api_key_var (name only), provider id
    schema: str = SCHEMA
    transport: dict = field(default_factory=dict)
    # What the fairness audit compares across arms (runner.results.audit): the sha256 of the codex binary
    # the trial ran (the staged file on the host that was mounted or copied in), the config.toml
    # hashes (exact, and normalised with the declared differences masked: modes.config_digest),
    # the image id of the trial's main container, and the arm's declared masked differences.
    codex_sha256: str | None = None
    config_toml: dict = field(default_factory=dict)
    image_digest: str | None = None
    masked: list[dict] = field(default_factory=list)
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
    # what the harness did before (LoopX install, preflight, app-server start) is prep_sec. Through
    # the gateway's relay it starts again at the request itself (``extra.budget_anchor``, and
    # ``extra.first_request_after_sec`` after the first start), where the gateway starts the wire's.
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


# ---------------------------------------------------------------------------------------- reading

#: Each figure read back, by the writer's field name, with the older spellings still accepted (the
#: field harness wrote ``_unblock_count``, ``error_events``, ``final_goal_status``, ``timed_out``).
#: The runbook's monitor read ``unblock_count`` and reported "0 unblocks" forever.
SPELLINGS: dict[str, tuple[str, ...]] = {
    "continuations": ("continuations", "n_continuations", "continuation_count"),
    "unblocks": ("unblocks", "n_unblocks", "unblock_count", "_unblock_count"),
    "errors": ("errors", "error_events", "n_errors", "n_error_events"),
    "turns": ("turns", "n_turns"),
    "goal_status_final": ("goal_status_final", "final_goal_status", "goal_status", "final_status"),
    "deadline_hit": ("deadline_hit", "timed_out"),
}

#: receipt paths of the setup facts the fairness audit compares across arms
SETUP_PATHS: dict[str, tuple[str, ...]] = {
    "codex_version": ("codex_version",),
    "codex_in_container": ("extra", "codex_version_in_container"),
    "codex_sha256": ("codex_sha256",),
    "config_toml_sha256": ("config_toml", "normalized_sha256"),
    "transport": ("transport", "kind"),
    "user": ("transport", "user"),
    "workdir": ("transport", "workdir"),
    "credential": ("provider", "api_key_var"),
    "model": ("model",),
    "provider_base_url": ("provider", "base_url"),
    "budget_sec": ("budget_sec",),
    "goal_timeout_sec": ("goal_timeout_sec",),
    "agent_timeout_sec": ("extra", "harbor_agent_timeout_sec"),
    "image_digest": ("image_digest",),
    "loopx_version": ("extra", "loopx", "profile", "loopx"),
    "node_version": ("extra", "loopx", "profile", "node"),
}
#: a setup fact is compared as text, at most this long
SETUP_CAP = 200


@dataclass(slots=True)  # not frozen: the results layer builds one per trial (see runner.results.records)
class ReceiptFigures:
    """The figures of a receipt that status, report, console and the fairness audit show.

    ``state`` is the reading's (``ok``, or why not: ``missing``, ``refused``, ``unreadable``,
    ``invalid``...), ``error`` says why; the figures keep the writer's names.
    """

    state: str
    error: str = ""
    continuations: int | None = None
    unblocks: int | None = None
    errors: int | None = None  # how many error events (the writer keeps a list of them)
    goal_status_final: str | None = None
    turns: int | None = None
    deadline_hit: bool | None = None
    arm: str | None = None
    # the trial's setup as the arm recorded it (codex, transport, credentials, model, budget), for
    # the fairness audit: (fact, value) pairs, values as short strings
    setup: tuple[tuple[str, str], ...] = ()
    # what the arm reported it used (app-server's thread total): (input, cached input, output)
    # tokens, reconciled with the model gateway's ledger (runner.results.ledger.reconcile)
    token_usage: tuple[int, int, int] | None = None


def _first(d: Mapping[str, Any], name: str) -> tuple[str, Any]:
    for k in SPELLINGS[name]:
        if d.get(k) is not None:
            return k, d[k]
    return name, None


def _count(d: Mapping[str, Any], name: str) -> int | None | Bad:
    k, v = _first(d, name)
    if isinstance(v, list):  # the writer keeps errors as a list: its length is the count
        return len(v)
    got = number(v, COUNT, k)
    return got if not isinstance(got, float) else int(got)


def _setup(d: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    out = []
    for fact, path in SETUP_PATHS.items():
        v: Any = d
        for k in path:
            v = v.get(k) if isinstance(v, Mapping) else None
        if isinstance(v, bool) or v is None or isinstance(v, (dict, list)):
            continue
        if isinstance(v, int) and not -(10**15) < v < 10**15:
            v = f"a number of {len(str(abs(v)))} digits"
        out.append((fact, str(v)[:SETUP_CAP]))
    return tuple(out)


#: the keys of ``Receipt.token_usage`` (app-server's names) that the reconciliation reads
USAGE_KEYS = ("inputTokens", "cachedInputTokens", "outputTokens")


def _token_usage(v: Any) -> tuple[int, int, int] | None | Bad:
    """The receipt's own token totals, each a count in range (a missing one is 0), or None."""
    if v is None or (isinstance(v, Mapping) and not v):
        return None
    if not isinstance(v, Mapping):
        return Bad("token_usage", f"expected an object, not {type(v).__name__}")
    got = []
    for k in USAGE_KEYS:
        n = number(v.get(k), COUNT, f"token_usage.{k}")
        if isinstance(n, Bad):
            return n
        got.append(int(n) if n is not None else 0)
    return (got[0], got[1], got[2])


def read_figures(d: Mapping[str, Any], ok: str = "ok") -> ReceiptFigures | Bad:
    """The figures of a parsed receipt (state ``ok``), or the first value that makes no sense."""
    figures: dict[str, Any] = {}
    for name in ("continuations", "unblocks", "errors", "turns"):
        got = _count(d, name)
        if isinstance(got, Bad):
            return got
        figures[name] = got
    key, status = _first(d, "goal_status_final")
    if status is None:  # an older receipt kept it in its goal block
        goal = d.get("goal")
        key, status = "goal.status", goal.get("status") if isinstance(goal, Mapping) else None
    status = text(status, key)
    if isinstance(status, Bad):
        return status
    key, hit = _first(d, "deadline_hit")
    hit = flag(hit, key)
    if isinstance(hit, Bad):
        return hit
    arm = text(d.get("arm"), "arm")
    if isinstance(arm, Bad):
        return arm
    usage = _token_usage(d.get("token_usage"))
    if isinstance(usage, Bad):
        return usage
    return ReceiptFigures(
        state=ok,
        goal_status_final=status or None,
        deadline_hit=hit,
        arm=arm,
        setup=_setup(d),
        token_usage=usage,
        **figures,
    )
