"""When the grid shows a change, what it shows first, and what the console gives back when it closes.

A change that comes alone (one trial finishing) is on the grid in the same call that hands it
over; only a burst waits, merged into one paint every ``FLUSH_SEC`` (``MainScreen._schedule_flush``;
before, every change waited ``FLUSH_SEC``). The console's first load freezes the model's records
out of the cyclic GC's reach (``console.feeds.TreeFeed.load``); closing the console unfreezes them,
or a process that opens many consoles (a test session) would keep every closed one's records.
Watching, the first paint takes the scan index unchecked and says so until the checked scan after
it; the arms panel sums the receipts of each arm.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest
import real_trees
from console_support import rewrite_partial, run_async, wait_for
from textual.widgets.data_table import ColumnDoesNotExist, RowDoesNotExist
from textual_screen import screen_text

from console import view
from console.app import ConsoleApp, make_app
from console.feeds import TreeFeed
from console.screens.main import FLUSH_SEC
from console.widgets.grid import Grid
from console.widgets.panels import ArmsPanel
from runner.results.index import RACY_NS
from runner.results.model import RunModel

SIZE = (100, 30)


def test_a_lone_change_is_on_the_grid_in_the_call_that_hands_it_over(tree):
    trial = next(p for p in (tree / "calc-partial" / "nop").rglob("metrics.json"))

    async def go():
        # no watcher: the test hands the feed's snapshots to the screen itself, as the App does
        app = make_app(tree, docker=False, offer_start=False, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.main.last_change_at is not None, 30, "first grid")
            grid = app.screen.query_one(Grid)
            col = grid.get_column_index("nop")
            assert "0.60" not in str(grid.get_row("calc-partial")[col])
            first = app._feed.update(rewrite_partial(trial, 0.6))
            second = app._feed.update(rewrite_partial(trial, 0.7))
            assert first is not None and second is not None
            await pilot.pause(2 * FLUSH_SEC)  # the last paint is older than FLUSH_SEC
            app.main.apply_tree(first)
            assert "0.60" in str(grid.get_row("calc-partial")[col])  # no await in between
            app.main.apply_tree(second)  # right after a paint: shown by the next one, never lost
            await wait_for(pilot, lambda: "0.70" in str(grid.get_row("calc-partial")[col]), 10, "0.70")

    run_async(go)


def test_closing_the_console_gives_back_what_its_load_froze(tree):
    during: list[int] = []

    async def go():
        app = make_app(tree, docker=False, offer_start=False, watch=False)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.main.last_change_at is not None, 30, "first grid")
            during.append(gc.get_freeze_count())

    run_async(go)
    assert during[0] > 0, "the load froze nothing"
    assert gc.get_freeze_count() == 0


def test_the_arms_panel_sums_the_receipts_of_each_arm(tmp_path):
    """The recorded agents tree: harbor ran a test agent whose receipt reports 2 continuations,
    1 unblock and 1 error event (arm ``partial``); the panel shows them on that arm's row, 0 on the
    arms without receipts."""
    out = real_trees.copy_recorded("agents", tmp_path / "out")
    rows: dict[str, list[str]] = {}

    async def go():
        app = make_app(out, docker=False, offer_start=False, watch=False)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(pilot, lambda: app.main.last_change_at is not None, 30, "first grid")
            panel = app.main.query_one(ArmsPanel)
            await wait_for(pilot, lambda: "partial" in panel.render().plain, 10, "the arms panel")
            for line in panel.render().plain.splitlines()[1:]:
                name, *sums = line.split()
                rows[name] = sums

    run_async(go)
    assert rows["partial"] == ["2", "1", "1"], rows
    assert all(sums == ["0", "0", "0"] for arm, sums in rows.items() if arm != "partial"), rows


class CheckedRecordingApp(ConsoleApp):
    """The console, with the ``checked`` flag of every tree snapshot it is handed kept in order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.checked_seen: list[bool] = []

    def on_tree_data(self, msg) -> None:
        self.checked_seen.append(msg.snapshot.checked)
        super().on_tree_data(msg)


def _indexed_then_changed(tree) -> Path:
    """The tree's scan index made by a checked scan, then a score finished again behind it."""
    time.sleep(RACY_NS / 1e9 + 0.2)  # the index stores only files older than its racy window
    RunModel.load(tree)
    trial = next(p for p in (tree / "calc-partial" / "nop").rglob("metrics.json"))
    rewrite_partial(trial, 0.6)
    return trial


def test_the_first_paint_takes_the_index_unchecked_and_the_checked_scan_follows(tree):
    """Watching, the console's first paint takes the scan index's entries without checking their
    files (a third of a warm scan on a 2,010-task tree), says so in the top bar, and the checked
    scan that follows at once brings what changed behind the index (``TreeFeed.load``)."""
    _indexed_then_changed(tree)
    feed = TreeFeed(tree)
    try:
        first = feed.load(trust_index=True)
        assert not first.checked and first.cells[("calc-partial", "nop")].partial == pytest.approx(0.2)
        after = feed.rescan()
        assert after is not None and after.checked
        assert after.cells[("calc-partial", "nop")].partial == pytest.approx(0.6)
        assert feed.rescan() is None  # checked already, nothing changed: nothing to hand over
    finally:
        feed.release()
    # an unchecked first paint of a tree nothing changed in: the checked scan still says so
    RunModel.load(tree)
    time.sleep(RACY_NS / 1e9 + 0.2)
    RunModel.load(tree)  # every entry settled and stored
    feed = TreeFeed(tree)
    try:
        assert not feed.load(trust_index=True).checked
        same = feed.rescan()
        assert same is not None and same.checked and not same.full and dict(same.cells) == {}
    finally:
        feed.release()

    async def go(app: CheckedRecordingApp) -> None:
        async with app.run_test(size=SIZE) as pilot:
            grid = app.screen.query_one(Grid)

            def shown() -> bool:  # the checked value on the grid (its columns come with the first paint)
                try:
                    return "0.60" in str(grid.get_row("calc-partial")[grid.get_column_index("nop")])
                except (ColumnDoesNotExist, RowDoesNotExist):
                    return False

            await wait_for(pilot, lambda: app.main.checked and bool(app.checked_seen) and shown(), 30, "0.60")
            # the top bar tells the data's age again ("data live", "data 6s old" on a slow machine)
            await wait_for(
                pilot,
                lambda: view.UNCHECKED not in (t := screen_text(app)) and "no data yet" not in t,
                10,
                "age",
            )

    watching = CheckedRecordingApp(tree, docker=False, offer_start=False)
    run_async(lambda: go(watching))
    assert watching.checked_seen[0] is False and watching.checked_seen[-1] is True
    # not watching (--screenshot): the one paint there is is checked
    still = CheckedRecordingApp(tree, docker=False, offer_start=False, watch=False)
    run_async(lambda: go(still))
    assert still.checked_seen == [True]
