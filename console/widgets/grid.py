"""The task x arm grid: a DataTable with stable row/column keys, updated in place.

Rows and columns are keyed by name, so a live update changes only the cells that changed and the
cursor stays on the same (task, arm) when rows are re-sorted or filtered (htop's "follow").
"""

from __future__ import annotations

from typing import Any

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

SUMMARY = "__summary__"


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
        self.wide = False
        self.restoring: tuple[str, str] | None = None  # the pair to keep the cursor on across a rebuild
        self.budget: float | None = None  # the arms' goal timeout, for "elapsed against budget"
        self.now: float | None = None  # the App's clock at the last update

    # -- attributes down -------------------------------------------------------------------------
    def show(
        self,
        rows: list[str],
        cols: list[str],
        cells: dict[tuple[str, str], Any],
        summary: dict[str, Any],
        *,
        arm_major: bool,
        wide: bool,
        width: int = 80,
        keep: tuple[str, str] | None = None,
    ) -> None:
        """Rebuild the table (new names, sort, filter, transpose), keeping the cursor on its pair."""
        keep = keep or self.restoring or self.current_pair()
        self.arm_major, self.wide = arm_major, wide
        self.rows_order, self.cols_order = rows, cols
        self.clear(columns=True)
        label_w = min(max([len(r) for r in rows] + [6]), 24 if wide else 12)
        self.add_column("arm" if arm_major else "task", key="__label__", width=label_w)
        ncols = len(cols) + (1 if arm_major else 0)
        cw = 11 if not wide else max(11, min(32, (width - label_w - 4) // max(1, ncols) - 2))
        # the per-arm summary stays in sight: first row (task-major) or second column (arm-major), fixed
        if arm_major:  # one-line summaries: mean, pass rate, n and interval side by side
            self.add_column("mean", key=SUMMARY, width=max(cw, 34 if wide else 21))
        for c in cols:
            self.add_column(c[:cw], key=c, width=cw)
        self.fixed_columns = 2 if arm_major else 1
        self.fixed_rows = 1 if rows and not arm_major else 0  # the summary row exists only with rows
        if not arm_major and rows:
            values = [Text("mean", style="bold")] + [
                Text(view.summary_line(c, summary.get(c), wide), style="bold") for c in cols
            ]
            self.add_row(*values, key=SUMMARY, height=2)  # second line: n and the interval
        for r in rows:
            values = [Text(r)]
            if arm_major:
                values.append(Text(view.summary_line(r, summary.get(r), wide, True), style="bold"))
            values += [view.cell_text(cells.get(self._pair(r, c)), wide, self.budget, self.now) for c in cols]
            self.add_row(*values, key=r)
        if keep and keep[0 if not arm_major else 1] in rows:
            self.restoring = keep
            self.move_to(*keep)
            self.call_after_refresh(self._restore)
        elif rows and cols:
            self.cursor_coordinate = Coordinate(0, 2) if arm_major else Coordinate(1, 1)

    def patch(self, cells: dict[tuple[str, str], Any], keys, summary: dict[str, Any]) -> bool:
        """Update the given (task, arm) cells in place; False when a rebuild is needed."""
        for task, arm in keys:
            r, c = (arm, task) if self.arm_major else (task, arm)
            try:
                self.update_cell(
                    r, c, view.cell_text(cells.get((task, arm)), self.wide, self.budget, self.now)
                )
            except CellDoesNotExist:
                if r in self.rows_order and c in self.cols_order:
                    return False
                continue  # filtered out
        for arm, s in summary.items():
            try:
                if self.arm_major:
                    line = view.summary_line(arm, s, self.wide, True)
                    self.update_cell(arm, SUMMARY, Text(line, style="bold"))
                else:
                    self.update_cell(SUMMARY, arm, Text(view.summary_line(arm, s, self.wide), style="bold"))
            except CellDoesNotExist:
                pass
        return True

    # -- cursor ----------------------------------------------------------------------------------
    def _pair(self, row: str, col: str) -> tuple[str, str]:
        return (col, row) if self.arm_major else (row, col)

    def current_pair(self) -> tuple[str, str] | None:
        """(task, arm) under the cursor, or None on a label or summary cell."""
        if not self.row_count:
            return None
        try:
            row_key, col_key = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        r, c = row_key.value, col_key.value
        if r in (None, SUMMARY) or c in (None, SUMMARY, "__label__"):
            return None
        return self._pair(r, c)

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
        if pair:
            self.post_message(self.Selected(*pair, open=True))
