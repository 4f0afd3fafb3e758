"""Search a file's bytes chunk by chunk, so a hit anywhere in a gigabyte is found without loading it.

One implementation for the console's raw file view and the trajectory reader: both hold an open
file and an index of where their lines or steps start, and both map a byte offset back to them.
Smart case, as in less and vim: an all-lowercase query ignores ASCII case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

SEARCH_CHUNK = 16 * 1024 * 1024  # bytes read per step: one pread, bounded memory


def find_offsets(
    pread: Callable[[int, int], bytes],
    size: int,
    query: str,
    first: int,
    limit: int,
    backwards: bool = False,
) -> Iterator[int]:
    """Byte offsets where ``query`` starts, in ``[first, limit)``, nearest to the start point first.

    ``pread(length, offset)`` reads the file (``size`` bytes long); a match may run past ``limit``.
    Forwards the offsets ascend from ``first``; backwards they descend from just before ``limit``.
    """
    needle = query.encode("utf-8")
    if not needle:
        return
    fold = needle == needle.lower()
    if fold:
        needle = needle.lower()
    overlap = len(needle) - 1

    def read(begin: int, length: int) -> bytes:
        data = pread(length, begin)
        return data.lower() if fold else data

    if backwards:
        high = limit
        while high > first:
            low = max(first, high - SEARCH_CHUNK)
            data = read(low, min(high + overlap, size) - low)
            hit = data.rfind(needle, 0, high - low + overlap)  # a match that starts before high
            while hit >= 0:
                yield low + hit
                hit = data.rfind(needle, 0, hit + overlap) if hit > 0 else -1
            high = low
        return
    pos = first
    while pos < limit:
        span = min(SEARCH_CHUNK, limit - pos)
        data = read(pos, min(span + overlap, size - pos))
        hit = data.find(needle)
        while 0 <= hit < span:  # a hit in the overlap is the next chunk's, found there once
            yield pos + hit
            hit = data.find(needle, hit + 1)
        pos += span
