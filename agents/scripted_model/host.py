#!/usr/bin/env python3
"""The scripted model on the host, as the gateway's upstream (stdlib only; ``server.py`` decides).

Why: with the model gateway (``runner.ops.gateway``) codex no longer reaches a model inside its own
container; every call goes sandbox -> relay -> gateway -> provider. In the demo and the tests the
provider is this process: the same scenarios as ``server.py`` (which the task images still carry,
unchanged, for the older in-container route), reached over a unix socket (``SCRIPTED_SOCKET``) or
the host's loopback (``SCRIPTED_PORT``), so the path the tests take is the path a real run takes.

What differs from the in-container server, and only that:

- one process serves every attempt of every task, so the task's plan is found from the request
  itself, as a real model knows its task from the prompt: the task (``SCRIPTED_TASKS``: a harbor
  tasks dir; each task's ``instruction.md`` and ``environment/plan.json``) whose instruction appears
  in the texts codex sent; ``SCRIPTED_PLAN`` when none does;
- every log line also names the gateway's ``x-client-request-id`` (``<attempt>.<n>``), its attempt,
  the task found and the ``usage`` answered, so the ledger can be checked against the model's own
  count, call by call; ``GET /__scripted/stats`` counts requests per attempt.
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import threading
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server as S  # noqa: E402 - the in-container server's module, next to this file

_local = threading.local()
_by_attempt: dict[str, int] = {}
_tasks: list[tuple[str, str, dict]] = []  # (task, instruction text, plan), longest instruction first


def load_tasks(tasks_dirs: str | None) -> list[tuple[str, str, dict]]:
    """Each task's instruction (stripped) and plan, longest instruction first (the most specific wins);
    ``tasks_dirs``: one tasks dir, or several joined by ``os.pathsep`` (a test's own tasks beside the
    mini-benchmark's)."""
    found = []
    for tasks_dir in (tasks_dirs or "").split(os.pathsep):
        if not (tasks_dir and os.path.isdir(tasks_dir)):
            continue
        for name in sorted(os.listdir(tasks_dir)):
            d = Path(tasks_dir) / name
            try:
                text = (d / "instruction.md").read_text(encoding="utf-8").strip()
                plan = json.loads((d / "environment" / "plan.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if text and isinstance(plan, dict):
                found.append((name, text, plan))
    return sorted(found, key=lambda t: -len(t[1]))


def task_of(body: dict) -> tuple[str | None, dict | None]:
    """The task whose instruction codex sent (any user/developer text or goal objective)."""
    texts = S._texts(body)
    for name, text, plan in _tasks:
        if any(text in t for t in texts):
            return name, plan
    return None, None


def _plan() -> dict:
    plan = getattr(_local, "plan", None)
    return plan if plan is not None else _file_plan()


_file_plan = S._plan


def _record(entry: dict) -> int:
    rid = getattr(_local, "request_id", None)
    extra = {"request_id": rid, "attempt": rid.rsplit(".", 1)[0] if rid and "." in rid else None}
    if getattr(_local, "task", None):
        extra["task"] = _local.task
    raw_len = getattr(_local, "raw_len", None)
    if raw_len is not None and str(entry.get("outcome", "")) in ("call", "message"):
        usage = S._usage(raw_len)
        if entry.get("scenario") == "zero-usage":
            usage = {k: ({kk: 0 for kk in v} if isinstance(v, dict) else 0) for k, v in usage.items()}
        extra["usage"] = usage
    if extra["attempt"]:
        with S._lock:
            _by_attempt[extra["attempt"]] = _by_attempt.get(extra["attempt"], 0) + 1
    return _orig_record({**entry, **extra})


_orig_record = S._record
S._plan = _plan
S._record = _record


class HostHandler(S.Handler):
    """``server.Handler`` with the request's task and request id made known to the log and the plan."""

    def do_POST(self):  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _local.request_id = self.headers.get("x-client-request-id")
        _local.raw_len = len(raw)
        _local.task, _local.plan = None, None
        try:
            body = json.loads(
                S.gzip.decompress(raw)
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip"
                else raw or b"{}"
            )
        except (ValueError, OSError):
            body = None
        if isinstance(body, dict):
            _local.task, _local.plan = task_of(body)
        import io

        self.rfile = io.BytesIO(raw)
        try:
            super().do_POST()
        finally:
            _local.request_id = _local.raw_len = _local.task = _local.plan = None

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/") == "/__scripted/stats":
            with S._lock:
                body = {"requests": S._count, "by_attempt": dict(_by_attempt)}
            self._send(200, json.dumps(body).encode(), "application/json")
            return
        super().do_GET()


class UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def main() -> int:
    global _tasks
    _tasks = load_tasks(os.environ.get("SCRIPTED_TASKS"))
    log = S._log_path()
    os.makedirs(os.path.dirname(log), exist_ok=True)
    open(log, "a").close()
    sock = os.environ.get("SCRIPTED_SOCKET")
    if sock:
        if os.path.exists(sock):
            os.unlink(sock)
        srv: socketserver.BaseServer = UnixHTTPServer(sock, HostHandler)
        where = sock
    else:
        port = int(os.environ.get("SCRIPTED_PORT", "0"))
        srv = S.ThreadingHTTPServer(("127.0.0.1", port), HostHandler)
        srv.daemon_threads = True
        where = f"127.0.0.1:{srv.server_address[1]}"
    print(
        f"scripted model (host) on {where}, {len(_tasks)} task plan(s), log {log}",
        file=sys.stderr,
        flush=True,
    )
    try:
        srv.serve_forever()
    finally:
        if sock:
            try:
                os.unlink(sock)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
