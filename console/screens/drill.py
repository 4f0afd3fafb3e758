"""Drill-down: the trials of one (task, arm) across attempts, voided ones included, and their files.

The trial list comes from the cell the App already holds (records, not files). Opening a file,
indexing it, searching and tailing run in workers that post messages; the file view only renders.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static, Tab, Tabs

from console import actions, view
from console.feeds import CellSpend, TrialRow, list_trials
from console.fileindex import LineSource
from console.keys import bindings_for
from console.widgets.fileview import FileView
from modes.trial_files import TrialFiles
from runner.results.cells import Cell

#: the files of a trial, in tab order: (tab id, label, candidate paths relative to the trial dir)
FILES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "trajectory",
        "raw",
        (TrialFiles.TRAJECTORY, "@sessions", "agent/codex.txt", "agent/oracle.txt"),
    ),
    ("stdout", "test-stdout", (TrialFiles.TEST_STDOUT,)),
    ("metrics", "metrics", (TrialFiles.METRICS,)),
    ("reward", "reward", (TrialFiles.REWARD_TXT, TrialFiles.REWARD_JSON)),
    ("log", "trial.log", ("trial.log",)),
    ("exception", "exception", (TrialFiles.EXCEPTION,)),
    ("receipt", "receipt", (TrialFiles.RECEIPT,)),
    ("result", "result", (TrialFiles.RESULT,)),
)
TAIL_SEC = 0.5
FIRST_CHUNK = 1 << 20


def _mtime(p: Path) -> float:
    try:
        return p.lstat().st_mtime  # a planted symlink loop must not raise here
    except OSError:
        return 0.0


def resolve_file(trial_dir: Path, candidates: tuple[str, ...]) -> Path:
    """The first candidate that exists (``@sessions``: the newest codex session JSONL), else the first."""
    for c in candidates:
        if c == "@sessions":
            sessions = sorted((trial_dir / "agent" / "sessions").rglob("*.jsonl"), key=_mtime)
            if sessions:
                return sessions[-1]
            continue
        p = trial_dir / c
        if p.is_symlink() or p.exists():  # a symlink is shown refused, not skipped
            return p
    return trial_dir / candidates[0]


@dataclass
class FileOpened(Message):
    source: LineSource
    path: Path
    follow: bool


@dataclass
class FileGrew(Message):
    source: LineSource

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FileGrew) and message.source is self.source


@dataclass
class SearchDone(Message):
    query: str
    line: int | None


def trial_status(t: TrialRow) -> str:
    """One trial's status as the drill-down lists it (the record's states, in the grid's words)."""
    rec = t.record
    if t.voided:
        return "voided"
    if rec.metrics.state == "tampered":
        return "tampered"
    if rec.state == "refused" or rec.metrics.state == "refused":
        return "unreadable"
    if rec.state != "ok":
        return "running" if rec.state == "missing" else rec.state
    return "errored" if rec.errored else "done"


def repeat_text(repeat: int, parts: tuple[Cell, ...]) -> str:
    """A trial's repeat and where that repeat stands: ``r2 ✓0.50`` (``view.repeat_figure``)."""
    if 1 <= repeat <= len(parts):
        return f"r{repeat} {view.repeat_figure(parts[repeat - 1])}"
    return f"r{repeat}"


def is_running(t: TrialRow) -> bool:
    """A live trial without its result yet: its files are followed as they grow."""
    return not t.voided and t.record.state == "missing"


class DrillScreen(Screen):
    BINDINGS = [*bindings_for("drill-down"), Binding("question_mark,f1", "app.help", "Help")]

    def __init__(
        self, out: Path, task: str, arm: str, cell: Cell | None, budget: float | None = None,
        clock: Callable[[], float] = time.time,
        spend: Callable[[], CellSpend | None] = lambda: None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.out, self.pair_task, self.pair_arm = out, task, arm
        self.cell = cell
        #: the pair's spend on the gateway's ledger now, as the grid's cell line gives it (the
        #: header showed harbor's $0.00 beside the grid's "spend $0.16", a probe found)
        self.spend = spend
        self.budget, self.clock = budget, clock
        self.trials: list[TrialRow] = []
        self.trial: TrialRow | None = None
        self.file_id = FILES[0][0]
        self.source: LineSource | None = None
        self._hosted = False  # the trials table has a host column (a cluster run's pair)
        self._repeated = False  # the trials table has a repeat column (a run with repeats)

    def compose(self) -> ComposeResult:
        yield Static(id="drill-title")
        yield DataTable(id="trials", cursor_type="row")
        yield Tabs(*[Tab(label, id=fid) for fid, label, _ in FILES], id="files")
        yield Static(id="file-status")
        yield FileView(id="fileview")
        yield Input(placeholder="search (lowercase ignores case) — Enter finds, Esc closes", id="search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#search", Input).display = False
        table = self.query_one("#trials", DataTable)
        table.add_columns("attempt", "trial", "status", "reward", "partial", "pass", "time", "note")
        self.load_trials(self.cell)
        table.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "void" and self.app.readonly:
            return False
        return True

    # -- trials ----------------------------------------------------------------------------------
    def load_trials(self, cell: Cell | None) -> None:
        """Show the pair's cell: the header and the trial rows from the same record, so the header
        can never lag behind the rows below it."""
        self.cell = cell
        self._paint_title()
        self.trials = list_trials(cell)
        table = self.query_one("#trials", DataTable)
        keep = self.trial.path if self.trial else None
        table.clear()
        if not self._hosted and any(t.host for t in self.trials):  # a cluster run: which host ran it
            table.add_column("host", key="host")
            self._hosted = True
        if not self._repeated and cell is not None and cell.repeats:  # which repeat, and how it stands
            table.add_column("repeat", key="repeat")
            self._repeated = True
        parts = cell.parts if cell is not None else ()
        for t in self.trials:
            status = trial_status(t)
            rec = t.record
            note = t.reason or rec.exception_type or rec.metrics.error or rec.error or ""
            table.add_row(
                view.plain(t.stamp),
                view.plain(t.trial),
                Text(
                    f"{view.STATUS_GLYPH.get(status, '?')} {status}", style=view.STATUS_STYLE.get(status, "")
                ),
                view.num(rec.reward),
                view.num(rec.partial) + (" B" if rec.build_failed else ""),
                view.pct(rec.pass_rate),
                view.duration(rec.wall_sec),
                view.plain(view.clean(note)[:40]),
                *([view.plain(t.host or "-")] if self._hosted else []),
                *([view.plain(repeat_text(t.repeat, parts))] if self._repeated else []),
                key=t.path,
            )
        if self.trials:
            idx = next((i for i, t in enumerate(self.trials) if t.path == keep), 0)
            table.move_cursor(row=idx)
            if self.trial is None or self.trial.path != self.trials[idx].path:
                self.select_trial(self.trials[idx])
        else:
            self.query_one("#file-status", Static).update("no trials yet for this pair")

    def _paint_title(self) -> None:
        width = max(10, (self.size.width or 80) - len(self.pair_task) - len(self.pair_arm) - 6)
        title = Text(f"{view.clean(self.pair_task, 80)} × {view.clean(self.pair_arm, 80)}", style="bold")
        detail = view.cell_detail(
            self.pair_task, self.pair_arm, self.cell, self.budget, self.clock(), width, self.spend()
        )
        title.append(f"   {detail}", style="dim")
        self.query_one("#drill-title", Static).update(title)

    def on_resize(self) -> None:
        self._paint_title()

    @on(DataTable.RowHighlighted, "#trials")
    def trial_highlighted(self, event: DataTable.RowHighlighted) -> None:
        path = event.row_key.value if event.row_key else None
        t = next((t for t in self.trials if t.path == path), None)
        if t is not None and (self.trial is None or t.path != self.trial.path):
            self.select_trial(t)

    @on(DataTable.RowSelected, "#trials")
    def trial_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a trial: read its trajectory as steps (the raw tab keeps the file as written)."""
        path = event.row_key.value if event.row_key else None
        t = next((t for t in self.trials if t.path == path), None)
        if t is None:
            return
        from console.screens.reader import ReaderScreen

        title = f"{self.pair_task} × {self.pair_arm}  {t.stamp}  {t.trial}"
        self.app.push_screen(ReaderScreen(Path(t.path), title, follow=is_running(t)))

    def action_compare(self) -> None:
        self.app.action_compare(self.pair_task)

    def select_trial(self, trial: TrialRow) -> None:
        self.trial = trial
        self.open_current()

    # -- files -----------------------------------------------------------------------------------
    @on(Tabs.TabActivated, "#files")
    def tab_activated(self, event: Tabs.TabActivated) -> None:
        if event.tab.id and event.tab.id != self.file_id:
            self.file_id = event.tab.id
            self.open_current()

    def action_next_file(self) -> None:
        self.query_one("#files", Tabs).action_next_tab()

    def action_prev_file(self) -> None:
        self.query_one("#files", Tabs).action_previous_tab()

    # the file view's own keys from anywhere on the screen (the file view has them when focused)
    def action_file_follow(self) -> None:
        self.query_one(FileView).action_toggle_follow()

    def action_file_top(self) -> None:
        self.query_one(FileView).action_top()

    def action_file_end(self) -> None:
        self.query_one(FileView).action_bottom()

    def action_file_next(self) -> None:
        self.query_one(FileView).action_search_next()

    def action_file_prev(self) -> None:
        self.query_one(FileView).action_search_prev()

    def open_current(self) -> None:
        if self.trial is None:
            return
        candidates = next(c for fid, _, c in FILES if fid == self.file_id)
        self.query_one("#file-status", Static).update(Text("opening…", style="dim"))
        self.open_worker(Path(self.trial.path), candidates, is_running(self.trial))

    @work(thread=True, group="file-open", exclusive=True, exit_on_error=False)
    def open_worker(self, trial_dir: Path, candidates: tuple[str, ...], follow: bool) -> None:
        path = resolve_file(trial_dir, candidates)
        source = LineSource(path, trial_dir)
        source.index_more(FIRST_CHUNK)
        self.post_message(FileOpened(source, path, follow))

    def on_file_opened(self, msg: FileOpened) -> None:
        if self.source is not None and self.source is not msg.source:
            self.source.close()
        self.source = msg.source
        view_ = self.query_one(FileView)
        view_.set_source(msg.source, follow=msg.follow)
        self._show_status()
        self.tail_worker(msg.source)

    @work(thread=True, group="file-tail", exclusive=True, exit_on_error=False)
    def tail_worker(self, source: LineSource) -> None:
        """Index the rest of the file in chunks, then follow it while it grows (a running trial)."""
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled:
            if source.index_more():
                self.post_message(FileGrew(source))
                time.sleep(0.005)  # leave the GIL to the UI between chunks
                continue
            self.post_message(FileGrew(source))
            while not worker.is_cancelled and not source.refresh():
                time.sleep(TAIL_SEC)
                if worker.is_cancelled or self.app._stop.is_set():
                    return

    def on_file_grew(self, msg: FileGrew) -> None:
        if msg.source is self.source:
            self.query_one(FileView).grew()
            self._show_status()

    def _show_status(self) -> None:
        s = self.source
        if s is None:
            return
        rel = s.path
        try:
            rel = s.path.relative_to(self.out.parent)
        except ValueError:
            pass
        t = Text()
        if self.query_one(FileView).follow:
            t.append("following ", style="green")
        if s.error and s.missing:
            t.append("not written yet ", style="yellow")
        elif s.error:
            t.append(f"unreadable: {view.clean(s.error)} ", style="bold red")
        else:
            done = "" if s.complete else f" indexing {100 * s.scanned // max(1, s.size)}%"
            if s.capped:
                done = f" (the first {s.line_count:,} only: the rest of the file is not indexed)"
            t.append(f"{s.line_count:,} lines {s.size:,} B{done} ", style="dim")
        t.append(view.clean(rel), style="bold")
        self.query_one("#file-status", Static).update(t)

    # -- search ----------------------------------------------------------------------------------
    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#search")
    def search_submitted(self, event: Input.Submitted) -> None:
        fv = self.query_one(FileView)
        fv.query = event.value
        fv.focus()
        event.input.display = False
        if event.value:
            self.search_worker(event.value, fv.top_line, False)

    @on(FileView.SearchRequested)
    def search_requested(self, msg: FileView.SearchRequested) -> None:
        self.search_worker(msg.query, msg.start_line, msg.backwards)

    @work(thread=True, group="search", exclusive=True, exit_on_error=False)
    def search_worker(self, query: str, start: int, backwards: bool) -> None:
        source = self.source
        line = source.search(query, start, backwards) if source else None
        self.post_message(SearchDone(query, line))

    def on_search_done(self, msg: SearchDone) -> None:
        if msg.line is None:
            self.notify(f"not found: {view.clean(msg.query, 80)}", severity="warning", markup=False)
            return
        self.query_one(FileView).goto(msg.line, msg.query)

    # -- actions ---------------------------------------------------------------------------------
    def action_back(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            box.display = False
            self.query_one(FileView).focus()
            return
        if self.source is not None:
            self.source.close()
        self.dismiss() if self.is_modal else self.app.pop_screen()

    def action_void(self) -> None:
        if self.trial is None or self.trial.voided:
            self.notify("select a trial that is not voided", severity="warning")
            return
        self.app.request(actions.VOID, trial_path=self.trial.path)
