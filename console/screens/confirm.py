"""Confirmation dialog for destructive actions: shows the exact plan; Cancel is the default.

As in ctop and Posting: Cancel is listed first and focused, Escape and ``n`` cancel, and only an
explicit ``y`` or a press on the red button goes ahead.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from modes import safetext


class ConfirmScreen(ModalScreen[bool]):
    """Returns True only when the operator confirms; the plan text is shown verbatim."""

    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel"),
        Binding("y", "confirm", "Yes, do it"),
        Binding("left,right,tab", "app.focus_next", "Switch", show=False),
        Binding("up,k", "scroll(-1)", "Scroll plan", show=False),
        Binding("down,j", "scroll(1)", "Scroll plan", show=False),
        Binding("pageup", "scroll(-10)", "", show=False),
        Binding("pagedown", "scroll(10)", "", show=False),
    ]

    def __init__(self, title: str, plan_text: str, confirm_label: str = "Do it") -> None:
        super().__init__()
        self.title_text = title
        self.plan_text = plan_text
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(Text(safetext.clean(self.title_text)), id="confirm-title")
            with VerticalScroll(id="confirm-plan"):  # a plan names paths and projects from the tree
                yield Static(Text(safetext.clean(self.plan_text, None, newlines=True)), markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel (n/Esc)", id="cancel", variant="primary")
                yield Button(f"{self.confirm_label} (y)", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_scroll(self, lines: int) -> None:
        self.query_one("#confirm-plan", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_confirm(self) -> None:
        self.dismiss(True)


class MessageScreen(ModalScreen[None]):
    """The outcome of an action (what was signalled, removed, started), dismissed with any key."""

    BINDINGS = [Binding("escape,enter,q,space", "close", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(Text(safetext.clean(self.title_text)), id="confirm-title")
            with VerticalScroll(id="confirm-plan"):
                yield Static(Text(safetext.clean(self.text, None, newlines=True)), markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Close (Enter)", id="close", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
