"""When the run ends the console says how (with the terminal bell), and the same for a network gate
that has waited more than five minutes; the drill-down's header follows the same data as its rows.

The events are written with the runner's own writer (``runner.results.events.append_event``); a live or a
dead runner is a real process registered in the tree's registry (never a mock): one this test
starts, and ends by its PID.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from console_support import rewrite_partial, run_async, wait_for
from textual_screen import screen_text

from console.app import ConsoleApp
from console.screens.drill import DrillScreen
from console.widgets.grid import Grid
from runner.ops.procs import Registry
from runner.results.events import append_event

RUN = "20261201T000000Z-abcdef"


class BellCountingApp(ConsoleApp):
    """The console with its terminal bell counted (the bell is a byte to the terminal, nothing more)."""

    bells = 0

    def bell(self) -> None:
        self.bells += 1
        super().bell()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(out, t: float, kind: str, **fields) -> None:
    append_event(out, {"ts": iso(t), "event": kind, "run_id": RUN, **fields})


def start_run(out, t0: float, pairs: int = 20, arms=("plain", "goal")) -> None:
    per_arm = {a: pairs // len(arms) for a in arms}
    event(out, t0, "runner_start", pid=1, arms=list(arms), n_pairs=pairs, pairs_per_arm=per_arm,
          already_done={}, concurrency=4)  # fmt: skip


@pytest.fixture
def sleeper():
    """A real process standing in for a runner; ended by its PID when the test is done."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _app(out) -> BellCountingApp:
    return BellCountingApp(out, docker=False, offer_start=False, watch=False, runner_sec=0.2)


def banner(app) -> str:
    """The banner line under the grid as the screen shows it ("" while it is hidden)."""
    alarm = app.main.query_one("#alarm")
    return screen_text(app).splitlines()[alarm.region.y] if alarm.display else ""


def test_a_run_that_finished_says_so_once_with_the_bell(tree):
    t0 = time.time() - 600
    start_run(tree, t0)
    for i in range(20):
        event(tree, t0 + 5 + i, "job_start", task=f"t{i}", arm=("plain", "goal")[i % 2], stamp="s", pid=2)
        event(tree, t0 + 100 + i, "job_finish", task=f"t{i}", arm=("plain", "goal")[i % 2], stamp="s",
              status="done", elapsed_sec=60.0)  # fmt: skip
    event(tree, t0 + 168, "runner_exit", reason="all pairs done", done=20, total=20)

    async def go():
        app = _app(tree)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(pilot, lambda: "pairs done in" in banner(app), 30, "the end-of-run banner")
            assert "20/20 pairs done in 2 min 48 s" in banner(app)
            assert app.bells == 1
            top = screen_text(app).splitlines()[0]
            assert "20/20 pairs" in top and "elapsed 2m" in top and "ETA" not in top  # the run is over
            await pilot.pause(1.5)  # more ticks and runner polls: the bell rings once per banner
            assert app.bells == 1

    run_async(go)


def test_a_runner_that_died_says_when_and_how_to_restart_it(tree, sleeper):
    t0 = time.time() - 120
    Registry(tree).register(sleeper.pid, "runner", ["marathon", "run", str(tree)])
    start_run(tree, t0)
    event(tree, t0 + 5, "job_start", task="calc-partial", arm="plain", stamp="s", pid=sleeper.pid)
    last = t0 + 60
    event(
        tree, last, "job_finish", task="calc-partial", arm="plain", stamp="s", status="done", elapsed_sec=55.0
    )

    async def go():
        app = _app(tree)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(
                pilot, lambda: app.main.info is not None and app.main.info.alive, 30, "runner alive"
            )
            top = screen_text(app).splitlines()[0]
            # 19 pairs left, 55 s each, 4 at a time: 19 * 55 / 4 = 261 s
            assert "1/20 pairs" in top and "ETA 4m" in top, top
            assert "died" not in banner(app) and app.bells == 0
            sleeper.kill()  # the runner dies without its runner_exit
            sleeper.wait(timeout=30)
            await wait_for(pilot, lambda: "runner died" in banner(app), 30, "the died banner")
            hhmm = time.strftime("%H:%M", time.localtime(last))
            assert f"runner died at {hhmm} (its last event), 1/20 pairs done; `R` restarts it" in banner(app)
            assert app.bells == 1

    run_async(go)


@pytest.mark.parametrize("waited", [400, 30], ids=["over-five-minutes", "recent"])
def test_a_network_gate_waiting_over_five_minutes_rings_once(tree, sleeper, waited):
    now = time.time()
    Registry(tree).register(sleeper.pid, "runner", ["marathon", "run", str(tree)])
    start_run(tree, now - 900)
    event(tree, now - waited, "gate_wait", reason="31 of 31 networks in use", used=31, used_ours=4, cap=31)

    async def go():
        app = _app(tree)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(
                pilot, lambda: app.main.info is not None and app.main.info.alive, 30, "runner alive"
            )
            if waited < 300:  # a short wait is routine: no banner, no bell
                await pilot.pause(1.2)
                assert "network gate" not in banner(app) and app.bells == 0
                return
            await wait_for(pilot, lambda: "gate waiting" in banner(app), 30, "the gate banner")
            assert "(31 of 31 networks in use)" in banner(app)
            assert app.bells == 1
            event(tree, time.time(), "gate_open", waited_sec=400.0, reason="ok")
            await wait_for(pilot, lambda: "network gate" not in banner(app), 30, "the gate banner to go")
            assert app.bells == 1

    run_async(go)


def test_the_drill_down_header_follows_the_rows_below_it(mini_tree, tmp_path):
    """The header and the trial rows are painted from the same cell on every update (it once said
    ``running · reward -`` above a row that said ``✓ done 1.00``)."""
    tree = tmp_path / "out"
    shutil.copytree(mini_tree, tree)
    trial = next((tree / "calc-partial" / "nop").rglob("metrics.json"))

    async def go():
        app = BellCountingApp(tree, docker=False, offer_start=False)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "grid"
            )
            app.main.query_one(Grid).move_to("calc-partial", "nop")
            await pilot.pause()
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), 10, "drill")
            drill = app.screen
            assert "partial 0.20" in screen_text(app).splitlines()[0]
            await wait_for(pilot, app.watching.is_set, 30, "the watcher")
            rewrite_partial(trial, 0.6)
            table = drill.query_one("#trials")
            await wait_for(pilot, lambda: "0.60" in str(table.get_row_at(0)), 30, "the trial row updated")
            assert "partial 0.60" in screen_text(app).splitlines()[0]

    run_async(go)


def test_the_audit_alarm_is_a_banner_with_one_bell(tmp_path):
    """The hand-made tree where one trial's receipt names another provider: the fairness audit's
    line is on the banner, and the bell rings once."""
    from core.handmade_tree import build, write_receipts

    out = build(tmp_path / "out")
    write_receipts(out, **{"heartbeat/t05": {"provider": {"base_url": "http://elsewhere:9/v1"}}})

    async def go():
        app = BellCountingApp(out, docker=False, offer_start=False, watch=False)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: "arms differ in" in banner(app), 60, "the audit alarm")
            assert "⚠ arms differ in: provider base URL (plain, goal ≠ heartbeat; task t05)" in banner(app)
            await pilot.pause(1.5)
            assert app.bells == 1

    run_async(go)
