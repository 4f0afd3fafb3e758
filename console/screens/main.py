"""The main screen: the grid, the selected-cell line, the banner, the runner/pool/arms panels and the
events tail. It owns what it shows: the cells the tree worker sent, the runner and the pool as their
workers last saw them, and the operator's view choices (filter, sort, transpose, cell mode, pause).

The panels are bound to this screen's reactives (``data_bind``), so setting one repaints exactly
the widgets that show it. Cell updates are applied in place, by (task, arm) key: at once when they
come alone, merged into one paint per ``FLUSH_SEC`` when they come in a burst.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from console import view
from console.feeds import ArmSummary, CellSpend, Key, PoolView, RunEvent, RunnerInfo, TreeSnapshot
from console.widgets.grid import Grid
from console.widgets.panels import ArmsPanel, EventTail, HostsPanel, PoolGauge, RunnerPanel
from runner.results.cells import Cell
from runner.results.hosts import HostUse

if TYPE_CHECKING:
    from runner.results.projection import Projection
    from runner.schedule.fleet.cluster import NodeState

#: batching: cell updates that arrive within this window are applied in one repaint
FLUSH_SEC = 0.08


class MainScreen(Screen):
    BINDINGS = [Binding("escape", "clear_filter", "Clear filter", show=False)]

    info: reactive[RunnerInfo | None] = reactive(None)
    pool: reactive[PoolView | None] = reactive(None)
    pool_error: reactive[str | None] = reactive(None)
    readonly: reactive[bool] = reactive(False)
    alarm: reactive[str | None] = reactive(None)
    busy: reactive[str | None] = reactive(None)
    paused: reactive[bool] = reactive(False)
    scope: reactive[str] = reactive("run")
    polling: reactive[bool] = reactive(False)
    hosts: reactive[tuple[HostUse, ...]] = reactive(())
    nodes: reactive[tuple[NodeState, ...] | None] = reactive(None)
    nodes_error: reactive[str | None] = reactive(None)

    def __init__(self, out: Path, clock=time.time, readonly: bool = False) -> None:
        super().__init__()
        self.out = out
        self.clock = clock
        self.set_reactive(MainScreen.readonly, readonly)
        # what the tree worker last sent
        self.cells: dict[Key, Cell] = {}
        self.history: dict[Key, Cell] = {}
        self.tasks: list[str] = []
        self.arms: list[str] = []
        self.summary: dict[str, ArmSummary] = {}
        self.spend: dict[Key, CellSpend] = {}  # the cells' spend on the gateway's ledger, live
        self.projection: Projection | None = None  # the run's spend projected (the feed's, throttled)
        self.run_pieces: tuple = ()  # when the run's runners ran (its rates are over it)
        self.run_spend: tuple = (None, None)  # what the run's own attempts spent: USD, tokens
        self.notes: tuple[str, ...] = ()
        self.suspect: dict[str, str] = {}  # task -> evidence: every arm failed it alike
        self.scanned_at: float | None = None
        self.checked = True  # the tree's values were checked against its files (``TreeSnapshot``)
        # the operator's view of it
        self.filter_text = ""
        self.sort_key = "name"
        self.arm_major = False
        self.mode = view.CELL_MODES[0][0]
        self.selected: Key | None = None
        self.last_change_at: float | None = None  # monotonic time of the last applied change
        self.pending_events: list[RunEvent] = []
        self._dirty: set[Key] = set()
        self._rebuild = True
        self._flush_pending = False
        self._flushed_at = -FLUSH_SEC  # monotonic time of the last paint (``_schedule_flush``)
        self._tree_pending = False  # tree data that no flush has shown yet
        self._width = 0
        self._topbar_plain = ""
        self._shown: dict[str, object] = {}  # what the detail line and the banner show now
        self._rung: set[str] = set()  # banners the bell has rung for
        self._live = False  # composed and mounted: painting is possible

    def compose(self) -> ComposeResult:
        yield Static(id="topbar")
        yield Grid(id="grid")
        yield Static(id="detail")
        yield Static(id="alarm")
        with Horizontal(id="panels"):
            with Vertical(id="left-panels"):
                yield RunnerPanel(id="runner").data_bind(MainScreen.info, MainScreen.readonly)
                yield PoolGauge(id="pool").data_bind(MainScreen.pool, MainScreen.pool_error)
            yield ArmsPanel(id="receipts").data_bind(MainScreen.info)
            yield HostsPanel(id="hosts").data_bind(MainScreen.hosts, MainScreen.nodes, MainScreen.nodes_error)
            yield EventTail(id="events")
        yield Input(placeholder="filter rows (!text inverts) — Enter keeps, Esc clears", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(Grid).focus()
        self._live = True
        self.paint_status()
        self._flushed_at = time.monotonic()  # the screen's first paint: after its mount, as a batch
        self._schedule_flush()

    def on_unmount(self) -> None:
        self._live = False  # records may still arrive while the app exits: nothing to paint then

    def on_resize(self) -> None:
        # big terminals: taller panels (more events, receipts); 80x24 keeps the grid usable
        self.query_one("#panels").styles.height = 7 if self.size.height < 40 else 14
        if self.size.width != self._width:  # the cell format follows the width
            self._width = self.size.width
            self._rebuild = True
            self._schedule_flush()
        self.paint_status()

    # -- data in (the App hands its workers' records over) -----------------------------------------
    def apply_tree(self, snap: TreeSnapshot) -> None:
        if snap.full:
            self.cells = {k: c for k, c in snap.cells.items() if c is not None}
            self.history = {k: c for k, c in snap.history.items() if c is not None}
            self._rebuild = True
        else:
            for k, c in snap.cells.items():
                if c is None:
                    self.cells.pop(k, None)
                else:
                    self.cells[k] = c
            self.history.update({k: c for k, c in snap.history.items() if c is not None})
            self._dirty |= set(snap.cells)
        if snap.full:
            self.spend = dict(snap.spend)
        else:
            for k in snap.cells:
                if k in snap.spend:
                    self.spend[k] = snap.spend[k]
                else:
                    self.spend.pop(k, None)
        if list(snap.tasks) != self.tasks or list(snap.arms) != self.arms:
            self._rebuild = True
        self.tasks, self.arms = list(snap.tasks), list(snap.arms)
        self.summary, self.notes = dict(snap.summary), snap.notes
        self.projection = snap.projection
        self.run_pieces, self.run_spend = snap.run_pieces, snap.run_spend
        if dict(snap.suspect) != self.suspect:  # the marks are in the row labels: rebuild
            self.suspect = dict(snap.suspect)
            self._rebuild = True
        self.hosts = snap.hosts
        self.alarm = snap.alarm
        self.scanned_at = snap.scanned_at
        self.checked = snap.checked
        self._tree_pending = True
        self._schedule_flush()

    def add_events(self, events: tuple[RunEvent, ...]) -> None:
        self.pending_events.extend(events)
        self._paint_events()

    def _paint_events(self) -> None:
        """Hand the waiting records to the event tail; records that arrive while the app exits (its
        widgets already gone, the screen not yet unmounted) have nothing to be painted on."""
        if not self._live or not self.pending_events:
            return
        try:
            self.query_one(EventTail).add(self.pending_events)
        except NoMatches:
            self._live = False
            return
        self.pending_events.clear()

    def watch_info(self) -> None:
        self.paint_status()

    def watch_alarm(self) -> None:
        self.paint_status()

    def watch_busy(self) -> None:
        self.paint_status()

    # -- the operator's view -----------------------------------------------------------------------
    def set_view(self, **changes: object) -> None:
        """Change filter, sort, transpose or cell mode and repaint the grid at once."""
        for name, value in changes.items():
            setattr(self, name, value)
        self._rebuild = True
        self._flush()

    def watch_paused(self, paused: bool) -> None:
        if not paused:
            self._schedule_flush()
        self.paint_status()

    def visible_rows_cols(self) -> tuple[list[str], list[str]]:
        rows_all, cols = (self.arms, self.tasks) if self.arm_major else (self.tasks, self.arms)
        rows = [r for r in rows_all if view.matches(self.filter_text, r)]
        if self.sort_key != "name":
            col = None
            if self.selected:
                col = self.selected[0] if self.arm_major else self.selected[1]
            col = col if col in cols else (cols[0] if cols else None)
            if col is not None:

                def key(r: str) -> tuple:
                    pair = (col, r) if self.arm_major else (r, col)
                    return (view.sort_value(self.cells.get(pair), self.sort_key, self.spend.get(pair)), r)

                rows.sort(key=key)
        return rows, cols

    def spend_of(self, key: Key) -> CellSpend | None:
        """A cell's spend on the gateway's ledger now (None: none of its calls is on it)."""
        return self.spend.get(key)

    @on(Grid.Selected)
    def grid_selected(self, msg: Grid.Selected) -> None:
        self.selected = (msg.task, msg.arm) if msg.task and msg.arm else None
        self.paint_status()
        if msg.open:  # (on a label, ``action_open`` says what it needs)
            self.app.action_open()

    # -- painting ----------------------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        """Paint now when the last paint is ``FLUSH_SEC`` old, else once it is: a change that comes
        alone (the tree's first data, one trial finishing) is on screen at once, and a burst is
        merged into one paint every ``FLUSH_SEC``."""
        if self._flush_pending or self.paused or not self._live:
            return
        wait = FLUSH_SEC - (time.monotonic() - self._flushed_at)
        if wait <= 0:
            self._flush()
            return
        self._flush_pending = True
        self.set_timer(wait, self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        self._flushed_at = time.monotonic()
        if self.paused or not self._live:
            return
        try:
            grid = self.query_one(Grid)
        except NoMatches:  # the app is exiting: the screen's widgets are already gone
            self._live = False
            return
        grid.now = self.clock()
        grid.budget = self.info.budget_sec if self.info else None
        grid.spend = self.spend
        with self.app.batch_update():
            if self._rebuild:
                self._rebuild_grid(grid)
            elif self._dirty:
                if not grid.patch(self.cells, self._dirty, self.summary):
                    self._rebuild_grid(grid)
            self._dirty.clear()
            self._paint_events()
            self.paint_status()
            self.app.refresh_drill_downs(self.history)
        if self._tree_pending:  # the tree's data is on screen now (benchmarks and tests wait for it)
            self._tree_pending = False
            self.last_change_at = time.monotonic()
            self.app.painted()

    def _rebuild_grid(self, grid: Grid) -> None:
        self._rebuild = False
        rows, cols = self.visible_rows_cols()
        grid.show(
            rows,
            cols,
            self.cells,
            self.summary,
            arm_major=self.arm_major,
            mode=self.mode,
            width=self.size.width or 80,
            keep=self.selected,
            marked=self.suspect,
        )

    def paint_status(self) -> None:
        """The top bar, the selected-cell line, the banner and the arms panel's receipts."""
        if not self._live:
            return
        try:
            self._paint_status()
        except NoMatches:  # the app is exiting: the screen's widgets are already gone
            self._live = False

    def _paint_status(self) -> None:
        now = self.clock()
        self._paint_topbar(now)
        width = max(10, self.size.width or 80)
        if self.selected:
            t, a = self.selected
            budget = self.info.budget_sec if self.info else None
            line = view.cell_detail(
                t, a, self.cells.get(self.selected), budget, now, width, self.spend.get(self.selected)
            )
            if t in self.suspect:  # first, at most half the line, so the width never cuts it away
                mark = f"⚠ {view.clean(self.suspect[t], None)}"  # task and test names from the tree
                half = max(20, width // 2)
                line = (mark if len(mark) <= half else mark[: half - 1] + "…") + " · " + line
        else:
            notes = f" · {view.clean('; '.join(self.notes), None)}" if self.notes else ""
            line = f"{len(self.tasks)} tasks × {len(self.arms)} arms{notes}"
        if line != self._shown.get("detail"):  # an idle console repaints nothing
            self._shown["detail"] = line
            self.query_one("#detail", Static).update(Text(line, no_wrap=True, overflow="ellipsis"))
        self._paint_banner(now)
        # the arms' summary rows carry the sums (a pass over every cell on each paint was a tenth of
        # the first grid's main thread on a 2,010-task tree, and the clock repaints every second)
        sums = [(a, self.summary.get(a) or ArmSummary()) for a in self.arms]
        self.query_one(ArmsPanel).receipts = tuple(
            (a, (s.continuations, s.unblocks, s.error_events)) for a, s in sums
        )

    def _paint_topbar(self, now: float) -> None:
        right = Text()
        if self.busy:
            right.append(f"{self.busy}… ", style="bold yellow")
        if self.paused:
            right.append("PAUSED ", style="bold reverse")
        if self.filter_text:
            right.append(f"filter '{self.filter_text}' ", style="cyan")
        if self.sort_key != "name":
            right.append(f"sort {self.sort_key} ", style="cyan")
        if self.mode != view.CELL_MODES[0][0]:
            right.append(f"cells {dict(view.CELL_MODES)[self.mode]} ", style="cyan")
        right.append(f"{self.scope} ")
        if self.polling:
            right.append("poll ")
        if self.checked:
            right.append(view.age_text(self.scanned_at, now), style="dim")
        else:
            right.append(view.UNCHECKED, style="yellow")
        run = view.progress_text(self.info, *self.run_spend, now, self.run_pieces)
        live = view.arms_spend_text(self.summary, self.projection)  # the gateway's ledger, as its lines land
        run = " · ".join(x for x in (run, live) if x)
        t = Text(f"marathon {view.clean(self.out.name, 60)}", style="bold")
        if run:
            t.append(f"  {run}")
        # the right part (paused, filter, sort, scope, the data's age) always shows: the left is cut
        # to fit (a gateway run's spend per arm pushed it off the one-line bar, a probe found)
        room = self.size.width - right.cell_len - 1
        if t.cell_len > room:
            t.truncate(max(1, room), overflow="ellipsis")
        pad = max(1, self.size.width - t.cell_len - right.cell_len)
        t.append(" " * pad)
        t.append_text(right)
        if t.plain != self._topbar_plain:  # repaint only when it reads differently (idle = no work)
            self._topbar_plain = t.plain
            self.query_one("#topbar", Static).update(t)

    def _paint_banner(self, now: float) -> None:
        """Paused run, how the run ended, a long network-gate wait, the bias alarm: one line, and
        the terminal bell the first time each appears."""
        lines: list[tuple[str, str, str]] = []  # (bell key, text, style)
        paused = self.info.paused if self.info else None
        if paused:
            lines.append(("", f"⏸ RUN PAUSED: {paused}", "bold reverse red"))
        ended = view.run_end_text(self.info)
        if ended:
            lines.append((f"end:{self.info.progress.run_id}:{ended}", f"■ {ended}", "bold reverse yellow"))
        gate = view.gate_text(self.info, now)
        if gate:
            lines.append((f"gate:{self.info.progress.gate_waiting_since}", f"⧗ {gate}", "bold yellow"))
        if self.alarm:
            lines.append((f"alarm:{self.alarm}", f"⚠ {self.alarm}", "bold red"))
        banner = self.query_one("#alarm", Static)
        banner.display = bool(lines)
        if lines and lines != self._shown.get("banner"):
            self._shown["banner"] = lines
            text = Text(no_wrap=True, overflow="ellipsis")
            for i, (_, line, style) in enumerate(lines):
                if i:
                    text.append("  ")
                text.append(view.clean(line), style=style)  # reasons from events, audit lines from receipts
            banner.update(text)
        new = {k for k, _, _ in lines if k and k not in self._rung}
        if new:
            self._rung |= new
            self.app.bell()

    def tick(self) -> None:
        """Once a second: the data age and the run's clock on the top bar, a gate wait's age."""
        self.paint_status()

    # -- filter input ------------------------------------------------------------------------------
    def open_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.filter_text
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.set_view(filter_text=event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.display = False
            self.query_one(Grid).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.display or box.value:
            box.value = ""
            box.display = False
            self.set_view(filter_text="")
            self.query_one(Grid).focus()
