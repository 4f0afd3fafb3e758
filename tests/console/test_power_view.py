"""The console's marks for a comparison's limits: tasks every arm failed alike (the grid's ⚠, the
selected-cell line, the compare view's evidence) and each pair's MDE and tasks needed in the
compare view, on a tree built from recorded real harbor files (no runner, no Docker)."""

from __future__ import annotations

import shutil

import pytest
from console_support import run_async, wait_for
from textual.widgets import DataTable, Static
from textual_screen import screen_text

from console.app import make_app
from console.screens.compare import CompareScreen
from console.widgets.grid import Grid

SIZE = (160, 50)
EVIDENCE = "suspect: every arm failed alike: all 3 arms (plain, goal, heartbeat): the verifier's build failed"


@pytest.fixture(scope="module")
def sus_tree(tmp_path_factory):
    from core.suspect_tree import build

    return build(tmp_path_factory.mktemp("suspect-console") / "out")


def test_suspect_task_is_marked_and_compare_shows_its_evidence_and_each_pairs_mde(sus_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sus_tree, out, symlinks=True)

    async def go():
        app = make_app(out, docker=False, offer_start=False)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "grid"
            )
            await pilot.pause()
            assert app.main.suspect == {"env-broken": EVIDENCE}
            grid = app.screen.query_one(Grid)
            assert str(grid.get_row("env-broken")[0]).startswith("⚠env-broken")
            assert not str(grid.get_row("zero-mixed")[0]).startswith("⚠")
            grid.move_to("env-broken", "goal")
            await wait_for(pilot, lambda: app.main.selected == ("env-broken", "goal"), 10, "selection")
            await pilot.pause()
            assert "⚠ suspect: every arm failed alike" in screen_text(app)
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 10, "compare screen")
            screen = app.screen
            assert EVIDENCE in str(screen.query_one("#compare-suspect", Static).render())
            table = screen.query_one("#compare-pairs", DataTable)
            await wait_for(pilot, lambda: table.row_count == 3, 60, "the pairs table")
            heads = [str(c.label) for c in table.columns.values()]
            assert heads == [
                "a",
                "b",
                "partial diff [95 %]",
                "Holm p",
                "MDE partial / reward / pass",
                "tasks needed",
            ]
            plain_goal = [str(v) for v in table.get_row_at(0)]
            # 4 untied tasks of 10 (6 ties): even all one way, Holm p 0.125 > 0.05: the pair detects
            # nothing, whatever the t test's MDE (0.34) would say
            assert plain_goal[:2] == ["plain", "goal"] and plain_goal[4:] == [
                ">1 / >1 / >1",
                "231 / - / 231",
            ]
            title = str(screen.query_one("#compare-pairs-title", Static).render())
            assert "Holm-adjusted level 0.017 (0.05 over 3 pairs)" in title
            notes = str(screen.query_one("#compare-pairs-notes", Static).render())
            assert (
                "plain vs goal (n = 10): undetectable, its 4 untied task(s) all one way (every pair at its best) "
                "would give Holm p 0.125, above 0.05: partial −0.06 (231 tasks needed)"
            ) in " ".join(notes.split()), notes

    run_async(go)
