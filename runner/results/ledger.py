"""The gateway's ledger: every model call of every attempt, one JSON line each, read here.

Why a ledger: an agent's own logs under-report what it spent (other harbor users found usage missing
or 16-35 % low on timed-out trials), and the receipt is written by the arm, in a tree the agent can
write to. The gateway (``runner.ops.gateway``) sits on the wire: it records per call the attempt,
arm and task, the request's behaviour parameters, the tokens from the response's own ``usage``,
the status and the latencies, in ``<out>/.runner/gateway/ledger.jsonl`` (append-only, fsync'd,
outside every agent-writable path; a cluster host's gateway writes ``ledger.<host>.jsonl``). So
status, report and console take tokens from here when the ledger has the attempt, the receipts'
self-reported usage is reconciled with it, and the wire fairness audit compares what each arm
really sent.

Row kinds: ``call`` (one HTTP request of a sandbox, forwarded or refused), ``gateway_start`` and
``gateway_stop`` (a gateway instance's life). Writer and reader agree on the names below.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modes import gateway as gateway_contract
from modes import safeio
from modes.cost_map import crossed_threshold
from modes.values import COUNT, SECONDS, Bad, Range, depth_within, number
from runner.results.tree import ledger_paths, outages_path

#: an HTTP status code
HTTP_STATUS = Range(100, 599, integer=True)

SCHEMA = 1
CALL = "call"
GATEWAY_START = "gateway_start"
GATEWAY_STOP = "gateway_stop"

#: what happened to a call
OK = "ok"  # forwarded, the upstream answered 2xx and the answer reached the client
REFUSED = "refused"  # the gateway answered 401/402/404 itself (``REFUSALS``); nothing went upstream
UPSTREAM_ERROR = "upstream_error"  # forwarded; the upstream answered 4xx/5xx or could not be reached
CLIENT_CLOSED = "client_closed"  # the client went away before the answer ended; upstream cancelled
GATEWAY_ERROR = "gateway_error"  # the gateway itself failed on the call
OUTCOMES = (OK, REFUSED, UPSTREAM_ERROR, CLIENT_CLOSED, GATEWAY_ERROR)

#: why the gateway refused a call (the 401's ``code``)
NO_TOKEN = "invalid_api_key"  # no token, or one no attempt holds
OTHER_ATTEMPT = "token_of_another_attempt"  # a live token, sent on another attempt's socket
ENDED = "attempt_ended"  # the runner ended, voided or stopped the attempt
GONE = "attempt_gone"  # the attempt's harbor process is gone (killed)
BUDGET = gateway_contract.BUDGET_EXHAUSTED  # the attempt's model budget (modes.budget) is spent
NOT_FOUND = "not_found"  # a path outside the API (404): nothing went upstream
SPEND_CAP_RUN = "spend_cap_run"  # the run's spend cap is reached (402; runner.results.caps)
SPEND_CAP_ARM = "spend_cap_arm"  # the arm's spend cap is reached (402)
SPEND_CAP_ATTEMPT = gateway_contract.SPEND_CAP_ATTEMPT  # the attempt spent its own cap (402; cut, not voided)
REFUSALS = (
    NO_TOKEN,
    OTHER_ATTEMPT,
    ENDED,
    GONE,
    BUDGET,
    NOT_FOUND,
    SPEND_CAP_RUN,
    SPEND_CAP_ARM,
    SPEND_CAP_ATTEMPT,
)

#: the request parameters that decide the model's behaviour, compared across arms by the wire audit
PARAMS: dict[str, str] = {
    "model": "model",
    "reasoning_effort": "reasoning effort",
    "reasoning_summary": "reasoning summary",
    "temperature": "temperature",
    "top_p": "top_p",
    "max_output_tokens": "max output tokens",
    "tools_sha256": "tool list (sha256)",
    "instructions_sha256": "instructions (sha256)",
    "tool_choice": "tool choice",
    "parallel_tool_calls": "parallel tool calls",
    "service_tier": "service tier",
    "text_verbosity": "text verbosity",
}
TOKENS = ("input", "cached", "output", "reasoning")


#: latencies in milliseconds, at most a century
MILLIS = Range(0.0, SECONDS.hi * 1000)


def _num(v: Any, rng: Range = SECONDS) -> float | None:
    """A time or latency (``modes.values``): a value out of its range is no value."""
    got = number(v, rng, "")
    return None if got is None or isinstance(got, Bad) else float(got)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


@dataclass(frozen=True, slots=True)
class Call:
    """One ``call`` line, typed."""

    at: float  # epoch seconds, when the gateway received the request
    attempt: str | None
    task: str | None
    arm: str | None
    stamp: str | None
    host: str | None
    outcome: str
    status: int | None
    refused: str | None = None
    method: str = "POST"
    path: str = ""
    request_id: str | None = None
    response_id: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    usage: tuple[int, int, int, int] | None = None  # input, cached, output, reasoning
    first_byte_ms: float | None = None
    total_ms: float | None = None
    model_time_sec: float | None = None
    gateway: str | None = None

    @property
    def key(self) -> tuple[str, str, str] | None:
        if self.task and self.arm and self.stamp:
            return (self.task, self.arm, self.stamp)
        return None

    @property
    def forwarded(self) -> bool:
        return self.outcome != REFUSED

    def param(self, name: str) -> str | None:
        return dict(self.params).get(name)


def _params(v: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, dict):
        return ()
    out = []
    for k in PARAMS:
        if k in v and v[k] is not None:
            x = v[k]
            out.append((k, x if isinstance(x, str) else json.dumps(x, sort_keys=True)))
    return tuple(out)


def _usage(v: Any) -> tuple[int, int, int, int] | None:
    """The response's token counts (``modes.values`` counts; a missing one is 0), or None when
    there is no usage or one count makes no sense (then the call has no usage, as if cut)."""
    if not isinstance(v, dict):
        return None
    got = []
    for k in TOKENS:
        n = number(v.get(k), COUNT, k)
        if isinstance(n, Bad):
            return None
        got.append(int(n or 0))
    return (got[0], got[1], got[2], got[3])


def call_from_dict(d: dict[str, Any]) -> Call | None:
    """A ``call`` line as a ``Call``; None for another kind or a line without a time."""
    if d.get("kind") != CALL:
        return None
    at = _num(d.get("at"))
    if at is None:
        return None
    outcome = d.get("outcome") if d.get("outcome") in OUTCOMES else GATEWAY_ERROR
    status = number(d.get("status"), HTTP_STATUS, "status")
    return Call(
        at=at,
        attempt=_str(d.get("attempt")),
        task=_str(d.get("task")),
        arm=_str(d.get("arm")),
        stamp=_str(d.get("stamp")),
        host=_str(d.get("host")),
        outcome=outcome,
        status=status if isinstance(status, int) else None,
        refused=_str(d.get("refused")),
        method=_str(d.get("method")) or "POST",
        path=_str(d.get("path")) or "",
        request_id=_str(d.get("request_id")),
        response_id=_str(d.get("response_id")),
        params=_params(d.get("params")),
        usage=_usage(d.get("usage")),
        first_byte_ms=_num(d.get("first_byte_ms"), MILLIS),
        total_ms=_num(d.get("total_ms"), MILLIS),
        model_time_sec=_num(d.get("model_time_sec")),
        gateway=_str(d.get("gateway")),
    )


class LedgerReader:
    """The one reader of the ledgers, incremental per file (the console and the model poll it): each
    ``read_new`` returns the lines appended since the last call. A torn last line waits until it is
    complete; a replaced or truncated file is read again from its start (``restarted``)."""

    def __init__(self, out: Path | str) -> None:
        self.out = Path(out)
        self._pos: dict[str, tuple[int, int]] = {}  # path -> (inode, offset)
        self.skipped = 0
        self.restarted = False

    def read_new(self) -> list[dict[str, Any]]:
        self.restarted = False
        rows: list[dict[str, Any]] = []
        for path in ledger_paths(self.out):
            rows += self._read(str(path))
        return rows

    def _read(self, path: str) -> list[dict[str, Any]]:
        opened = safeio.open_own(path)  # a symlink is refused, a FIFO never blocks
        if isinstance(opened, safeio.Refused):
            return []
        fd, st = opened
        try:
            inode, offset = self._pos.get(path, (st.st_ino, 0))
            if inode != st.st_ino or st.st_size < offset:
                self.restarted = True
                offset = 0
            if st.st_size == offset:
                self._pos[path] = (st.st_ino, offset)
                return []
            data = os.pread(fd, st.st_size - offset, offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1
        self._pos[path] = (st.st_ino, offset + end)
        out = []
        for raw in data[:end].splitlines():
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError):
                row = None
            if (
                isinstance(row, dict)
                and isinstance(row.get("kind"), str)
                and depth_within(row, safeio.OWN_DEPTH)
            ):
                out.append(row)
            else:
                self.skipped += 1
        return out


#: what prices a call's tokens: its model and service tier (the request's ``params``; None when it
#: named none) and the prompt-size tier LiteLLM raises its rates at (``modes.cost_map``; "" below)
PriceKey = tuple[str | None, str | None, str]


@dataclass
class AttemptUsage:
    """What the ledger says of one attempt (``<task>/<arm>/<stamp>``)."""

    calls: int = 0  # every call line, refused ones too
    forwarded: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # reason -> calls
    outcomes: dict[str, int] = field(default_factory=dict)
    input: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    with_usage: int = 0  # forwarded calls whose answer carried usage
    #: the provider's error answers by HTTP status ("no answer": none came), ``runner.results.alarms``
    upstream_errors: dict[str, int] = field(default_factory=dict)
    #: forwarded calls that were not an error answer and whose usage never reached the ledger (cut
    #: by the client or the deadline, a stream that ended early): the provider may bill their tokens
    unmetered: int = 0
    first_at: float | None = None  # the first forwarded call: where the wire budget starts
    last_accepted_at: float | None = None
    last_accepted_model_sec: float | None = None
    first_refused_at: float | None = None
    params: dict[str, set[str]] = field(default_factory=dict)
    #: the tokens by what prices them (``PriceKey``): summed per key, priced by
    #: ``runner.results.prices`` (each key's rates once, never per call)
    by_price: dict[PriceKey, list[int]] = field(default_factory=dict)

    def add(self, c: Call) -> None:
        self.calls += 1
        self.outcomes[c.outcome] = self.outcomes.get(c.outcome, 0) + 1
        if not c.forwarded:
            reason = c.refused or NO_TOKEN
            self.refused[reason] = self.refused.get(reason, 0) + 1
            if self.first_refused_at is None or c.at < self.first_refused_at:
                self.first_refused_at = c.at
            return
        self.forwarded += 1
        if c.outcome == UPSTREAM_ERROR:
            s = str(c.status) if c.status else "no answer"
            self.upstream_errors[s] = self.upstream_errors.get(s, 0) + 1
        elif c.usage is None:
            self.unmetered += 1
        if self.first_at is None or c.at < self.first_at:
            self.first_at = c.at
        if self.last_accepted_at is None or c.at > self.last_accepted_at:
            self.last_accepted_at = c.at
            self.last_accepted_model_sec = c.model_time_sec
        if c.usage is not None:
            self.with_usage += 1
            self.input += c.usage[0]
            self.cached += c.usage[1]
            self.output += c.usage[2]
            self.reasoning += c.usage[3]
            model, tier = c.param("model"), c.param("service_tier")
            pk = (model, tier, crossed_threshold(model, tier, c.usage[0]))
            got = self.by_price.setdefault(pk, [0, 0, 0, 0])
            for i, n in enumerate(c.usage):
                got[i] += n
        for k, v in c.params:
            self.params.setdefault(k, set()).add(v)

    @property
    def total(self) -> int:
        return self.input + self.output

    def param_value(self, name: str) -> str | None:
        """The attempt's value of one parameter (several values joined: a mix is itself a value)."""
        vals = self.params.get(name)
        return " | ".join(sorted(vals)) if vals else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "forwarded": self.forwarded,
            "refused": dict(self.refused),
            "input_tokens": self.input,
            "cached_input_tokens": self.cached,
            "output_tokens": self.output,
            "reasoning_tokens": self.reasoning,
        }


Key = tuple[str, str, str]  # (task, arm, stamp)


@dataclass
class Ledger:
    """Every call of the tree's ledgers, and per attempt what they add up to."""

    calls: list[Call] = field(default_factory=list)
    attempts: dict[Key, AttemptUsage] = field(default_factory=dict)
    gateways: list[dict[str, Any]] = field(default_factory=list)  # gateway_start / gateway_stop lines

    @property
    def exists(self) -> bool:
        return bool(self.calls) or bool(self.gateways)

    def add_rows(self, rows: Iterable[dict[str, Any]]) -> set[Key]:
        """Take new lines; returns the attempts they touched."""
        touched: set[Key] = set()
        for row in rows:
            if row.get("kind") in (GATEWAY_START, GATEWAY_STOP):
                self.gateways.append(row)
                continue
            c = call_from_dict(row)
            if c is None:
                continue
            self.calls.append(c)
            if c.key is not None:
                self.attempts.setdefault(c.key, AttemptUsage()).add(c)
                touched.add(c.key)
        return touched

    def usage(self, task: str, arm: str, stamp: str) -> AttemptUsage | None:
        return self.attempts.get((task, arm, stamp))

    def of_attempt(self, attempt_id: str) -> list[Call]:
        return [c for c in self.calls if c.attempt == attempt_id]


def read_ledger(out: Path | str) -> Ledger:
    """The whole ledger of a tree (every host's file); an empty ``Ledger`` when there is none."""
    led = Ledger()
    led.add_rows(LedgerReader(out).read_new())
    return led


def iter_rows(out: Path | str) -> Iterator[dict[str, Any]]:
    """Every well-formed line of every ledger file (for tools and tests)."""
    yield from LedgerReader(out).read_new()


# ------------------------------------------------------------------------------ reconciliation


def reconcile(ledger: AttemptUsage, receipt_usage: dict[str, Any] | None) -> list[str]:
    """What the arm's own receipt reported against the wire, for one attempt: [] when they agree.

    The receipt's ``token_usage`` is app-server's ``thread/tokenUsage/updated`` total (the sum of the
    ``usage`` codex read from each response); the ledger adds up the same ``usage`` objects as they
    passed the wire. Token counts are integers: any difference is more than rounding.
    """
    if not receipt_usage:
        return ["the receipt reports no token usage"] if ledger.with_usage else []
    pairs = (
        ("input", ledger.input, receipt_usage.get("inputTokens")),
        ("cached input", ledger.cached, receipt_usage.get("cachedInputTokens")),
        ("output", ledger.output, receipt_usage.get("outputTokens")),
    )
    return _differences("receipt", pairs)


#: two costs of the same tokens from the same map differ by float rounding only: USD, absolute and
#: relative (harbor prices each call with LiteLLM and sums; the ledger sums per price, then prices)
COST_ROUNDING = 1e-6


def _differences(who: str, pairs: Iterable[tuple[str, int | float, Any]]) -> list[str]:
    """The one comparison rule of the reconciliation: token counts are integers (any difference is
    more than rounding), a cost differs when by more than ``COST_ROUNDING``; a figure ``who`` did
    not give (None, not a number) is not compared."""
    out = []
    for what, wire, said in pairs:
        if not isinstance(said, (int, float)) or isinstance(said, bool):
            continue
        if isinstance(said, int) and isinstance(wire, int):
            if said != wire:
                out.append(f"{what} tokens: {who} {said}, ledger {wire} ({said - wire:+d})")
        elif abs(said - wire) > COST_ROUNDING * (1 + max(abs(said), abs(wire))):
            out.append(f"{what}: {who} ${said:.6f}, ledger ${wire:.6f} ({said - wire:+.6f})")
    return out


def reconcile_harbor(
    ledger: AttemptUsage,
    n_input: int | None,
    n_output: int | None,
    harbor_usd: float | None,
    wire_usd: float | None,
) -> list[str]:
    """Harbor's own figures of one attempt (its trial's ``agent_result``: tokens from the agent's
    logs, ``cost_usd`` priced by harbor with LiteLLM) against the wire's: [] when they agree.

    Harbor's ``n_input_tokens`` is the prompt total with cached tokens (as the ledger's input), its
    ``n_output_tokens`` the completion with reasoning (as the ledger's output). ``wire_usd``: the
    ledger's cost (``runner.results.prices``), None when unpriced (then no cost is compared)."""
    pairs: list[tuple[str, int | float, Any]] = [
        ("input", ledger.input, n_input),
        ("output", ledger.output, n_output),
    ]
    if wire_usd is not None:
        pairs.append(("cost", wire_usd, harbor_usd))
    return _differences("harbor", pairs)


# ------------------------------------------------------------------------------------- outages


@dataclass(frozen=True)
class Outage:
    """A gateway found dead and replaced (``outages.jsonl``, written by whoever restarted it: the
    runner, a cluster job, ``health --fix``), with the attempts that were live at its gateway."""

    host: str | None
    down_since: float | None  # its last heartbeat
    restarted_at: float | None
    by: str
    attempts: frozenset[tuple[str, str, str]]  # (task, arm, stamp)

    def describe(self) -> str:
        from datetime import UTC, datetime

        def t(v: float | None) -> str:
            return datetime.fromtimestamp(v, UTC).strftime("%H:%M:%S") if v else "?"

        return f"the model gateway was down from {t(self.down_since)} to {t(self.restarted_at)} UTC (restarted by {self.by})"


def read_outages(out: Path | str) -> list[Outage]:
    raw = safeio.read_own(outages_path(Path(out)))
    if isinstance(raw, safeio.Refused):
        return []
    text = raw.decode(errors="replace")
    found = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(d, dict) or not depth_within(d, safeio.OWN_DEPTH):
            continue
        atts = set()
        for a in d.get("live_attempts") or []:
            if isinstance(a, dict) and all(isinstance(a.get(k), str) for k in ("task", "arm", "stamp")):
                atts.add((a["task"], a["arm"], a["stamp"]))
        found.append(
            Outage(
                host=_str(d.get("host")),
                down_since=_num(d.get("down_since")),
                restarted_at=_num(d.get("restarted_at")),
                by=_str(d.get("by")) or "?",
                attempts=frozenset(atts),
            )
        )
    return found


def outage_of(out: Path | str, task: str, arm: str, stamp: str) -> Outage | None:
    """The gateway outage the attempt was live through (the first), or None."""
    return next((o for o in read_outages(out) if (task, arm, stamp) in o.attempts), None)
