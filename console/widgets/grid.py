"""The task x arm grid: a DataTable with stable row/column keys, updated in place.

Rows and columns are keyed by name, so a live update changes only the cells that changed and the
cursor stays on the same (task, arm) when rows are re-sorted or filtered (htop's "follow").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from rich.console import Console, ConsoleOptions
from rich.text import Text
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import (
    CellDoesNotExist,
    ColumnDoesNotExist,
    ColumnKey,
    RowDoesNotExist,
    RowKey,
)

from console import view
from console.feeds import ArmSummary, CellSpend
from runner.results.cells import Cell

#: the grid's own row and column keys: a "/" is never in a task or arm name (a dataset's task named
#: ``__summary__`` collided with the old key and the console exited on its first paint)
SUMMARY = "/summary"
LABEL = "/label"
#: a cell's width in characters, at least and at most (below the minimum the grid scrolls sideways)
MIN_CELL = 8
MAX_CELL = 32


class GridText:
    """What a grid cell holds: its text, made when the table first draws it or something reads it
    (``str``), and never measured.

    Why: the DataTable measures every cell of every new row (``__rich_measure__``, through Rich's
    console options, which ask the terminal for its size each time) to size auto-width columns, and
    the grid's columns all have fixed widths; a 2,010-task tree has 12,060 cells and a screen shows
    a few hundred. Without a measure or ``__rich__``, the table takes a width of 1 for the cell,
    and renders it through ``__rich_console__`` when it is in sight.
    """

    __slots__ = ("_make", "_args", "_text")

    def __init__(self, make: Callable[..., Text], *args: object) -> None:
        self._make: Callable[..., Text] | None = make
        self._args = args
        self._text: Text | None = None

    @classmethod
    def of(cls, text: Text) -> GridText:
        """A cell whose text is already made (a row label)."""
        cell = cls(Text)
        cell._make, cell._args, cell._text = None, (), text
        return cell

    @property
    def text(self) -> Text:
        if self._text is None:
            assert self._make is not None
            self._text = self._make(*self._args)
            self._make, self._args = None, ()
        return self._text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield self.text

    def __str__(self) -> str:
        return self.text.plain


def _label(name: str, width: int, marked: bool) -> Text:
    """A task's name in a row label or column head (from the tree, so cleaned and never read as
    markup: ``view.plain``); ``⚠`` first when every arm failed it alike."""
    name = view.clean(name)
    if marked:
        return view.plain("⚠" + _cut(name, width - 1), style="yellow")
    return view.plain(_cut(name, width))


def _cut(name: str, width: int) -> str:
    """``name`` in ``width`` characters, a cut one ending in ``…`` (at 80 columns "words-passra"
    read as a whole name, a probe found)."""
    if len(name) <= width:
        return name
    return name[: max(0, width - 1)] + "…" if width > 0 else ""


class Grid(DataTable):
    """Rows are tasks (task-major) or arms (arm-major); the last row/column is the per-arm summary."""

    class Selected(Message):
        """The cursor moved to (task, arm), or Enter was pressed on it (``open``)."""

        def __init__(self, task: str | None, arm: str | None, open: bool = False) -> None:
            self.task = task
            self.arm = arm
            self.open = open
            super().__init__()

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="cell", zebra_stripes=False, **kwargs)
        self.arm_major = False
        self.rows_order: list[str] = []
        self.cols_order: list[str] = []
        self.mode = "score"  # what the cells show (view.CELL_MODES)
        self.cell_width = 11  # characters a cell may use: the layout never cuts a figure to fit
        self.restoring: tuple[str, str] | None = None  # the pair to keep the cursor on across a rebuild
        self.budget: float | None = None  # the arms' goal timeout, for "elapsed against budget"
        self.now: float | None = None  # the App's clock at the last update
        self.spend: Mapping[tuple[str, str], CellSpend] = {}  # the cells' ledger spend (the main screen's)

    # -- attributes down -------------------------------------------------------------------------
    def show(
        self,
        rows: list[str],
        cols: list[str],
        cells: Mapping[tuple[str, str], Cell | None],
        summary: Mapping[str, ArmSummary],
        *,
        arm_major: bool,
        mode: str = "score",
        width: int = 80,
        keep: tuple[str, str] | None = None,
        marked: Collection[str] = (),
    ) -> None:
        """Rebuild the table (new names, sort, filter, transpose, mode, width), keeping the cursor on
        its pair. Column widths follow the terminal; each cell shows the figures that fit. Tasks in
        ``marked`` (every arm failed them alike) carry a ``⚠`` before their name."""
        keep = keep or self.restoring or self.current_pair()
        self.arm_major, self.mode = arm_major, mode
        self.rows_order, self.cols_order = rows, cols
        self.clear(columns=True)
        label_w = min(max([len(view.clean(r)) for r in rows] + [6]), 24 if width >= 120 else 12)
        # every column costs two characters of padding; keep two for the scrollbar
        room = width - (label_w + 2) - 2
        sum_w = 0
        if arm_major:  # one-line summaries (mean, pass rate, n and interval side by side)
            widths = [view.summary_widths(summary.get(r)) for r in rows] or [(4, 4, 4)]
            options = [max(w[i] for w in widths) for i in range(3)]
            # the widest summary that still leaves the cells their usual room, else the narrowest
            sum_w = next((w for w in options if (room - w - 2) // max(1, len(cols)) - 2 >= 11), options[-1])
            room -= sum_w + 2
        cw = max(MIN_CELL, min(MAX_CELL, room // max(1, len(cols)) - 2))
        self.cell_width = cw
        self.add_column("arm" if arm_major else "task", key=LABEL, width=label_w)
        # the per-arm summary stays in sight: first row (task-major) or second column (arm-major), fixed
        if arm_major:
            self.add_column("mean", key=SUMMARY, width=sum_w)
        for c in cols:
            self.add_column(_label(c, cw, c in marked), key=c, width=cw)
        self.fixed_columns = 2 if arm_major else 1
        self.fixed_rows = 1 if rows and not arm_major else 0  # the summary row exists only with rows
        if not arm_major and rows:
            lines = {c: view.summary_lines(summary.get(c), cw) for c in cols}
            height = max([len(v) for v in lines.values()] + [2])  # n and the interval below the means
            values = [Text("mean", style="bold")] + [Text("\n".join(lines[c]), style="bold") for c in cols]
            self.add_row(*values, key=SUMMARY, height=height)
        for r in rows:
            values = [GridText.of(_label(r, label_w, r in marked))]
            if arm_major:
                values.append(Text(view.summary_line(summary.get(r), sum_w, True), style="bold"))
            values += [self._cell(cells.get(p := self._pair(r, c)), p) for c in cols]
            self.add_row(*values, key=r)
        if keep and keep[0 if not arm_major else 1] in rows:
            self.restoring = keep
            self.move_to(*keep)
            self.call_after_refresh(self._restore)
        elif rows and cols:
            self.cursor_coordinate = Coordinate(0, 2) if arm_major else Coordinate(1, 1)

    def _cell(self, cell: Cell | None, pair: tuple[str, str]) -> GridText:
        return GridText(
            view.cell_text, cell, self.mode, self.cell_width, self.budget, self.now, self.spend.get(pair)
        )

    def patch(
        self, cells: Mapping[tuple[str, str], Cell | None], keys: Iterable[tuple[str, str]],
        summary: Mapping[str, ArmSummary],
    ) -> bool:  # fmt: skip
        """Update the given (task, arm) cells in place; False when a rebuild is needed."""
        for task, arm in keys:
            r, c = (arm, task) if self.arm_major else (task, arm)
            try:
                self.update_cell(r, c, self._cell(cells.get((task, arm)), (task, arm)))
            except CellDoesNotExist:
                if r in self.rows_order and c in self.cols_order:
                    return False
                continue  # filtered out
        for arm, s in summary.items():
            try:
                if self.arm_major:
                    width = self.columns[ColumnKey(SUMMARY)].width
                    line = view.summary_line(s, width, True)
                    self.update_cell(arm, SUMMARY, Text(line, style="bold"))
                else:
                    lines = view.summary_lines(s, self.cell_width)
                    if len(lines) > self.rows[RowKey(SUMMARY)].height:
                        return False  # a taller summary: rebuild
                    self.update_cell(SUMMARY, arm, Text("\n".join(lines), style="bold"))
            except (CellDoesNotExist, KeyError):
                pass
        return True

    # -- cursor ----------------------------------------------------------------------------------
    def _pair(self, row: str, col: str) -> tuple[str, str]:
        return (col, row) if self.arm_major else (row, col)

    def current_pair(self) -> tuple[str, str] | None:
        """(task, arm) under the cursor, or None on a label or summary cell."""
        if (keys := self._cursor_keys()) is None:
            return None
        r, c = keys
        if r in (None, SUMMARY) or c in (None, SUMMARY, LABEL):
            return None
        return self._pair(r, c)

    def current_task(self) -> str | None:
        """The task of the cursor's cell, or of its row or column label (None on the mean row)."""
        if (keys := self._cursor_keys()) is None:
            return None
        task = keys[1] if self.arm_major else keys[0]
        return None if task in (None, SUMMARY, LABEL) else task

    def _cursor_keys(self) -> tuple[str | None, str | None] | None:
        """The row and column keys under the cursor; None on an empty grid."""
        if not self.row_count:
            return None
        try:
            row_key, col_key = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        return row_key.value, col_key.value

    def move_to(self, task: str, arm: str) -> None:
        r, c = (arm, task) if self.arm_major else (task, arm)
        try:
            self.cursor_coordinate = Coordinate(
                self.get_row_index(RowKey(r)), self.get_column_index(ColumnKey(c))
            )
        except (CellDoesNotExist, RowDoesNotExist, ColumnDoesNotExist, KeyError):
            pass

    def _restore(self) -> None:
        keep, self.restoring = self.restoring, None
        if keep:
            self.move_to(*keep)
            self.post_message(self.Selected(*keep))

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        event.stop()
        if self.restoring is not None:
            return  # highlights caused by the rebuild itself
        pair = self.current_pair()
        self.post_message(self.Selected(*(pair or (None, None))))

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        pair = self.current_pair()
        self.post_message(self.Selected(*(pair or (None, None)), open=True))
