"""The grid fits its terminal: at 80, 120, 160 and 200 columns every figure on screen is a whole
figure of the model (none cut to fit), the cell-mode key cycles what the cells show, and the
summary row keeps n and the per-arm interval.

The tree is the recorded mini and agents trees merged (six arms: oracle, nop and the stand-ins
that crash, time out, exit non-zero and half-solve), normalised so the screens are deterministic.
"""

from __future__ import annotations

import re

import pytest
import real_trees
from console_support import capture as support_capture
from console_support import check_snapshot, normalise, run_async, wait_for
from textual_screen import screen_text

from console import view
from console.app import make_app
from console.widgets.grid import Grid
from runner.results.model import RunModel

WIDTHS = (80, 120, 160, 200)
MODES = [m for m, _ in view.CELL_MODES]


@pytest.fixture(scope="module")
def six_arms(tmp_path_factory):
    raw = tmp_path_factory.mktemp("six_raw") / "out"
    real_trees.copy_recorded("mini", raw)
    real_trees.copy_recorded("agents", raw)
    return normalise(raw, tmp_path_factory.mktemp("six") / "six")


def whole_figures(tree) -> set[str]:
    """Every figure the console may show for this tree, formatted whole (the model's own values)."""
    m = RunModel.load(tree)
    from console.feeds import arm_summary

    out: set[str] = set()
    for c in m.cells.values():
        for mode in MODES:
            for f in view.cell_figures(c, mode):
                out |= set(f.strip().rstrip("B").split())
        out |= {view.num(c.reward), view.num(c.partial), view.pct(c.pass_rate), view.money(c.cost_usd)}
    summary, _ = arm_summary(m, "run")
    for s in summary.values():
        for line in view.summary_lines(s, 200) + view.summary_lines(s, 200, True) + view.summary_lines(s, 8):
            out |= set(line.replace("\u26a0", "").split())
    return out


def grid_lines(app) -> list[str]:
    """The grid's rows as the screen shows them (the top bar above, the detail line below)."""
    grid = app.main.query_one(Grid)
    lines = screen_text(app).splitlines()
    top = grid.region.y
    return lines[top : top + grid.region.height]


def capture(tree, width: int, keys=()) -> tuple[str, list[str], int]:
    screen, (lines, cw) = support_capture(
        tree, (width, 30), keys, lambda app: (grid_lines(app), app.main.query_one(Grid).cell_width)
    )
    return screen, lines, cw


FIGURE = re.compile(r"\d")


def cut_figures(lines: list[str], whole: set[str], names: set[str]) -> list[str]:
    """Tokens with a digit that are not a whole figure of the model (nor a task or arm name)."""
    bad = []
    for line in lines[1:]:  # the header row holds the arm names (cut to the column, not figures)
        for tok in line.split():
            tok = tok.lstrip("✓▶✗·⊘?!\u26a0").rstrip("*")
            if tok.endswith("B") and tok[:-1] in whole:
                tok = tok[:-1]
            if FIGURE.search(tok) and tok not in whole and not any(tok in n for n in names):
                bad.append(tok)
    return bad


@pytest.mark.parametrize("width", WIDTHS)
def test_the_grid_never_cuts_a_figure(six_arms, width):
    whole = whole_figures(six_arms)
    names = {p.name for p in six_arms.iterdir()} | {p.name for p in six_arms.glob("*/*")}
    screen, lines, cw = capture(six_arms, width)
    check_snapshot(f"grid_six_arms_{width}x30", screen)
    # no figure cut (Textual's own "…"); a task name cut to its column ends in one, on purpose
    cut = [t for line in lines for t in line.split() if "…" in t]
    assert all(t.endswith("…") and any(n.startswith(t[:-1]) for n in names) for t in cut), cut
    assert cut_figures(lines, whole, names) == []
    # the summary row keeps n and the interval of every arm that has done cells
    # (beside n when the column has room, else on the line below)
    summary = "\n".join(lines[:5])
    assert re.search(r"n4\s+(\S+\s+)*?(\[0\.00, 0\.30\]|\.00-\.30)", summary), summary  # nop
    assert re.search(r"n1\s+(\S+\s+)*?(\[0\.40, 0\.40\]|\.40-\.40)", summary), summary  # partial
    # wider terminals show more of each cell, never less
    assert cw >= 8


def test_every_mode_at_every_width_shows_whole_figures(six_arms):
    whole = whole_figures(six_arms)
    names = {p.name for p in six_arms.iterdir()} | {p.name for p in six_arms.glob("*/*")}
    for width in (80, 200):
        _, lines, _ = capture(six_arms, width, keys=("v",) * 4)  # the last mode: tokens
        assert cut_figures(lines, whole, names) == [], width


def test_the_cell_mode_key_cycles_what_the_cells_show(six_arms):
    seen = {}

    async def go():
        app = make_app(six_arms, watch=False, docker=False, offer_start=False, clock=lambda: 0.0)
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "grid"
            )
            grid = app.main.query_one(Grid)
            col = grid.get_column_index("partial")
            for mode in MODES + [MODES[0]]:
                assert app.main.mode == mode
                seen[mode] = (str(grid.get_row("calc-partial")[col]), screen_text(app).splitlines()[0])
                await pilot.press("v")
                await pilot.pause(0.3)

    run_async(go)
    cell = RunModel.load(six_arms).cells[("calc-partial", "partial")]

    def first(mode: str) -> str:
        return seen[mode][0].lstrip("✓").split()[0]

    assert first("score") == view.num(cell.partial)
    assert first("reward") == view.num(cell.reward)
    assert first("cost") == view.money(cell.cost_usd)
    assert first("time") == view.duration(cell.wall_sec)
    assert first("tokens") == f"{view.count(cell.n_input_tokens)}/{view.count(cell.n_output_tokens)}"
    assert "cells cost" in seen["cost"][1] and "cells" not in seen["score"][1]  # the top bar says so


def test_fit_never_cuts_and_keeps_the_order():
    assert view.fit(["0.20", " 20%", "r1.00", "$0.12"], 10) == "0.20  20%"
    assert view.fit(["0.20", " 20%", "r1.00"], 8) == "0.20"  # the next figure would not fit whole
    assert view.fit(["$12.34"], 5) == ""
    assert view.count(378232) == "378k" and view.count(12345) == "12k" and view.count(1234) == "1.2k"
    assert view.count(640) == "640" and view.count(4_200_000) == "4.2M"


def test_a_cut_task_name_ends_in_an_ellipsis():
    """At 80 columns "words-passra" read as a whole name (a probe)."""
    from console.widgets.grid import _label

    assert _label("words-passrate", 12, False).plain == "words-passr…"
    assert _label("calc", 12, False).plain == "calc"
    assert _label("words-passrate", 12, True).plain == "⚠words-pass…"


@pytest.mark.parametrize("name,keys", [("__summary__", ()), ("__label__", ("t",))])
def test_a_task_named_like_the_grids_own_rows_paints_in_both_orientations(tmp_path, name, keys):
    """A probe: a dataset task named ``__summary__`` (or ``__label__``, transposed) was the grid's
    own row key, and the console exited on its first paint, on every restart."""
    raw = tmp_path / "raw"
    real_trees.copy_recorded("mini", raw)
    (raw / "calc-partial").rename(raw / name)
    real_trees.restore_write_order(raw)
    tree = normalise(raw, tmp_path / "tree")
    screen, tasks = support_capture(tree, (160, 40), keys, probe=lambda app: sorted(app.main.cells))
    assert name in screen and "mean" in screen
    assert name in {t for t, _ in tasks}
