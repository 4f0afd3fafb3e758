"""The ``?`` screen: every key binding, generated from the same table the bindings come from."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.keys import KEYS


def keys_table(readonly: bool = False) -> Table:
    table = Table(title="marathon console — keys", expand=False, show_edge=False)
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("where")
    table.add_column("what")
    for k in KEYS:
        what = k.help + ("  (disabled: --readonly)" if readonly and k.destructive else "")
        table.add_row(k.key_label, k.where, what)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close")]

    def __init__(self, readonly: bool = False) -> None:
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(keys_table(self.readonly))
            yield Static(
                "Destructive actions show the exact plan first; Cancel is the default (Enter on it, n or Esc).\n"
                "The runner is never a child of this console: quitting or losing the terminal leaves it running.",
                id="help-foot",
            )

    def action_close(self) -> None:
        self.dismiss(None)
