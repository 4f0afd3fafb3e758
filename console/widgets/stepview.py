"""One line per step of a trajectory, expandable in place; only the visible steps are ever parsed.

The widget is handed a ``runner.results.trajectory.StepIndex`` (attributes down); indexing, search and
following run in the reader screen's workers, which post messages; this widget renders what it is
asked for and moves a cursor. Lines: ``▸ step time role tokens mark summary``; an expanded step
adds its full message, reasoning and each command with its exit code, duration and output.
"""

from __future__ import annotations

import bisect

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from modes import safetext
from runner.results.trajectory import ERROR, GOAL, Step, StepIndex

#: lines an expanded step shows at most (the rest: see the raw tab)
MAX_DETAIL_LINES = 2000
DETAIL_LINE_CHARS = 1000
ROLE_STYLE = {"agent": "cyan", "user": "green", "system": "dim", "event": "magenta"}
CURSOR_STYLE = Style(reverse=True)
MATCH_STYLE = Style(reverse=True, bold=True)


def _printable(s: str) -> str:
    """What the agent wrote, as the screen may show it (``modes.safetext.clean``: one sanitizer)."""
    return safetext.clean(s, None)


def header_text(step: Step, number_width: int) -> Text:
    """The one line of a step (also what tests and captures read)."""
    t = Text(no_wrap=True, end="")
    t.append(f"{step.index + 1:>{number_width}} ", style="dim")
    # every field of a step is the agent's words (the timestamp and the role too): ``_printable``
    t.append(f"{_printable(step.time or '--:--:--')[:8]:8} ", style="dim")
    t.append(f"{_printable(step.role)[:6]:6} ", style=ROLE_STYLE.get(step.role, ""))
    tok = ""
    if step.tokens_in is not None or step.tokens_out is not None:
        tok = f"{step.tokens_in if step.tokens_in is not None else '-'}/{step.tokens_out if step.tokens_out is not None else '-'}"
    t.append(f"{tok:>13} ", style="dim")
    if step.flag == ERROR:
        t.append("✗ ", style="bold red")
    elif step.flag == GOAL:
        t.append("◆ ", style="bold yellow")
    else:
        t.append("  ")
    style = "red" if step.flag == ERROR else ("yellow" if step.flag == GOAL else "")
    t.append(_printable(step.summary), style=style)
    return t


def detail_lines(step: Step, width: int = 120) -> list[Text]:
    """What an expanded step shows: message, reasoning, each command with its outcome and output.

    Long lines are folded at ``width`` (the view's width) so that nothing is cut at the edge.
    """
    out: list[Text] = []
    fold = max(20, width - 4)

    def block(title: str, body: str, style: str = "") -> None:
        if not body.strip():
            return
        out.append(Text(f"   ── {title}", style="bold dim"))
        for ln in body.splitlines():
            line = _printable(ln.expandtabs(4))[:DETAIL_LINE_CHARS]
            for k in range(0, max(1, len(line)), fold):
                if len(out) >= MAX_DETAIL_LINES:
                    return
                out.append(Text("   " + line[k : k + fold], style=style))

    block("message", step.message)
    block("reasoning", step.reasoning, "italic")
    for c in step.commands:
        mark = []
        if c.exit_code is not None:
            mark.append(f"exit {c.exit_code}")
        if c.duration_sec is not None:
            mark.append(f"{c.duration_sec:.2f}s")
        if c.failed:
            mark.append("FAILED")
        block(f"{_printable(c.tool)} {' · '.join(mark)}", c.text, "bold red" if c.failed else "bold")
        block("output", c.output)
    if step.note:
        out.append(Text(f"   ({step.note})", style="yellow"))
    out.append(
        Text(f"   ── {step.length:,} bytes at offset {step.offset:,} (raw tab shows them)", style="dim")
    )
    return out[: MAX_DETAIL_LINES + 2]


class StepView(ScrollView, can_focus=True):
    """Line-API list of steps with a cursor; ``follow`` keeps the cursor on the newest step."""

    cursor: reactive[int] = reactive(0)
    follow: reactive[bool] = reactive(False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.index: StepIndex | None = None
        self.expanded: dict[int, list[Text]] = {}
        self._order: list[int] = []  # expanded steps, sorted
        self.query = ""

    # -- attributes down -------------------------------------------------------------------------
    def set_index(self, index: StepIndex | None, follow: bool = False) -> None:
        self.index = index
        self.expanded.clear()
        self._order = []
        self.follow = follow
        self.cursor = 0
        self.scroll_to(0, 0, animate=False)
        self.grew()

    @property
    def count(self) -> int:
        return self.index.count if self.index else 0

    def grew(self) -> None:
        """The index has more steps: resize the canvas; in follow mode move to the newest."""
        extra = sum(len(v) for v in self.expanded.values())
        self.virtual_size = Size(self.size.width, self.count + extra)
        if self.follow and self.count:
            self.cursor = self.count - 1
            self.scroll_end(animate=False)
        self.refresh()

    # -- geometry ----------------------------------------------------------------------------------
    def y_of(self, step: int) -> int:
        """The display line of a step's header (expanded steps above it push it down)."""
        k = bisect.bisect_left(self._order, step)
        return step + sum(len(self.expanded[s]) for s in self._order[:k])

    def locate(self, y: int) -> tuple[int, int]:
        """(step, 0) for a header line, (step, n) for the n-th detail line of an expanded step."""
        offset = 0
        for s in self._order:
            if y <= s + offset:
                return y - offset, 0
            extra = len(self.expanded[s])
            if y <= s + offset + extra:
                return s, y - (s + offset)
            offset += extra
        return y - offset, 0

    # -- rendering ---------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        step_i, sub = self.locate(int(scroll_y) + y)
        index = self.index
        if index is None or step_i >= index.count:
            return Strip.blank(width, self.rich_style)
        if sub:
            text = self.expanded[step_i][sub - 1].copy()
        else:
            step = index.step(step_i)
            if step is None:
                return Strip.blank(width, self.rich_style)
            text = header_text(step, len(str(index.count)))
            marker = "▾" if step_i in self.expanded else "▸"
            text = Text(marker, style="dim").append_text(text)
            if step_i == self.cursor:
                text.stylize(CURSOR_STYLE)
        if self.query:
            self._highlight(text)
        segments = list(text.render(self.app.console))
        strip = Strip(segments, text.cell_len).crop(int(scroll_x), int(scroll_x) + width)
        return strip.extend_cell_length(width).apply_style(self.rich_style)

    def _highlight(self, text: Text) -> None:
        q = self.query
        hay = text.plain.lower() if q == q.lower() else text.plain
        start = hay.find(q)
        while start >= 0:
            text.stylize(MATCH_STYLE, start, start + len(q))
            start = hay.find(q, start + len(q))

    # -- cursor ------------------------------------------------------------------------------------
    def watch_cursor(self, old: int, new: int) -> None:
        self._keep_visible()
        self.refresh()

    def _keep_visible(self) -> None:
        y = self.y_of(self.cursor)
        top = int(self.scroll_offset.y)
        h = max(1, self.size.height)
        if y < top:
            self.scroll_to(y=y, animate=False)
        elif y >= top + h:
            self.scroll_to(y=y - h + 1, animate=False)

    def move(self, delta: int) -> None:
        if self.count:
            self.follow = False if delta < 0 else self.follow
            self.cursor = max(0, min(self.count - 1, self.cursor + delta))

    def goto(self, step: int) -> None:
        """Put the cursor on ``step`` (a search hit, the next error) and bring it into view."""
        if 0 <= step < self.count:
            self.follow = False
            self.cursor = step
            y = self.y_of(step)
            self.scroll_to(y=max(0, y - self.size.height // 3), animate=False)
            self.refresh()

    def toggle(self, step: int | None = None) -> None:
        i = self.cursor if step is None else step
        if self.index is None or not 0 <= i < self.count:
            return
        if i in self.expanded:
            del self.expanded[i]
            self._order.remove(i)
        else:
            s = self.index.step(i)
            if s is None:
                return
            self.expanded[i] = detail_lines(s, self.size.width or 120)
            bisect.insort(self._order, i)
        self.grew()
        self._keep_visible()

    def visible_text(self) -> list[str]:
        """The plain text of the lines on screen (tests and captures)."""
        return [self.render_line(y).text for y in range(self.size.height)]
