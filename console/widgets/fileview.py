"""A virtualised view of one file: only the visible lines are ever read (a 1 GB trajectory opens at once).

The widget is handed a ``LineSource`` (attributes down); indexing, search and tailing run in the
screen's workers, which post messages; this widget only renders the lines it is asked for.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.fileindex import MAX_LINE_BYTES, LineSource
from modes import safetext

MATCH_STYLE = Style(reverse=True, bold=True)
CURRENT_STYLE = Style(underline=True)


class FileView(ScrollView, can_focus=True):
    """Line-API view over a ``LineSource``; follows the end while ``follow`` is on (live tail)."""

    BINDINGS = [
        Binding("g,home", "top", "Top", show=False),
        Binding("G,end", "bottom", "End", show=False),
        Binding("f", "toggle_follow", "Follow"),
        Binding("n", "search_next", "Next"),
        Binding("N", "search_prev", "Prev"),
        Binding("up,k", "scroll_up", "Up", show=False),
        Binding("down,j", "scroll_down", "Down", show=False),
        Binding("pageup,b", "page_up", "PgUp", show=False),
        Binding("pagedown,space", "page_down", "PgDn", show=False),
        Binding("left,h", "scroll_left", "Left", show=False),
        Binding("right,l", "scroll_right", "Right", show=False),
    ]

    follow: reactive[bool] = reactive(False)

    class SearchRequested(Message):
        """Ask the screen to search (it runs the search in a worker)."""

        def __init__(self, query: str, start_line: int, backwards: bool) -> None:
            self.query = query
            self.start_line = start_line
            self.backwards = backwards
            super().__init__()

    def __init__(self, source: LineSource | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.query = ""
        self.match_line: int | None = None
        self._width = 80

    # -- attributes down -------------------------------------------------------------------------
    def set_source(self, source: LineSource | None, follow: bool = False) -> None:
        self.source = source
        self.match_line = None
        self.follow = follow
        self.scroll_to(0, 0, animate=False)
        self.grew()

    def grew(self) -> None:
        """The source indexed more lines: resize the virtual canvas, follow the tail if asked."""
        count = self.source.line_count if self.source else 0
        self.virtual_size = Size(max(self._width, self.size.width), count)
        if self.follow:
            self.scroll_end(animate=False)
        self.refresh()

    def goto(self, line: int, query: str | None = None) -> None:
        if query is not None:
            self.query = query
        self.match_line = line
        self.follow = False
        self.scroll_to(y=max(0, line - self.size.height // 3), animate=False)
        self.refresh()

    @property
    def top_line(self) -> int:
        return int(self.scroll_offset.y)

    # -- rendering -------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        source = self.source
        if source is None or index >= source.line_count:
            return Strip.blank(width, self.rich_style)
        count = source.line_count
        gutter = len(str(count)) + 1
        line = source.get_line(index)
        line = safetext.clean(
            line.expandtabs(4), None
        )  # a log line from the tree: no ESC reaches the terminal
        text = Text(line, no_wrap=True, end="")
        if self.query:
            self._highlight(text, line)
        if index == self.match_line:
            text.stylize(CURRENT_STYLE)
        # widest a line can be: MAX_LINE_BYTES bytes, each escaped as at most 4 cells (``\xNN``);
        # grown only when it grows (at the cap it once asked again on every render, forever)
        wider = min(text.cell_len + gutter, 4 * MAX_LINE_BYTES + gutter)
        if wider > self._width:
            self._width = wider
            self.call_after_refresh(self.grew)
        number = Segment(f"{index + 1:>{gutter - 1}} ", Style(dim=True))
        body = Strip(list(text.render(self.app.console)), text.cell_len)
        body = body.crop(int(scroll_x), int(scroll_x) + max(0, width - gutter))
        strip = Strip([number, *body], gutter + body.cell_length)
        return strip.extend_cell_length(width).apply_style(self.rich_style)

    def _highlight(self, text: Text, line: str) -> None:
        q = self.query
        hay = line.lower() if q == q.lower() else line
        start = hay.find(q)
        while start >= 0:
            text.stylize(MATCH_STYLE, start, start + len(q))
            start = hay.find(q, start + len(q))

    # -- actions ---------------------------------------------------------------------------------
    def action_top(self) -> None:
        self.follow = False
        self.scroll_home(animate=False)

    def action_bottom(self) -> None:
        self.scroll_end(animate=False)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.scroll_end(animate=False)

    def action_search_next(self) -> None:
        if self.query:
            start = (self.match_line + 1) if self.match_line is not None else self.top_line
            self.post_message(self.SearchRequested(self.query, start, False))

    def action_search_prev(self) -> None:
        if self.query:
            start = self.match_line if self.match_line is not None else self.top_line
            self.post_message(self.SearchRequested(self.query, start, True))
