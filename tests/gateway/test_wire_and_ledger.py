"""What the gateway reads off the wire (runner.ops.gateway.wire), the ledger's one reader
(runner.results.ledger) and the scripted model on the host (agents/scripted_model/host.py): pure
logic and a real stdlib server, no Docker."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import time
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.ops.gateway import wire
from runner.ops.gateway.wire import UsageScanner, request_params, usage_of
from runner.results import ledger as L

REPO = Path(__file__).resolve().parents[2]
USAGE = {
    "input_tokens": 900,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 930,
}


def _stream(n_deltas: int = 50, crlf: bool = False) -> bytes:
    def ev(kind: str, data: dict) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    s = ev("response.created", {"response": {"id": "resp_9"}})
    s += ": keepalive\n\n" + "".join(
        ev("response.output_text.delta", {"delta": "x" * 20}) for _ in range(n_deltas)
    )
    s += ev("response.completed", {"response": {"id": "resp_9", "status": "completed", "usage": USAGE}})
    return (s.replace("\n", "\r\n") if crlf else s).encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=80), st.booleans())
def test_usage_is_read_from_a_stream_however_it_is_cut_into_chunks(cuts, crlf):
    data = _stream(crlf=crlf)
    sc = UsageScanner("text/event-stream; charset=utf-8")
    pos = 0
    for n in cuts * 200:
        if pos >= len(data):
            break
        sc.feed(data[pos : pos + n])
        pos += n
    sc.feed(data[pos:])
    sc.close()
    assert sc.usage == {"input": 900, "cached": 100, "output": 30, "reasoning": 5, "total": 930}
    assert (sc.response_id, sc.final) == ("resp_9", "completed")


def test_a_cut_stream_has_no_usage_and_a_runaway_event_is_dropped():
    data = _stream()
    sc = UsageScanner("text/event-stream")
    sc.feed(data[: data.index(b"response.completed")])  # the client went away before the end
    sc.close()
    assert sc.usage is None and sc.response_id == "resp_9"
    runaway = UsageScanner("text/event-stream")
    runaway.feed(b"data: " + b"x" * (5 * 1024 * 1024))  # no blank line, ever
    assert runaway.overflow and len(runaway._buf) == 0
    for _ in range(40 * 16):  # 40 MiB more in 64 KiB reads: what is kept of it stays bounded
        runaway.feed(b"x" * 65536)
    assert len(runaway._buf) == 0 and len(runaway._big.tail) <= 2 * wire.BIG_TAIL + 65536
    runaway.close()
    assert runaway.usage is None and runaway.final is None  # no final event, no usage


def _big_final(kind: str, echoed: int, crlf: bool, named: bool) -> bytes:
    """A final event of ``echoed`` bytes of instructions (the response object echoes them), with
    the Responses API's key order: ``usage`` after the output and the tools, before ``metadata``."""
    response = {
        "id": "resp_big", "object": "response", "status": kind.rpartition(".")[2],
        "instructions": 'say "usage": {"input_tokens": 1}\n' * (echoed // 34),  # text: never the key
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}],
        "tools": [{"type": "function", "name": "shell", "parameters": {"usage": {"type": "string"}}}],
        "usage": USAGE, "user": None, "metadata": {"note": "x" * 1000, "usage": "1"},  # (echoed: the agent's)
    }  # fmt: skip
    head = f"event: {kind}\n" if named else ""
    event = f"{head}data: {json.dumps({'type': kind, 'sequence_number': 99, 'response': response})}\n\n"
    return (event.replace("\n", "\r\n") if crlf else event).encode()


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(["response.completed", "response.incomplete", "response.failed"]),
    st.integers(min_value=wire.MAX_EVENT + 1, max_value=wire.MAX_EVENT + 3 * wire.BIG_TAIL),
    st.booleans(),
    st.booleans(),
    st.integers(min_value=2_000, max_value=200_000),
)
def test_a_final_event_past_the_kept_size_still_gives_its_usage(kind, echoed, crlf, named, read):
    """Found in the gateway's list of what it does not protect (2026-12-07): a final event over
    4 MiB (an answer echoing megabytes of instructions) lost its usage, and the call counted at the
    estimate. Its head gives its type and the tail its usage, however the reads cut it."""
    data = _stream(n_deltas=3, crlf=crlf)
    data = data[: data.index(b"event: response.completed")] + _big_final(kind, echoed, crlf, named)
    data += b": after\n\n" if not crlf else b": after\r\n\r\n"
    sc = UsageScanner("text/event-stream")
    for i in range(0, len(data), read):
        sc.feed(data[i : i + read])
    sc.close()
    assert sc.overflow  # it was too long to keep whole
    assert sc.usage == usage_of({"usage": USAGE}) and sc.final == kind.rpartition(".")[2]
    assert sc.response_id == "resp_big"
    assert sc._big is None and len(sc._buf) == 0


def test_a_long_event_that_is_not_final_gives_no_usage_and_the_next_one_is_read():
    big_delta = (
        b"event: response.output_text.delta\ndata: "
        + json.dumps(
            {"type": "response.output_text.delta", "delta": "x" * wire.MAX_EVENT, "usage": USAGE}
        ).encode()
    )
    sc = UsageScanner("text/event-stream")
    sc.feed(big_delta)  # past the kept size before its end: read as a long event (head and tail)
    assert sc._big is not None
    sc.feed(b"\n\n")
    assert sc.usage is None and sc.final is None  # a delta's own "usage" key is no answer's usage
    sc.feed(_stream(n_deltas=2))
    sc.close()
    assert sc.usage == usage_of({"usage": USAGE}) and (sc.response_id, sc.final) == ("resp_9", "completed")


def test_a_json_answer_and_an_incomplete_one():
    sc = UsageScanner("application/json")
    sc.feed(json.dumps({"id": "r1", "usage": USAGE}).encode())
    sc.close()
    assert sc.usage["input"] == 900 and sc.response_id == "r1"
    inc = UsageScanner("text/event-stream")
    inc.feed(b'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"id":"r2","usage":'
             + json.dumps(USAGE).encode() + b"}}\n\n")  # fmt: skip
    assert inc.final == "incomplete" and inc.usage["output"] == 30
    assert usage_of({"usage": {"input_tokens": -5, "output_tokens": True}}) == {
        "input": 0, "cached": 0, "output": 0, "reasoning": 0, "total": 0
    }  # fmt: skip
    # a provider that writes its counts as floats (found by a probe: recorded as 0 tokens, $0)
    floats = {"input_tokens": 100000.0, "output_tokens": 40.0, "total_tokens": 100040.0,
              "input_tokens_details": {"cached_tokens": 0.0}, "output_tokens_details": {"reasoning_tokens": 7.0}}  # fmt: skip
    assert usage_of({"usage": floats}) == {
        "input": 100000, "cached": 0, "output": 40, "reasoning": 7, "total": 100040
    }  # fmt: skip
    assert usage_of({"usage": {"input_tokens": 1.5, "output_tokens": float("nan")}})["input"] == 0


def test_request_parameters_plain_and_gzipped():
    body = {
        "model": "gpt-5.5", "reasoning": {"effort": "high", "summary": "auto"}, "temperature": 0.2,
        "max_output_tokens": 1000, "tools": [{"type": "function", "name": "exec_command"}],
        "instructions": "be brief", "stream": True, "input": [{"type": "message"}],
    }  # fmt: skip
    p, stream = request_params(json.dumps(body).encode())
    assert stream and p["model"] == "gpt-5.5" and p["reasoning_effort"] == "high"
    assert p["temperature"] == 0.2 and p["max_output_tokens"] == 1000 and p["n_tools"] == 1
    assert len(p["tools_sha256"]) == 64 and len(p["instructions_sha256"]) == 64
    # key order in the tool list's JSON does not change its hash; a different tool list does
    same = dict(body, tools=[{"name": "exec_command", "type": "function"}])
    assert request_params(json.dumps(same).encode())[0]["tools_sha256"] == p["tools_sha256"]
    other = dict(body, tools=[{"type": "function", "name": "update_goal"}])
    assert request_params(json.dumps(other).encode())[0]["tools_sha256"] != p["tools_sha256"]
    assert request_params(gzip.compress(json.dumps(body).encode()), "gzip")[0] == p
    assert request_params(b"\x00garbage", "gzip")[0] == {
        "unparsed": "body encoding 'gzip' (or over 64 MiB decoded)"
    }
    assert request_params(b"[1, 2]")[0] == {"unparsed": "not a JSON object"}
    # deflate as gzip; an encoding the gateway does not decode is unknown, not guessed
    assert request_params(zlib.compress(json.dumps(body).encode()), "deflate")[0] == p
    assert request_params(json.dumps(body).encode(), "zstd")[0] == {
        "unparsed": "body encoding 'zstd' (or over 64 MiB decoded)"
    }


def test_every_setting_outside_the_named_parameters_is_one_compared_value():
    """Fields the named parameters leave out (``include``, ``store``, ``truncation``, a ``text`` or
    ``reasoning`` key of their own) are kept together as ``other_fields``; the call's content and
    identity (the conversation, the cache key, ids, metadata) are not, so calls of two attempts
    that differ only there read the same."""
    codex = {
        "model": "gpt-5.5", "reasoning": {"effort": "high", "summary": "auto"}, "stream": True,
        "tools": [], "tool_choice": "auto", "parallel_tool_calls": False, "store": False,
        "include": ["reasoning.encrypted_content"], "input": [{"type": "message"}],
        "prompt_cache_key": "conv-1", "client_metadata": {"session": "s1"},
    }  # fmt: skip
    p = request_params(json.dumps(codex).encode())[0]
    assert p["other_fields"] == {"include": ["reasoning.encrypted_content"], "store": False}
    again = dict(codex, input=[], prompt_cache_key="conv-2", client_metadata={"session": "s2"},
                 previous_response_id="resp_9", metadata={"n": 1}, user="u2")  # fmt: skip
    assert request_params(json.dumps(again).encode())[0] == dict(p, n_input_items=0)
    truncating = dict(codex, truncation="auto", text={"verbosity": "low", "format": {"type": "text"}},
                      reasoning={"effort": "high", "generate_summary": "concise"})  # fmt: skip
    t = request_params(json.dumps(truncating).encode())[0]
    assert t["other_fields"] == {
        "include": ["reasoning.encrypted_content"], "store": False, "truncation": "auto",
        "text": {"format": {"type": "text"}}, "reasoning": {"generate_summary": "concise"},
    }  # fmt: skip
    assert t["text_verbosity"] == "low" and t["reasoning_effort"] == "high"
    bare = {"model": "m", "input": "hi", "stream": False}
    assert request_params(json.dumps(bare).encode())[0]["other_fields"] == {}  # recorded: none sent
    assert L.PARAMS["other_fields"] == "other request fields"


def test_a_hostile_clients_parameters_are_bounded_and_its_bombs_stop_at_the_limit():
    """What the agent sends is kept as it was when small and finite, else as its hash and length;
    a compressed body is never decompressed past what the gateway accepts raw."""

    from runner.ops.gateway.wire import MAX_DECODED, MAX_PARAM_CHARS, decode_body, param

    assert param("auto") == "auto" and param({"type": "function", "name": "x"}) == {
        "type": "function",
        "name": "x",
    }
    assert param(0.2) == 0.2 and param(True) is True and param(float("nan")) == "not a finite number"
    assert param(10**400) == "integer of 401 digits"
    long = param("x" * (MAX_PARAM_CHARS + 1))
    assert long.startswith("sha256:") and long.endswith(f"({MAX_PARAM_CHARS + 1} chars)")
    deep = json.loads("[" * 900 + "1" + "]" * 900)
    assert param(deep).startswith("sha256:")  # deep but encodable: its hash
    assert param(json.loads("[" * 900 + "NaN" + "]" * 900)).startswith("not a JSON value")
    body = b'{"model": "m"}' + b" " * (MAX_DECODED + 10)
    for enc, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        assert decode_body(packed, enc) is None  # stopped at the limit, not decompressed whole
        assert decode_body(packed[: len(packed) // 2], enc) is None  # cut short: not a body either
    small = b'{"model": "m", "stream": true}'
    assert decode_body(gzip.compress(small), "gzip") == small == decode_body(zlib.compress(small), "deflate")


def test_the_ledger_reader_is_incremental_and_sums_per_attempt(tmp_path):
    from runner.results.tree import ledger_path

    out = tmp_path / "out"
    path = ledger_path(out)
    path.parent.mkdir(parents=True)

    def row(**kw) -> str:
        base = {"kind": "call", "at": 1000.0, "attempt": "a1", "task": "t", "arm": "plain",
                "stamp": "s1", "outcome": "ok", "status": 200}  # fmt: skip
        return json.dumps({**base, **kw}) + "\n"

    path.write_text(
        row(usage={"input": 10, "cached": 2, "output": 3, "reasoning": 1}, params={"model": "m", "top_p": 1})
        + row(at=1001.0, usage={"input": 5, "cached": 0, "output": 1, "reasoning": 0}, params={"model": "m2"})
        + row(at=1002.0, outcome="refused", refused="budget_exhausted", status=401)
        + "not json\n"
        + '{"kind": "call", "at": 5'  # a torn last line waits
    )
    reader = L.LedgerReader(out)
    led = L.Ledger()
    led.add_rows(reader.read_new())
    u = led.usage("t", "plain", "s1")
    assert (u.calls, u.forwarded, u.input, u.cached, u.output, u.reasoning) == (3, 2, 15, 2, 4, 1)
    assert u.refused == {"budget_exhausted": 1} and u.first_at == 1000.0 and u.first_refused_at == 1002.0
    assert (
        u.param_value("model") == "m | m2" and u.param_value("top_p") == "(not sent) | 1"
    )  # sent on one call of two
    assert reader.skipped == 1
    with path.open("a") as fh:
        fh.write('.0, "attempt": "a2", "task": "t", "arm": "goal", "stamp": "s2", "outcome": "ok"}\n')
    assert led.add_rows(reader.read_new()) == {("t", "goal", "s2")}  # the torn line, now whole
    assert L.reconcile(u, {"inputTokens": 15, "cachedInputTokens": 2, "outputTokens": 4}) == []
    assert L.reconcile(u, {"inputTokens": 12, "cachedInputTokens": 2, "outputTokens": 4}) == [
        "input tokens: receipt 12, ledger 15 (-3)"
    ]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=220, max_value=500),  # the chunk: more than a line, less than the long one
    st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=12),  # where the writer paused
    st.integers(min_value=0, max_value=3),  # where a line longer than a chunk goes
)
def test_the_ledger_is_read_a_chunk_at_a_time_and_loses_no_line_however_it_was_cut(chunk, pauses, long_at):
    """A multi-day run's ledger is read a ``CHUNK`` at a time (never held whole): the lines read
    over any number of looks, while a writer appends in pieces that end anywhere, are every line
    written, once, in order; a line longer than a chunk (not the gateway's) is skipped alone."""
    import tempfile

    from runner.results.tree import ledger_path

    lines = [json.dumps({"kind": "call", "at": 1000.0 + i, "attempt": f"a{i % 3}", "task": "t", "arm": "plain",
                         "stamp": f"s{i % 3}", "outcome": "ok", "status": 200,
                         "usage": {"input": i, "cached": 0, "output": 1, "reasoning": 0}}) + "\n"
             for i in range(8)]  # fmt: skip
    assert max(map(len, lines)) < 220
    lines.insert(long_at, json.dumps({"kind": "call", "pad": "x" * 600}) + "\n")
    data = "".join(lines).encode()
    old = L.CHUNK
    L.CHUNK = chunk
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            path = ledger_path(out)
            path.parent.mkdir(parents=True)
            reader = L.LedgerReader(out)
            got, pos = [], 0
            with path.open("wb") as fh:
                for n in [*pauses, len(data)]:
                    fh.write(data[pos : pos + n])
                    fh.flush()
                    pos += n
                    got += reader.read_new()
                    if pos >= len(data):
                        break
            got += reader.read_new()
    finally:
        L.CHUNK = old
    assert [r["at"] for r in got] == [1000.0 + i for i in range(8)]
    assert reader.skipped == 1 and not reader.restarted


def test_the_scripted_model_on_the_host_finds_the_task_from_the_request(tmp_path):
    """host.py: one server for every task; the plan is the task whose instruction codex sent."""
    sock = tmp_path / "s.sock"
    log = tmp_path / "requests.jsonl"
    env = dict(os.environ, SCRIPTED_SOCKET=str(sock), SCRIPTED_LOG=str(log),
               SCRIPTED_TASKS=str(REPO / "runner" / "demo" / "tasks"))  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-S", str(REPO / "agents" / "scripted_model" / "host.py")], env=env
    )
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        from gateway_support import UnixConn

        def ask(task: str, rid: str) -> dict:
            text = (REPO / "runner" / "demo" / "tasks" / task / "instruction.md").read_text()
            body = {"model": "scripted/solve", "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Task:\n" + text}]}]}  # fmt: skip
            c = UnixConn(sock)
            c.request("POST", "/v1/responses", json.dumps(body), {"x-client-request-id": rid})
            r = c.getresponse()
            sse = r.read().decode()
            c.close()
            items = [json.loads(x[6:]) for x in sse.splitlines() if x.startswith("data: ")]
            return next(i["item"] for i in items if i["type"] == "response.output_item.done")

        for task in ("calc-partial", "two-stage"):
            plan = json.loads(
                (REPO / "runner" / "demo" / "tasks" / task / "environment" / "plan.json").read_text()
            )
            item = ask(task, f"a-{task}.1")
            assert json.loads(item["arguments"])["cmd"] == plan["steps"][0], task
        rows = [json.loads(x) for x in log.read_text().splitlines()]
        assert [(r["task"], r["attempt"], r["request_id"]) for r in rows] == [
            ("calc-partial", "a-calc-partial", "a-calc-partial.1"), ("two-stage", "a-two-stage", "a-two-stage.1")
        ]  # fmt: skip
        assert all(r["usage"]["input_tokens"] > 0 for r in rows)
        c = UnixConn(sock)
        c.request("GET", "/__scripted/stats")
        stats = json.loads(c.getresponse().read())
        assert stats == {"requests": 2, "by_attempt": {"a-calc-partial": 1, "a-two-stage": 1}}
    finally:
        proc.terminate()  # the server this test started, by its handle
        proc.wait(10)


READ_SIZES = """
import asyncio, socket, sys
from runner.ops.gateway import server
if sys.argv[1] == "small":
    server.small_reads()
sizes = []

async def main():
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    class Reader(asyncio.Protocol):
        def data_received(self, data):
            sizes.append(len(data))

        def connection_lost(self, exc):
            done.set_result(None)

    a, b = socket.socketpair()
    a.sendall(b"x" * 120_000)  # in the kernel's buffer before the loop reads any of it
    a.close()
    await loop.connect_accepted_socket(Reader, b)
    await done

asyncio.run(main())
print(max(sizes), sum(sizes))
"""


def test_the_gateways_reads_are_bounded_and_lose_nothing():
    """asyncio reads a socket 256 KiB at a time, a buffer mapped and unmapped per SSE chunk: the
    gateway's process reads at most ``RECV_BYTES`` (docs/gateway.md), every byte still arriving."""
    from runner.ops.gateway.server import RECV_BYTES

    def run(how: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", READ_SIZES, how], capture_output=True, text=True,
                             cwd=REPO, check=True)  # fmt: skip
        biggest, total = out.stdout.split()
        return int(biggest), int(total)

    assert run("default") == (120_000, 120_000)  # asyncio's own: all that is buffered, at once
    biggest, total = run("small")
    assert total == 120_000 and biggest <= RECV_BYTES


def test_the_key_is_masked_wherever_an_answer_carries_it_even_split_across_reads():
    from runner.ops.gateway.wire import KeyMask

    key = "sk-real-" + "k" * 40
    answer = b'{"echo": "Bearer ' + key.encode() + b'", "again": "' + key.encode() + b'"}'
    masked = answer.replace(key.encode(), b"*" * len(key))
    for cut in range(1, len(answer)):
        m = KeyMask(key)
        out = m(answer[:cut]) + m(answer[cut:]) + m.flush()
        assert out == masked and m.hits == 2, cut  # same length: a Content-Length holds
    # split across three reads and more (the middle read once went out unmasked: 30 of 40 bytes)
    rnd = random.Random(7)
    for _ in range(300):
        cuts = sorted(rnd.sample(range(1, len(answer)), rnd.randint(2, 12)))
        m = KeyMask(key)
        parts = [m(answer[a:b]) for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)]
        assert b"".join(parts) + m.flush() == masked and m.hits == 2, cuts
        assert all(key.encode()[:8] not in p for p in parts), cuts  # no part of it ever went out
    # an SSE stream's reads, each ending an event, pass on whole and at once
    m = KeyMask(key)
    for event in (b'data: {"delta": "s"}\n\n', b'data: {"delta": "sk-"}\n\n'):
        assert m(event) == event
    assert m(b"half an event: sk-re") == b"half an event: " and m(b"ady\n\n") == b"sk-ready\n\n"
    m = KeyMask(key)
    assert m.text(f"Bearer {key}") == "Bearer " + "*" * len(key) and m.hits == 1
    assert KeyMask(key)(b"no key here") == b"no key here"
    # a key too short to be a secret (a local server's "x"): never masked, the answer unchanged
    delta = b'{"type":"response.output_text.delta","delta":"next max"}'
    short = KeyMask("x")
    assert short(delta) == delta and short.text("x") == "x" and short.hits == 0
