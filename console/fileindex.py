"""Lazy line index over a file of any size: the IO model behind the virtualised file view.

A trajectory can be a gigabyte (codex session JSONL of a day-long run). Reading it whole would
freeze the console and eat memory, so the file is indexed in chunks (a background worker calls
``index_more`` until ``complete``) and lines are read on demand with ``os.pread``. The first screen
needs only the first chunk. The file may grow while the trial runs: ``refresh`` notices and the
indexer picks up from where it stopped. No textual import here: this is plain IO, testable alone.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from pathlib import Path

from modes import safeio
from runner.results.search import find_offsets

#: A "line" longer than this many bytes is shown as several display lines (a minified 1 GB JSON
#: document is one physical line; it must still open at once).
MAX_LINE_BYTES = 4096
CHUNK = 8 * 1024 * 1024
#: the most display lines indexed (8 bytes each): a 200 MB file of newlines alone once took 1.6 GB
#: to index; past this the view shows the first ones and says so (``capped``)
MAX_LINES = 5_000_000


class LineSource:
    """Display lines of one file, indexed incrementally; safe to read while another thread indexes."""

    def __init__(self, path: Path | str, root: Path | str | None = None) -> None:
        self.path = Path(path)
        # the trial dir: the file is opened by the tree's safe-open rules (modes.safeio), so a FIFO
        # never blocks the view and a symlink out of the trial dir is never shown
        self.root = Path(root) if root is not None else self.path.parent
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._starts = array("q", [0])  # start offset of each display line
        self._scanned = 0  # bytes indexed so far
        self.capped = False  # MAX_LINES reached: the lines past it are not indexed
        self.size = 0
        self.error: str | None = None
        self.missing = False  # error is "not there (yet)" rather than a refusal or an IO error
        self._open()

    # -- lifecycle -----------------------------------------------------------------------------
    def _open(self) -> None:
        got = safeio.open_tree_file(self.path, self.root, safeio.STREAM)
        if isinstance(got, safeio.Refused):
            self._fd = None
            self.size = 0
            self.missing = got.missing
            self.error = f"{self.path.name}: {'No such file or directory' if got.missing else got.reason}"
            return
        self.missing = False
        self._fd = got
        try:
            self.size = os.fstat(self._fd).st_size
            self.error = None
        except OSError as exc:
            os.close(self._fd)
            self._fd = None
            self.size = 0
            self.error = f"{self.path.name}: {exc.strerror or exc}"

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def refresh(self) -> bool:
        """Re-stat the file (it may have appeared, grown or been replaced); True when it changed."""
        with self._lock:
            if self._fd is None:
                self._open()
                return self._fd is not None
            try:
                size = os.fstat(self._fd).st_size
                st = os.stat(self.path)
            except OSError:
                return False
            if st.st_ino != os.fstat(self._fd).st_ino or size < self._scanned:
                # replaced (atomic rewrite) or truncated: start over
                os.close(self._fd)
                self._fd = None
                self._starts = array("q", [0])
                self._scanned = 0
                self.capped = False
                self._open()
                return True
            if size != self.size:
                self.size = size
                return True
            return False

    # -- indexing ------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return self._scanned >= self.size or self.capped

    @property
    def scanned(self) -> int:
        return self._scanned

    def index_more(self, max_bytes: int = CHUNK) -> bool:
        """Index up to ``max_bytes`` more; returns True while there is more to index."""
        with self._lock:
            if self._fd is None or self._scanned >= self.size or self.capped:
                return False
            start = self._scanned
            data = os.pread(self._fd, min(max_bytes, self.size - start), start)
        if not data:
            return False
        new = array("q")
        line_start = self._starts[-1]
        find = data.find
        pos = 0
        n = len(data)
        while True:
            nl = find(b"\n", pos)
            end = nl if nl >= 0 else n
            # long line: break it every MAX_LINE_BYTES
            while start + end - line_start > MAX_LINE_BYTES:
                line_start += MAX_LINE_BYTES
                new.append(line_start)
            if nl < 0:
                break
            line_start = start + nl + 1
            new.append(line_start)
            pos = nl + 1
        with self._lock:
            room = MAX_LINES + 1 - len(self._starts)
            if len(new) >= room:  # the first MAX_LINES lines, each whole; the rest not indexed
                del new[room:]
                self._starts.extend(new)
                self._scanned = self._starts[-1]
                self.capped = True
                return False
            self._starts.extend(new)
            self._scanned = start + n
            return self._scanned < self.size

    def index_to(self, offset: int) -> None:
        while self._scanned <= offset and self.index_more():
            pass

    # -- reading -------------------------------------------------------------------------------
    @property
    def line_count(self) -> int:
        """Display lines known so far (the last, unterminated line counts once indexed)."""
        with self._lock:
            n = len(self._starts) - 1
            if self._starts[-1] < self._scanned:
                n += 1  # an unterminated last line
            return n

    def line_bounds(self, index: int) -> tuple[int, int]:
        with self._lock:
            start = self._starts[index]
            end = self._starts[index + 1] if index + 1 < len(self._starts) else self._scanned
        return start, end

    def get_line(self, index: int) -> str:
        if index < 0 or index >= self.line_count or self._fd is None:
            return ""
        start, end = self.line_bounds(index)
        try:
            raw = os.pread(self._fd, end - start, start)
        except OSError:
            return ""
        return raw.rstrip(b"\r\n").decode("utf-8", "replace").expandtabs(4)

    def line_of_offset(self, offset: int) -> int:
        self.index_to(offset)
        with self._lock:
            return max(0, bisect.bisect_right(self._starts, offset) - 1)

    # -- search --------------------------------------------------------------------------------
    def search(self, query: str, start_line: int = 0, backwards: bool = False) -> int | None:
        """The display line of the first match of ``query`` at/after ``start_line`` (or before it)."""
        if not query or self._fd is None:
            return None
        fd, size, count = self._fd, self.size, self.line_count
        if backwards:
            first, limit = 0, self.line_bounds(start_line)[0] if start_line < count else size
        else:
            first, limit = self.line_bounds(start_line)[0] if 0 <= start_line < count else 0, size
        for offset in find_offsets(lambda n, at: os.pread(fd, n, at), size, query, first, limit, backwards):
            return self.line_of_offset(offset)
        return None
