"""JSON-RPC client for ``codex app-server`` over stdio (one JSON object per line).

API (used by every codex arm, the LoopX arms included):

    client = AppServerClient(proc, raw_log=Path(".../appserver.stdout.jsonl"))
    await client.start()                      # reader + stderr pump
    await client.initialize("marathon", "0.1.0")
    result = await client.request("thread/start", {...}, timeout=60)   # AppServerError on error
    client.add_listener(fn)                   # fn(method, params) for every notification
    client.add_result_listener(fn)            # fn(method, result) for every answer to our requests
    ev = await client.next_notification(deadline=None)    # Notification(method, params) | raises
    client.noise_lines / client.server_requests / client.closed
    await client.close()

Why it looks like this:
- every raw stdout line is written to ``raw_log`` before anything else, so the evidence exists even
  when parsing fails; lines that are not a JSON object are kept in ``noise_lines`` and never reach
  the JSON-RPC parser (a shell banner must not break a run);
- lines are classified by keys, not ids: server->client requests use small integer ids that collide
  with ours (``method`` + ``id`` = server request; ``method`` only = notification; ``id`` with
  ``result``/``error`` = a response to us);
- server requests are answered at once (approval policy is ``never``; an approval request is
  accepted and logged), so a command never waits on a missing answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modes import safeio


class AppServerError(RuntimeError):
    """A JSON-RPC error response, or the app-server went away."""

    def __init__(self, message: str, code: int | None = None, method: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.method = method


class AppServerClosed(AppServerError):
    """The app-server's stdout ended (process exited)."""


class DeadlineReached(Exception):
    """``next_notification`` passed its deadline (the caller decides what the deadline means)."""


@dataclass
class Notification:
    method: str
    params: dict
    received_at: float = field(default_factory=time.time)


#: Answers to server->client requests (approval policy is ``never``: accept and log).
def _answer(method: str, params: dict) -> dict | None:
    if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
        return {"decision": "accept"}
    if method in ("execCommandApproval", "applyPatchApproval"):
        return {"decision": "approved"}
    if method == "item/permissions/requestApproval":
        return {"permissions": params.get("permissions") or {}, "scope": "turn"}
    if method == "item/tool/requestUserInput":
        return {"answers": {}}
    return None


class AppServerClient:
    def __init__(
        self, proc: asyncio.subprocess.Process, raw_log: Path, stderr_log: Path | None = None
    ) -> None:
        self.proc = proc
        self.raw_log = raw_log
        self.stderr_log = stderr_log or raw_log.with_name("appserver.stderr.log")
        self._next_id = 0
        self._pending: dict[int, asyncio.Future] = {}
        self._pending_method: dict[int, str] = {}
        self._result_listeners: list[Callable[[str, Any], None]] = []
        self._queue: asyncio.Queue[Notification | None] = asyncio.Queue()
        self._listeners: list[Callable[[str, dict], None]] = []
        self._tasks: list[asyncio.Task] = []
        self._write_lock = asyncio.Lock()
        self.noise_lines: list[str] = []
        self.server_requests: list[dict] = []
        self.closed = False
        self.exit_code: int | None = None

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self.raw_log.parent.mkdir(parents=True, exist_ok=True)
        self._tasks = [
            asyncio.create_task(self._read_stdout(), name="appserver-stdout"),
            asyncio.create_task(self._pump_stderr(), name="appserver-stderr"),
        ]

    async def initialize(self, name: str = "marathon", version: str = "0.1.0") -> dict:
        result = await self.request(
            "initialize",
            {
                "clientInfo": {"name": name, "title": "marathon harness", "version": version},
                "capabilities": {"experimentalApi": False, "requestAttestation": False},
            },
        )
        await self.notify("initialized")
        return result

    async def close(self, grace: float = 5.0) -> None:
        """Close stdin (app-server exits on EOF), then wait; terminate the client process if needed."""
        if self.proc.stdin and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace)
        except TimeoutError:
            self.kill()
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except TimeoutError:
                pass
        for t in self._tasks:
            if not t.done():
                t.cancel()
        self.exit_code = self.proc.returncode

    def kill(self) -> None:
        """Synchronous: end the client process we started (by its handle), e.g. under cancellation."""
        if self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    # --- sending -----------------------------------------------------------------------------------

    async def _send(self, msg: dict) -> None:
        await self._send_lines([msg])

    async def _send_lines(self, msgs: list[dict]) -> None:
        if self.proc.stdin is None or self.proc.stdin.is_closing():
            raise AppServerClosed("app-server stdin is closed")
        data = "".join(json.dumps(m) + "\n" for m in msgs).encode()
        async with self._write_lock:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()

    async def request(self, method: str, params: dict | None = None, timeout: float | None = 120) -> Any:
        (result,) = await self.requests([(method, params)], timeout)
        return result

    async def requests(self, calls: list[tuple[str, dict | None]], timeout: float | None = 120) -> list[Any]:
        """Several requests written back to back in one write, before any answer is awaited; their
        results in order (the first error raises). app-server reads them in this order, so the
        second is already in its input while it handles the first: nothing of ours (this process
        being scheduled, reading the first answer) can come between them."""
        if self.closed:
            raise AppServerClosed(f"app-server exited before {calls[0][0]}", method=calls[0][0])
        loop = asyncio.get_running_loop()
        sent: list[tuple[int, str, asyncio.Future]] = []
        lines = []
        for method, params in calls:
            rid = self._next_id
            self._next_id += 1
            fut: asyncio.Future = loop.create_future()
            self._pending[rid] = fut
            self._pending_method[rid] = method
            sent.append((rid, method, fut))
            msg: dict = {"id": rid, "method": method}
            if params is not None:
                msg["params"] = params
            lines.append(msg)
        waiting = calls[0][0]
        try:
            await self._send_lines(lines)
            results = []
            for _rid, method, fut in sent:
                waiting = method
                results.append(await asyncio.wait_for(fut, timeout))
            return results
        except TimeoutError as exc:
            raise AppServerError(f"{waiting}: no response within {timeout}s", method=waiting) from exc
        finally:
            for rid, _method, _fut in sent:
                self._pending.pop(rid, None)
                self._pending_method.pop(rid, None)

    async def notify(self, method: str, params: dict | None = None) -> None:
        msg: dict = {"method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msg)

    # --- receiving ---------------------------------------------------------------------------------

    def add_listener(self, fn: Callable[[str, dict], None]) -> None:
        """``fn(method, params)`` runs for every notification, in arrival order, before it is queued."""
        self._listeners.append(fn)

    def add_result_listener(self, fn: Callable[[str, Any], None]) -> None:
        """``fn(method, result)`` runs for every successful answer to our requests, in stdout order.

        The awaiting caller resumes later, possibly after notifications written after the answer
        were handled; state taken from an answer here is never older than what those showed.
        """
        self._result_listeners.append(fn)

    async def next_notification(self, deadline: float | None = None) -> Notification:
        """The next notification; DeadlineReached at ``deadline`` (monotonic); AppServerClosed at EOF."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError as exc:
            raise DeadlineReached() from exc
        if item is None:
            self._queue.put_nowait(None)  # keep signalling EOF to later callers
            raise AppServerClosed(f"app-server exited (code {self.proc.returncode})")
        return item

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        with os.fdopen(safeio.open_append(self.raw_log), "ab") as raw:
            while True:
                try:
                    line = await self.proc.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError) as exc:  # line beyond STREAM_LIMIT
                    self.noise_lines.append(f"<unreadable line: {exc}>")
                    continue
                if not line:
                    break
                raw.write(line)
                raw.flush()
                self._dispatch(line)
        self.closed = True
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            pass
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(AppServerClosed(f"app-server exited (code {self.proc.returncode})"))
        self._queue.put_nowait(None)

    async def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        with os.fdopen(safeio.open_append(self.stderr_log), "ab") as fh:
            while True:
                chunk = await self.proc.stderr.read(65536)
                if not chunk:
                    break
                fh.write(chunk)
                fh.flush()

    def _dispatch(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            msg = json.loads(text)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self.noise_lines.append(text[:500])
            return
        has_method, has_id = "method" in msg, "id" in msg
        if has_method and has_id:
            self._on_server_request(msg)
        elif has_method:
            note = Notification(str(msg["method"]), msg.get("params") or {})
            for fn in self._listeners:
                fn(note.method, note.params)
            self._queue.put_nowait(note)
        elif has_id and ("result" in msg or "error" in msg):
            fut = self._pending.get(msg["id"]) if isinstance(msg["id"], int) else None
            if fut is None or fut.done():
                self.noise_lines.append(f"<response to unknown id> {text[:300]}")
            elif "error" in msg:
                err = msg["error"] or {}
                fut.set_exception(AppServerError(str(err.get("message")), err.get("code")))
            else:
                method = self._pending_method.get(msg["id"], "")
                for fn in self._result_listeners:
                    fn(method, msg["result"])
                fut.set_result(msg["result"])
        else:
            self.noise_lines.append(text[:500])

    def _on_server_request(self, msg: dict) -> None:
        method, params = str(msg["method"]), msg.get("params") or {}
        result = _answer(method, params)
        entry = {"method": method, "id": msg["id"], "answered": result is not None, "at": time.time()}
        self.server_requests.append(entry)
        reply: dict = {"id": msg["id"]}
        if result is None:
            reply["error"] = {"code": -32601, "message": f"marathon does not handle {method}"}
        else:
            reply["result"] = result
        asyncio.get_running_loop().create_task(self._send_quiet(reply))

    async def _send_quiet(self, msg: dict) -> None:
        try:
            await self._send(msg)
        except (AppServerError, ConnectionError, OSError):
            pass
