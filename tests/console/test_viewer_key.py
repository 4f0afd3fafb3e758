"""The console's one key for the viewer (``w``): it starts ``marathon view`` detached (never the
console's child, registered like the runner) and says how to reach it; pressed again it shows the
same viewer. Real processes on a recorded tree; no Docker."""

from __future__ import annotations

import os
import shutil

import psutil
from console_support import run_async, wait_for

from console.app import make_app
from console.feeds import read_runner_info
from console.screens.confirm import MessageScreen
from runner.ops import viewer
from runner.ops.procs import Registry


async def _press_w(pilot, app) -> str:
    await pilot.press("w")
    await wait_for(pilot, lambda: isinstance(app.screen, MessageScreen), 120, "the viewer's dialog")
    text = app.screen.title_text + "\n" + app.screen.text
    await pilot.press("enter")
    await wait_for(pilot, lambda: not isinstance(app.screen, MessageScreen), 10, "the dialog closed")
    return text


def test_w_starts_the_viewer_then_shows_it(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    got = {}

    async def go():
        app = make_app(out, watch=False, docker=False, offer_start=False, runner_sec=0.5)
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(pilot, lambda: bool(app.main.cells), 30, "first grid")
            got["first"] = await _press_w(pilot, app)
            got["again"] = await _press_w(pilot, app)

    try:
        run_async(go)
        acc = viewer.running(out)
        assert acc is not None
        assert "started" in got["first"] and acc.url in got["first"] and "ssh -N -L" in got["first"]
        assert "already running" in got["again"] and acc.url in got["again"]
        proc = psutil.Process(acc.pid)
        assert proc.ppid() != os.getpid() and os.getsid(acc.pid) == acc.pid  # not the console's child
        assert [e.pid for e in Registry(out).entries() if e.role == viewer.ROLE_VIEWER] == [acc.pid]
        assert read_runner_info(out).running == 0  # the viewer is not counted as a running trial
    finally:
        viewer.stop(out)
    assert viewer.running(out) is None
