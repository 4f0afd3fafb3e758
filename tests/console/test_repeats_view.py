"""The console on a run with repeats (K = 3, tests/core/repeats_tree.py: recorded real harbor files,
no runner, no Docker): each grid cell shows its repeat count beside the mean of its repeats, the
selected cell's line names every repeat, and the drill-down lists each trial with its repeat."""

from __future__ import annotations

import pytest
from console_support import run_async, wait_for
from textual.widgets import DataTable

from console.app import make_app
from console.screens.drill import DrillScreen
from console.widgets.grid import Grid

SIZE = (160, 50)


@pytest.fixture(scope="module")
def rtree(tmp_path_factory):
    from core.repeats_tree import build

    return build(tmp_path_factory.mktemp("repeats-console") / "out", 3)


def test_grid_counts_repeats_and_the_drill_down_lists_them(rtree):
    async def go():
        app = make_app(rtree, docker=False, offer_start=False)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "grid"
            )
            await pilot.pause()
            grid = app.screen.query_one(Grid)
            cols = ["__label__", *grid.cols_order]
            row = {c: str(v) for c, v in zip(cols, grid.get_row("t02"), strict=True)}
            assert row["plain"].startswith("✓0.30 2/3")  # repeat 2 errored: the mean of two
            assert row["goal"].startswith("✓0.20 ×3")  # all three done
            grid.move_to("t02", "plain")
            await wait_for(pilot, lambda: app.main.selected == ("t02", "plain"), 10, "selection")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), 10, "the drill-down")
            drill = app.screen
            table = drill.query_one("#trials", DataTable)
            await wait_for(pilot, lambda: table.row_count == 3, 10, "the trials")
            heads = [str(c.label) for c in table.columns.values()]
            assert heads[-1] == "repeat"
            shown = [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]
            assert shown == ["r1 ✓0.20", "r2 ✗", "r3 ✓0.40"]
            title = str(drill.query_one("#drill-title").render())
            assert "repeats 2/3 done" in title and "r1 ✓0.20 r2 ✗ r3 ✓0.40" in title

    run_async(go)
