"""Where the gateway reads a large request body's parameters: one child process, off its event loop.

Why: the gateway serves every attempt of a host on one event loop, and ``json.loads`` holds it for
as long as it parses. A 64 MiB body of small items (the most the gateway takes) took 1.1-1.4 s to
parse, and an agent under test could send eight at a time, again and again: every other
attempt's stream, of every arm, stalled that long each time (its model time running on). A
thread would not help (the parse holds the GIL throughout). So a body over ``INLINE_MAX`` (or
compressed, whose size says nothing of what it expands to) is parsed by a child process the
gateway starts when it first needs one, one body at a time, by ``wire.request_params`` as a small
body is parsed inline; the loop only writes the body to a pipe and reads a line back.

The child gets the gateway's environment without the model key or any other credential (it needs
none) and ends with the gateway (its stdin closes); a child that dies or hangs is ended (by its
PID, ours) and the next large body starts another; the call it was parsing is forwarded all the
same, its parameters ``unparsed`` on the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from runner.ops.gateway.wire import request_params
from runner.secrets import without_secrets

#: a body up to this size, sent as is, is parsed on the event loop (at most ~20 ms of small items)
INLINE_MAX = 1 << 20
#: a parse that takes longer ends its child (a 64 MiB body of small items takes 1-2 s)
PARSE_TIMEOUT_SEC = 60.0
#: the child's answer: the parameters of one body, every value bounded (``wire.param``)
MAX_ANSWER = 1 << 20
#: a child that holds more memory than this after an answer is ended (the next large body starts
#: another): parsing 52 MB of small items took it to 0.5 GB for a moment (25 MB held after it,
#: measured); a guard for whatever a body's objects leave behind
RESTART_HELD_MB = 256

Params = tuple[dict[str, Any], bool]
#: how an ``unparsed`` reason of the gateway's own begins (its parser failed, not the body): such a
#: call is forwarded all the same, its parameters unknown; a body the gateway cannot read is refused
PARSER_FAILED = "the parser process"


def inline(body: bytes, encoding: str | None) -> bool:
    """Whether the gateway parses this body itself: small, and as sent (not compressed)."""
    return len(body) <= INLINE_MAX and (encoding or "").strip().lower() in ("", "identity")


class BodyParser:
    """The gateway's parser of large bodies (``params``); ``close`` ends its child."""

    def __init__(self, key_var: str = "") -> None:
        self._key_var = key_var
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.started = 0  # children started (a test reads it)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def params(self, body: bytes, encoding: str | None, turn: asyncio.Lock | None = None) -> Params:
        """``wire.request_params`` of the body: inline when small, else from the child, once
        ``turn`` is held (the attempt's own: one of its bodies at a time in the child's queue)."""
        if inline(body, encoding):
            return request_params(body, encoding)
        async with turn or contextlib.nullcontext(), self._lock:
            try:
                got, held_mb = await asyncio.wait_for(self._ask(body, encoding), PARSE_TIMEOUT_SEC)
                if held_mb > RESTART_HELD_MB:
                    await self.close()
                return got
            except (OSError, EOFError, ValueError, TypeError, KeyError, TimeoutError) as exc:
                await self._end()
                why = "took too long" if isinstance(exc, TimeoutError) else f"failed ({type(exc).__name__})"
                return {"unparsed": f"{PARSER_FAILED} {why}"}, False
            except asyncio.CancelledError:  # the client left mid-exchange: its answer must not be
                self._abandon()  # read as the next body's
                raise

    async def _ask(self, body: bytes, encoding: str | None) -> tuple[Params, float]:
        proc = await self._child()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"n": len(body), "encoding": encoding}).encode() + b"\n")
        proc.stdin.write(body)
        await proc.stdin.drain()
        line = await proc.stdout.readline()
        if not line.endswith(b"\n"):
            raise EOFError("the parser ended")
        got = json.loads(line)
        return (dict(got["params"]), got["stream"] is True), float(got["held_mb"])

    async def _child(self) -> asyncio.subprocess.Process:
        if self._proc is not None and self._proc.returncode is None:
            return self._proc
        env = {k: v for k, v in without_secrets(os.environ).items() if k != self._key_var}
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            env=env, limit=MAX_ANSWER, close_fds=True,
        )  # fmt: skip
        self.started += 1
        return self._proc

    def _abandon(self) -> asyncio.subprocess.Process | None:
        """Kill the child (ours, by its handle) and forget it; the next large body starts another."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        return proc

    async def _end(self) -> None:
        proc = self._abandon()
        if proc is not None:
            await proc.wait()

    async def close(self) -> None:
        """End the child: its stdin closed (it exits at the end of its input), then killed if it
        does not."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            await self._end()
        self._proc = None


def _serve() -> int:
    """The child: a header line (``{"n": bytes, "encoding": ...}``), the body, and one answer
    line back, until its input ends."""
    src, dst = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = src.readline()
        if not head:
            return 0
        h = json.loads(head)
        body = src.read(int(h["n"]))
        params, stream = request_params(body, h.get("encoding"))
        del body
        dst.write(json.dumps({"params": params, "stream": stream, "held_mb": _held_mb()}).encode() + b"\n")
        dst.flush()


def _held_mb() -> float:
    """This process's resident memory now, in MB (not ``ru_maxrss``: that survives ``execve`` and
    would be the parent's peak at the fork, a test runner's hundreds of MB)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


if __name__ == "__main__":
    sys.exit(_serve())
