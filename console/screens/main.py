"""The main screen: grid, selected-cell line, alarm, runner/pool/receipts panels, events tail."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from console.widgets.grid import Grid
from console.widgets.panels import EventTail, PoolGauge, ReceiptsPanel, RunnerPanel


class MainScreen(Screen):
    """Layout only; the App pushes state into these widgets (attributes down)."""

    BINDINGS = [Binding("escape", "clear_filter", "Clear filter", show=False)]
    _topbar_plain = ""

    def compose(self) -> ComposeResult:
        yield Static(id="topbar")
        yield Grid(id="grid")
        yield Static(id="detail")
        yield Static(id="alarm")
        with Horizontal(id="panels"):
            with Vertical(id="left-panels"):
                yield RunnerPanel(id="runner")
                yield PoolGauge(id="pool")
            yield ReceiptsPanel(id="receipts")
            yield EventTail(id="events")
        yield Input(placeholder="filter rows (!text inverts) — Enter keeps, Esc clears", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(Grid).focus()

    def on_resize(self) -> None:
        # big terminals: taller panels (more events, receipts); 80x24 keeps the grid usable
        self.query_one("#panels").styles.height = 7 if self.size.height < 40 else 14

    def set_topbar(self, left: str, right: Text) -> None:
        t = Text(left, style="bold")
        pad = max(1, self.size.width - t.cell_len - right.cell_len)
        t.append(" " * pad)
        t.append_text(right)
        if t.plain != self._topbar_plain:  # repaint only when it reads differently (idle = no work)
            self._topbar_plain = t.plain
            self.query_one("#topbar", Static).update(t)

    # filter input ---------------------------------------------------------------------------------
    def open_filter(self, current: str) -> None:
        box = self.query_one("#filter", Input)
        box.value = current
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.app.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = False
            self.query_one(Grid).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display or box.value:
            box.value = ""
            box.display = False
            self.app.set_filter("")
            self.query_one(Grid).focus()
