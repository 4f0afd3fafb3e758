"""The one table of key bindings: it feeds the App's bindings, the footer, the help screen and the
palette (docs/console.md keeps a copy of the table, made by hand).

Destructive actions sit on capital letters that cannot be mistaken for navigation or filter keys
(k9s's complaints #21 and #87), and every one of them asks for confirmation first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    keys: str  # textual key names, comma separated
    action: str
    help: str
    where: str = "grid"
    destructive: bool = False
    show: bool = True  # shown in the footer
    short: str = ""  # footer label

    @property
    def key_label(self) -> str:
        names = {"question_mark": "?", "slash": "/", "escape": "Esc", "enter": "Enter", "ctrl+p": "Ctrl+P", "ctrl+s": "Ctrl+S",
                 "up": "↑", "down": "↓", "left": "←", "right": "→", "pageup": "PgUp", "pagedown": "PgDn",
                 "home": "Home", "end": "End"}  # fmt: skip
        return " ".join(names.get(k, k) for k in self.keys.split(","))


KEYS: tuple[Key, ...] = (
    Key(
        "enter",
        "open",
        "drill down into the selected pair (trials, trajectory, verifier, logs)",
        show=False,
        short="Open",
    ),
    Key("slash", "filter", "filter rows by name (!text inverts); Esc clears", short="Filter"),
    Key(
        "s",
        "sort",
        "cycle sort: name, partial, reward, pass rate, cost, status (by the cursor's column)",
        short="Sort",
    ),
    Key("t", "transpose", "toggle task-major / arm-major grid", short="Transpose"),
    Key(
        "v",
        "cell_mode",
        "cycle what the cells show: partial+pass, reward, cost, time vs budget, tokens",
        short="Cells",
    ),
    Key("a", "scope", "toggle counting: this run / all time", show=False, short="Scope"),
    Key("r", "rescan", "rescan the whole tree now", show=False, short="Rescan"),
    Key("p", "pause", "pause / resume screen updates (data keeps flowing)", show=False, short="Pause"),
    Key(
        "R",
        "start_runner",
        "start the runner (detached, from .driver_env)",
        destructive=True,
        short="Start",
        where="any",
    ),
    Key(
        "T",
        "stop_runner",
        "stop the runner gracefully (SIGTERM to the runner alone; it stops its trials, cleans up)",
        destructive=True,
        short="Stop",
        where="any",
    ),
    Key(
        "K",
        "kill",
        "kill: TERM runner and trials by group, grace, KILL; remove this run's containers/networks",
        destructive=True,
        short="Kill",
        where="any",
    ),
    Key(
        "C",
        "cleanup",
        "cleanup only: remove this run's containers and compose networks",
        destructive=True,
        short="Cleanup",
        where="any",
    ),
    Key(
        "w",
        "web_viewer",
        "harbor's web viewer of this tree: start it (or show the running one) and how to reach it",
        short="Web",
        where="any",
        show=False,
    ),
    Key(
        "V",
        "void",
        "void the selected trial and rerun the pair",
        where="drill-down",
        destructive=True,
        short="Void",
    ),
    Key(
        "ctrl+s",
        "screenshot",
        "save the screen as SVG (./marathon-console-<time>.svg; `marathon console --screenshot FILE` for scripts)",
        show=False,
        short="Screenshot",
        where="any",
    ),
    Key("question_mark,f1", "help", "this help", short="Help", where="any"),
    Key("ctrl+p", "command_palette", "command palette", show=False, where="any"),
    Key("q", "quit", "quit the console (the runner keeps running)", short="Quit"),
    Key("escape", "back", "back / close", where="any", show=False),
    Key("escape,q", "back", "back to the grid", where="drill-down", short="Back"),
    Key(
        "tab",
        "next_file",
        "switch file (trajectory, verifier, metrics, reward, trial.log, exception, receipt, result)",
        where="drill-down",
        short="Next file",
    ),
    Key("shift+tab", "prev_file", "previous file", where="drill-down", show=False),
    Key(
        "slash",
        "search",
        "search in the file; n / N next / previous match",
        where="drill-down",
        short="Search",
    ),
    # the file view's keys, whichever of the drill-down's parts has the focus (they did nothing
    # while the trials table had it, as it has on opening, a probe found)
    Key("f", "file_follow", "follow the end of the file (live tail)", where="drill-down", show=False),
    Key("g", "file_top", "top of the file", where="drill-down", show=False),
    Key("G", "file_end", "end of the file", where="drill-down", show=False),
    Key("n", "file_next", "next match of the search", where="drill-down", show=False),
    Key("N", "file_prev", "previous match of the search", where="drill-down", show=False),
    Key("c", "compare", "compare the arms on the selected task, side by side", short="Compare"),
    Key("enter", "", "read the selected trial's trajectory as steps", where="drill-down", show=False),
    Key("c", "compare", "compare the arms on this task", where="drill-down", short="Compare"),
    # the trajectory reader (one line per step)
    Key("up,k", "cursor_up", "previous step", where="reader", show=False),
    Key("down,j", "cursor_down", "next step", where="reader", show=False),
    Key("pageup", "page_up", "a page of steps up", where="reader", show=False),
    Key("pagedown", "page_down", "a page of steps down", where="reader", show=False),
    Key(
        "enter,o",
        "toggle_expand",
        "expand / fold the step: full message, command output, reasoning",
        where="reader",
        short="Expand",
    ),  # fmt: skip
    Key("e", "next_error", "next failed command or error", where="reader", short="Next err"),
    Key("E", "prev_error", "previous failed command or error", where="reader", show=False),
    Key("slash", "search", "search the steps; n / N next / previous match", where="reader", short="Search"),
    Key("n", "search_next", "next match", where="reader", show=False),
    Key("N", "search_prev", "previous match", where="reader", show=False),
    Key("f", "toggle_follow", "follow new steps (a running trial)", where="reader", short="Follow"),
    Key("g,home", "top", "first step", where="reader", show=False),
    Key("G,end", "bottom", "last step", where="reader", show=False),
    Key(
        "s",
        "switch_source",
        "switch between the ATIF trajectory and the raw app-server stdout",
        where="reader",
        short="Source",
    ),  # fmt: skip
    # the arm comparison
    Key("left,right", "", "choose an arm (column)", where="compare", show=False),
    Key("enter", "read_arm", "read the chosen arm's trajectory", where="compare", short="Read"),
    Key("tab", "switch_table", "switch between the figures and the tests table", where="compare", show=False),
)


def bindings_for(where: str) -> list:
    """The textual bindings of one screen, from this table (the help screen and the palette read it too)."""
    from textual.binding import Binding

    return [
        Binding(k.keys, k.action, k.short or k.action, show=k.show)
        for k in KEYS
        if k.where == where and k.action
    ]
