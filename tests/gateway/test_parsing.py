"""The gateway's parser of large bodies (``runner.ops.gateway.parsing``): its real child process,
driven as the gateway drives it, one event loop, no gateway around it."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal

from runner.ops.gateway import parsing
from runner.ops.gateway.server import unmeterable_body
from runner.ops.gateway.wire import request_params
from runner.results import ledger as L


def _big(model: str, n: int = 40_000) -> bytes:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    return json.dumps({"model": model, "stream": True, "input": [item] * n}).encode()


def test_small_bodies_stay_inline_and_large_or_compressed_ones_go_to_one_child():
    small = b'{"model": "m", "stream": true, "input": []}'

    async def main() -> None:
        p = parsing.BodyParser()
        try:
            assert await p.params(small, None) == request_params(small) and p.started == 0
            for model in ("a", "b"):
                body = _big(model)
                assert len(body) > parsing.INLINE_MAX
                assert await p.params(body, None) == request_params(body)
            zipped = gzip.compress(small)  # small, but what it expands to is not known before
            assert await p.params(zipped, "gzip") == request_params(small)
            assert p.started == 1 and p.pid is not None
            assert await p.params(b"{" * 2_000_000, None) == ({"unparsed": "not JSON"}, False)
        finally:
            await p.close()
        assert p.pid is None

    asyncio.run(main())


def test_a_call_cancelled_mid_parse_never_hands_its_answer_to_the_next():
    """The client of a large body left (its handler cancelled) at any point of the exchange: the
    next body's parameters are its own (the child is ended rather than read out of step)."""

    async def main() -> None:
        p = parsing.BodyParser()
        try:
            for delay in (0.0, 0.001, 0.005, 0.02):
                first = asyncio.ensure_future(p.params(_big("cancelled"), None))
                await asyncio.sleep(delay)
                first.cancel()
                await asyncio.gather(first, return_exceptions=True)
                params, stream = await p.params(_big("next"), None)
                assert params["model"] == "next" and stream
        finally:
            await p.close()

    asyncio.run(main())


def test_a_child_that_hangs_or_dies_is_replaced_and_its_call_is_unparsed(monkeypatch):
    async def main() -> None:
        p = parsing.BodyParser()
        try:
            await p.params(_big("one"), None)
            pid = p.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)  # our own child, held still: it never answers
            with monkeypatch.context() as m:  # (only this call's wait is short: a loaded machine's
                m.setattr(parsing, "PARSE_TIMEOUT_SEC", 1.0)  # child start and parse take over 1 s)
                got = await p.params(_big("held"), None)
            assert got == ({"unparsed": "the parser process took too long"}, False)
            # the gateway's own failure, not the body's: forwarded (a review found it refused 415)
            assert unmeterable_body(got[0]) is None
            assert unmeterable_body(request_params(b"not json")[0])[0] == L.UNREADABLE
            assert p.pid is None  # ended, by its handle
            assert (await p.params(_big("two"), None))[0]["model"] == "two"
            os.kill(p.pid, signal.SIGKILL)
            for _ in range(1000):  # until the loop has reaped it (10 s at most)
                if p.pid is None:
                    break
                await asyncio.sleep(0.01)
            assert (await p.params(_big("three"), None))[0]["model"] == "three"
            assert p.started == 3
        finally:
            await p.close()

    asyncio.run(main())


def test_a_child_that_holds_much_memory_after_its_answer_is_ended(monkeypatch):
    """A 52 MB body of small items takes the child to 0.5 GB for a moment: holding more than
    ``RESTART_HELD_MB`` after its answer it is ended, and the next large body starts another (here the
    mark is 0 MB, so every body is past it)."""
    monkeypatch.setattr(parsing, "RESTART_HELD_MB", 0)

    async def main() -> None:
        p = parsing.BodyParser()
        try:
            for n, model in enumerate(("one", "two"), 1):
                assert (await p.params(_big(model), None))[0]["model"] == model
                assert p.pid is None and p.started == n
        finally:
            await p.close()

    asyncio.run(main())
