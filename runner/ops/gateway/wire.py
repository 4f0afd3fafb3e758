"""What the gateway reads off the wire, as pure functions: the request's behaviour parameters and the
response's own ``usage``, without buffering a stream.

Why pure and apart from the server: the ledger's figures and the wire fairness audit stand on these
two readings; they are tested on their own (hostile, truncated, compressed input) and the server
only calls them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from typing import Any

from modes import values

#: the SSE events that carry the final ``response`` object (with ``usage``)
FINAL_EVENTS = (b"response.completed", b"response.incomplete", b"response.failed")
#: the most of a non-streamed JSON answer read for its usage
MAX_JSON_ANSWER = 16 * 1024 * 1024
#: the longest SSE event kept while waiting for its end (a final event is a few KB; deltas are skipped)
MAX_EVENT = 4 * 1024 * 1024
#: of a longer event, what is kept: its head (its type, the response's id) and its last bytes (a
#: response object ends with ``usage``, ``user`` and ``metadata``); the middle passes unread
BIG_HEAD = 64 * 1024
BIG_TAIL = 256 * 1024
_TYPE = re.compile(rb'\s*\{\s*"type"\s*:\s*"([^"\\]{1,100})"')
_EVENT_NAME = re.compile(rb"^event:[ ]?(\S{1,100})[ \t\r]*$", re.MULTILINE)
_RESPONSE_ID = re.compile(rb'"response"\s*:\s*\{\s*"id"\s*:\s*"([^"\\]{1,200})"')
#: a JSON key ``usage`` (inside a string its quotes would be escaped, so this is never model text)
_USAGE_KEY = re.compile(rb'"usage"\s*:\s*')


#: the most a request body is decompressed to for its parameters: what the gateway accepts raw
#: (server.MAX_BODY); a 2 MB gzip bomb that expands to 2 GiB stops here instead of taking the memory
MAX_DECODED = 64 * 1024 * 1024
#: the longest parameter value kept as it was; a longer one is kept as its hash and length (the
#: ledger reads its lines in chunks of 1 MiB: a 9 MB tool_choice made a line no reader saw)
MAX_PARAM_CHARS = 256


def _sha256_json(v: Any) -> str:
    return hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _inflate(raw: bytes, wbits: int) -> bytes | None:
    d = zlib.decompressobj(wbits)
    out = d.decompress(raw, MAX_DECODED + 1)
    if len(out) > MAX_DECODED or d.unconsumed_tail or not d.eof:
        return None  # larger than the gateway would accept raw, or cut short: its parameters unknown
    return out


def decode_body(raw: bytes, encoding: str | None) -> bytes | None:
    """The request body as JSON bytes (as sent, gzip or deflate), at most ``MAX_DECODED`` of it;
    None if not. Any other encoding (codex compresses with zstd only for OpenAI's own provider, not
    for the relay's) is forwarded as is, its parameters unknown on the ledger."""
    enc = (encoding or "").strip().lower()
    if enc in ("", "identity"):
        return raw
    try:
        if enc == "gzip":
            return _inflate(raw, 16 + zlib.MAX_WBITS)
        if enc == "deflate":
            return _inflate(raw, zlib.MAX_WBITS)
    except zlib.error:
        return None
    return None
    return None


def param(v: Any) -> Any:
    """A parameter as the ledger keeps it: a string, a finite number, a bool, or a small object as
    sent (its canonical JSON up to ``MAX_PARAM_CHARS``); anything longer, deeper or not finite as
    ``sha256:<hex> (<n> chars)``, still comparable between arms. The client writes these: a NaN
    nested 1,000 deep once stopped the ledger line of a call the provider had answered."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if abs(v) < 2**53 else f"integer of {len(str(v))} digits"
    if isinstance(v, float):
        return v if math.isfinite(v) else "not a finite number"
    try:
        text = (
            v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)
        )
    except (ValueError, TypeError, RecursionError):
        return "not a JSON value the ledger keeps (non-finite or too deep)"
    if len(text) <= MAX_PARAM_CHARS:
        return v
    return f"sha256:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()} ({len(text)} chars)"


def _digest(v: Any) -> str | None:
    try:
        return _sha256_json(v)
    except (ValueError, TypeError, RecursionError):
        return None


#: the request's top-level fields read above as parameters of their own, or that are the call's
#: content or identity rather than a setting (the conversation, the cache key, ids and metadata):
#: every other field goes into ``other_fields``
_READ_OR_PER_CALL = frozenset({
    "model", "reasoning", "temperature", "top_p", "max_output_tokens", "tools", "instructions",
    "tool_choice", "parallel_tool_calls", "service_tier", "text", "stream", "input",
    "prompt_cache_key", "previous_response_id", "conversation", "client_metadata", "metadata",
    "user", "safety_identifier",
})  # fmt: skip
#: the calls the gateway forwards: a model call, and codex's remote compaction of its context
FORWARDED = frozenset({("POST", "/v1/responses"), ("POST", "/v1/responses/compact")})


def _other_fields(
    d: dict[str, Any], reasoning: dict[str, Any], text: dict[str, Any]
) -> dict[str, Any] | None:
    """Every setting of the request the named parameters leave out (``store``, ``include``,
    ``truncation``, ``max_tool_calls``, ``text.format``, another ``reasoning`` key, ...), as one
    object, ``{}`` when there is none. Why: the wire audit compared a fixed list, so one arm's
    ``truncation: "auto"`` or ``include: ["reasoning.encrypted_content"]`` (what the model keeps of
    earlier turns) would pass unseen."""
    other = {k: v for k, v in d.items() if k not in _READ_OR_PER_CALL}
    if r := {k: v for k, v in reasoning.items() if k not in ("effort", "summary")}:
        other["reasoning"] = r
    if t := {k: v for k, v in text.items() if k != "verbosity"}:
        other["text"] = t
    return other  # ({} when none: recorded, unlike a ledger line of a gateway before it, which lacks it)


class _KeyTwice(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _KeyTwice(f"the key {param(twice)!r} given twice in one object")
    return d


def _numeral(text: str) -> int | str:
    """An integer as JSON wrote it; a numeral past 20 digits kept as its text (Python reads one of
    4,299 digits in quadratic time: a body of them held the gateway's loop 100 ms a call, a probe)."""
    return int(text) if len(text) <= 20 else f"integer of {len(text)} digits"


def loads_strict(body: bytes) -> Any:
    """A request body as the provider must read it: a key given twice in one object is refused
    (``ValueError``). Why: ``json.loads`` keeps the last of two ``model`` keys (an escaped
    ``mod\\u0065l`` too), a parser that keeps the first would act on the other, and the ledger, the
    caps' prices and the wire audit would record a model the provider never ran (a probe)."""
    return json.loads(body, object_pairs_hook=_object, parse_int=_numeral)


def request_params(raw: bytes, encoding: str | None = None) -> tuple[dict[str, Any], bool]:
    """(the request's behaviour parameters, whether it asks for a stream). Unknown when the body is
    not a JSON object: ``{"unparsed": reason}``. Every value bounded by ``param``."""
    body = decode_body(raw, encoding)
    if body is None:
        return {"unparsed": f"body encoding {encoding!r} (or over {MAX_DECODED >> 20} MiB decoded)"}, False
    try:
        d = loads_strict(body or b"{}")
    except _KeyTwice as exc:
        return {"unparsed": str(exc)}, False
    except (ValueError, RecursionError):
        return {"unparsed": "not JSON"}, False
    if not isinstance(d, dict):
        return {"unparsed": "not a JSON object"}, False
    reasoning = d.get("reasoning") if isinstance(d.get("reasoning"), dict) else {}
    text = d.get("text") if isinstance(d.get("text"), dict) else {}
    p: dict[str, Any] = {
        "model": d.get("model"),
        "reasoning_effort": reasoning.get("effort"),
        "reasoning_summary": reasoning.get("summary"),
        "temperature": d.get("temperature"),
        "top_p": d.get("top_p"),
        "max_output_tokens": d.get("max_output_tokens"),
        "tools_sha256": _digest(d["tools"]) if "tools" in d else None,
        "instructions_sha256": (
            hashlib.sha256(d["instructions"].encode("utf-8", "surrogatepass")).hexdigest()
            if isinstance(d.get("instructions"), str)
            else None
        ),
        "tool_choice": d.get("tool_choice"),
        "parallel_tool_calls": d.get("parallel_tool_calls"),
        "service_tier": d.get("service_tier"),
        "text_verbosity": text.get("verbosity"),
        "other_fields": _other_fields(d, reasoning, text),
        "background": d.get("background") if isinstance(d.get("background"), bool) else None,
        "n_tools": len(d["tools"]) if isinstance(d.get("tools"), list) else None,
        "n_input_items": len(d["input"]) if isinstance(d.get("input"), list) else None,
    }
    return {k: param(v) for k, v in p.items() if v is not None}, d.get("stream") is True


def usage_of(response: Any) -> dict[str, int] | None:
    """The ledger's token counts from a Responses API ``usage`` object (None when there is none)."""
    if not isinstance(response, dict) or not isinstance(response.get("usage"), dict):
        return None
    u = response["usage"]

    def n(v: Any) -> int:
        # a count as ``modes.values`` reads one: ``100000.0`` is 100000 (a provider that wrote its
        # usage as floats was recorded as 0 tokens and $0: found by a probe); nonsense is 0
        got = values.number(v, values.COUNT, "usage")
        return got if isinstance(got, int) else 0

    inp = u.get("input_tokens_details") if isinstance(u.get("input_tokens_details"), dict) else {}
    out = u.get("output_tokens_details") if isinstance(u.get("output_tokens_details"), dict) else {}
    return {
        "input": n(u.get("input_tokens")),
        "cached": n(inp.get("cached_tokens")),
        "output": n(u.get("output_tokens")),
        "reasoning": n(out.get("reasoning_tokens")),
        "total": n(u.get("total_tokens")),
    }


#: bytes of a request body per input token for ``estimate``: about four characters a token for
#: English and code in OpenAI's tokenizers, and a body's JSON framing adds bytes, never tokens
BYTES_PER_TOKEN = 4


def estimate(body_bytes: int, events: int) -> dict[str, int]:
    """The usage a call that ended without its own (its client hung up before the final event, or
    it was cut) is counted at by the spend caps: its input from the request body's size, its output
    one token per stream event that passed (a delta is about a token). An estimate, not a bound:
    the reasoning it did unseen is not in it. Found by a probe: a client that hung up just before
    each final event made 30 calls the provider billed ($6.00) that no cap counted."""
    return {"input": body_bytes // BYTES_PER_TOKEN + 1, "output": events}


class UsageScanner:
    """Fed the answer's bytes as they pass, keeps what the ledger needs: the response id, its final
    status and ``usage``. A stream is cut into events at blank lines; only an event naming a final
    type is parsed (the many deltas are skipped unparsed), and nothing is kept beyond one event."""

    def __init__(self, content_type: str | None) -> None:
        self.sse = "text/event-stream" in (content_type or "").lower()
        self._buf = bytearray()
        self.response_id: str | None = None
        self.usage: dict[str, int] | None = None
        self.final: str | None = None  # completed | incomplete | failed
        self.overflow = False  # an event (or a JSON answer) too long to keep whole passed
        self._big: _BigEvent | None = None
        self.events = 0  # the stream's events passed (``estimate``: about one output token each)

    def feed(self, chunk: bytes) -> None:
        if not self.sse:
            if len(self._buf) + len(chunk) <= MAX_JSON_ANSWER:
                self._buf += chunk
            else:
                self.overflow = True
            return
        if self._big is not None:
            chunk = self._big.feed(chunk)
            if self._big.ended:
                self._big_event(self._big)
                self._big = None
            if not chunk:
                return
        start = max(0, len(self._buf) - 3)  # what is kept was searched already (a blank line may straddle)
        self._buf += chunk
        while True:
            cut = _event_end(self._buf, start)
            if cut is None:
                break
            event, rest = bytes(self._buf[: cut[0]]), cut[1]
            del self._buf[:rest]
            start = 0
            self.events += 1
            self._event(event)
        if len(self._buf) > MAX_EVENT:  # a long event (no blank line yet): its head and tail kept, never all
            self.overflow = True
            self._big = _BigEvent(bytes(self._buf[:BIG_HEAD]), bytearray(self._buf[-BIG_TAIL:]))
            self._buf.clear()

    def close(self) -> None:
        """The answer ended: parse a non-streamed JSON answer, or a last event without its blank line."""
        if not self.sse:
            if not self.overflow and self._buf:
                try:
                    d = json.loads(bytes(self._buf))
                except (ValueError, RecursionError):
                    d = None
                if isinstance(d, dict):
                    self._take(d)
        elif self._big is not None:  # the answer ended inside a long event: its end is the answer's
            self._big_event(self._big)
            self._big = None
        elif self._buf.strip():
            self._event(bytes(self._buf))
        self._buf.clear()

    def _event(self, event: bytes) -> None:
        if b"response.created" in event and self.response_id is None:
            d = _data(event)
            if isinstance(d, dict) and isinstance(d.get("response"), dict):
                rid = d["response"].get("id")
                self.response_id = rid if isinstance(rid, str) else None
            return
        if not any(k in event for k in FINAL_EVENTS):
            return
        d = _data(event)
        if isinstance(d, dict) and isinstance(d.get("response"), dict):
            kind = str(d.get("type") or "")
            self.final = kind.rpartition(".")[2] or None
            self._take(d["response"])

    def _big_event(self, big: _BigEvent) -> None:
        """A final event too long to parse (over ``MAX_EVENT``: an answer echoing megabytes of
        instructions): its type from its head, its ``usage`` from the last such key in its tail.
        Until 2026-12-07 it was dropped and the call counted at the estimate."""
        self.events += 1
        kind = big.kind()
        if kind is None or kind.encode() not in FINAL_EVENTS:
            return
        self.final = kind.rpartition(".")[2] or None
        m = _RESPONSE_ID.search(big.head)
        if m is not None:
            self.response_id = m.group(1).decode("utf-8", "replace")
        tail = bytes(big.tail)
        # the last key whose value is a usage object: the request's ``metadata``, which the response
        # echoes after ``usage``, may hold a "usage" key of its own (a string: the provider takes no
        # other), and the last key alone lost the call's usage (a review)
        for key in reversed(list(_USAGE_KEY.finditer(tail))):
            try:
                usage, _end = json.JSONDecoder().raw_decode(tail[key.end() :].decode("utf-8", "replace"))
            except (ValueError, RecursionError):
                continue
            if isinstance(usage, dict) and ("input_tokens" in usage or "output_tokens" in usage):
                self.usage = usage_of({"usage": usage})
                return

    def _take(self, response: dict) -> None:
        rid = response.get("id")
        if isinstance(rid, str):
            self.response_id = rid
        u = usage_of(response)
        if u is not None:
            self.usage = u


class _BigEvent:
    """An SSE event past ``MAX_EVENT`` as it passes: its first ``BIG_HEAD`` bytes, its last
    ``BIG_TAIL`` (the middle dropped as it comes), until the blank line that ends it."""

    def __init__(self, head: bytes, tail: bytearray) -> None:
        self.head = head
        self.tail = tail
        self.ended = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the event's bytes of ``chunk``; what follows its end is returned (b"" until then)."""
        start = max(0, len(self.tail) - 3)  # a blank line may straddle two reads
        self.tail += chunk
        cut = _event_end(self.tail, start)
        if cut is None:
            if len(self.tail) > 2 * BIG_TAIL:
                del self.tail[:-BIG_TAIL]
            return b""
        rest = bytes(self.tail[cut[1] :])
        del self.tail[cut[0] :]
        self.ended = True
        return rest

    def kind(self) -> str | None:
        """The event's type: its ``event:`` line, else the ``type`` its data begins with."""
        m = _EVENT_NAME.search(self.head)
        if m is not None:
            return m.group(1).decode("ascii", "replace")
        for line in self.head.splitlines():
            if line.startswith(b"data:"):
                t = _TYPE.match(line, 5)
                return t.group(1).decode("utf-8", "replace") if t else None
        return None


def _event_end(buf: bytearray, start: int = 0) -> tuple[int, int] | None:
    """(end of the event, start of the next) at the first blank line, either line ending."""
    best = None
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep, start)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(sep))
    return best


def _data(event: bytes) -> Any:
    """The JSON of an SSE event's ``data:`` lines (joined as the SSE spec says)."""
    lines = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            v = line[5:]
            lines.append(v[1:] if v.startswith(b" ") else v)
    if not lines:
        return None
    try:
        return json.loads(b"\n".join(lines))
    except (ValueError, RecursionError):
        return None


class KeyMask:
    """The real key wherever an answer carries it back (an upstream or a proxy that echoes the
    request's headers in an error page), replaced by as many ``*`` before the bytes go on to the
    agent, and counted (``hits``). A key split across reads, however many, is masked whole: a read
    that ends with the start of the key keeps those bytes back until the next read shows whether
    the key goes on (``flush`` gives them at the answer's end). An SSE event ends with a newline,
    which no key holds, so a stream's reads are passed on whole; only a read cut inside a word may
    wait (at most the key's length less one byte) for the next. A key written in another form
    (encoded, cut) is not recognised."""

    #: a key shorter than this is no secret worth masking (``x``, ``dummy``, ``ollama`` for a local
    #: server): masking it would change every ``x`` of every answer
    MIN_KEY = 16

    def __init__(self, key: str) -> None:
        self.key = key.encode()
        self.on = len(self.key) >= self.MIN_KEY
        self.hits = 0
        self._held = b""

    def text(self, value: str) -> str:
        """A text of the answer the gateway passes on or keeps (a header's name or value, the status
        line's reason, the response's id on the ledger), the key masked."""
        key = self.key.decode()
        if self.on and key in value:
            self.hits += value.count(key)
            return value.replace(key, "*" * len(key))
        return value

    def __call__(self, chunk: bytes) -> bytes:
        """The bytes of this read that may go on now (possibly none: they could begin the key)."""
        if not self.on:
            return chunk
        k = self.key
        data = self._held + chunk if self._held else chunk
        self._held = b""
        if k in data:
            self.hits += data.count(k)
            data = data.replace(k, b"*" * len(k))
        if data[-1:] and data[-1:] in k:  # (an event's last byte, a newline, is in no key)
            for i in range(min(len(k) - 1, len(data)), 0, -1):
                if k.startswith(data[-i:]):
                    self._held, data = data[-i:], data[:-i]
                    break
        return data

    def flush(self) -> bytes:
        """At the answer's end: the bytes kept back, which turned out not to be the key."""
        held, self._held = self._held, b""
        return held
