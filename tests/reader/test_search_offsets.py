"""The chunked byte search finds exactly what a whole-file search finds, across chunk edges."""

from __future__ import annotations

import random
import re

import pytest

from runner.results import search


@pytest.mark.parametrize("chunk", [3, 7, 64])
@pytest.mark.parametrize("query", ["ab", "aba", "ABA", "b"])
def test_offsets_equal_a_whole_file_search(monkeypatch, chunk: int, query: str) -> None:
    monkeypatch.setattr(search, "SEARCH_CHUNK", chunk)
    rng = random.Random(chunk * 31 + len(query))
    data = "".join(rng.choice("abAB\n") for _ in range(500)).encode()
    hay = data.lower() if query == query.lower() else data
    needle = re.escape(query.encode().lower() if query == query.lower() else query.encode())
    every = [m.start() for m in re.finditer(b"(?=" + needle + b")", hay)]

    def pread(n: int, at: int) -> bytes:
        return data[at : at + n]

    for first, limit in [(0, len(data)), (10, 300), (123, 124), (0, 0)]:
        inside = [o for o in every if first <= o < limit]
        got = list(search.find_offsets(pread, len(data), query, first, limit))
        assert got == inside
        got_back = list(search.find_offsets(pread, len(data), query, first, limit, backwards=True))
        assert got_back == inside[::-1]
