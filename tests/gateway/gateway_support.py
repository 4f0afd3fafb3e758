"""A provider stand-in for the gateway's own tests, and clients for the gateway's sockets.

``Provider`` is a real HTTP server on the host's loopback (stdlib, in a thread of the test) whose
answers the test steers through the request's ``model``: a stream that waits for the test before it
ends (pass-through, not buffering), a stream that never ends (a client that goes away must cancel
it), a non-streamed JSON answer, the provider's error answers (``ERRORS``), a quick stream, a stream
in chunked framing on a kept connection and a 32 MiB one. It records what reached it (the key, the
request id, the connection), never what the gateway is supposed to keep to itself.
"""

from __future__ import annotations

import functools
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import waiting

USAGE = {
    "input_tokens": 1234,
    "input_tokens_details": {"cached_tokens": 200},
    "output_tokens": 56,
    "output_tokens_details": {"reasoning_tokens": 7},
    "total_tokens": 1290,
}


#: the models the provider answers with an error: HTTP status, the error's code
ERRORS = {"limited": (429, "rate_limit_exceeded"), "bad": (400, "invalid_request_error")}

#: the 64 KiB events of a "big" answer (32 MiB: more than any socket buffers between the two)
BIG_EVENTS = 512


def sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


class Provider:
    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.go = threading.Event()
        self.disconnected = threading.Event()
        self.ports: list[int] = []  # the client port of each call: which connection carried it
        self.sent = 0  # the bytes of "chunked"/"big" answers written so far
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:  # what a hostile client sent (a compressed body): answered all the same
                    body = {}
                body = body if isinstance(body, dict) else {}
                provider.seen.append(
                    {"auth": self.headers.get("Authorization"), "request_id": self.headers.get("x-client-request-id"),
                     "accept_encoding": self.headers.get("Accept-Encoding"), "model": body.get("model"),
                     "path": self.path, "headers": {k.lower() for k in self.headers}, "raw": raw}
                )  # fmt: skip
                model = body.get("model")
                provider.ports.append(self.client_address[1])
                if model in ("chunked", "big"):
                    # chunked framing on a connection kept for the next call, as a provider's HTTPS
                    # endpoint answers; "big": BIG_EVENTS events of 64 KiB before the end
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()

                    def chunk(data: bytes) -> None:
                        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
                        self.wfile.flush()
                        provider.sent += len(data)

                    chunk(sse("response.created", {"response": {"id": "resp_1"}}))
                    for _ in range(BIG_EVENTS if model == "big" else 0):
                        chunk(b": " + b"x" * (64 * 1024 - 4) + b"\n\n")
                    chunk(sse("response.output_text.delta", {"delta": "hi"}))
                    chunk(sse("response.completed", {"response": {"id": "resp_1", "usage": USAGE}}))
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                if model in ERRORS:
                    # the provider's error answer, as OpenAI writes a rate limit or a bad request
                    status, code = ERRORS[model]
                    data = json.dumps(
                        {"error": {"message": f"{code} (test)", "type": code, "code": code}}
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if model == "echo":
                    # a provider (or a proxy before it) that echoes the request's headers back: in
                    # its body, the response's id, a header's value and name, the status line
                    auth = self.headers.get("Authorization") or ""
                    data = json.dumps({"id": auth, "headers": dict(self.headers), "usage": USAGE}).encode()
                    self.send_response(200, f"OK for {auth}")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("X-Echo-Authorization", auth)
                    self.send_header(f"X-For-{auth.removeprefix('Bearer ')}", "1")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if model == "json":
                    data = json.dumps({"id": "resp_json", "object": "response", "usage": USAGE}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    for name in (
                        "OpenAI-Organization",
                        "OpenAI-Project",
                        "X-RateLimit-Remaining-Tokens",
                        "Set-Cookie",
                    ):
                        self.send_header(name, "the operator's")  # what the agent must not see
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(sse("response.created", {"response": {"id": "resp_1"}}))
                self.wfile.flush()
                if model == "stream-wait":
                    provider.go.wait(20)
                elif model == "stream-forever":
                    try:
                        for _ in range(600):
                            time.sleep(0.05)
                            self.wfile.write(b": keepalive\n\n")
                            self.wfile.flush()
                    except OSError:
                        provider.disconnected.set()
                    return
                self.wfile.write(sse("response.output_text.delta", {"delta": "hi"}))
                self.wfile.write(sse("response.completed", {"response": {"id": "resp_1", "usage": USAGE}}))
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Provider:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.go.set()
        self.server.shutdown()
        self.server.server_close()


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path: str | Path, timeout: float = 30) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path_ = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path_)


def post(sock: str | Path, token: str | None, model: str = "quick") -> tuple[int, bytes]:
    c = UnixConn(sock)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        c.request("POST", "/v1/responses", json.dumps({"model": model, "stream": True, "input": []}), headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def code_of(body: bytes) -> str | None:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def send_call(sock: str | Path, token: str, model: str, timeout: float) -> socket.socket:
    """A client connected to an attempt's socket with one streaming call sent (``raw_request`` with
    ``close``: read to EOF for the whole answer); the caller reads and closes."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(str(sock))
    s.sendall(raw_request(token, model, close=True))
    return s


def dechunk(framed: bytes) -> bytes:
    """The body of an answer in chunked framing (the gateway cuts its chunks where its reads fell,
    anywhere in an event, so a test reads the events only after this)."""
    out, pos = bytearray(), 0
    while True:
        eol = framed.index(b"\r\n", pos)
        size = int(framed[pos:eol].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += framed[eol + 2 : eol + 2 + size]
        assert framed[eol + 2 + size : eol + 4 + size] == b"\r\n", "chunked framing broken"
        pos = eol + 4 + size


def raw_request(token: str, model: str, close: bool = False) -> bytes:
    """A streaming call as raw bytes; ``close``: ask the gateway to close the connection once the
    response is whole, so the client can read to the end of it (EOF) before it lets go."""
    body = json.dumps({"model": model, "stream": True, "input": []}).encode()
    return (
        f"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
        + ("Connection: close\r\n" if close else "")
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


#: the gateway's tests poll fast: what they wait for is a socket or a ledger line, not a trial
wait_for = functools.partial(waiting.wait_for, step=0.05)
