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

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
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
#: forwarded, then cut in flight by the gateway (``cut``: the attempt's budget ran out, or it ended);
#: upstream cancelled, its usage unknown (a lower bound, as a client that closed)
CUT = "cut"
OUTCOMES = (OK, REFUSED, UPSTREAM_ERROR, CLIENT_CLOSED, GATEWAY_ERROR, CUT)

#: why the gateway refused a call (the 401's ``code``)
NO_TOKEN = "invalid_api_key"  # no token, or one no attempt holds
OTHER_ATTEMPT = "token_of_another_attempt"  # a live token, sent on another attempt's socket
ENDED = "attempt_ended"  # the runner ended, voided or stopped the attempt
GONE = "attempt_gone"  # the attempt's harbor process is gone (killed)
BUDGET = gateway_contract.BUDGET_EXHAUSTED  # the attempt's model budget (modes.budget) is spent
NOT_FOUND = "not_found"  # a path or method the gateway does not forward (404): nothing went upstream
#: a body whose parameters the gateway cannot read (an encoding it does not decode, over 64 MiB, not
#: a JSON object; 415): when it was forwarded, it was priced as the run's model and hidden from the
#: wire audit
UNREADABLE = "unreadable_body"
#: a request the gateway cannot meter (400): ``background: true`` generates on at the provider, its
#: usage in no answer the gateway sees
NOT_METERABLE = "not_meterable"
#: spend caps are set and the call's model has no price (400): its tokens would count $0 to every cap
UNPRICED = "unpriced_model"
SPEND_CAP_RUN = "spend_cap_run"  # the run's spend cap is reached (402; runner.results.caps)
SPEND_CAP_ARM = "spend_cap_arm"  # the arm's spend cap is reached (402)
SPEND_CAP_ATTEMPT = gateway_contract.SPEND_CAP_ATTEMPT  # the attempt spent its own cap (402; cut, not voided)
#: a call on the TLS route over a connection past its attempt's share (429; runner.ops.gateway.conns)
CONNECTIONS = "too_many_connections"
#: a call that would have gone upstream while its gateway stops (503): it waited behind the calls
#: the stop cut, and nothing would cut it
STOPPING = "gateway_stopping"
REFUSALS = (
    NO_TOKEN,
    OTHER_ATTEMPT,
    ENDED,
    GONE,
    BUDGET,
    NOT_FOUND,
    UNREADABLE,
    NOT_METERABLE,
    UNPRICED,
    SPEND_CAP_RUN,
    SPEND_CAP_ARM,
    SPEND_CAP_ATTEMPT,
    CONNECTIONS,
    STOPPING,
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
    "other_fields": "other request fields",
}
#: parameters the gateway records for every body it reads (``{}`` when the body has none), so one an
#: attempt's calls lack was not recorded (a gateway before it), never "not sent": left out of the
#: comparison there (a run resumed across the upgrade read as arms that sent different fields)
RECORDED_WHEN_PARSED = frozenset({"other_fields"})
TOKENS = ("input", "cached", "output", "reasoning")
#: codex's remote compaction of its context: a call of its own kind (model, input and instructions
#: only), priced like any other and left out of the parameters the wire audit compares (its lack of
#: tools and reasoning read as "(not sent)" beside the attempt's model calls: a red line against
#: every arm that never compacted; found by a review)
COMPACT_PATH = "/v1/responses/compact"
#: the value of a parameter a model call did not carry where another call (of the attempt, or of
#: another arm: ``runner.results.audit``) did: the provider's default
NOT_SENT = "(not sent)"


#: latencies in milliseconds, at most a century
MILLIS = Range(0.0, SECONDS.hi * 1000)


def _num(v: Any, rng: Range = SECONDS) -> float | None:
    """A time or latency (``modes.values``): a value out of its range is no value."""
    if type(v) is float and rng.lo <= v <= rng.hi:  # the hot path (every line has four); NaN fails it
        return v
    got = number(v, rng, "")
    return None if got is None or isinstance(got, Bad) else float(got)


def _str(v: Any) -> str | None:
    return v if type(v) is str else None


@dataclass(slots=True)
class Call:
    """One ``call`` line, typed (not frozen: built 150,000 times for a multi-day run's ledger, and
    a frozen dataclass pays a ``object.__setattr__`` per field; no reader changes one)."""

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
    #: a call gone upstream whose usage never came (cut, or its client hung up before the final
    #: event): (input, output) tokens the gateway estimated for the spend caps (``wire.estimate``)
    estimate: tuple[int, int] | None = None

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
        x = v.get(k)
        if x is None:
            continue
        if isinstance(x, str):
            out.append((k, x))
        elif depth_within(x, safeio.OWN_DEPTH):  # the one place a row's nested value is walked
            out.append((k, json.dumps(x, sort_keys=True)))
    return tuple(out)


def _usage(v: Any) -> tuple[int, int, int, int] | None:
    """The response's token counts (``modes.values`` counts; a missing one is 0), or None when
    there is no usage or one count makes no sense (then the call has no usage, as if cut)."""
    if not isinstance(v, dict):
        return None
    got = []
    for k in TOKENS:
        n = v.get(k)
        if type(n) is int and 0 <= n <= COUNT.hi:  # the hot path: a count as the gateway writes it
            got.append(n)
            continue
        n = number(n, COUNT, k)
        if isinstance(n, Bad):
            return None
        got.append(int(n or 0))
    return (got[0], got[1], got[2], got[3])


def call_from_dict(d: dict[str, Any]) -> Call | None:
    """A ``call`` line as a ``Call``; None for another kind or a line without a time."""
    g = d.get
    if g("kind") != CALL:
        return None
    at = _num(g("at"))
    if at is None:
        return None
    outcome = g("outcome")
    if type(outcome) is not str or outcome not in OUTCOMES:
        outcome = GATEWAY_ERROR
    status = g("status")
    if not (type(status) is int and 100 <= status <= 599):
        status = number(status, HTTP_STATUS, "status")
    s = _str
    return Call(
        at,
        s(g("attempt")),
        s(g("task")),
        s(g("arm")),
        s(g("stamp")),
        s(g("host")),
        outcome,
        status if isinstance(status, int) else None,
        s(g("refused")),
        s(g("method")) or "POST",
        s(g("path")) or "",
        s(g("request_id")),
        s(g("response_id")),
        _params(g("params")),
        _usage(g("usage")),
        _num(g("first_byte_ms"), MILLIS),
        _num(g("total_ms"), MILLIS),
        _num(g("model_time_sec")),
        s(g("gateway")),
        _estimate(g("usage_estimate")),
    )


def _estimate(v: Any) -> tuple[int, int] | None:
    """An unmetered call's estimated (input, output) tokens, counts as ``_usage`` reads them; None
    when absent or nonsense."""
    if not isinstance(v, dict):
        return None
    got = []
    for k in ("input", "output"):
        n = v.get(k)
        if not (type(n) is int and 0 <= n <= COUNT.hi):
            n = number(n, COUNT, k)
            if not isinstance(n, int):
                return None
        got.append(n)
    return got[0], got[1]


#: the most of a ledger file read at once: a multi-day run's ledger holds hundreds of thousands of
#: lines (over 100 MB), which are taken in and let go a chunk at a time
CHUNK = 8 * 1024 * 1024


class LedgerReader:
    """The one reader of the ledgers, incremental per file (the console and the model poll it): each
    ``read_new`` returns the lines appended since the last call (``iter_new``: one at a time, the
    file read a ``CHUNK`` at a time). A torn last line waits until it is complete; a replaced or
    truncated file is read again from its start (``restarted``).

    A line is handed on when it is a JSON object with a ``kind``; a ``call`` line's fields are typed
    by ``call_from_dict`` (which walks no nested value but a parameter's, depth-checked there), any
    other kind is depth-checked here (a line is the gateway's own, but the reader trusts no file)."""

    def __init__(self, out: Path | str) -> None:
        self.out = Path(out)
        self._pos: dict[str, tuple[int, int]] = {}  # path -> (inode, offset)
        #: path -> the sha256 of the bytes before its offset (what ``state`` names and ``resume`` checks)
        self._sha: dict[str, Any] = {}
        self.skipped = 0
        self.restarted = False

    def read_new(self) -> list[dict[str, Any]]:
        return list(self.iter_new())

    def iter_new(self) -> Iterator[dict[str, Any]]:
        """The lines appended since the last look, one at a time (``restarted`` is known once the
        first file has been looked at; callers that need it read to the end first)."""
        self.restarted = False
        for path in ledger_paths(self.out):
            yield from self._read(str(path))

    def _read(self, path: str) -> Iterator[dict[str, Any]]:
        opened = safeio.open_own(path)  # a symlink is refused, a FIFO never blocks
        if isinstance(opened, safeio.Refused):
            return
        fd, st = opened
        try:
            inode, offset = self._pos.get(path, (st.st_ino, 0))
            if inode != st.st_ino or st.st_size < offset:
                self.restarted = True
                offset = 0
            if offset == 0:
                self._sha[path] = hashlib.sha256()
            self._pos[path] = (st.st_ino, offset)
            sha = self._sha[path]
            while offset < st.st_size:
                try:
                    data = os.pread(fd, min(CHUNK, st.st_size - offset), offset)
                except OSError:
                    return
                if not data:
                    return
                end = data.rfind(b"\n") + 1
                if end == 0:
                    if len(data) < CHUNK:
                        return  # a torn last line: wait for its end
                    # one line longer than a chunk: not the gateway's; skip to its end
                    past = sha.copy()
                    past.update(data)
                    nl = _next_newline(fd, offset + len(data), st.st_size, past)
                    if nl is None:
                        return
                    self.skipped += 1
                    offset = nl + 1
                    self._sha[path] = sha = past
                    self._pos[path] = (st.st_ino, offset)
                    continue
                offset += end
                sha.update(data[:end] if end < len(data) else data)
                self._pos[path] = (st.st_ino, offset)
                yield from self._rows(data[:end])
        finally:
            os.close(fd)

    def state(self) -> dict[str, list[Any]]:
        """Where the reader is, per file (its name in the gateway dir): ``[inode, offset, sha256 of
        the bytes before it]``, for ``resume`` in another process (``runner.results.ledger_memo``)."""
        return {
            os.path.basename(p): [ino, off, self._sha[p].hexdigest()]
            for p, (ino, off) in self._pos.items()
            if p in self._sha
        }

    def resume(self, state: dict[str, Any]) -> bool:
        """Take up where ``state`` was, when every file it names still starts with the very bytes it
        had read (same inode, at least as long, the same sha256 of them: the gateway only appends);
        False, the reader unchanged, when one does not (read from the start then)."""
        gw = ledger_paths(self.out)
        by_name = {p.name: str(p) for p in gw}
        pos: dict[str, tuple[int, int]] = {}
        shas: dict[str, Any] = {}
        for name, got in state.items():
            path = by_name.get(name)
            if path is None or not (isinstance(got, list) and len(got) == 3):
                return False
            ino, off, want = got
            if not (type(ino) is int and type(off) is int and off >= 0 and isinstance(want, str)):
                return False
            sha = _prefix_sha(path, ino, off)
            if sha is None or sha.hexdigest() != want:
                return False
            pos[path], shas[path] = (ino, off), sha
        self._pos, self._sha = pos, shas
        return True

    def _rows(self, data: bytes) -> Iterator[dict[str, Any]]:
        loads = json.loads
        for raw in data.splitlines():
            if not raw.strip():
                continue
            try:
                row = loads(raw)
            except (ValueError, RecursionError):
                row = None
            if (
                isinstance(row, dict)
                and isinstance(kind := row.get("kind"), str)
                and (kind == CALL or depth_within(row, safeio.OWN_DEPTH))
            ):
                yield row
            else:
                self.skipped += 1


def _next_newline(fd: int, start: int, size: int, sha: Any) -> int | None:
    """The offset of the first newline at or after ``start`` (None: none before ``size``); the
    bytes up to it, the newline included, go into ``sha``."""
    pos = start
    while pos < size:
        try:
            data = os.pread(fd, min(CHUNK, size - pos), pos)
        except OSError:
            return None
        if not data:
            return None
        i = data.find(b"\n")
        if i >= 0:
            sha.update(data[: i + 1])
            return pos + i
        sha.update(data)
        pos += len(data)
    return None


def _prefix_sha(path: str, inode: int, size: int) -> Any:
    """The sha256 of the first ``size`` bytes of the ledger file ``path`` when it is still the file
    ``inode`` and at least that long (None otherwise), ready to take the bytes after them."""
    opened = safeio.open_own(path)
    if isinstance(opened, safeio.Refused):
        return None
    fd, st = opened
    try:
        if st.st_ino != inode or st.st_size < size:
            return None
        sha = hashlib.sha256()
        pos = 0
        while pos < size:
            data = os.pread(fd, min(CHUNK, size - pos), pos)
            if not data:
                return None
            sha.update(data)
            pos += len(data)
        return sha
    except OSError:
        return None
    finally:
        os.close(fd)


#: error answers that say the request was wrong (the harness's doing), except those that say the
#: provider's state: a refused credential (401, 403), a timeout (408), a rate or quota limit (429)
REQUEST_FAULTS = range(400, 500)
PROVIDER_4XX = frozenset({401, 403, 408, 429})


def provider_fault(status: int | None) -> bool:
    """Is an ``upstream_error`` call the provider's failure (down, overloaded, rate-limited, the
    credential refused, the answer cut, no answer at all: 502 from the gateway) rather than a
    request the harness got wrong (400, 404, 413, 422: those are the arm's, never an outage)?"""
    return status is None or status not in REQUEST_FAULTS or status in PROVIDER_4XX


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
    #: the provider down for the attempt (``provider_fault``): seconds from a failed call to the next
    #: answered one, summed; an outage still open at the attempt's last call is ``down_since`` to
    #: ``down_until`` (the end of its last failed call). ``provider_down_sec`` adds them up.
    down_sec: float = 0.0
    down_since: float | None = None
    down_until: float | None = None
    first_at: float | None = None  # the first forwarded call: where the wire budget starts
    last_accepted_at: float | None = None
    last_accepted_model_sec: float | None = None
    first_refused_at: float | None = None
    #: per parameter, the values the attempt's calls sent it with (``NOT_SENT`` among them when one
    #: of its model calls did not: the provider's default there)
    params: dict[str, set[str]] = field(default_factory=dict)
    model_calls: int = 0  # forwarded calls that named a model (the calls ``params`` is about)
    #: the tokens by what prices them (``PriceKey``): summed per key, priced by
    #: ``runner.results.prices`` (each key's rates once, never per call)
    by_price: dict[PriceKey, list[int]] = field(default_factory=dict)
    #: the unmetered calls' estimated tokens (``Call.estimate``: input, output) by what prices them:
    #: what the spend caps count for them (``prices.Cost.estimated``); in no token figure
    estimated: dict[PriceKey, list[int]] = field(default_factory=dict)

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
            if provider_fault(c.status):
                if self.down_since is None or c.at < self.down_since:
                    self.down_since = c.at
                end = c.at + (c.total_ms or 0.0) / 1000
                if self.down_until is None or end > self.down_until:
                    self.down_until = end
        elif c.usage is None:
            self.unmetered += 1
        if c.outcome == OK and self.down_since is not None and c.at > self.down_since:
            self.down_sec += c.at - self.down_since  # answered again: the outage closes
            self.down_since = self.down_until = None
        if self.first_at is None or c.at < self.first_at:
            self.first_at = c.at
        if self.last_accepted_at is None or c.at > self.last_accepted_at:
            self.last_accepted_at = c.at
            self.last_accepted_model_sec = c.model_time_sec
        model = tier = None
        params = self.params if c.path != COMPACT_PATH else {}  # (priced below, never compared)
        for k, v in c.params:
            if (vals := params.get(k)) is None:
                params[k] = {v} if not self.model_calls else {v, NOT_SENT}  # earlier calls left it out
            else:
                vals.add(v)
            if k == "model":
                model = v
            elif k == "service_tier":
                tier = v
        # a model call (a compaction is not compared): a parameter earlier ones sent and this one did not
        if model is not None and params is self.params:
            self.model_calls += 1
            if len(params) > len(c.params):
                sent = dict(c.params)
                for k, vals in params.items():
                    if k not in sent:
                        vals.add(NOT_SENT)
        if c.usage is None and (e := c.estimate) is not None and c.outcome != UPSTREAM_ERROR:
            pk = (model, tier, "")
            if (got := self.estimated.get(pk)) is None:
                self.estimated[pk] = [e[0], e[1]]
            else:
                got[0] += e[0]
                got[1] += e[1]
        if (u := c.usage) is not None:
            self.with_usage += 1
            self.input += u[0]
            self.cached += u[1]
            self.output += u[2]
            self.reasoning += u[3]
            pk = (model, tier, crossed_threshold(model, tier, u[0]))
            # priced per call: cached within its input, reasoning within its output (a call whose
            # usage said more cached than input re-priced the attempt's other calls as cached)
            cached, reasoning = min(u[1], u[0]), min(u[3], u[2])
            if (got := self.by_price.get(pk)) is None:
                self.by_price[pk] = [u[0], cached, u[2], reasoning]
            else:
                got[0] += u[0]
                got[1] += cached
                got[2] += u[2]
                got[3] += reasoning

    @property
    def total(self) -> int:
        return self.input + self.output

    @property
    def provider_down_sec(self) -> float:
        """How long the provider failed the attempt's calls: closed outages, and one still open."""
        still = (
            (self.down_until - self.down_since) if self.down_since is not None and self.down_until else 0.0
        )
        return self.down_sec + max(0.0, still)

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
    """What the tree's ledgers add up to per attempt, and the gateways' lives.

    The calls themselves only when asked (``keep_calls``: tools and tests): a multi-day run's ledger
    holds hundreds of thousands, and every reader (status, report, the console, the runner's and the
    gateway's spend tally) needs only their sums."""

    attempts: dict[Key, AttemptUsage] = field(default_factory=dict)
    gateways: list[dict[str, Any]] = field(default_factory=list)  # gateway_start / gateway_stop lines
    n_calls: int = 0  # call lines taken in (refused ones too)
    keep_calls: bool = False
    calls: list[Call] = field(default_factory=list)  # every call line, with ``keep_calls``

    @property
    def exists(self) -> bool:
        return bool(self.n_calls) or bool(self.gateways)

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
            self.n_calls += 1
            if self.keep_calls:
                self.calls.append(c)
            if c.key is not None:
                self.attempts.setdefault(c.key, AttemptUsage()).add(c)
                touched.add(c.key)
        return touched

    def usage(self, task: str, arm: str, stamp: str) -> AttemptUsage | None:
        return self.attempts.get((task, arm, stamp))

    def to_state(self) -> dict[str, Any]:
        """The sums as JSON (``runner.results.ledger_memo`` keeps them between processes): each
        attempt's ``AttemptUsage`` as a list in the order of ``fields`` (a 10,000-attempt ledger's
        state is read back in a tenth of the time of one object per attempt)."""
        return {
            "n_calls": self.n_calls,
            "gateways": self.gateways,
            "fields": _USAGE_FIELDS,
            "attempts": [[*k, _usage_state(u)] for k, u in self.attempts.items()],
        }

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Ledger:
        """``to_state`` read back (a TypeError, ValueError or KeyError when it is not one)."""
        if d["fields"] != _USAGE_FIELDS:
            raise ValueError("kept by another version of AttemptUsage")
        gateways = list(d["gateways"])
        if not all(isinstance(g, dict) for g in gateways):
            raise TypeError("a gateway line")
        led = cls(n_calls=int(d["n_calls"]), gateways=gateways)
        attempts = led.attempts
        for task, arm, stamp, u in d["attempts"]:
            if type(task) is not str or type(arm) is not str or type(stamp) is not str:
                raise TypeError("an attempt's key")
            attempts[(task, arm, stamp)] = _usage_from_state(u)
        return led


_USAGE_FIELDS = [f.name for f in fields(AttemptUsage)]
_PARAMS_AT = _USAGE_FIELDS.index("params")
_BY_PRICE_AT = _USAGE_FIELDS.index("by_price")
_ESTIMATED_AT = _USAGE_FIELDS.index("estimated")


def _usage_state(u: AttemptUsage) -> list[Any]:
    vals = [getattr(u, name) for name in _USAGE_FIELDS]
    vals[_PARAMS_AT] = [[k, sorted(v)] for k, v in u.params.items()]
    vals[_BY_PRICE_AT] = [[*k, v] for k, v in u.by_price.items()]
    vals[_ESTIMATED_AT] = [[*k, v] for k, v in u.estimated.items()]
    return vals


def _usage_from_state(vals: list[Any]) -> AttemptUsage:
    vals = list(vals)
    vals[_PARAMS_AT] = {str(k): {str(x) for x in v} for k, v in vals[_PARAMS_AT]}
    vals[_BY_PRICE_AT] = {(m, t, str(th)): [int(x) for x in v] for m, t, th, v in vals[_BY_PRICE_AT]}
    vals[_ESTIMATED_AT] = {(m, t, str(th)): [int(x) for x in v] for m, t, th, v in vals[_ESTIMATED_AT]}
    return AttemptUsage(*vals)


def read_ledger(out: Path | str, keep_calls: bool = False) -> Ledger:
    """The whole ledger of a tree (every host's file) added up; an empty ``Ledger`` when there is
    none. ``keep_calls``: every call too, typed (tools and tests: all of them in memory)."""
    led = Ledger(keep_calls=keep_calls)
    led.add_rows(LedgerReader(out).iter_new())
    return led


def iter_rows(out: Path | str) -> Iterator[dict[str, Any]]:
    """Every well-formed line of every ledger file (for tools and tests)."""
    yield from LedgerReader(out).iter_new()


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


def live_at_deaths(out: Path | str, attempts: Iterable[tuple[str, str, str]]) -> dict[str, int]:
    """Per arm, how many of ``attempts`` (task, arm, stamp) were live at a gateway found dead: the
    calls they had in flight then never reached the ledger (a process killed writes no line), so
    the spend is a lower bound by those (the money section says so)."""
    dead = {k for o in read_outages(out) for k in o.attempts}
    found: dict[str, int] = {}
    if dead:
        for k in dict.fromkeys(attempts):
            if k in dead:
                found[k[1]] = found.get(k[1], 0) + 1
    return found


def outage_of(out: Path | str, task: str, arm: str, stamp: str) -> Outage | None:
    """The gateway outage the attempt was live through (the first), or None."""
    return next((o for o in read_outages(out) if (task, arm, stamp) in o.attempts), None)
