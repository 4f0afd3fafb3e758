"""The console's watcher in its child process (console/treewatch.py): real watchfiles, a real child,
real files; what it reports, that a stop or the console's death ends the child, and a file name
watchfiles cannot report (an agent can make one) costing a rescan, not the watcher."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from console.treewatch import WatchSettings, watch

REPO = Path(__file__).resolve().parents[2]


def settings(*roots: Path) -> WatchSettings:
    return WatchSettings([str(r) for r in roots], 50, 20, 200, False, 200)


def own_children() -> set[tuple[int, float]]:
    return {(p.pid, p.create_time()) for p in psutil.Process().children()}


def test_changes_arrive_hostile_names_intact_and_a_stop_ends_the_child(tmp_path):
    before = own_children()
    stop = threading.Event()
    seen: set[str] = set()
    it = watch(settings(tmp_path), stop)
    next(it)  # the first batch (a timeout's empty one): the watches are set up
    names = ["plain.json", "new\nline", "naïve ☃.json"]
    for n in names:
        (tmp_path / n).write_text("{}")
    deadline = time.monotonic() + 30
    while not all(str(tmp_path / n) in seen for n in names):
        assert time.monotonic() < deadline, f"never saw all of {names}: {seen}"
        seen |= {p for _, p in next(it)}
    stop.set()
    assert list(it) == []  # ends at once
    deadline = time.monotonic() + 30
    while own_children() - before:
        assert time.monotonic() < deadline, "the watcher's child outlived its stop"
        time.sleep(0.05)


def test_a_name_that_is_not_utf8_asks_for_a_rescan_and_the_watch_goes_on(tmp_path):
    """watchfiles raises on such a name (``WatchfilesRustInternalError``): in the console's own
    thread that ended its live updates for good."""
    stop = threading.Event()
    it = watch(settings(tmp_path), stop)
    next(it)
    (tmp_path / os.fsdecode(b"bad-\xff-utf8")).write_text("{}")
    deadline = time.monotonic() + 30
    while (got := next(it)) is not None:
        assert time.monotonic() < deadline, f"no rescan asked for; last batch {got}"
    while next(it) is None:  # the child's next batch comes from its new watch: it is set up
        pass
    (tmp_path / "after.json").write_text("{}")
    seen: set[str] = set()
    while str(tmp_path / "after.json") not in seen:
        assert time.monotonic() < deadline + 30, f"the watch did not go on: {seen}"
        seen |= {p for _, p in (next(it) or ())}
    stop.set()
    assert list(it) == []


HOLDER = """
import sys, threading, psutil
from console.treewatch import WatchSettings, watch
it = watch(WatchSettings([sys.argv[1]], 50, 20, 200, False, 200), threading.Event())
next(it)
(child,) = psutil.Process().children()
print(child.pid, child.create_time(), flush=True)
threading.Event().wait()
"""


def test_the_child_ends_when_the_console_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)  # fmt: skip
    pid, created = holder.stdout.readline().split()
    child = psutil.Process(int(pid))
    assert child.create_time() == float(created)
    holder.kill()  # the console killed: no stop, no cleanup of its own
    holder.wait()
    try:
        child.wait(30)  # its stdin closed with its parent: it ends by itself
    except psutil.TimeoutExpired:
        child.kill()
        pytest.fail("the watcher's child outlived the console")
