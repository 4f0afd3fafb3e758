"""The trajectory reader: what the agent of one trial did, one line per step.

Opens the trial's ATIF ``agent/trajectory.json`` (else the raw app-server stdout, which is all a
running trial has); ``s`` switches between the two. The step index is built in a worker (the first
chunk first, so the first screen of a gigabyte shows at once, then the rest in the background, then
the file is followed while it grows); search runs in a worker too. The widget only renders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from console.keys import bindings_for
from console.widgets.stepview import StepView
from modes import safetext
from runner.results.trajectory import ERROR, StepIndex

FIRST_CHUNK = 1 << 20
FIRST_PIECE = 64 << 10
FIRST_STEPS = 200
TAIL_SEC = 0.5
SOURCES = ("agent/trajectory.json", "agent/appserver.stdout.jsonl")


@dataclass
class StepsOpened(Message):
    index: StepIndex
    follow: bool


@dataclass
class StepsGrew(Message):
    index: StepIndex

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StepsGrew) and message.index is self.index


@dataclass
class StepFound(Message):
    what: str
    step: int | None


def sources_of(trial_dir: Path) -> list[Path]:
    """The trial's readable trajectories, ATIF first (a running trial has only the app-server stdout)."""
    return [trial_dir / s for s in SOURCES if (trial_dir / s).is_file()]


class ReaderScreen(Screen):
    BINDINGS = bindings_for("reader")
    BINDINGS += [("escape,q", "back", "Back"), ("question_mark,f1", "app.help", "Help")]

    def __init__(self, trial_dir: Path | str, title: str = "", follow: bool = False) -> None:
        super().__init__()
        self.trial_dir = Path(trial_dir)
        self.title_text = title or self.trial_dir.name
        self.start_follow = follow
        self.sources = sources_of(self.trial_dir)
        self.source_no = 0
        self.index: StepIndex | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="reader-title")
        yield Static(id="reader-status")
        yield StepView(id="steps")
        yield Input(
            placeholder="search steps (lowercase ignores case) — Enter finds, Esc closes", id="reader-search"
        )
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#reader-search", Input).display = False
        self.query_one(StepView).focus()
        self.open_source()

    @property
    def view(self) -> StepView:
        return self.query_one(StepView)

    # -- opening and following -------------------------------------------------------------------
    def open_source(self) -> None:
        title = Text(safetext.clean(self.title_text, 200), style="bold")
        if not self.sources:
            title.append(
                "   no trajectory yet (agent/trajectory.json, agent/appserver.stdout.jsonl)", style="yellow"
            )
            self.query_one("#reader-title", Static).update(title)
            self.watch_for_sources()
            return
        path = self.sources[self.source_no]
        title.append(f"   {safetext.clean(path.relative_to(self.trial_dir))}", style="dim")
        if len(self.sources) > 1:
            title.append("   (s: switch source)", style="dim")
        self.query_one("#reader-title", Static).update(title)
        self.query_one("#reader-status", Static).update(Text("indexing…", style="dim"))
        self.open_worker(path, self.start_follow)

    @work(thread=True, group="reader-sources", exclusive=True, exit_on_error=False)
    def watch_for_sources(self) -> None:
        """A trial that has not written anything yet: wait for its first file, then open it."""
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled and not self.app._stop.is_set():
            if sources_of(self.trial_dir):
                self.app.call_from_thread(self._sources_appeared)
                return
            time.sleep(TAIL_SEC)

    def _sources_appeared(self) -> None:
        self.sources = sources_of(self.trial_dir)
        self.start_follow = True
        self.open_source()

    @work(thread=True, group="reader-open", exclusive=True, exit_on_error=False)
    def open_worker(self, path: Path, follow: bool) -> None:
        index = StepIndex(path)
        # enough for the first screens, and never more than the first megabyte before the first paint
        while index.count < FIRST_STEPS and index.scanned < FIRST_CHUNK and index.index_more(FIRST_PIECE):
            pass
        self.post_message(StepsOpened(index, follow))

    def on_steps_opened(self, msg: StepsOpened) -> None:
        if self.index is not None and self.index is not msg.index:
            self.index.close()
        self.index = msg.index
        self.view.set_index(msg.index, follow=msg.follow)
        self._show_status()
        self.tail_worker(msg.index)

    @work(thread=True, group="reader-tail", exclusive=True, exit_on_error=False)
    def tail_worker(self, index: StepIndex) -> None:
        """Index the rest in chunks, then follow the file while it grows (a running trial)."""
        from textual.worker import get_current_worker

        worker = get_current_worker()
        while not worker.is_cancelled:
            if index.index_more():
                self.post_message(StepsGrew(index))
                time.sleep(0.005)  # leave the GIL to the UI between chunks
                continue
            self.post_message(StepsGrew(index))
            while not worker.is_cancelled and not index.refresh():
                time.sleep(TAIL_SEC)
                if worker.is_cancelled or self.app._stop.is_set():
                    return

    def on_steps_grew(self, msg: StepsGrew) -> None:
        if msg.index is self.index:
            self.view.grew()
            self._show_status()

    def _show_status(self) -> None:
        ix = self.index
        if ix is None:
            return
        t = Text()
        if self.view.follow:
            t.append("following ", style="green")
        if ix.error:
            t.append(f"cannot read: {safetext.clean(ix.error)}", style="yellow")
        else:
            t.append(f"{ix.count:,} steps · {ix.size:,} B", style="dim")
            if not ix.complete:
                t.append(f" · indexing {100 * ix.scanned // max(1, ix.size)}%", style="dim")
            errors = ix.count_flagged(ERROR)
            if errors:
                t.append(f" · {errors} failed/error (e / E)", style="red")
        self.query_one("#reader-status", Static).update(t)

    # -- keys ----------------------------------------------------------------------------------------
    def action_cursor_up(self) -> None:
        self.view.move(-1)

    def action_cursor_down(self) -> None:
        self.view.move(1)

    def action_page_up(self) -> None:
        self.view.move(-max(1, self.view.size.height - 1))

    def action_page_down(self) -> None:
        self.view.move(max(1, self.view.size.height - 1))

    def action_top(self) -> None:
        self.view.follow = False
        self.view.goto(0)

    def action_bottom(self) -> None:
        self.view.goto(max(0, self.view.count - 1))

    def action_toggle_expand(self) -> None:
        self.view.toggle()

    def action_toggle_follow(self) -> None:
        v = self.view
        v.follow = not v.follow
        v.grew()
        self._show_status()

    def action_next_error(self) -> None:
        self._jump_error(False)

    def action_prev_error(self) -> None:
        self._jump_error(True)

    def _jump_error(self, backwards: bool) -> None:
        if self.index is None:
            return
        i = self.index.next_flagged(self.view.cursor, backwards=backwards)
        if i is None:
            self.notify("no more failed commands or errors" + (" above" if backwards else " below"))
            return
        self.view.goto(i)

    def action_switch_source(self) -> None:
        if len(self.sources) < 2:
            self.notify("this trial has one trajectory source only")
            return
        self.source_no = (self.source_no + 1) % len(self.sources)
        self.open_source()

    def action_search(self) -> None:
        box = self.query_one("#reader-search", Input)
        box.display = True
        box.focus()

    @on(Input.Submitted, "#reader-search")
    def search_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        self.view.query = event.value
        self.view.focus()
        self.view.refresh()
        if event.value:
            self.search_worker(event.value, self.view.cursor - 1, False)

    def action_search_next(self) -> None:
        if self.view.query:
            self.search_worker(self.view.query, self.view.cursor, False)

    def action_search_prev(self) -> None:
        if self.view.query:
            self.search_worker(self.view.query, self.view.cursor, True)

    @work(thread=True, group="reader-search", exclusive=True, exit_on_error=False)
    def search_worker(self, query: str, start: int, backwards: bool) -> None:
        index = self.index
        step = index.search(query, start, backwards) if index else None
        self.post_message(StepFound(query, step))

    def on_step_found(self, msg: StepFound) -> None:
        if msg.step is None:
            self.notify(f"not found: {safetext.clean(msg.what, 80)}", severity="warning", markup=False)
            return
        self.view.goto(msg.step)

    def action_back(self) -> None:
        box = self.query_one("#reader-search", Input)
        if box.display:
            box.display = False
            self.view.focus()
            return
        if self.index is not None:
            self.index.close()
        self.app.pop_screen()
