"""The model gateway itself, as a real process (``marathon gateway``, started the way the runner
starts it) between real HTTP clients on the attempts' unix sockets and a real HTTP provider on the
host's loopback (tests/gateway/gateway_support.py). No Docker: the sandbox side is the socket.

What it must do, each one a test: forward a stream as it arrives (never buffer it whole); cancel the
upstream call when the client goes away; put the real key upstream only (never in what it writes);
record every call on the ledger with the response's own usage; refuse (401, on the ledger, with the
attempt) a missing token, another attempt's token, an ended attempt's, a killed attempt's and one
past its model budget; keep an attempt's budget start across its own restart (which is recorded as
an outage); serve remote sandboxes over TLS with the operator's certificate.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from gateway_support import (
    BIG_EVENTS,
    USAGE,
    Provider,
    UnixConn,
    code_of,
    dechunk,
    post,
    raw_request,
    send_call,
    sse,
    wait_for,
)  # fmt: skip
from waiting import SETTLE

from runner.ops.gateway import attempts, process
from runner.results import ledger as L
from runner.results.tree import gateway_dir, ledger_path

KEY_VAR = "MARATHON_GW_TEST_KEY"


@pytest.fixture
def key(monkeypatch) -> str:
    value = "sk-gwtest-" + os.urandom(12).hex()
    monkeypatch.setenv(KEY_VAR, value)
    return value


@pytest.fixture
def provider():
    with Provider() as p:
        yield p


@pytest.fixture
def gateway(tmp_path, key, provider):
    out = tmp_path / "out"
    out.mkdir()
    s = process.GatewaySettings(upstream=provider.url, key_var=KEY_VAR)
    st = process.start_detached(out, s)
    try:
        yield out, s, st
    finally:
        for host in (None,):
            try:
                process.stop(out, host)
            except Exception:  # noqa: BLE001 - a test that killed it already
                pass
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def issue(out: Path, arm: str = "plain", budget: float | None = None) -> attempts.Issued:
    iss = attempts.issue(out, "t1", arm, f"2026-01-01__00-00-{len(list(attempts.list_records(out))):02d}",
                         budget_sec=budget)  # fmt: skip
    wait_for(lambda: attempts.socket_path(out, iss.record.id).exists(), SETTLE, "the attempt's socket")
    return iss


def calls(out: Path) -> list[L.Call]:
    return L.read_ledger(out, keep_calls=True).calls


def test_a_call_is_forwarded_with_the_real_key_and_recorded_with_its_usage(gateway, provider, key):
    out, _s, _st = gateway
    a = issue(out)
    status, body = post(attempts.socket_path(out, a.record.id), a.token)
    assert status == 200 and b"response.completed" in body
    (seen,) = provider.seen
    assert seen["auth"] == f"Bearer {key}"  # the key upstream, the token replaced
    assert seen["request_id"] == f"{a.record.id}.1" and seen["accept_encoding"] == "identity"
    (c,) = wait_for(lambda: calls(out), SETTLE, "the ledger line")
    assert (c.outcome, c.status, c.attempt, c.task, c.arm) == (L.OK, 200, a.record.id, "t1", "plain")
    assert c.usage == (1234, 200, 56, 7) and c.response_id == "resp_1"
    assert c.param("model") == "quick" and c.first_byte_ms <= c.total_ms
    # a non-streamed JSON answer is read for its usage too
    assert post(attempts.socket_path(out, a.record.id), a.token, model="json")[0] == 200
    js = wait_for(lambda: [c for c in calls(out) if c.param("model") == "json"], SETTLE, "the JSON call")
    assert js[0].usage == (USAGE["input_tokens"], 200, 56, 7)
    # a provider that echoes the request's headers: the key goes back to the agent masked
    status, body = post(attempts.socket_path(out, a.record.id), a.token, model="echo")
    assert status == 200 and key.encode() not in body and b"Bearer " + b"*" * len(key) in body
    c = UnixConn(attempts.socket_path(out, a.record.id))
    c.request(
        "POST",
        "/v1/responses",
        json.dumps({"model": "echo", "input": []}),
        {"Authorization": f"Bearer {a.token}"},
    )
    r = c.getresponse()
    assert r.getheader("X-Echo-Authorization") == "Bearer " + "*" * len(key) and key.encode() not in r.read()
    assert r.reason == "OK for Bearer " + "*" * len(key)  # the status line and the header names too
    assert r.getheader("X-For-" + "*" * len(key)) == "1" and all(key not in h for h in r.headers)
    c.close()
    wait_for(
        lambda: len([c for c in calls(out) if c.param("model") == "echo"]) == 2 or None,
        SETTLE,
        "the echo calls",
    )
    rows = [json.loads(line) for line in ledger_path(out).read_bytes().splitlines()]
    # each: twice in the body (its id, the echoed headers), a header's value and name, the status
    # line, and the id the ledger keeps
    assert sorted(r["key_masked"] for r in rows if "key_masked" in r) == [6, 6]
    # the key is in none of the gateway's files (ledger, log, state, attempts)
    for p in gateway_dir(out).rglob("*"):
        if p.is_file():
            assert key.encode() not in p.read_bytes(), p


def test_the_providers_error_answers_reach_the_client_whole_and_the_ledger_by_status(gateway, provider):
    """codex retries a 429 unseen (runbook pitfall 1): the client must get the provider's answer as
    it was (status, Retry-After, body), and the ledger must keep it per attempt by status, which is
    what the provider-errors alarm counts (tests/core/test_provider_errors.py reads such rows)."""
    out, _s, _st = gateway
    a, b = issue(out, "plain"), issue(out, "goal")
    sock = attempts.socket_path(out, a.record.id)
    for _ in range(3):
        c = UnixConn(sock)
        c.request("POST", "/v1/responses", json.dumps({"model": "limited", "stream": True}),
                  {"Authorization": f"Bearer {a.token}", "Content-Type": "application/json"})  # fmt: skip
        r = c.getresponse()
        assert (r.status, r.getheader("Retry-After"), code_of(r.read())) == (429, "1", "rate_limit_exceeded")
        c.close()
    assert post(sock, a.token, model="bad")[0] == 400
    assert post(sock, a.token)[0] == 200  # the retry that got through
    assert post(attempts.socket_path(out, b.record.id), b.token)[0] == 200
    rows = wait_for(lambda: len(calls(out)) == 6 and calls(out), SETTLE, "six ledger lines")
    assert [(c.outcome, c.status) for c in rows if c.attempt == a.record.id] == [
        (L.UPSTREAM_ERROR, 429)] * 3 + [(L.UPSTREAM_ERROR, 400), (L.OK, 200)]  # fmt: skip
    led = L.read_ledger(out)
    ua = led.usage("t1", "plain", a.record.stamp)
    ub = led.usage("t1", "goal", b.record.stamp)
    assert (ua.forwarded, ua.upstream_errors, ua.unmetered, ua.with_usage) == (5, {"429": 3, "400": 1}, 0, 1)
    assert (ub.forwarded, ub.upstream_errors) == (1, {})
    # the provider was down for the attempt from its first 429 to the answered call (the 400 between
    # is the request's fault, and neither opens nor closes the outage)
    by_at = sorted((c for c in rows if c.attempt == a.record.id), key=lambda c: c.at)
    assert ua.provider_down_sec == by_at[-1].at - by_at[0].at > 0 and ub.provider_down_sec == 0


def test_a_stream_passes_as_it_arrives_never_buffered_whole(gateway, provider):
    out, _s, _st = gateway
    a = issue(out)
    with send_call(attempts.socket_path(out, a.record.id), a.token, "stream-wait", 10) as s:
        got = b""
        while b"response.created" not in got:
            got += s.recv(65536)
        # the first event reached the client while the provider still holds the rest back
        assert not provider.go.is_set() and b"response.completed" not in got
        provider.go.set()
        # to the end of the response (the gateway closes): a client that let go after the last event
        # but before the response's end was, rightly, a client that closed early on the ledger
        while chunk := s.recv(65536):
            got += chunk
    assert b"response.completed" in got
    (c,) = wait_for(lambda: calls(out), SETTLE, "the ledger line")
    assert c.outcome == L.OK and c.usage is not None and c.first_byte_ms < c.total_ms


def test_a_client_that_goes_away_cancels_the_upstream_call(gateway, provider):
    out, _s, _st = gateway
    a = issue(out)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(attempts.socket_path(out, a.record.id)))
    s.sendall(raw_request(a.token, "stream-forever"))
    got = b""
    while b"keepalive" not in got:
        got += s.recv(65536)
    s.close()  # the agent's codex went away mid-stream
    assert provider.disconnected.wait(10), "the gateway kept the upstream call running for nobody"
    (c,) = wait_for(lambda: calls(out), SETTLE, "the ledger line")
    assert c.outcome == L.CLIENT_CLOSED and c.usage is None


def test_the_providers_connection_is_kept_for_the_next_call(gateway, provider):
    out, _s, _st = gateway
    a = issue(out)
    for _ in range(3):
        status, body = post(attempts.socket_path(out, a.record.id), a.token, model="chunked")
        assert status == 200 and body.endswith(
            sse("response.completed", {"response": {"id": "resp_1", "usage": USAGE}})
        )
    assert len(provider.ports) == 3 and len(set(provider.ports)) == 1  # one connection carried all three
    got = wait_for(
        lambda: [c for c in calls(out) if c.outcome == L.OK] if len(calls(out)) == 3 else None,
        SETTLE,
        "3 lines",
    )
    assert [c.usage for c in got] == [(1234, 200, 56, 7)] * 3


def test_a_client_slower_than_the_provider_holds_the_provider_and_loses_nothing(gateway, provider):
    out, _s, _st = gateway
    a = issue(out)
    with send_call(attempts.socket_path(out, a.record.id), a.token, "big", 20) as s:
        # the client reads nothing: the gateway's writes wait for it (aiohttp's drain), so it stops
        # reading the provider, whose writes then block once the sockets' buffers are full
        last = -1
        while last != provider.sent:
            last = provider.sent
            time.sleep(0.5)
        assert provider.sent < BIG_EVENTS * 64 * 1024 // 2, provider.sent
        got = bytearray()
        while chunk := s.recv(1 << 20):
            got += chunk
    assert provider.sent > BIG_EVENTS * 64 * 1024  # read on: the whole answer went through
    head, _, framed = bytes(got).partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body = dechunk(framed)
    assert body.count(b": xxx") == BIG_EVENTS and b"response.completed" in body
    (c,) = wait_for(lambda: calls(out), SETTLE, "the ledger line")
    assert c.outcome == L.OK and c.usage == (1234, 200, 56, 7)


def test_tokens_are_refused_without_a_token_from_another_attempt_ended_killed_or_past_budget(
    gateway, provider
):
    out, _s, _st = gateway
    a, b = issue(out, "plain"), issue(out, "goal")
    sock_a, sock_b = attempts.socket_path(out, a.record.id), attempts.socket_path(out, b.record.id)
    assert code_of(post(sock_a, None)[1]) == L.NO_TOKEN
    assert code_of(post(sock_a, "not-a-token")[1]) == L.NO_TOKEN
    status, body = post(sock_b, a.token)  # a token carried into another attempt's sandbox
    assert (status, code_of(body)) == (401, L.OTHER_ATTEMPT)
    assert post(sock_a, a.token)[0] == 200 and post(sock_b, b.token)[0] == 200
    # a replayed after its attempt ended: its socket stays bound a while, to refuse it on the record
    attempts.end(out, a.record.id, "ended")
    assert (post(sock_a, a.token)[0], code_of(post(sock_a, a.token)[1])) == (401, L.ENDED)
    # b's harbor process was killed: its token is refused at once, before the runner notices
    doomed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    attempts.set_harbor(out, b.record.id, doomed.pid)
    assert post(sock_b, b.token)[0] == 200
    doomed.kill()  # the process this test started, by its handle
    doomed.wait()
    assert code_of(post(sock_b, b.token)[1]) == L.GONE
    # c's budget: 1 s from its first forwarded call
    c = issue(out, "heartbeat", budget=1.0)
    sock_c = attempts.socket_path(out, c.record.id)
    assert post(sock_c, c.token)[0] == 200
    time.sleep(1.2)
    assert code_of(post(sock_c, c.token)[1]) == L.BUDGET
    forwarded = len(provider.seen)
    led = wait_for(
        lambda: L.read_ledger(out, keep_calls=True) if len(calls(out)) >= 11 else None, SETTLE, "every line"
    )
    refused = [x for x in led.calls if x.outcome == L.REFUSED]
    assert [x.refused for x in refused] == [
        L.NO_TOKEN, L.NO_TOKEN, L.OTHER_ATTEMPT, L.ENDED, L.ENDED, L.GONE, L.BUDGET
    ]  # fmt: skip
    assert all(x.status == 401 and x.usage is None for x in refused)
    # each refusal is on the ledger with the attempt whose socket it came in on
    assert [x.attempt for x in refused] == [a.record.id, a.record.id, b.record.id, a.record.id,
                                            a.record.id, b.record.id, c.record.id]  # fmt: skip
    assert forwarded == 4  # nothing refused went upstream
    assert led.usage("t1", "heartbeat", c.record.stamp).refused == {L.BUDGET: 1}


def issued_by_a_process_that_died(out: Path, arm: str = "plain") -> tuple[str, str]:
    """(attempt id, token) of an attempt issued by a child that exits before any harbor is
    recorded: the runner killed between issuing an attempt and releasing its held harbor."""
    code = ("import sys; from pathlib import Path; from runner.ops.gateway import attempts as a; "
            f"i = a.issue(Path(sys.argv[1]), 't1', {arm!r}, 'S', budget_sec=None); "
            "print(i.record.id, i.token)")  # fmt: skip
    got = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2], timeout=60)  # fmt: skip
    attempt_id, token = got.stdout.split()
    return attempt_id, token


def test_an_attempt_whose_issuer_died_before_its_harbor_was_recorded_is_gone(gateway, provider):
    """Seen in CI: a runner killed right after issuing an attempt (its harbor still held at the gate,
    which then exits unrun) left the record live for good, and health called for the gateway of a
    finished run. Such a record is gone, and its token refused, as a killed harbor's is."""
    out, _s, _st = gateway
    orphan, token = issued_by_a_process_that_died(out)
    rec = attempts.read_record(out, orphan)
    assert rec is not None and rec.state == attempts.LIVE and rec.harbor is None and rec.gone()
    mine = issue(out)  # issued by this process, which runs, its harbor not started yet
    assert not attempts.read_record(out, mine.record.id).gone()
    assert post(attempts.socket_path(out, mine.record.id), mine.token)[0] == 200
    sock = attempts.socket_path(out, orphan)  # bound as any live record's is, and refusing
    wait_for(sock.exists, SETTLE, "the orphan attempt's socket")
    assert code_of(post(sock, token)[1]) == L.GONE


def test_the_relay_marks_the_budgets_first_request_as_the_gateway_counts_it(gateway, provider):
    """The in-sandbox relay (``agents.relay``) on loopback in front of an attempt's socket, as the
    driver runs it: armed at the budget's start, the next request's first bytes call it back once
    (on a connection opened before it was armed, as a kept-alive one of codex's may be), just before
    the gateway takes that call as the attempt's first (the wire budget's start); the harness's
    budget starts there (``Conversation.anchor_budget``). A later request does not call it again."""
    import asyncio

    from agents.relay import Relay

    out, _s, _st = gateway
    a = issue(out, budget=60.0)
    sock = attempts.socket_path(out, a.record.id)

    async def scenario() -> tuple[list[float], list[bytes]]:
        relay = Relay("127.0.0.1", 0, str(sock))
        await relay.start()
        assert relay.server is not None
        port = relay.server.sockets[0].getsockname()[1]
        marks: list[float] = []
        bodies: list[bytes] = []
        try:
            early_r, early_w = await asyncio.open_connection("127.0.0.1", port)  # before the budget
            await asyncio.sleep(0.2)
            assert marks == []
            relay.on_first = lambda _mono, epoch: marks.append(epoch)
            for r, w in ((early_r, early_w), await asyncio.open_connection("127.0.0.1", port)):
                w.write(raw_request(a.token, "quick", close=True))
                await w.drain()
                bodies.append(await r.read())  # to its end: the gateway closes after the response
                w.close()
        finally:
            await relay.close()
        return marks, bodies

    marks, bodies = asyncio.run(scenario())
    assert [b.split(b"\r\n", 1)[0] for b in bodies] == [b"HTTP/1.1 200 OK"] * 2, bodies
    (mark,) = marks
    first, second = wait_for(lambda: c if len(c := calls(out)) >= 2 else None, SETTLE, "both calls")
    assert (first.outcome, second.outcome, first.attempt) == (L.OK, L.OK, a.record.id)
    # the harness's budget start is the wire's, to within the relay's hop: never after it
    assert mark <= first.at < mark + 1.0, (mark, first.at)
    assert first.model_time_sec == 0 and second.at > first.at


def test_a_killed_gateway_is_restarted_with_the_outage_recorded_and_the_budget_kept(gateway, provider):
    out, s, st = gateway
    # long enough for the kill and the restart on a loaded machine (two Python processes importing
    # aiohttp: 0.6 s idle, several seconds at a load of 17), which the budget's clock includes
    budget = 15.0
    a = issue(out, budget=budget)
    sock = attempts.socket_path(out, a.record.id)
    assert post(sock, a.token)[0] == 200
    first = wait_for(lambda: calls(out), SETTLE, "the first call")[0].at
    os.kill(st.pid, signal.SIGKILL)  # the gateway this test started (its registered identity)
    wait_for(lambda: process.running(out) is None, SETTLE, "the gateway to be gone")
    new, started = process.ensure(out, s, by="test")
    assert started and new.pid != st.pid
    (o,) = L.read_outages(out)
    assert ("t1", "plain", a.record.stamp) in o.attempts and o.by == "test"
    wait_for(lambda: sock.exists(), SETTLE, "the socket bound again in the same dir")
    assert post(sock, a.token)[0] == 200  # the restarted gateway serves the attempt ...
    # (its ledger line is written after the answer, by the ledger's thread: waited for)
    _, later = wait_for(
        lambda: c if len(c := [c for c in calls(out) if c.outcome == L.OK]) == 2 else None,
        SETTLE,
        "the second call",
    )
    assert abs(later.model_time_sec - (later.at - first)) < 0.01  # ... on the budget from its first call
    time.sleep(max(0.0, first + budget + 0.2 - time.time()))
    assert code_of(post(sock, a.token)[1]) == L.BUDGET


def test_a_ledger_it_cannot_write_stops_the_gateway_and_the_restart_keeps_the_ledger_whole(gateway, provider):
    """A full disk under the ledger must not leave a gateway serving calls no ledger holds (they
    would escape the caps, the budgets and the bill). The failure is a real one: a file-size limit
    set on the running gateway (``prlimit``), so its next row is cut short and then refused
    (EFBIG, as ENOSPC on a full disk). It exits saying why; the restart records the outage (the
    attempt live at it is voided by ``gateway_failed``), ends the torn line, and serves again."""
    import resource

    out, s, st = gateway
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    for _ in range(6):
        assert post(sock, a.token)[0] == 200
    wait_for(lambda: len(calls(out)) == 6, SETTLE, "six ledger lines")
    ledger = ledger_path(out)
    size = ledger.stat().st_size
    others = [p.stat().st_size for p in gateway_dir(out).rglob("*") if p.is_file() and p != ledger]
    assert size > max(others) + 100  # only the ledger's next row crosses the limit
    resource.prlimit(st.pid, resource.RLIMIT_FSIZE, (size + 40, resource.RLIM_INFINITY))
    assert post(sock, a.token)[0] == 200  # answered; its row is what cannot be written
    wait_for(lambda: process.running(out) is None, SETTLE, "the gateway to exit")
    log = (gateway_dir(out) / process.LOG_FILE).read_text()
    assert "gateway: the ledger cannot be written (File too large): exiting" in log
    assert ledger.stat().st_size == size + 40  # the torn row: 40 bytes of it, no newline
    new, started = process.ensure(out, s, by="test")
    assert started and new.pid != st.pid
    (o,) = L.read_outages(out)
    assert ("t1", "plain", a.record.stamp) in o.attempts
    wait_for(lambda: sock.exists(), SETTLE, "the socket bound again")
    assert post(sock, a.token)[0] == 200
    wait_for(lambda: len(calls(out)) == 7, SETTLE, "the new gateway's call on the ledger")
    lines = ledger.read_bytes().split(b"\n")
    assert len(lines[7]) == 40 and json.loads(lines[8])["kind"] == L.GATEWAY_START  # the torn row alone
    starts = [g["gateway"] for g in L.read_ledger(out).gateways if g["kind"] == L.GATEWAY_START]
    assert starts[-1] == new.instance


def test_a_cluster_job_restarts_its_hosts_killed_gateway_never_a_stopped_one(tmp_path, key, provider):
    """``runner.schedule.fleet.job.keep_gateway``, the tender each cluster job runs beside its harbor
    on its host (``restart_if_failed``, the runner's rule on one host too): the host's gateway
    killed mid-attempt is restarted at once, the outage recorded with the job's attempt (so the
    attempt is voided and rerun); stopped on purpose (``marathon kill``, the run's end), it stays
    stopped; the tender ends with its harbor."""
    import threading

    from runner.schedule.fleet.job import keep_gateway

    out, host = tmp_path / "out", "node-a"
    out.mkdir()
    s = process.GatewaySettings(upstream=provider.url, key_var=KEY_VAR, host=host)
    st = process.start_detached(out, s)
    harbor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the job's harbor
    ended = threading.Event()
    try:
        a = attempts.issue(out, "t1", "plain", "2026-01-01__00-00-00", budget_sec=None, host=host)
        wait_for(lambda: attempts.socket_path(out, a.record.id).exists(), SETTLE, "the attempt's socket")
        attempts.set_harbor(out, a.record.id, harbor.pid)
        keeper = threading.Thread(target=keep_gateway, args=(out, s, a.record.id, harbor, ended, 0.1))
        keeper.start()
        os.kill(st.pid, signal.SIGKILL)  # the gateway this test started (its registered identity)
        new = wait_for(
            lambda: (n := process.running(out, host)) and n.pid != st.pid and n, 30, "a new gateway"
        )
        # the outage is written once the new gateway serves, a moment after it answers as running
        (o,) = wait_for(lambda: L.read_outages(out), SETTLE, "the outage")
        assert o.by == f"job of attempt {a.record.id}" and ("t1", "plain", a.record.stamp) in o.attempts
        wait_for(lambda: attempts.socket_path(out, a.record.id).exists(), SETTLE, "the socket bound again")
        assert post(attempts.socket_path(out, a.record.id), a.token)[0] == 200  # serving the attempt again
        # stopped on purpose (as `marathon kill` stops it, by its registered identity): left stopped
        assert process.stop(out, host).startswith("stopped")
        time.sleep(1.0)  # ten of the tender's looks
        assert process.running(out, host) is None and process.read_state(out, host).pid == new.pid
        assert len(L.read_outages(out)) == 1
        assert keeper.is_alive()
        harbor.kill()  # the job's harbor ends (ours, by its handle): so does the tender
        harbor.wait()
        keeper.join(10)
        assert not keeper.is_alive()
    finally:
        ended.set()
        if harbor.poll() is None:
            harbor.kill()
            harbor.wait()
        with contextlib.suppress(Exception):
            process.stop(out, host)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def test_a_gateway_the_kill_ends_with_sigkill_counts_as_stopped_on_purpose(tmp_path, key, provider):
    """``marathon kill`` (``runner.ops.kill``) marks each registered gateway of its plan as stopping
    before any signal: a gateway that cannot act on SIGTERM within the grace (here: held by SIGSTOP,
    so it never writes its own stop line) is ended by SIGKILL and still left stopped by the tender
    (``restart_if_failed``); one killed by anybody else is restarted (the test above)."""
    from runner.ops.kill import act_kill, plan_kill

    out, host = tmp_path / "out", "node-b"
    out.mkdir()
    s = process.GatewaySettings(upstream=provider.url, key_var=KEY_VAR, host=host)
    st = process.start_detached(out, s)
    try:
        plan = plan_kill(out, node=host, grace_sec=0.5)
        (t,) = [t for t in plan.stop.targets if t.pid == st.pid]
        assert t.role == process.ROLE_GATEWAY
        os.kill(st.pid, signal.SIGSTOP)  # the gateway this test started: it cannot act on SIGTERM now
        report = act_kill(plan)
        assert [x.signal for x in report.stop.signalled if x.pid == st.pid] == ["SIGTERM", "SIGKILL"]
        wait_for(lambda: process.running(out, host) is None, SETTLE, "the gateway gone")
        stops = [g for g in L.read_ledger(out).gateways if g.get("kind") == L.GATEWAY_STOP]
        assert stops == []  # it wrote no stop line of its own
        assert process.restart_if_failed(out, s, by="test") is None
        assert process.running(out, host) is None and L.read_outages(out) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(st.pid, signal.SIGCONT)
        with contextlib.suppress(Exception):
            process.stop(out, host)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def _cert(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "gw.crt", tmp / "gw.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _tls_gateway(tmp_path: Path, provider) -> tuple[Path, process.GatewayState, Path]:
    """A gateway serving the TLS route on loopback with a fresh certificate: (out, its state, the cert)."""
    out = tmp_path / "out"
    out.mkdir()
    cert, tls_key = _cert(tmp_path)
    s = process.GatewaySettings(upstream=provider.url, key_var=KEY_VAR, tls_listen="127.0.0.1:0",
                                tls_cert=str(cert), tls_key=str(tls_key))  # fmt: skip
    return out, process.start_detached(out, s), cert


def _through_relay(tls: tuple[str, int, str | None], token: str) -> tuple[list[float], bytes, dict]:
    """One call through an ``agents.relay.Relay`` to the gateway's TLS address: the budget marks it
    made, the answer's status line, its stats."""
    import asyncio

    from agents.relay import Relay

    async def scenario() -> tuple[list[float], bytes, dict]:
        relay = Relay("127.0.0.1", 0, tls=tls)
        await relay.start()
        assert relay.server is not None
        marks: list[float] = []
        relay.on_first = lambda _mono, epoch: marks.append(epoch)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", relay.server.sockets[0].getsockname()[1])
            w.write(raw_request(token, "quick", close=True))
            await w.drain()
            answer = await r.read()  # to its end: the gateway (or the relay's refusal) closes
            w.close()
        finally:
            await relay.close()
        return marks, answer.split(b"\r\n", 1)[0], dict(relay.stats)

    return asyncio.run(scenario())


def test_remote_sandboxes_reach_it_over_tls_by_token(tmp_path, key, provider):
    out, st, cert = _tls_gateway(tmp_path, provider)
    try:
        a = attempts.issue(out, "t1", "plain", "2026-01-01__00-00-00", budget_sec=None)
        url = f"https://127.0.0.1:{st.tcp_port}/v1/responses"
        ctx = ssl.create_default_context(cafile=str(cert))

        def call(token: str) -> tuple[int, bytes]:
            req = urllib.request.Request(url, data=json.dumps({"model": "quick", "stream": True}).encode(),
                                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        wait_for(lambda: process.running(out) is not None, SETTLE, "the gateway")
        status, body = call(a.token)
        assert status == 200 and b"response.completed" in body
        # the in-sandbox relay as this route's TLS client (agents.relay): codex speaks plain HTTP to it
        # on the sandbox's loopback; it trusts the uploaded CA, checks the gateway's name, and marks the
        # budget's first request as on the socket route
        b = attempts.issue(out, "t1", "goal", "2026-01-01__00-00-01", budget_sec=60.0)
        marks, head, stats = _through_relay(("127.0.0.1", st.tcp_port, str(cert)), b.token)
        assert head == b"HTTP/1.1 200 OK" and stats["unreachable"] == 0
        (mark,) = marks
        (first,) = wait_for(
            lambda: [c for c in calls(out) if c.attempt == b.record.id], SETTLE, "the relayed call"
        )
        assert first.outcome == L.OK and mark <= first.at < mark + 1.0, (mark, first.at)
        # a relay that does not trust the gateway's certificate (the system's CAs only) gets nowhere:
        # codex is answered 502 naming the gateway, and the relay counts it for the receipt
        marks, head, stats = _through_relay(("127.0.0.1", st.tcp_port, None), b.token)
        assert head == b"HTTP/1.1 502 Bad Gateway" and stats["unreachable"] == 1
        assert code_of(call("nobody's token")[1]) == L.NO_TOKEN
        attempts.end(out, a.record.id, "ended")
        time.sleep(0.5)  # the gateway re-reads the record on each call; this only lets the write land
        assert code_of(call(a.token)[1]) == L.ENDED
        # plain HTTP on the TLS port gets nowhere
        with pytest.raises(Exception):  # noqa: B017 - any failure: a reset, a bad status line
            urllib.request.urlopen(url.replace("https", "http"), timeout=5)
    finally:
        process.stop(out)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def test_the_tls_route_holds_each_attempt_to_its_share_of_connections(tmp_path, key, provider):
    """The TLS route (one listener for every remote sandbox) was not capped per attempt: an agent
    could open connections on it without end, as one did on its socket before that was capped, and
    take the gateway's descriptors from every attempt. Now connections no call has named are held
    to ``MAX_UNNAMED_PER_PEER`` from one address (a new one closes the oldest, its TLS handshake not
    even begun; ``test_conns`` has several addresses and the cap on all of them), a call names
    its connection for its attempt, and an attempt past ``MAX_CONNECTIONS`` named ones is refused
    ``too_many_connections`` on the ledger and its connection closed; other attempts are served."""
    import http.client

    from runner.ops.gateway.conns import MAX_CONNECTIONS, MAX_UNNAMED_PER_PEER, UNNAMED_SEC

    out, st, cert = _tls_gateway(tmp_path, provider)
    ctx = ssl.create_default_context(cafile=str(cert))
    body = json.dumps({"model": "quick", "stream": True})
    held: list = []
    try:
        a = attempts.issue(out, "t1", "plain", "2026-01-01__00-00-00", budget_sec=None)
        b = attempts.issue(out, "t1", "goal", "2026-01-01__00-00-01", budget_sec=None)
        wait_for(lambda: process.running(out) is not None, SETTLE, "the gateway")

        def call(conn: http.client.HTTPSConnection, token: str) -> tuple[int, bytes, bool]:
            conn.request("POST", "/v1/responses", body, {"Authorization": f"Bearer {token}"})
            r = conn.getresponse()
            return r.status, r.read(), r.will_close

        def fresh(token: str) -> tuple[int, bytes, bool]:
            conn = http.client.HTTPSConnection("127.0.0.1", st.tcp_port, context=ctx, timeout=SETTLE)
            held.append(conn)
            return call(conn, token)

        # a flood of connections that never say a word: the oldest go, the listener stays open to all
        flood = [socket.create_connection(("127.0.0.1", st.tcp_port), timeout=SETTLE)
                 for _ in range(MAX_UNNAMED_PER_PEER + 16)]  # fmt: skip
        held += flood
        for sock in flood[:16]:  # closed by the gateway (a reset, or the end of the stream) at once:
            # well before any timeout would (the route's own for an unnamed connection, or asyncio's
            # handshake timeout, a minute, which closed the whole flood together before the cap)
            sock.settimeout(UNNAMED_SEC / 2)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
        assert select.select(flood[16:], [], [], 0)[0] == []  # the newer ones still open
        assert fresh(b.token)[0] == 200  # served

        # an attempt's own share: MAX_CONNECTIONS connections kept, each named by its call
        own = [http.client.HTTPSConnection("127.0.0.1", st.tcp_port, context=ctx, timeout=SETTLE)
               for _ in range(MAX_CONNECTIONS)]  # fmt: skip
        held += own
        assert {call(c, a.token)[:1] for c in own} == {(200,)}
        assert {call(c, a.token)[:1] for c in own[:3]} == {(200,)}  # kept: one more call each
        status, answer, closes = fresh(a.token)  # one past its share
        assert (status, code_of(answer), closes) == (429, L.CONNECTIONS, True), answer
        assert fresh(b.token)[0] == 200  # another attempt's share is its own
        elsewhere = http.client.HTTPSConnection("127.0.0.1", st.tcp_port, context=ctx, timeout=SETTLE)
        held.append(elsewhere)
        elsewhere.request("GET", "/v1/models", headers={"Authorization": f"Bearer {b.token}"})
        r = elsewhere.getresponse()
        assert (r.status, code_of(r.read()), r.will_close) == (404, L.NOT_FOUND, True)  # refused: it goes
        own.pop().close()  # one of a's goes: a new one takes its place
        assert wait_for(lambda: fresh(a.token)[0] == 200 or None, SETTLE, "a's share freed")
        refused = [c for c in calls(out) if c.refused == L.CONNECTIONS]
        assert refused and {(c.attempt, c.forwarded) for c in refused} == {(a.record.id, False)}
        # a's connections go when it ends, idle or not (else counted, and open, for an hour)
        attempts.end(out, a.record.id, "ended")
        idle = own[0].sock
        idle.settimeout(SETTLE)
        with contextlib.suppress(ConnectionResetError, ssl.SSLError):
            assert idle.recv(1) == b""
        assert fresh(b.token)[0] == 200
    finally:
        for c in held:
            c.close()
        process.stop(out)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def test_health_finds_a_dead_gateway_that_live_attempts_need_and_fix_restarts_it(tmp_path, monkeypatch):
    """``marathon health`` of a run whose gateway died under a live attempt (its harbor still runs):
    a ``gateway_dead`` finding; ``--fix`` restarts it from the run's own settings (.driver_env) and
    records the outage, so the attempt is voided by the table when it ends."""
    from runner.schedule.config import resolve, write_driver_env
    from runner.schedule.gateway import settings_for
    from runner.schedule.health import check, fix

    monkeypatch.setenv("MARATHON_DEMO_MODEL_KEY", "scripted-demo-placeholder")
    canary = "sk-scriptedtest-" + os.urandom(12).hex()  # another key of the operator's shell
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    out = tmp_path / "out"
    tasks = Path(__file__).resolve().parents[2] / "runner" / "demo" / "tasks"
    cfg = resolve(out, {"tasks_dir": str(tasks), "tasks": ["calc-partial"], "arms": ["plain"],
                        "model": "scripted/solve", "agent_kwargs": ["api_key_var=MARATHON_DEMO_MODEL_KEY"]},
                  environ={})  # fmt: skip
    write_driver_env(cfg)
    harbor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"]
    )  # the attempt's "harbor"
    # a live runner of the tree (so health restarts only what is dead: the gateway)
    from runner.ops.procs import Registry

    Registry(out).register(harbor.pid, "runner", ["marathon", "run", str(out)])
    try:
        st = process.start_detached(out, settings_for(cfg))
        import psutil

        (scripted,) = psutil.Process(st.pid).children()  # the scripted model: no credential at all
        env = open(f"/proc/{scripted.pid}/environ", "rb").read()
        assert canary.encode() not in env and b"MARATHON_DEMO_MODEL_KEY=" not in env
        a = attempts.issue(out, "calc-partial", "plain", "2026-01-01__00-00-00", budget_sec=30)
        attempts.set_harbor(out, a.record.id, harbor.pid)
        issued_by_a_process_that_died(out, "goal")  # no attempt of a dead issuer needs a gateway
        rep, _ = check(out)
        assert (
            rep.gateway
            and "serving" in rep.gateway
            and not [f for f in rep.findings if f.kind == "gateway_dead"]
        )
        os.kill(st.pid, signal.SIGKILL)  # the gateway this test started
        wait_for(lambda: process.running(out) is None, SETTLE, "the gateway to be gone")
        rep, _ = check(out)
        (dead,) = [f for f in rep.findings if f.kind == "gateway_dead"]
        assert dead.fixable and dead.data["attempts"] == [a.record.id]
        fixed = fix(out)
        assert any(x.startswith("restarted the model gateway") for x in fixed.fixes), fixed.fixes
        new = process.running(out)
        assert new is not None and new.pid != st.pid
        (o,) = L.read_outages(out)
        assert o.by == "health --fix" and ("calc-partial", "plain", "2026-01-01__00-00-00") in o.attempts
    finally:
        harbor.kill()  # the process this test started, by its handle
        harbor.wait()
        process.stop(out)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def test_a_runner_that_ends_with_attempts_running_leaves_their_gateway_serving(tmp_path, monkeypatch):
    """Found by a probe: a runner that ended on an error (a full disk) with attempts running
    stopped the tree's gateway on its way out, so every call of those attempts was cut and they
    failed, where the runner that resumes would have adopted them. The local launcher keeps the
    gateway while attempts it started still run, and stops it at a run's end."""
    from runner.results.events import EventLog
    from runner.schedule.config import resolve
    from runner.schedule.gateway import settings_for
    from runner.schedule.local import LocalLauncher
    from runner.schedule.lock import me

    monkeypatch.setenv("MARATHON_DEMO_MODEL_KEY", "scripted-demo-placeholder")
    out = tmp_path / "out"
    tasks = Path(__file__).resolve().parents[2] / "runner" / "demo" / "tasks"
    cfg = resolve(out, {"tasks_dir": str(tasks), "tasks": ["calc-partial"], "arms": ["plain"],
                        "model": "scripted/solve", "agent_kwargs": ["api_key_var=MARATHON_DEMO_MODEL_KEY"]},
                  environ={})  # fmt: skip
    out.mkdir()
    st = process.start_detached(out, settings_for(cfg))
    try:
        launcher = LocalLauncher(cfg, EventLog(out, "r1"), me("r1"), {}, {})
        assert launcher.gateway
        launcher.close(still_running=True)
        assert (now := process.running(out)) is not None and now.pid == st.pid
        launcher.close()
        wait_for(lambda: process.running(out) is None, SETTLE, "the gateway to stop at the run's end")
    finally:
        process.stop(out)
        shutil.rmtree(attempts.socket_root(out), ignore_errors=True)


def test_spend_caps_are_refused_at_the_wire_402_finish_lets_started_attempts_go_on_stop_does_not(
    gateway, provider
):
    """The operator's caps (runner.results.caps) at the gateway: each "quick" call costs $1.166 at
    the price below (1034 input, 200 cached, 56 output tokens). A run cap of $2 is passed by the
    second call; under ``finish`` the attempts running at the cap go on, one that had not yet called
    the model too (a probe found such an attempt, still in its harness's preparation, errored by the
    402 of its first call: the arms with long preparations were caught), and an attempt issued after
    the cap is refused; under ``stop`` every call is; a higher cap (a resume) lets them through; an
    arm's cap holds one arm."""
    from runner.results import caps as C

    out, _s, _st = gateway
    price = ("quick=1000,100,2000",)
    C.write_caps(out, C.Caps(run_usd=2.0, prices=price, model="quick"))
    a, b = issue(out, "plain"), issue(out, "goal")
    sock_a, sock_b = attempts.socket_path(out, a.record.id), attempts.socket_path(out, b.record.id)

    def after(n: int) -> None:  # the ledger has n lines: what the next call's check reads
        wait_for(lambda: len(calls(out)) >= n, SETTLE, f"{n} ledger lines")

    assert post(sock_a, a.token)[0] == 200
    after(1)
    assert post(sock_a, a.token)[0] == 200  # $1.166 < $2: still under
    after(2)
    assert post(sock_a, a.token)[0] == 200  # $2.33 >= $2, but a started before: finish lets it go on
    after(3)
    assert post(sock_b, b.token)[0] == 200  # b was running at the cap, before its first call: it goes on
    after(4)
    c = issue(out, "goal")  # issued after the cap: refused
    status, body = post(attempts.socket_path(out, c.record.id), c.token)
    assert (status, code_of(body)) == (402, L.SPEND_CAP_RUN) and b"--max-spend" in body
    C.write_caps(out, C.Caps(run_usd=2.0, on_cap=C.STOP, prices=price, model="quick"))
    assert (post(sock_a, a.token)[0], code_of(post(sock_a, a.token)[1])) == (402, L.SPEND_CAP_RUN)
    C.write_caps(out, C.Caps(run_usd=100.0, on_cap=C.STOP, prices=price, model="quick"))  # resumed higher
    assert post(sock_b, b.token)[0] == 200
    after(8)
    # each arm's cap of $3: plain spent $3.50, goal $2.33
    C.write_caps(out, C.Caps(arm_usd=3.0, on_cap=C.STOP, prices=price, model="quick"))
    assert code_of(post(sock_a, a.token)[1]) == L.SPEND_CAP_ARM
    assert post(sock_b, b.token)[0] == 200
    led = wait_for(
        lambda: L.read_ledger(out, keep_calls=True) if len(calls(out)) >= 10 else None, SETTLE, "every line"
    )
    refused = [(c.arm, c.refused, c.status) for c in led.calls if c.outcome == L.REFUSED]
    assert refused == [("goal", L.SPEND_CAP_RUN, 402), ("plain", L.SPEND_CAP_RUN, 402),
                       ("plain", L.SPEND_CAP_RUN, 402), ("plain", L.SPEND_CAP_ARM, 402)]  # fmt: skip
    assert len(provider.seen) == 6  # nothing refused went upstream
    tally = C.Tally(out, C.read_caps(out).pricer())
    tally.update()
    assert round(tally.arm("plain"), 6) == round(3 * 1.166, 6) and round(tally.run, 6) == round(6 * 1.166, 6)


def test_an_attempts_own_cap_cuts_it_when_its_usage_passes_and_refuses_it_alone(gateway, provider):
    """``--max-spend-attempt`` at the gateway: attempt a's second "quick" call ($1.166 each) passes
    its $2 cap, and the gateway writes a's cut record before that answer's end is out (the agent's
    host side ends the phase at it); a's next call is refused 402 ``spend_cap_attempt`` whatever
    ``--on-cap`` says; b, of the same arm and under its cap, goes on."""
    from runner.results import caps as C

    out, _s, _st = gateway
    price = ("quick=1000,100,2000",)
    C.write_caps(out, C.Caps(attempt_usd=2.0, prices=price, model="quick"))
    a, b = issue(out, "plain"), issue(out, "plain")
    sock_a, sock_b = attempts.socket_path(out, a.record.id), attempts.socket_path(out, b.record.id)
    cut = C.attempt_cut_path(out, a.record.id)
    assert post(sock_a, a.token)[0] == 200
    assert not cut.exists()  # $1.17 of $2
    assert post(sock_a, a.token)[0] == 200  # $2.33: this call passes it
    assert cut.is_file()  # written while that answer streamed, before the client could call again
    row = json.loads(cut.read_text())
    assert (row["attempt"], row["arm"], row["scope"], row["cap_usd"]) == (
        a.record.id,
        "plain",
        "attempt",
        2.0,
    )
    assert row["spent_usd"] == round(2 * 1.166, 6) and "spend cap of the attempt reached" in row["text"]
    status, body = post(sock_a, a.token)
    assert (status, code_of(body)) == (402, L.SPEND_CAP_ATTEMPT) and b"--max-spend-attempt" in body
    assert post(sock_b, b.token)[0] == 200 and not C.attempt_cut_path(out, b.record.id).exists()
    assert len(provider.seen) == 3  # the refused call never went upstream
    assert list(C.attempt_cuts(out)) == [(a.record.task, "plain", a.record.stamp)]


def test_under_a_spend_cap_an_attempts_calls_go_upstream_one_at_a_time(gateway, provider):
    """Found by a probe as the agent: 64 calls opened at once under a $1 attempt cap sent 8 upstream
    (the gateway's calls in flight per attempt), $2.40 counted. Under a spend cap an attempt's calls
    now go one at a time (codex makes one at a time): each is judged when the one before it has
    ended and its usage is counted, so the cap is passed by one call at most. Here four calls of
    $1.166 each are sent together under a $2 attempt cap: one goes upstream while it is held, the
    second passes the cap, the last two are refused 402 ``spend_cap_attempt`` and never sent."""
    from runner.results import caps as C

    out, _s, _st = gateway
    C.write_caps(out, C.Caps(attempt_usd=2.0, prices=("stream-wait=1000,100,2000",), model="stream-wait"))
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    held = [send_call(sock, a.token, "stream-wait", 20) for _ in range(4)]
    try:
        wait_for(lambda: len(provider.seen) >= 1 or None, SETTLE, "the first call upstream")
        time.sleep(1.0)  # the others would reach the provider within milliseconds
        assert len(provider.seen) == 1
        provider.go.set()
        answers = []
        for s in held:
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            answers.append(got)
    finally:
        for s in held:
            s.close()
    ok = [g for g in answers if g.startswith(b"HTTP/1.1 200")]
    refused = [g for g in answers if g.startswith(b"HTTP/1.1 402")]
    assert len(ok) == 2 and all(b"response.completed" in g for g in ok), answers
    assert len(refused) == 2 and {code_of(g.split(b"\r\n\r\n", 1)[1]) for g in refused} == {
        L.SPEND_CAP_ATTEMPT
    }
    assert len(provider.seen) == 2
    assert C.attempt_cut_path(out, a.record.id).is_file()


def test_under_a_spend_cap_a_call_whose_body_never_completes_holds_up_no_other_call(gateway, provider):
    """Found by a review: the one-at-a-time turn was taken before a call's body was read, so a call
    that sent its headers and never the rest of its body (a process the agent left running) held
    its attempt's every other call, answered neither by the provider nor by a refusal once the
    attempt ended. The turn is taken once the body is in, as the call is judged."""
    from runner.results import caps as C

    out, _s, _st = gateway
    C.write_caps(out, C.Caps(attempt_usd=100.0, prices=("quick=1,1,1",), model="quick"))
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    with socket.socket(socket.AF_UNIX) as stuck:
        stuck.connect(str(sock))
        stuck.sendall(
            f"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {a.token}\r\n"
            'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model": '.encode()
        )  # its body never completes
        time.sleep(0.5)  # the stuck call is in, waiting for its body
        status, _body = post(sock, a.token)  # another call of the attempt: served at once
        assert status == 200
    assert len(provider.seen) == 1


def _same_tick(path: Path, mtime_ns: int) -> None:
    """Give ``path`` the mtime it had before its last change, as a filesystem whose times move in
    coarse ticks does for two changes within one tick (Linux before 6.13 stamps files and dirs from a
    clock of one jiffy, up to 10 ms; some network disks in seconds; this machine's kernel stamps
    finely once a time was read, so the tick is made by hand)."""
    os.utime(path, ns=(os.stat(path).st_atime_ns, mtime_ns))


def test_a_client_that_hangs_up_before_the_usage_is_counted_by_the_caps_at_an_estimate(gateway, provider):
    """Found by a probe as the agent: a client that read each answer and hung up just before its
    final event (the one with the usage) made 30 calls the provider billed ($6.00) and no cap
    counted. Such a call now counts at an estimate (``wire.estimate``: its input from the request's
    size, one output token per event that passed), on the ledger as ``usage_estimate``, and the
    attempt's own cap is reached by them like any other spend."""
    from runner.ops.gateway.wire import BYTES_PER_TOKEN
    from runner.results import caps as C

    out, _s, _st = gateway
    C.write_caps(
        out, C.Caps(attempt_usd=0.05, prices=("stream-forever=1000,100,2000",), model="stream-forever")
    )
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    body_bytes = len(raw_request(a.token, "stream-forever").split(b"\r\n\r\n", 1)[1])
    counted = 0.0
    for n in range(1, 6):
        s = send_call(sock, a.token, "stream-forever", 20)
        got = b""
        while b"402" not in got[:12] and got.count(b"keepalive") < 5:
            got += s.recv(4096)
        s.close()
        if got.startswith(b"HTTP/1.1 402"):
            break
        closed = lambda k=n: [c for c in calls(out) if c.outcome == L.CLIENT_CLOSED][k - 1 : k] or None  # noqa: E731
        (row,) = wait_for(closed, SETTLE, f"hang-up {n}")
        assert row.usage is None and row.estimate is not None
        inp, events = row.estimate
        assert inp == body_bytes // BYTES_PER_TOKEN + 1 and events >= 6  # created + 5 keepalives at least
        counted += inp * 1000e-6 + events * 2000e-6
    else:
        pytest.fail("five hang-ups and never refused")
    assert code_of(got.split(b"\r\n\r\n", 1)[1]) == L.SPEND_CAP_ATTEMPT
    assert counted >= 0.05 and counted - (inp * 1000e-6 + events * 2000e-6) < 0.05  # refused once past it
    tally = C.Tally(out, C.read_caps(out).pricer())
    tally.update()
    key = ("t1", "plain", a.record.stamp)
    assert tally.attempt(key) == pytest.approx(counted)
    led = L.read_ledger(out)
    assert led.usage(*key).unmetered == n - 1 and led.usage(*key).input == 0  # in no token figure


def test_two_records_written_within_one_tick_are_both_served(gateway, provider):
    """The gateway lists its attempts' records only when their dir changed (by its mtime): a second
    attempt issued within the same tick as the first left the dir's mtime as the first set it, its
    socket was never bound, and its agent's every call failed at the relay, scored against its arm."""
    out, _s, _st = gateway
    d = attempts.attempts_dir(out)
    a = issue(out, "plain")  # listed and bound: the gateway has seen the dir with a in it
    before = os.stat(d).st_mtime_ns
    b = attempts.issue(out, "t1", "goal", "2026-01-01__00-00-59", budget_sec=None)
    _same_tick(d, before)
    sock_b = attempts.socket_path(out, b.record.id)
    wait_for(sock_b.exists, SETTLE, "the second attempt's socket")
    assert post(sock_b, b.token)[0] == 200 and post(attempts.socket_path(out, a.record.id), a.token)[0] == 200


def test_an_attempt_ended_within_the_tick_of_its_last_change_is_refused(gateway, provider):
    """A record rewritten within one tick keeps its mtime: told apart by its inode (each version is
    written by a rename), an ended attempt's token is refused, never served on the old record."""
    out, _s, _st = gateway
    a = issue(out, "plain")
    sock = attempts.socket_path(out, a.record.id)
    assert post(sock, a.token)[0] == 200  # the gateway has read the live record
    rec = attempts.record_path(out, a.record.id)
    before = os.stat(rec).st_mtime_ns
    attempts.end(out, a.record.id, "ended")
    _same_tick(rec, before)
    assert (post(sock, a.token)[0], code_of(post(sock, a.token)[1])) == (401, L.ENDED)


def _send(
    sock: Path, token: str, path: str, body: bytes, headers: dict | None = None, method: str = "POST"
) -> tuple[int, bytes]:
    c = UnixConn(sock)
    try:
        c.request(method, path, body, {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                       **(headers or {})})  # fmt: skip
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_a_hostile_clients_paths_stay_under_v1_and_its_calls_stay_on_the_ledger(gateway, provider, key):
    """Found by a probe of the gateway as the agent (2026-12-06): ``/v1/../admin`` and its encoded
    forms reached the provider's ``/admin`` with the real key; a call whose tool_choice was a NaN
    nested 990 deep reached the provider with no ledger line (the line did not encode); a 9 MB
    tool_choice made a line no ledger reader reads; a 2 MB gzip body that expands to 2 GiB was
    decompressed whole on the event loop."""
    import gzip

    out, _s, _st = gateway
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    call = b'{"model": "quick", "stream": true, "input": []}'
    for path in (
        "/v1/../admin",
        "/v1/%2e%2e/%2e%2e/admin",
        "/v1/..%2f..%2fadmin",
        "/v1/.%2e/admin",
        "/v1/..\\admin",
    ):
        status, body = _send(sock, a.token, path, call)
        assert status == 404 and code_of(body) == L.NOT_FOUND, (path, status, body)
    assert provider.seen == []  # none of them reached the provider
    assert _send(sock, a.token, "/v1/./responses/..", call)[0] == 404
    # a path aiohttp percent-decodes into an escape (OSC 52: the operator's clipboard) and a CR that
    # rewrites the line: the log shows them as text, one line per refusal (a review, 2026-12-07)
    forged = "/v1/%1b]52;c;ZXZpbA==%1b%5c%0d%1b[2Kgateway:%20forwarded%20POST%20/v1/responses"
    assert _send(sock, a.token, forged, call)[0] == 404
    log_file = gateway_dir(out) / process.LOG_FILE
    said = wait_for(lambda: [ln for ln in log_file.read_bytes().splitlines() if b"ZXZpbA==" in ln] or None,
                    SETTLE, "the refusal's log line")  # fmt: skip
    assert b"\x1b" not in said[0] and b"\r" not in said[0] and b"\\x1b]52" in said[0], said

    deep = b"[" * 990 + b"NaN" + b"]" * 990
    nan_deep = b'{"model": "quick", "stream": true, "input": [], "tool_choice": ' + deep + b"}"
    long_choice = json.dumps(
        {"model": "quick", "stream": True, "input": [], "tool_choice": "x" * 9_000_000}
    ).encode()
    for body in (nan_deep, long_choice):
        assert _send(sock, a.token, "/v1/responses", body)[0] == 200
    bomb = gzip.compress(call[:-1] + b" " * (200 << 20) + b"}")  # 200 MiB of JSON in ~200 KB
    status, body = _send(sock, a.token, "/v1/responses", bomb, {"Content-Encoding": "gzip"})
    assert (status, code_of(body)) == (415, L.UNREADABLE)  # its parameters unknown: never upstream
    got = wait_for(lambda: [c for c in calls(out) if c.outcome != L.REFUSED] if len(
        [c for c in calls(out) if c.outcome != L.REFUSED]) == 2 else None, SETTLE, "two ledger lines")  # fmt: skip
    assert len(provider.seen) == 2  # each call the provider got is on the ledger, read back
    nan_line, long_line = got
    assert nan_line.param("tool_choice") == "not a JSON value the ledger keeps (non-finite or too deep)"
    assert long_line.param("tool_choice").startswith("sha256:") and "(9000000 chars)" in long_line.param(
        "tool_choice"
    )

    def bomb_rows() -> list[dict] | None:
        rows = map(json.loads, ledger_path(out).read_bytes().splitlines())
        return [r for r in rows if "unparsed" in r.get("params", {})] or None

    # the refused call's line, written by the ledger's own thread after the refusal went out: read
    # before it landed, the list was empty (CI, 2026-12-07; the failure of the stop before, found)
    (bomb_row,) = wait_for(bomb_rows, SETTLE, "the refused call's ledger line")
    lines = ledger_path(out).read_bytes().splitlines()
    assert max(len(line) for line in lines) < 4096
    assert bomb_row["params"] == {"unparsed": "body encoding 'gzip' (or over 64 MiB decoded)"}
    assert bomb_row["refused"] == L.UNREADABLE


def test_only_the_codex_calls_go_upstream_and_only_what_the_ledger_can_meter(gateway, provider):
    """Found by a probe as the agent (2026-12-07): every ``/v1`` path went upstream with the real
    key: ``/v1/files`` listed and deleted the operator's files, ``/v1/fine_tuning/jobs`` started a
    job, ``/v1/chat/completions`` ran unmetered, and each ``GET /v1/responses/<id>`` counted that
    response's usage again toward the run's cap. A zstd body hid its model (priced as the run's),
    ``background: true`` left the answer's usage at the provider, and a model the prices lack
    counted $0 to the caps. Only ``POST /v1/responses`` (and ``/compact``) go upstream now, and only
    a call whose body the gateway read, not in the background, and priced when caps are set."""
    from runner.results import caps as C

    out, _s, _st = gateway
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    call = b'{"model": "quick", "stream": true, "input": []}'
    for method, path in (
        ("GET", "/v1/files"), ("DELETE", "/v1/files/file-1"), ("POST", "/v1/fine_tuning/jobs"),
        ("POST", "/v1/chat/completions"), ("GET", "/v1/responses/resp_1"), ("GET", "/v1/responses"),
        ("POST", "/v1/responses/resp_1/cancel"), ("POST", "/v1/responses/"), ("PUT", "/v1/responses"),
    ):  # fmt: skip
        status, body = _send(sock, a.token, path, call, method=method)
        assert (status, code_of(body)) == (404, L.NOT_FOUND), (method, path, status, body)
        assert b"POST /v1/responses" in body
    for body, headers, status, code in (
        (call, {"Content-Encoding": "zstd"}, 415, L.UNREADABLE),
        (b"not json", {}, 415, L.UNREADABLE),
        (b'{"model": "quick", "background": true, "input": []}', {}, 400, L.NOT_METERABLE),
    ):
        got = _send(sock, a.token, "/v1/responses", body, headers)
        assert (got[0], code_of(got[1])) == (status, code), got
    assert provider.seen == []  # none of them reached the provider
    C.write_caps(out, C.Caps(run_usd=100.0, prices=("quick=1000,100,2000",), model="quick"))
    status, body = _send(
        sock, a.token, "/v1/responses", b'{"model": "m-2026-12-01", "stream": true, "input": []}'
    )
    assert (status, code_of(body)) == (400, L.UNPRICED) and b"m-2026-12-01" in body
    assert provider.seen == []
    assert post(sock, a.token)[0] == 200  # the priced model goes through
    _send(
        sock, a.token, "/v1/responses/compact", call
    )  # codex's compaction: forwarded (the provider answers it)
    led = wait_for(lambda: calls(out) if len(calls(out)) >= 15 else None, SETTLE, "every ledger line")
    assert len(provider.seen) == 2 and [c.path for c in led if c.forwarded] == [
        "/v1/responses",
        "/v1/responses/compact",
    ]
    refused = [c.refused for c in led if not c.forwarded]
    assert refused == [L.NOT_FOUND] * 9 + [L.UNREADABLE, L.UNREADABLE, L.NOT_METERABLE, L.UNPRICED]
    assert [c.param("model") for c in led if c.refused == L.UNPRICED] == ["m-2026-12-01"]


def test_an_attempt_that_floods_its_socket_with_connections_holds_at_most_its_share(gateway, provider):
    """Found by a probe of the gateway as the agent: 20,000 idle connections on one attempt's socket
    used up the gateway's descriptors, every other attempt's calls timed out and the accept errors
    filled the log. An attempt's socket now holds ``MAX_CONNECTIONS`` at once; the rest are closed
    before a byte is read, and the other attempts are served."""
    from runner.ops.gateway.conns import MAX_CONNECTIONS

    out, _s, _st = gateway
    a, b = issue(out), issue(out, "goal")
    flood = []
    for _ in range(MAX_CONNECTIONS + 16):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(str(attempts.socket_path(out, a.record.id)))
        s.sendall(b"P")  # a request begun, never finished
        flood.append(s)
    try:
        closed = 0
        for s in flood[MAX_CONNECTIONS:]:
            try:
                closed += s.recv(1) == b""
            except ConnectionResetError:  # closed with the byte it sent unread
                closed += 1
        assert closed == 16  # past the share: closed at once
        assert post(attempts.socket_path(out, b.record.id), b.token)[0] == 200  # another attempt: served
    finally:
        for s in flood:
            s.close()
    assert wait_for(
        lambda: post(attempts.socket_path(out, a.record.id), a.token)[0] == 200 or None, SETTLE, "a's call"
    )


def test_a_call_whose_body_never_finishes_does_not_hold_the_gateways_stop(gateway):
    """A probe: a call that sent its headers and one byte of its body held a stopping gateway for
    aiohttp's 60 s shutdown timeout (``gateway --stop`` gave up after 10 s, the stop line missing
    from the ledger). The handlers left after the cut get ``SHUTDOWN_SEC``."""
    out, _s, st = gateway
    a = issue(out)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(SETTLE)
    s.connect(str(attempts.socket_path(out, a.record.id)))
    try:
        s.sendall(
            f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        # a whole call after it: once its line is on the ledger, the loop has read the first one's
        # headers too (they came first) and its handler waits in the body's read
        assert post(attempts.socket_path(out, a.record.id), a.token)[0] == 200
        wait_for(
            lambda: [c for c in calls(out) if c.attempt == a.record.id] or None, SETTLE, "the call's line"
        )
        said = process.stop(out)  # raises when the gateway still runs 10 s after its SIGTERM
        assert "stopped" in said, said
        assert [g for g in L.read_ledger(out).gateways if g["kind"] == L.GATEWAY_STOP], "no stop line"
    finally:
        s.close()


def _calls_held(out: Path, provider, timeout: float) -> tuple[attempts.Issued, list[socket.socket]]:
    """An attempt with ``MAX_CALLS + 2`` streaming calls sent, the provider holding its answers: the
    first ``MAX_CALLS`` upstream, the two past the cap waiting their turn."""
    from runner.ops.gateway.server import MAX_CALLS

    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    held = [send_call(sock, a.token, "stream-wait", timeout) for _ in range(MAX_CALLS + 2)]
    try:
        wait_for(lambda: len(provider.seen) == MAX_CALLS or None, SETTLE, "the first calls upstream")
    except BaseException:
        for s in held:
            s.close()
        raise
    return a, held


def test_an_attempts_calls_in_flight_are_capped_and_the_rest_wait_their_turn(gateway, provider):
    """Found by a probe of the gateway as the agent: 16 calls holding 60 MB bodies open took the
    gateway to 1 GB. One attempt has at most ``MAX_CALLS`` calls in flight; the next ones wait (their
    bodies unread) and are served once one ends, none refused, each on the ledger."""
    from runner.ops.gateway.server import MAX_CALLS

    out, _s, _st = gateway
    _a, held = _calls_held(out, provider, 20)
    try:
        time.sleep(1.0)  # the two past the cap would reach the provider within milliseconds
        assert len(provider.seen) == MAX_CALLS
        provider.go.set()
        for s in held:
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            assert b"response.completed" in got
    finally:
        for s in held:
            s.close()
    assert len(provider.seen) == MAX_CALLS + 2
    wait_for(lambda: len(calls(out)) == MAX_CALLS + 2 or None, SETTLE, "every call on the ledger")
    assert {c.outcome for c in calls(out)} == {L.OK}


def test_a_stop_cuts_the_calls_in_flight_and_refuses_the_ones_queued_behind_them(gateway, provider):
    """A review: a stop cut the calls in flight, which freed their turns, and the calls queued
    behind them then went upstream with the real key, uncut, and were cancelled unanswered by the
    server's shutdown (``client_closed``). They are refused ``gateway_stopping`` now, nothing of
    them upstream."""
    from runner.ops.gateway.server import MAX_CALLS

    out, _s, _st = gateway
    _a, held = _calls_held(out, provider, 30)
    try:
        process.stop(out)
    finally:
        for s in held:
            s.close()
    assert len(provider.seen) == MAX_CALLS, "a call went upstream after the stop began"
    got = calls(out)  # the stop returned once the gateway ended: its lines are all written
    assert sorted(c.outcome for c in got) == [L.CUT] * MAX_CALLS + [L.REFUSED] * 2
    assert {c.refused for c in got if c.outcome == L.REFUSED} == {L.STOPPING}


def test_a_large_body_is_parsed_by_a_child_without_the_key_and_the_loop_serves_meanwhile(
    gateway, provider, key
):
    """Found by a probe of the gateway as the agent: a 60 MB body of small items took 1-2 s of
    ``json.loads`` on the gateway's one event loop, every other attempt's stream stalled meanwhile,
    and an agent could send eight at a time. A body over ``INLINE_MAX`` is parsed by the gateway's
    child process: with that child stopped, another attempt is served; killed, the next large body
    starts another; the child never holds the key and ends with the gateway."""
    import threading

    import psutil

    from runner.ops.gateway.parsing import INLINE_MAX
    from runner.ops.gateway.wire import request_params

    out, _s, st = gateway
    a, b = issue(out), issue(out, "goal")
    sock = attempts.socket_path(out, a.record.id)

    def big(model: str) -> bytes:
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
        n = INLINE_MAX // len(json.dumps(item)) + 1
        return json.dumps({"model": model, "stream": True, "input": [item] * n}).encode()

    def params_of(request_id: str) -> dict:
        def row() -> dict | None:
            rows = map(json.loads, ledger_path(out).read_bytes().splitlines())
            return next((r for r in rows if r.get("request_id") == request_id and "outcome" in r), None)

        return wait_for(row, SETTLE, f"the ledger line of {request_id}")["params"]

    gw = psutil.Process(st.pid)
    assert gw.children() == []  # no child until a large body comes
    body = big("first")
    assert _send(sock, a.token, "/v1/responses", body)[0] == 200
    want = request_params(body)[0]
    assert params_of(f"{a.record.id}.1") == want and want["n_input_items"] == len(json.loads(body)["input"])
    (child,) = gw.children()
    env = open(f"/proc/{child.pid}/environ", "rb").read()
    assert KEY_VAR.encode() + b"=" not in env and key.encode() not in env
    assert key not in " ".join(child.cmdline())

    # the child held still: this attempt's next large body waits for it, another attempt is served
    child.suspend()
    got: list = []
    t = threading.Thread(target=lambda: got.append(_send(sock, a.token, "/v1/responses", big("second"))))
    t.start()
    try:
        wait_for(lambda: len(provider.seen) == 1 and t.is_alive() and child.status() == psutil.STATUS_STOPPED,
                 SETTLE, "the large body at the parser")  # fmt: skip
        assert post(attempts.socket_path(out, b.record.id), b.token)[0] == 200
        assert len(provider.seen) == 2 and t.is_alive()
    finally:
        child.resume()
    t.join(30)
    assert got and got[0][0] == 200 and params_of(f"{a.record.id}.2")["model"] == "second"

    # killed: the next large body starts another child, and its parameters are its own
    child.kill()
    child.wait(10)
    assert _send(sock, a.token, "/v1/responses", big("third"))[0] == 200
    assert params_of(f"{a.record.id}.3")["model"] == "third"
    (child2,) = gw.children()
    assert child2.pid != child.pid
    process.stop(out, None)
    child2.wait(10)  # ends with the gateway


def _read_to_end(s: socket.socket) -> bytes:
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def test_a_call_in_flight_is_cut_where_the_budget_ends(gateway, provider):
    """Found by a probe of the wire budget: a stream opened before the attempt's budget ran out kept
    streaming 11 s after it (the budget was checked only when a call's headers arrived). Each call
    is cut where the budget ends: the client's call ends, the provider's call is cancelled, and the
    ledger says ``cut`` with the reason."""
    out, _s, _st = gateway
    a = issue(out, budget=3)
    sock = attempts.socket_path(out, a.record.id)
    assert post(sock, a.token)[0] == 200  # the budget starts at the first call
    first = time.time()
    s = send_call(sock, a.token, "stream-forever", 60)  # 30 s of keepalives, if nobody cuts it
    try:
        got = _read_to_end(s)
    finally:
        s.close()
    assert b"keepalive" in got and b"response.completed" not in got
    assert provider.disconnected.wait(10), "the provider's call was not cancelled"
    cut = wait_for(lambda: [c for c in calls(out) if c.outcome == L.CUT], SETTLE, "the cut on the ledger")
    (row,) = [json.loads(x) for x in ledger_path(out).read_bytes().splitlines() if b'"cut"' in x]
    assert len(cut) == 1 and row["cut"] == L.BUDGET and cut[0].usage is None
    assert time.time() - first < 20  # cut, not run out (the stream alone lasts 30 s)
    assert code_of(post(sock, a.token)[1]) == L.BUDGET  # and the next call is refused


def test_an_ended_attempts_calls_in_flight_are_cut_and_the_queued_ones_refused(gateway, provider):
    """Found by a probe: with eight calls of an attempt in flight and more waiting their turn, the
    attempt ended (voided) and the waiting calls were forwarded after the end, the others streamed
    on. The calls in flight are cut at the end; a call that waited its turn is judged when its turn
    comes, and refused: nothing reaches the provider after the end."""
    from runner.ops.gateway.server import MAX_CALLS

    out, _s, _st = gateway
    a, held = _calls_held(out, provider, 30)
    try:
        attempts.end(out, a.record.id, "voided")
        answers = [_read_to_end(s) for s in held]
    finally:
        provider.go.set()
        for s in held:
            s.close()
    assert len(provider.seen) == MAX_CALLS  # none forwarded after the end
    rows = wait_for(lambda: calls(out) if len(calls(out)) == MAX_CALLS + 2 else None, SETTLE, "every call")
    assert sorted(c.outcome for c in rows) == sorted([L.CUT] * MAX_CALLS + [L.REFUSED] * 2)
    assert {c.refused for c in rows if c.outcome == L.REFUSED} == {L.ENDED}
    assert sum(b"attempt_ended" in got for got in answers) == 2


def test_a_stopped_gateway_cuts_its_calls_in_flight_and_records_them(gateway, provider):
    """Found by a probe: a gateway with a call streaming kept serving after SIGTERM (``gateway
    --stop`` gave up after 10 s), and a call in flight when it died left no ledger line. Stopping
    cuts every call in flight, each on the ledger (``cut``: ``gateway_stopped``), and the gateway
    ends at once."""
    from runner.ops.gateway.server import STOPPED

    out, _s, _st = gateway
    a = issue(out)
    s = send_call(attempts.socket_path(out, a.record.id), a.token, "stream-forever", 60)
    try:
        got = b""
        while b"keepalive" not in got:
            got += s.recv(65536)
        process.stop(out, None)  # raises if the gateway is still there 10 s after SIGTERM
        got += _read_to_end(s)
    finally:
        s.close()
    assert b"response.completed" not in got
    (row,) = [json.loads(x) for x in ledger_path(out).read_bytes().splitlines() if b'"request_id"' in x]
    assert (row["outcome"], row["cut"]) == (L.CUT, STOPPED)


def test_the_provider_gets_the_body_the_ledger_read_and_no_header_or_query_of_the_agents(gateway, provider):
    """A probe as the agent (2026-12-08): a key given twice (``model`` twice, or once escaped) was
    recorded as its last value while a provider keeping the first would run the other; its own
    organization, project, cookie and forwarding headers, and a query string, went upstream with
    the operator's key; two Content-Encoding headers were decoded by one and forwarded with the
    other; the provider's account headers (its rate-limit counts, shared by every arm) came back."""
    out, _s, _st = gateway
    a = issue(out)
    sock = attempts.socket_path(out, a.record.id)
    for body in (
        b'{"model": "gpt-5-pro", "input": [], "model": "quick"}',
        b'{"model": "gpt-5-pro", "mod\\u0065l": "quick", "input": []}',
        b'{"model": "quick", "reasoning": {"effort": "high", "effort": "low"}, "input": []}',
        b'{"model": "quick", "background": true, "background": false, "input": []}',
    ):
        status, answer = _send(sock, a.token, "/v1/responses", body)
        assert (status, code_of(answer)) == (415, L.UNREADABLE) and b"given twice" in answer, (body, answer)
    status, answer = _send(sock, a.token, "/v1/responses?api-version=2099&model=x", b'{"model": "quick"}')
    assert (status, code_of(answer)) == (404, L.NOT_FOUND) and b"no query string" in answer, answer
    import gzip

    status, answer = _send(
        sock, a.token, "/v1/responses", gzip.compress(b'{"model": "quick", "input": []}'),
        {"Content-Encoding": "gzip", "content-encoding": "identity"},
    )  # fmt: skip
    assert (status, code_of(answer)) == (415, L.UNREADABLE), answer
    assert provider.seen == []  # none of them went upstream

    agents_own = {
        "OpenAI-Organization": "org-evil", "OpenAI-Project": "proj_evil", "Cookie": "s=1",
        "X-Forwarded-For": "1.2.3.4", "Forwarded": "for=1.2.3.4", "api-key": "k", "X-Mine": "1",
        "X-Codex-Turn-Metadata": "{}", "Connection": "keep-alive, X-Mine",
    }  # fmt: skip
    c = UnixConn(sock)
    try:
        c.request("POST", "/v1/responses", b'{"model": "json", "input": [], "n": 12345678901234567890123}',
                  {"Authorization": f"Bearer {a.token}", "Content-Type": "application/json", **agents_own})  # fmt: skip
        r = c.getresponse()
        got = {k.lower() for k, _ in r.getheaders()}
        assert r.status == 200 and r.read()
    finally:
        c.close()
    (seen,) = provider.seen
    assert seen["path"] == "/v1/responses" and seen["model"] == "json"
    sent = {k.lower() for k in agents_own} - {"connection"}
    assert sent & seen["headers"] == {"x-codex-turn-metadata"}, seen["headers"]  # codex's own header passes
    assert not got & {
        "openai-organization",
        "openai-project",
        "x-ratelimit-remaining-tokens",
        "set-cookie",
    }, got
