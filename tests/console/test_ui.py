"""The console's screens and keys through a Pilot, on copies of a real harbor tree (no runner needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from console_support import REPO_ROOT, rewrite_partial, run_async, wait_for
from textual_screen import screen_text

from console.app import make_app
from console.keys import KEYS
from console.screens.drill import DrillScreen
from console.screens.help import HelpScreen, keys_table
from console.widgets.fileview import FileView
from console.widgets.grid import Grid

SIZE = (100, 30)


def _app(out, **kw):
    kw.setdefault("docker", False)
    kw.setdefault("offer_start", False)
    return make_app(out, **kw)


async def _ready(pilot, app):
    await wait_for(
        pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "first grid"
    )
    await pilot.pause()


async def _open_drill(pilot, app, task: str, arm: str, what: str) -> DrillScreen:
    """The grid's first paint, the cursor on (task, arm), Enter: the drill-down with its file open."""
    await _ready(pilot, app)
    app.screen.query_one(Grid).move_to(task, arm)
    await pilot.pause()
    await pilot.press("enter")
    await wait_for(
        pilot, lambda: isinstance(app.screen, DrillScreen) and app.screen.source is not None, 10, what
    )
    return app.screen


def test_grid_shows_both_metrics_and_build_failure(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            text = screen_text(app)
            assert "calc-partial" in text and "oracle" in text and "nop" in text
            grid = app.screen.query_one(Grid)
            row = grid.get_row("build-gate")
            nop_col = grid.get_column_index("nop")
            assert "B" in str(row[nop_col])  # build failure marked
            assert "0.20" in str(grid.get_row("calc-partial")[nop_col])  # partial
            assert "56%" in str(grid.get_row("two-stage")[nop_col])  # pass rate beside a 0 partial
            assert "mean" in text

    run_async(go)


def test_filter_sort_and_transpose_keep_the_cursor_on_its_pair(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            grid = app.screen.query_one(Grid)
            grid.move_to("two-stage", "nop")
            await pilot.pause()
            assert app.main.selected == ("two-stage", "nop")
            await pilot.press("slash", *"stage", "enter")
            await wait_for(pilot, lambda: grid.rows_order == ["two-stage"], 10, "filtered")
            assert app.main.selected == ("two-stage", "nop")
            await pilot.press("escape")  # clears the filter
            await wait_for(pilot, lambda: len(grid.rows_order) == 4, 10, "filter cleared")
            # typing in the filter never triggers actions: K inside the filter is just a letter
            await pilot.press("slash", "K", "escape")
            await wait_for(
                pilot, lambda: app.focused is grid and app.main.filter_text == "", 10, "filter closed"
            )
            assert not app.main.busy and app.screen is app.main
            await pilot.press("s")  # sort by partial in the cursor's column (nop): best first
            await wait_for(pilot, lambda: app.main.sort_key == "partial", 10, "sorted")
            await wait_for(pilot, lambda: grid.rows_order[0] == "words-passrate", 10, "best first")
            await wait_for(pilot, lambda: app.main.selected == ("two-stage", "nop"), 10, "cursor kept")
            await pilot.press("t")
            await wait_for(pilot, lambda: app.main.arm_major, 10, "arm-major")
            assert sorted(grid.rows_order) == ["nop", "oracle"]
            await wait_for(pilot, lambda: app.main.selected == ("two-stage", "nop"), 10, "cursor kept")
            await pilot.press("t")
            await wait_for(pilot, lambda: not app.main.arm_major, 10, "task-major")

    run_async(go)


def _rendered(table) -> str:
    """A rich table as plain text, wide enough that no cell wraps."""
    import io

    from rich.console import Console

    console = Console(width=400, file=io.StringIO(), record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_help_screen_and_command_palette(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            await pilot.press("question_mark")
            await pilot.pause(0.3)
            assert isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            # the screen opens on the key table: its first rows are in view
            assert KEYS[0].key_label in text and " ".join(KEYS[0].help.split()[:3]) in text, text
            # and the table is the whole key table, each key with its words; the destructive ones
            # marked disabled in a read-only console (a key left out, or help out of step, fails here)
            shown, readonly = _rendered(keys_table()), _rendered(keys_table(readonly=True))
            for k in KEYS:
                assert k.key_label in shown and " ".join(k.help.split()[:4]) in shown, k
            assert readonly.count("(disabled: --readonly)") == sum(k.destructive for k in KEYS) > 0
            assert "(disabled: --readonly)" not in shown
            await pilot.press("escape")
            await pilot.pause(0.2)
            await pilot.press("ctrl+p")
            await pilot.pause(0.3)
            await pilot.press(*"transpose")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await pilot.pause(0.5)
            assert app.main.arm_major

    run_async(go)


def test_drill_down_lists_trials_opens_files_and_searches(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            drill = await _open_drill(pilot, app, "calc-partial", "nop", "drill")
            assert len(drill.trials) == 1 and drill.trials[0].trial.startswith("calc-partial__")
            await pilot.press("tab")  # test-stdout
            await wait_for(
                pilot, lambda: drill.source and drill.source.path.name == "test-stdout.txt", 10, "stdout"
            )
            await wait_for(pilot, lambda: drill.source.line_count > 0, 10, "stdout lines")
            fv = drill.query_one(FileView)
            first = drill.source.get_line(0)
            assert first and first.split()[0] in screen_text(app)
            await pilot.press("slash", *"div_zero", "enter")
            await wait_for(pilot, lambda: fv.match_line is not None, 10, "search hit")
            assert "div_zero" in drill.source.get_line(fv.match_line)
            assert fv.match_line == next(
                i for i in range(drill.source.line_count) if "div_zero" in drill.source.get_line(i)
            )
            await pilot.press("tab")  # metrics.json
            await wait_for(pilot, lambda: drill.source.path.name == "metrics.json", 10, "metrics")
            await wait_for(pilot, lambda: "partial" in screen_text(app), 10, "metrics shown")
            await pilot.press("escape")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, DrillScreen)

    run_async(go)


def test_on_a_label_c_compares_its_task_and_enter_says_what_it_needs(tree):
    """A probe found the cursor able to rest on a row's label (one step left of the first arm) or
    the mean row, where Enter and c did nothing, silently. On a task's label c compares that task;
    where there is no cell, Enter says so."""
    from textual.coordinate import Coordinate

    from console.screens.compare import CompareScreen

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            grid = app.screen.query_one(Grid)
            grid.move_to("calc-partial", "nop")
            await pilot.pause()
            grid.cursor_coordinate = Coordinate(grid.cursor_coordinate.row, 0)  # the row's label
            await pilot.pause()
            assert app.main.selected is None and grid.current_task() == "calc-partial"
            await pilot.press("enter")
            await wait_for(
                pilot,
                lambda: any("onto a cell" in str(n.message) for n in app._notifications),
                10,
                "the notice",
            )
            assert not isinstance(app.screen, DrillScreen)
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 10, "compare screen")
            assert app.screen.task_name == "calc-partial"

    run_async(go)


def test_the_file_keys_work_in_a_drill_down_as_it_opens(tree):
    """A probe found f, g, G, n and N doing nothing in a fresh drill-down: the trials table has the
    focus, and only the file view had the keys. The screen has them now, whichever part is focused."""

    async def go():
        app = _app(tree)
        async with app.run_test(size=(100, 12)) as pilot:  # a short screen: the file is longer
            drill = await _open_drill(pilot, app, "calc-partial", "nop", "drill")
            await pilot.press("tab")  # test-stdout
            await wait_for(
                pilot, lambda: drill.source and drill.source.path.name == "test-stdout.txt", 10, "stdout"
            )
            fv = drill.query_one(FileView)
            await wait_for(pilot, lambda: fv.max_scroll_y > 0, 10, "a file longer than the view")
            assert isinstance(app.focused, type(drill.query_one("#trials")))  # the table, as it opens
            await pilot.press("G")
            await wait_for(pilot, lambda: fv.scroll_y == fv.max_scroll_y, 10, "the end")
            await pilot.press("g")
            await wait_for(pilot, lambda: fv.scroll_y == 0, 10, "the top")
            await pilot.press("f")
            await wait_for(pilot, lambda: fv.follow, 10, "following")
            await pilot.press("f")
            await wait_for(pilot, lambda: not fv.follow, 10, "not following")

    run_async(go)


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "poll"])
def test_a_file_change_updates_its_cell_live(tree, poll):
    """Rewriting a trial's metrics.json (atomically, as a verifier rerun would, then result.json as
    harbor does after its verifier) updates the cell, with inotify and with --poll (NFS, where
    inotify misses other hosts' writes)."""
    trial = next(p for p in (tree / "calc-partial" / "nop").rglob("metrics.json"))

    async def go():
        app = _app(tree, poll=poll)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            # the watches are up (polling: the first poll's baseline taken) and the tree read after them
            await wait_for(pilot, app.watching.is_set, 30, "the watcher")
            rewrite_partial(trial, 0.6)
            grid = app.screen.query_one(Grid)
            col = grid.get_column_index("nop")
            await wait_for(
                pilot, lambda: "0.60" in str(grid.get_row("calc-partial")[col]), 20, "cell updated"
            )
            assert app.main.cells[("calc-partial", "nop")].partial == pytest.approx(0.6)

    run_async(go)


def test_a_file_name_the_watcher_cannot_report_costs_a_rescan_not_the_live_updates(tree):
    """An agent can name a file in its trial dir with bytes that are not UTF-8; watchfiles cannot
    report such a name, and the batch it is in is lost (console/treewatch.py asks for a rescan
    instead). The console rescans: a change made with it still updates its cell, long before the
    periodic rescan, and the watch goes on (tests/console/test_treewatch.py)."""
    trial = next(p for p in (tree / "calc-partial" / "nop").rglob("metrics.json"))

    async def go():
        app = _app(tree, poll=False, rescan_sec=600)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            loaded = app.main.scanned_at
            # the watcher's first batch came (a heartbeat): its rescan is behind us
            await wait_for(pilot, lambda: app.main.scanned_at != loaded, 20, "the watcher's first batch")
            # in one batch of changes: the one watchfiles cannot report loses the other with it
            (trial.parent / os.fsdecode(b"agent-\xff-name")).write_text("{}")
            rewrite_partial(trial, 0.6)
            grid = app.screen.query_one(Grid)
            col = grid.get_column_index("nop")
            await wait_for(
                pilot, lambda: "0.60" in str(grid.get_row("calc-partial")[col]), 20, "cell updated"
            )

    run_async(go)


def test_huge_trajectory_opens_at_once_and_is_indexed_in_the_background(tree):
    trial_dir = next((tree / "calc-partial" / "oracle").rglob("calc-partial__*"))
    traj = trial_dir / "agent" / "trajectory.json"
    line = json.dumps({"step": 1, "message": "x" * 200}) + "\n"
    with open(traj, "w") as fh:
        for _ in range(40):
            fh.write(line * 10_000)  # ~90 MB
        fh.write('{"needle": "FINDME"}\n')

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _open_drill(pilot, app, "calc-partial", "oracle", "open")
            # how soon it opens is measured (benchmarks/bench_console.py), never asserted here
            drill = app.screen
            assert '"step": 1' in screen_text(app)
            await wait_for(pilot, lambda: drill.source.complete, 60, "indexing")
            assert drill.source.line_count == 400_001
            await pilot.press("slash", *"findme", "enter")
            fv = drill.query_one(FileView)
            await wait_for(pilot, lambda: fv.match_line == 400_000, 30, "search to the end")

    run_async(go)


def test_a_line_wider_once_escaped_settles_and_scrolls_to_its_end(tree, monkeypatch):
    """Found by a probe of the file views (2026-12-06): a line of ESC bytes is four times wider once
    escaped than the width the view was capped at, so every render asked to grow again (a render
    loop at a third of a core, seconds per key) and its last cells could not be scrolled to."""
    from console.fileindex import MAX_LINE_BYTES

    trial_dir = next((tree / "calc-partial" / "oracle").rglob("calc-partial__*"))
    (trial_dir / "agent" / "trajectory.json").write_bytes(b"\x1b" * MAX_LINE_BYTES * 3 + b"\n")
    calls: list[int] = []
    grew = FileView.grew
    monkeypatch.setattr(FileView, "grew", lambda self: (calls.append(1), grew(self))[1])

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _open_drill(pilot, app, "calc-partial", "oracle", "open")
            await wait_for(pilot, lambda: app.screen.source.complete, 10, "indexing")
            fv = app.screen.query_one(FileView)
            for _ in range(5):
                await pilot.pause()
            settled = len(calls)
            for _ in range(20):
                await pilot.pause()
            assert len(calls) == settled  # no render asks to grow again
            assert fv.virtual_size.width >= 4 * MAX_LINE_BYTES  # every escaped cell can be reached

    run_async(go)


def test_no_color_is_honoured(tree, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            assert app.no_color
            from textual.filter import Monochrome, NoColor

            assert any(isinstance(f, Monochrome | NoColor) for f in app.get_line_filters())
            # status never rests on colour alone: glyphs carry it
            assert "✓" in screen_text(app)

    run_async(go)


def test_console_command_imports_textual_only_when_run():
    code = "import sys, marathon.cli, marathon.commands.console; print('textual' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_console_command_bad_input_is_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "marathon.cli", "console", "/nonexistent/tree"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert (
        r.returncode == 2
        and r.stderr.strip().startswith("marathon: ")
        and len(r.stderr.strip().splitlines()) == 1
    )
