"""The arms of one task side by side: figures, what each agent did, and the tests x arms table.

The question the comparison asks ("what did heartbeat do on this task that plain did not?") is
answered here: one column per arm (the attempt that scores the pair), figures from the runner's
model, commands and the last message from each trajectory, and the verifier's per-test outcomes
with the tests one arm passed and another failed marked. Enter on a column opens that arm's
trajectory in the reader. Trajectories and verifier files are read in a worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from console import compare_rows, view
from console.keys import bindings_for
from console.screens.reader import ReaderScreen
from runner.results.cells import Cell
from runner.results.trajectory import TrajectoryFacts
from runner.results.verifier_tests import ERROR, FAIL, PASS, SKIP, TestOutcomes, disagreements

OUTCOME_TEXT = {PASS: ("✓ pass", "green"), FAIL: ("✗ fail", "bold red"), ERROR: ("✗ error", "bold red"),
                SKIP: ("- skip", "dim")}  # fmt: skip


#: the last agent message is cut to this in its cell (the reader shows it whole)
LAST_MESSAGE_CHARS = 20


@dataclass
class ArmRead(Message):
    arm: str
    facts: TrajectoryFacts
    tests: TestOutcomes


@dataclass
class PairsRead(Message):
    table: compare_rows.PairTable | None
    error: str | None = None


class CompareScreen(Screen):
    BINDINGS = bindings_for("compare")
    BINDINGS += [("escape,q", "back", "Back"), ("question_mark,f1", "app.help", "Help")]

    def __init__(self, out: Path, task: str, arms: list[str], cells: dict[str, Cell | None], budget: float | None = None,
                 now: float | None = None, all_cells: Mapping[compare_rows.Key, Cell] | None = None,
                 suspect: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.out, self.task_name = out, task
        self.arms = list(arms)
        self.cells = dict(cells)
        self.all_cells = dict(all_cells or {})  # every task's cells: the paired comparisons
        self.suspect = suspect  # the evidence, when every arm failed this task alike
        self.budget, self.now = budget, now
        self.trials = {a: compare_rows.shown_trial(self.cells.get(a)) for a in self.arms}
        self.facts: dict[str, TrajectoryFacts] = {}
        self.tests: dict[str, TestOutcomes] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="compare-title")
        yield Static(id="compare-suspect")
        yield DataTable(id="compare-figures", cursor_type="column", zebra_stripes=True)
        yield Static(id="compare-tests-title")
        yield DataTable(id="compare-tests", cursor_type="column")
        yield Static(id="compare-pairs-title")
        yield DataTable(id="compare-pairs", cursor_type="none", zebra_stripes=True)
        yield Static(id="compare-pairs-notes")
        yield Footer()

    def on_mount(self) -> None:
        n = sum(1 for t in self.trials.values() if t is not None)
        title = Text(view.clean(self.task_name, 80), style="bold")
        title.append(f"   {n} of {len(self.arms)} arms · a column is the attempt that scores the pair · "
                     "Enter reads its trajectory", style="dim")  # fmt: skip
        self.query_one("#compare-title", Static).update(title)
        sus = self.query_one("#compare-suspect", Static)
        sus.display = bool(self.suspect)
        if self.suspect:
            sus.update(Text(f"⚠ {view.clean(self.suspect, None)}"))  # task, test and exception text
        self.fill_figures()
        self.fill_tests()
        self.query_one("#compare-figures", DataTable).focus()
        for arm, trial in self.trials.items():
            if trial is not None:
                self.read_worker(arm, trial)
        pairs_title = self.query_one("#compare-pairs-title", Static)
        if len(self.arms) > 1 and self.all_cells:
            pairs_title.update(Text("pairs over every task: computing…", style="dim"))
            self.pairs_worker()
        else:
            pairs_title.display = False
            self.query_one("#compare-pairs", DataTable).display = False
        self.query_one("#compare-pairs-notes", Static).display = False

    @work(thread=True, group="compare-pairs", exit_on_error=False)
    def pairs_worker(self) -> None:
        try:
            self.post_message(PairsRead(compare_rows.pair_table(self.out, self.all_cells, self.arms)))
        except Exception as exc:  # noqa: BLE001 - shown in place of the table, never fatal
            self.post_message(PairsRead(None, f"{type(exc).__name__}: {exc}"))

    def on_pairs_read(self, msg: PairsRead) -> None:
        title = self.query_one("#compare-pairs-title", Static)
        table = self.query_one("#compare-pairs", DataTable)
        if msg.table is None:
            title.update(Text(f"pairs over every task: unavailable ({view.clean(msg.error)})", style="red"))
            return
        t = Text("pairs over every task", style="bold")
        t.append(f"   diff = a − b · {msg.table.level}", style="dim")
        title.update(t)
        table.clear(columns=True)
        for h in compare_rows.PAIR_HEADS:
            table.add_column(h)
        for row in msg.table.rows:
            table.add_row(*(view.plain(v) for v in row))  # arm names: cleaned, never read as markup
        if msg.table.underpowered:
            notes = self.query_one("#compare-pairs-notes", Static)
            notes.update(Text("underpowered (a \"no difference\" here is not evidence of none): "
                              + view.clean(" · ".join(msg.table.underpowered), None), style="yellow"))  # fmt: skip
            notes.display = True

    @work(thread=True, group="compare-read", exit_on_error=False)
    def read_worker(self, arm: str, trial: compare_rows.ArmTrial) -> None:
        facts, tests = compare_rows.read_arm(trial)
        self.post_message(ArmRead(arm, facts, tests))

    def on_arm_read(self, msg: ArmRead) -> None:
        self.facts[msg.arm], self.tests[msg.arm] = msg.facts, msg.tests
        self.fill_figures()
        self.fill_tests()

    # -- tables ----------------------------------------------------------------------------------
    def fill_figures(self) -> None:
        table = self.query_one("#compare-figures", DataTable)
        col = table.cursor_column
        table.clear(columns=True)
        table.add_column("", key="_label")
        for a in self.arms:
            table.add_column(view.plain(a), key=a)
        cols = {
            a: compare_rows.figure_rows(
                self.cells.get(a),
                self.trials[a],
                self.facts.get(a) if self.trials[a] else TrajectoryFacts(error="no trial"),
                self.budget,
                self.now,
            )  # fmt: skip
            for a in self.arms
        }
        for label, key in compare_rows.ROWS:
            values = [cols[a][key] for a in self.arms]
            differ = len(set(values)) > 1
            row: list[Text] = [Text(label, style="bold" if differ else "")]
            for v in values:
                style = ""
                if key == "status":
                    style = view.STATUS_STYLE.get(v, "")
                elif key == "failed_commands" and v not in ("0", "-", "…"):
                    style = "red"
                elif key == "build" and v == "FAILED":
                    style = "bold red"
                text = view.clean(v, LAST_MESSAGE_CHARS if key == "last_message" else None)
                row.append(Text(text, style=style, no_wrap=True, overflow="ellipsis"))
            table.add_row(*row, key=key)
        if col:
            table.move_cursor(column=col)
        else:
            table.move_cursor(column=1)

    def fill_tests(self) -> None:
        table = self.query_one("#compare-tests", DataTable)
        col = table.cursor_column
        table.clear(columns=True)
        got = {a: self.tests[a] for a in self.arms if a in self.tests and self.tests[a].outcomes}
        title = self.query_one("#compare-tests-title", Static)
        if not got:
            waiting = any(self.trials[a] is not None and a not in self.tests for a in self.arms)
            title.update(Text("tests: reading…" if waiting else "tests: the verifier output names no tests",
                              style="dim"))  # fmt: skip
            return
        split = set(disagreements(got))
        sources = sorted({o.source for o in got.values()})
        t = Text("tests × arms", style="bold")
        t.append(f"   from {view.clean(', '.join(sources))} · ", style="dim")
        t.append(f"{len(split)} test(s) passed by one arm and failed by another (marked ≠)",
                 style="bold yellow" if split else "dim")  # fmt: skip
        title.update(t)
        table.add_column("", key="_mark")
        table.add_column("test", key="_test")
        for a in self.arms:
            table.add_column(view.plain(a), key=a)
        names: dict[str, None] = {}
        for o in got.values():
            names.update(dict.fromkeys(n for n, _ in o.outcomes))
        maps = {a: o.as_dict() for a, o in got.items()}
        for name in names:
            differ = name in split
            row = [Text("≠" if differ else "", style="bold yellow"),
                   view.plain(name, "bold yellow" if differ else "", no_wrap=True, overflow="ellipsis")]  # fmt: skip
            for a in self.arms:
                outcome = maps.get(a, {}).get(name)
                label, style = OUTCOME_TEXT.get(outcome, ("·", "dim"))
                row.append(Text(label, style=style))
            table.add_row(*row, key=name)
        table.move_cursor(column=col if col >= 2 else 2)

    # -- keys ------------------------------------------------------------------------------------
    def _arm_under_cursor(self) -> str | None:
        table = self.focused if isinstance(self.focused, DataTable) else self.query_one("#compare-figures")
        col = table.cursor_column
        offset = 2 if table.id == "compare-tests" else 1
        i = col - offset
        return self.arms[i] if 0 <= i < len(self.arms) else None

    def action_read_arm(self, arm: str | None = None) -> None:
        arm = arm or self._arm_under_cursor()
        if arm is None:
            self.notify("choose an arm's column (left / right)", severity="warning")
            return
        trial = self.trials.get(arm)
        if trial is None:
            self.notify(f"{view.clean(arm, 40)} has no trial on {view.clean(self.task_name, 80)} yet",
                        severity="warning", markup=False)  # fmt: skip
            return
        running = view.status_of(self.cells.get(arm)) == "running"
        self.app.push_screen(
            ReaderScreen(trial.trial_dir, f"{self.task_name} × {arm}  {trial.stamp}", follow=running)
        )

    @on(DataTable.ColumnSelected)
    def column_selected(self, event: DataTable.ColumnSelected) -> None:
        self.action_read_arm()

    def action_switch_table(self) -> None:
        figures = self.query_one("#compare-figures", DataTable)
        tests = self.query_one("#compare-tests", DataTable)
        (tests if figures.has_focus else figures).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
