"""When the grid shows a change, and what the console gives back when it closes.

A change that comes alone (one trial finishing) is on the grid in the same call that hands it
over; only a burst waits, merged into one paint every ``FLUSH_SEC`` (``MainScreen._schedule_flush``;
before, every change waited ``FLUSH_SEC``). The console's first load freezes the model's records
out of the cyclic GC's reach (``console.feeds.TreeFeed.load``); closing the console unfreezes them,
or a process that opens many consoles (a test session) would keep every closed one's records.
"""

from __future__ import annotations

import gc

import real_trees
from console_support import rewrite_partial, run_async, wait_for

from console.app import make_app
from console.screens.main import FLUSH_SEC
from console.widgets.grid import Grid
from console.widgets.panels import ArmsPanel

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
