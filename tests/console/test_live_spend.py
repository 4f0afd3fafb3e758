"""Live spend in the console: as the gateway's writer appends call lines to the ledger of a tree the
console is watching, the top bar's spend per arm, the grid's cost view and the selected cell's line
follow them, priced as ``marathon status`` prices them (LiteLLM's map here); a call of a model the map
does not know turns the figure into "unpriced", never $0. A recorded real tree (oracle and nop over
the demo tasks); the ledger written by the gateway's own writer."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from console_support import run_async, wait_for
from textual_screen import screen_text

from console.app import make_app
from console.screens.drill import DrillScreen
from console.view import money
from runner.ops.gateway.server import LedgerWriter
from runner.results import caps as C
from runner.results import ledger as L
from runner.results.prices import Pricer
from runner.results.tree import ledger_path, list_dirs

TASK = "calc-partial"


def call(arm: str, stamp: str, n: int, inp: int, out_tokens: int, model: str = "gpt-5.5") -> dict:
    return {
        "kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9 + n, "gateway": "g1", "host": None,
        "attempt": f"{arm}-{stamp}", "task": TASK, "arm": arm, "stamp": stamp, "method": "POST",
        "path": "/v1/responses", "request_id": f"{arm}-{stamp}.{n}", "params": {"model": model},
        "outcome": L.OK, "status": 200, "usage": {"input": inp, "cached": 0, "output": out_tokens, "reasoning": 0},
    }  # fmt: skip


def usd(*rows: dict) -> float:
    u = L.AttemptUsage()
    for r in rows:
        u.add(L.call_from_dict(r))
    return Pricer().cost(u).usd


def test_spend_per_arm_and_per_cell_follows_the_ledger_as_its_lines_land(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    stamps = {arm: list_dirs(out / TASK / arm)[0] for arm in ("oracle", "nop")}
    o1 = call("oracle", stamps["oracle"], 1, 200_000, 5_000)
    o2 = call("oracle", stamps["oracle"], 2, 400_000, 20_000)
    n1 = call("nop", stamps["nop"], 3, 100_000, 1_000)

    async def go():
        app = make_app(out, docker=False, offer_start=False)
        async with app.run_test(size=(200, 40)) as pilot:
            await wait_for(pilot, lambda: TASK in screen_text(app), 60, "the grid")
            # the watcher's first heartbeat: its watches are set (it starts after the first paint)
            shown = time.time()
            await wait_for(pilot, lambda: (app.main.scanned_at or 0) > shown, 30, "the watcher")
            assert "spend $" not in screen_text(app)  # no ledger yet: no ledger figure
            w = LedgerWriter(ledger_path(out))
            try:
                w.write(o1)
                want = f"spend {money(usd(o1))} (projected {money(usd(o1))} [{usd(o1):.2f}, {usd(o1):.2f}]): oracle"
                await wait_for(pilot, lambda: want in screen_text(app), 30, want)
                w.write(o2)
                w.write(n1)
                total = usd(o1, o2) + usd(n1)
                # every pair is done: the projection at completion is what was spent (made at the first
                # line, moved by the spend since)
                iv = f"{total:.2f}"
                want = f"spend {money(total)} (projected {money(total)} [{iv}, {iv}]): nop {money(usd(n1))} oracle"
                await wait_for(pilot, lambda: want in screen_text(app), 30, want)
                assert f"Σ{money(usd(o1, o2))}" in screen_text(app)  # the arm's summary too
                # the cell's line: what the cell cost the run on the ledger, with its tokens
                app.main.query_one("Grid").move_to(TASK, "oracle")
                want = f"spend {money(usd(o1, o2))} (625k tok on the ledger)"
                await wait_for(pilot, lambda: want in screen_text(app), 30, want)
                # the drill-down's header: the same spend (it showed harbor's "cost $0.00", a probe)
                await pilot.press("enter")
                await wait_for(
                    pilot,
                    lambda: isinstance(app.screen, DrillScreen) and want in screen_text(app),
                    30,
                    "drill",
                )
                await pilot.press("escape")
                await wait_for(pilot, lambda: not isinstance(app.screen, DrillScreen), 30, "the grid again")
                # the grid's cost view: the cell's spend first
                await pilot.press("v", "v")  # partial+pass, reward, cost
                await wait_for(pilot, lambda: "cells cost" in screen_text(app), 30, "the cost view")
                assert money(usd(o1, o2)) in screen_text(app)
                # a model LiteLLM's map does not know: unpriced, never $0
                w.write(call("nop", stamps["nop"], 4, 1_000, 10, model="private-model-x"))
                await wait_for(
                    pilot, lambda: "spend unpriced: nop $? oracle" in screen_text(app), 30, "unpriced"
                )
                # the gateway cuts oracle's attempt at its own spend cap (--max-spend-attempt): the cell's
                # line says so once the attempt's next ledger line lands (the console watched it happen)
                assert "ended by its spend cap" not in screen_text(app)
                key = (TASK, "oracle", stamps["oracle"])
                C.write_attempt_cut(out, "a-oracle", key, C.Reached(C.ATTEMPT, "oracle", 1.0, 1.0))
                w.write(call("oracle", stamps["oracle"], 5, 1_000, 10))
                want = "ended by its spend cap (scored, like a deadline)"
                await wait_for(pilot, lambda: want in screen_text(app), 30, want)
            finally:
                w.close()

    run_async(go)


def test_the_top_bars_rates_are_over_the_runs_span_as_status_takes_them():
    """Found by a probe: the top bar took its $/h and tok/h since the last runner start and up to its
    exit, `marathon status` since that start and up to now, so the two read $40/h and $30/h of one
    finished run. Both are over the run's span (``RunModel.run_span``: its first start, a restart
    that resumed it included, to its exit)."""
    from datetime import UTC, datetime

    from console.feeds import RunnerInfo
    from console.view import progress_text
    from runner.results.run_progress import RunEnd, RunProgress

    t0 = 1_796_000_000.0
    restart = RunProgress(started_at=t0 + 3 * 3600, end=RunEnd("done", 4, 4, t0 + 5 * 3600))
    info = RunnerInfo(alive=False, progress=restart)
    at = lambda h: datetime.fromtimestamp(t0 + h * 3600, UTC)  # noqa: E731
    pieces = ((at(0), at(3)), (at(3), at(5)))  # a start, and the restart that resumed it
    text = progress_text(info, 10.0, 500_000, t0 + 9 * 3600, pieces)
    assert "elapsed 5h00 " in text and f"{money(2.0)}/h" in text, text
    # stopped after 1 h, resumed 10 h later: the hours between are not worked (found by a review)
    text = progress_text(info, 10.0, 500_000, t0 + 12 * 3600, ((at(0), at(1)), (at(11), None)))
    assert "elapsed 2h00 " in text and f"{money(5.0)}/h" in text, text
    # a tree without a span yet (no runner start read): the runner's own clock, as before
    assert "elapsed 2h00 " in progress_text(info, 10.0, 500_000, t0 + 9 * 3600)


def test_an_arm_with_calls_cut_before_their_usage_shows_its_spend_as_a_lower_bound():
    """Found by a review: the report and `status` say an arm's spend lacks the calls cut before their
    usage arrived; the top bar showed the same figure as a whole. It reads ``≥`` there now."""
    from console.feeds import ArmSummary
    from console.view import arms_spend_text

    plain = ArmSummary.of({"ledger_spend_usd": 0.4, "ledger_unmetered_calls": 2})
    goal = ArmSummary.of({"ledger_spend_usd": 0.83})
    assert (plain.ledger_unmetered, goal.ledger_unmetered) == (2, 0)
    text = arms_spend_text({"plain": plain, "goal": goal})
    assert text == f"spend ≥{money(1.23)}: plain ≥{money(0.4)} goal {money(0.83)}", text
    assert arms_spend_text({"goal": goal}) == f"spend {money(0.83)}: goal {money(0.83)}"


def tree_with_two_calls(mini_tree: Path, out: Path) -> dict[str, str]:
    """A copy of the mini tree at ``out`` whose ledger has one call of oracle and one of nop (the
    gateway's own writer); their stamps by arm."""
    shutil.copytree(mini_tree, out)
    stamps = {arm: list_dirs(out / TASK / arm)[0] for arm in ("oracle", "nop")}
    w = LedgerWriter(ledger_path(out))
    try:
        w.write(call("oracle", stamps["oracle"], 1, 200_000, 5_000))
        w.write(call("nop", stamps["nop"], 2, 100_000, 1_000))
    finally:
        w.close()
    return stamps


def test_an_arm_with_attempts_live_at_a_dead_gateway_shows_its_spend_as_a_lower_bound(mini_tree, tmp_path):
    """`status` and the report said an arm's spend lacks the calls in flight at a gateway found dead
    (a killed gateway writes no line for them); the console's top bar showed the figure as whole.
    The outage is recorded by the runner's own writer, the summary made as the console makes it."""
    from console.feeds import arm_summary
    from console.view import arms_spend_text, summary_lines
    from runner.ops.gateway.attempts import AttemptRecord
    from runner.ops.gateway.process import GatewayState, record_outage
    from runner.results.model import RunModel
    from runner.results.tree import gateway_dir

    out = tmp_path / "out"
    stamps = tree_with_two_calls(mini_tree, out)

    def top_bar() -> str:
        summary, _alarm = arm_summary(RunModel.load(out), "run")
        rows = {a: summary_lines(s, 200, True)[0] for a, s in summary.items()}  # the arms' summary row
        return arms_spend_text(summary) + " | " + " | ".join(f"{a}: {r}" for a, r in sorted(rows.items()))

    before = top_bar()
    assert "≥" not in before and "oracle $" in before and "oracle: " in before and "Σ$" in before, before
    gateway_dir(out).mkdir(parents=True, exist_ok=True)
    st = GatewayState(str(out), 1, 1, "b", "i", None, "http://127.0.0.1:1", "K", 0.0, 0.0)
    live = [AttemptRecord("a1", "h", TASK, "oracle", stamps["oracle"])]
    record_outage(out, None, st, 1.0, st, "test", live)
    after = top_bar()
    assert after.startswith("spend ≥$") and "oracle ≥$" in after and "nop ≥" not in after, after
    rows = dict(r.split(": ", 1) for r in after.split(" | ")[1:])
    assert "Σ≥$" in rows["oracle"] and "Σ$" in rows["nop"] and "≥" not in rows["nop"], rows


def test_with_a_ledger_an_arms_cost_is_the_ledgers_and_a_cells_line_has_no_harbor_cost(mini_tree, tmp_path):
    """Found on the demo: the arms' summary showed harbor's cost ($0.00: harbor prices a model its
    map lacks at $0) before the ledger's spend, and a cell's line "cost $0.00 · spend $0.57". With
    the ledger the arm's cost is the ledger's (the report's table says the same), and a cell's line
    gives the ledger's spend alone."""
    from console.feeds import arm_summary, cell_spend
    from console.view import cell_detail, summary_lines
    from runner.results.model import RunModel

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    stamp = list_dirs(out / TASK / "oracle")[0]
    o1 = call("oracle", stamp, 1, 200_000, 5_000)
    m = RunModel.load(out)
    summary, _ = arm_summary(m, "run")
    cell = m.scoped("run")[(TASK, "oracle")]
    assert "cost " in cell_detail(TASK, "oracle", cell) and "spend" not in cell_detail(TASK, "oracle", cell)
    w = LedgerWriter(ledger_path(out))
    try:
        w.write(o1)
    finally:
        w.close()
    m = RunModel.load(out)
    money_ = m.money()
    summary, _ = arm_summary(m, "run", money_)
    row = summary_lines(summary["oracle"], 200, True)[0]
    assert row.count(money(usd(o1))) == 2, row  # its cost (the scoring attempt) and Σ its spend
    cell = m.scoped("run")[(TASK, "oracle")]
    line = cell_detail(TASK, "oracle", cell, spend=cell_spend(money_, cell))
    assert f"spend {money(usd(o1))}" in line and "cost " not in line, line


def test_sorting_by_cost_sorts_by_the_cost_the_cells_show():
    """A probe found the cost sort on harbor's figure, $0 for every cell of a gateway run, while the
    cells showed their spend on the ledger: the rows stayed in name order."""
    from console.feeds import CellSpend
    from console.view import sort_value
    from runner.results.attempts import Figures
    from runner.results.cells import Cell

    cells = {
        t: Cell(task=t, arm="plain", status="done", figures=Figures(cost_usd=0.0)) for t in ("a", "b", "c")
    }
    spend = {"a": CellSpend(0.16, 1000), "b": CellSpend(0.10, 800), "c": CellSpend(None, 5, ("unpriced",))}
    assert sorted(cells, key=lambda t: sort_value(cells[t], "cost", spend[t])) == ["b", "a", "c"]
    assert sort_value(cells["a"], "cost") == (0, 0.0)  # without a ledger: harbor's cost


def test_the_top_bars_right_part_stays_on_screen_beside_a_long_spend_line(mini_tree, tmp_path):
    """A probe found a gateway run's spend per arm pushing the top bar's right part (PAUSED, the
    filter, the sort, the scope, the data's age) off its one line, at 130 columns and at 80."""
    out = tmp_path / "out"
    tree_with_two_calls(mini_tree, out)

    async def go():
        app = make_app(out, docker=False, offer_start=False)
        async with app.run_test(size=(50, 24)) as pilot:
            await wait_for(pilot, lambda: TASK in screen_text(app), 60, "the grid")
            await pilot.press("p")

            def bar() -> str:
                return screen_text(app).splitlines()[0]

            await wait_for(pilot, lambda: "PAUSED" in bar() and "spend" in bar(), 30, "the top bar")
            assert "PAUSED run" in bar() and len(bar().rstrip()) <= 50, bar()  # the right part whole
            assert "…" in bar(), bar()  # the left part cut to fit, marked

    run_async(go)
