"""The current screen of a Textual app as plain text: what the console tests assert on.

Reads Textual internals (the compositor's full update), so it lives with the tests, not in the
product: a Textual upgrade that moves them breaks a test helper, never the console.
"""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App


def screen_text(app: App) -> str:
    """The current screen as plain text (snapshots, README captures)."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    console.print(update)
    return console.export_text(styles=False)
