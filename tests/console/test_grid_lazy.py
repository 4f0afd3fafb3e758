"""The grid makes only the cells it draws: on a tree of thousands of tasks the first grid must not
wait for the texts (or the measuring) of rows no one has scrolled to (``console.widgets.grid.GridText``).

A 2,000-task grid in a 120x40 terminal draws about 30 rows of 5 cells; the DataTable used to
measure every cell of every new row (through Rich's terminal-size probe), which made all 10,000
texts before the first paint. Reading a cell (``str``, as the tests and the bench do) makes it on
demand; scrolling makes the rows that come into sight.
"""

from __future__ import annotations

from console_support import run_async, wait_for
from textual.app import App, ComposeResult
from textual_screen import screen_text

from console import view
from console.widgets.grid import Grid

ROWS = [f"task-{i:04d}" for i in range(2000)]
ARMS = ["plain", "goal", "ssh-goal", "codex-cli", "heartbeat"]


class GridApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Grid(id="grid")


def test_only_the_drawn_cells_are_made(monkeypatch):
    made: list[object] = []
    real = view.cell_text

    def counting(*args, **kwargs):
        made.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(view, "cell_text", counting)

    async def body() -> None:
        app = GridApp()
        async with app.run_test(size=(120, 40)) as pilot:
            grid = app.query_one(Grid)
            grid.show(ROWS, ARMS, {}, {}, arm_major=False, width=120)
            await wait_for(pilot, lambda: "task-0000" in screen_text(app), 30, "the grid drawn")
            await pilot.pause(0.2)  # the table's idle work on its new rows, and a second render
            drawn = len(made)
            assert 0 < drawn <= 40 * len(ARMS), f"{drawn} cell texts made for a 40-line screen"
            # a cell no one drew is made when it is read
            assert str(grid.get_row("task-1999")[1]) == "·"
            assert len(made) == drawn + 1
            # scrolling to the end draws (and makes) the last rows
            grid.move_to("task-1999", "plain")
            await wait_for(pilot, lambda: "task-1999" in screen_text(app), 30, "the last row drawn")
            assert drawn + 1 < len(made) <= 2 * 40 * len(ARMS) + 1

    run_async(body)
