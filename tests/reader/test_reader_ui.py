"""The trajectory reader and the arm comparison through a Pilot, on the recorded real trials.

No Docker and no runner: the tree is a copy of tests/data/trajectories (real harbor trials of the
five arms on calc-partial), read by the console's real tree worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reader_data import TASK, trial_of
from reader_support import run_async, wait_for
from textual_screen import screen_text

from console.app import make_app
from console.screens.compare import CompareScreen
from console.screens.drill import DrillScreen
from console.screens.reader import ReaderScreen
from console.widgets.stepview import StepView
from runner.results.trajectory import ERROR, StepIndex

SIZE = (130, 40)


def _app(out: Path):
    return make_app(out, watch=False, docker=False, offer_start=False)


async def _ready(pilot, app) -> None:
    await wait_for(
        pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 60, "first grid"
    )
    await pilot.pause()


async def _reader_ready(pilot, app, steps: int | None = None) -> StepView:
    await wait_for(pilot, lambda: isinstance(app.screen, ReaderScreen), 30, "the reader")
    scr = app.screen
    await wait_for(pilot, lambda: scr.index is not None and scr.index.complete, 60, "the step index")
    if steps is not None:
        await wait_for(pilot, lambda: scr.index.count == steps, 60, f"{steps} steps")
    await pilot.pause()
    return scr.query_one(StepView)


def _atif_steps(trial: Path) -> list[dict]:
    return json.loads((trial / "agent" / "trajectory.json").read_text())["steps"]


def _open_reader(app, trial: Path, **kw) -> None:
    app.push_screen(ReaderScreen(trial, "test", **kw))


def test_grid_to_drill_down_to_reader_shows_one_line_per_step(tree):
    trial = trial_of(tree, "codex-cli")
    want = _atif_steps(trial)

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            app.screen.query_one("#grid").focus()
            for _ in range(3):  # plain -> goal -> ssh-goal -> codex-cli
                await pilot.press("right")
            await wait_for(pilot, lambda: app.main.selected == (TASK, "codex-cli"), 30, "codex-cli selected")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), 30, "drill-down")
            await wait_for(pilot, lambda: app.screen.trials, 30, "trials listed")
            assert "raw" in screen_text(app)  # the raw file view stays as a tab
            app.screen.query_one("#trials").focus()
            await pilot.press("enter")
            view = await _reader_ready(pilot, app, len(want))
            text = screen_text(app)
            lines = view.visible_text()
            assert sum(1 for ln in lines if ln.strip()) == len(want)  # 17 steps fit: one line each
            assert "goal → blocked" in text and "goal → active (resumed)" in text  # the unblock
            assert "13481/20" in text  # tokens of the first agent step, as the file says
            assert f"{len(want)} steps" in text and "1 failed/error" in text
            failed = next(ln for ln in lines if "✗" in ln)
            assert "$ python3 -c" in failed and "exit 1" in failed

    run_async(go)


def test_expand_next_error_and_search(tree):
    trial = trial_of(tree, "codex-cli")
    want = _atif_steps(trial)

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            _open_reader(app, trial)
            view = await _reader_ready(pilot, app, len(want))
            scr = app.screen
            await pilot.press("e")
            err = view.cursor
            assert scr.index.flag(err) == ERROR
            assert "calc.sub" in json.dumps(want[err]["tool_calls"])
            await pilot.press("e")  # no second failure: the cursor stays
            assert view.cursor == err
            await pilot.press("enter")  # expand: the command, its outcome and its output
            await pilot.pause()
            text = screen_text(app)
            assert "exit 1 · 0.00s · FAILED" in text
            assert "AttributeError: module 'calc' has no attribute 'sub'" in text
            await pilot.press("enter")  # fold again
            await pilot.pause()
            assert "AttributeError: module" not in screen_text(app)
            await pilot.press("g")
            assert view.cursor == 0
            await pilot.press("E")
            assert view.cursor == 0  # nothing above the first step
            await pilot.press("G")
            await pilot.press("E")
            assert view.cursor == err
            # search: the agent's blocking message, then the next match of a word seen twice
            await pilot.press("g", "slash")
            await pilot.press(*"I am blocked", "enter")
            await wait_for(pilot, lambda: view.cursor != 0, 30, "search hit")
            assert want[view.cursor]["message"].startswith("I am blocked")
            first = view.cursor
            await pilot.press("g", "slash", *"zerodivisionerror", "enter")
            await wait_for(pilot, lambda: view.cursor not in (0, first), 30, "first zerodivisionerror")
            a = view.cursor
            await pilot.press("n")
            await wait_for(pilot, lambda: view.cursor > a, 30, "next match")
            assert "ZeroDivisionError" in json.dumps(want[view.cursor])
            await pilot.press("N")
            await wait_for(pilot, lambda: view.cursor == a, 30, "previous match")

    run_async(go)


def test_switch_source_to_app_server_stdout(tree):
    trial = trial_of(tree, "codex-cli")

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            _open_reader(app, trial)
            await _reader_ready(pilot, app)
            await pilot.press("s")
            scr = app.screen
            await wait_for(
                pilot, lambda: scr.index.path.name == "appserver.stdout.jsonl", 30, "source switch"
            )
            await _reader_ready(pilot, app)
            text = screen_text(app)
            assert "agent/appserver.stdout.jsonl" in text
            assert "goal → blocked" in text and "turn completed" in text and "$ /bin/bash -lc" in text

    run_async(go)


@pytest.mark.parametrize("name", ["appserver.stdout.jsonl", "trajectory.json"])
def test_follow_shows_steps_appended_while_the_reader_is_open(tree, tmp_path, name):
    """A running trial: its trajectory grows while the operator watches (app-server stdout line by
    line; an ATIF file written step by step, its steps array still open)."""
    data = (trial_of(tree, "plain") / "agent" / name).read_bytes()
    if name.endswith(".jsonl"):
        cut = data.index(b"\n", len(data) // 3) + 1
    else:
        cut = data.index(b"\n    },\n", len(data) // 3) + len(b"\n    },\n")
    live = tmp_path / "live-trial"
    (live / "agent").mkdir(parents=True)
    path = live / "agent" / name
    path.write_bytes(data[:cut])
    full = StepIndex(trial_of(tree, "plain") / "agent" / name)
    while full.index_more():
        pass

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            _open_reader(app, live, follow=True)
            view = await _reader_ready(pilot, app)
            scr = app.screen
            before = scr.index.count
            assert 0 < before < full.count
            assert view.follow and view.cursor == before - 1
            with open(path, "ab") as fh:
                fh.write(data[cut:])
            await wait_for(pilot, lambda: scr.index.count == full.count, 60, "appended steps")
            await wait_for(pilot, lambda: scr.index.complete, 60, "indexed")
            await pilot.pause()
            assert view.cursor == scr.index.count - 1  # follow keeps the newest step in view
            assert "following" in screen_text(app)
            assert "still working" in "\n".join(view.visible_text())  # the plain arm's ticks
            await pilot.press("f")  # follow off
            assert not view.follow

    run_async(go)


def test_a_trial_with_no_trajectory_yet_opens_it_when_it_appears(tree, tmp_path):
    live = tmp_path / "starting-trial"
    (live / "agent").mkdir(parents=True)
    src = trial_of(tree, "goal") / "agent" / "appserver.stdout.jsonl"

    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            _open_reader(app, live)
            await wait_for(pilot, lambda: "no trajectory yet" in screen_text(app), 30, "the empty state")
            (live / "agent" / "appserver.stdout.jsonl").write_bytes(src.read_bytes())
            view = await _reader_ready(pilot, app)
            assert view.count > 5 and view.follow

    run_async(go)


def test_compare_shows_the_five_arms_and_the_tests_one_arm_failed(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=(160, 48)) as pilot:
            await _ready(pilot, app)
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 30, "comparison")
            scr = app.screen
            await wait_for(pilot, lambda: len(scr.facts) == 5, 60, "every arm's trajectory read")
            await pilot.pause()
            figures = scr.query_one("#compare-figures")
            arms = ["plain", "goal", "ssh-goal", "codex-cli", "heartbeat"]
            assert [str(c.label) for c in figures.columns.values()][1:] == arms

            def row(key):
                return [str(v) for v in figures.get_row(key)[1:]]

            cells = {a: app.main.cells[(TASK, a)] for a in arms}
            assert row("reward") == [f"{cells[a].reward:.2f}" for a in arms]
            assert row("partial") == [f"{cells[a].partial:.2f}" for a in arms]
            assert row("unblocks") == [str(cells[a].unblocks) for a in arms]
            assert row("unblocks")[3] == "1" and row("continuations")[3] == "1"  # codex-cli blocked once
            assert row("failed_commands") == ["1"] * 5
            assert row("turns")[3] == "2"
            assert row("last_message")[0] == "-" and row("last_message")[1].startswith("calc.py now has")
            tests = scr.query_one("#compare-tests")
            marked = [str(tests.get_row(k)[1]) for k in ("mul", "div", "div_zero")]
            assert marked == ["mul", "div", "div_zero"]
            for k in ("mul", "div", "div_zero"):
                r = [str(v) for v in tests.get_row(k)]
                assert r[0] == "≠" and r[2] == "✗ fail" and set(r[3:]) == {"✓ pass"}
            assert str(tests.get_row("add")[0]) == ""
            assert "3 test(s) passed by one arm and failed by another" in screen_text(app)
            # jump from the codex-cli column into its trajectory
            figures.focus()
            figures.move_cursor(column=4)
            await pilot.press("enter")
            await _reader_ready(pilot, app)
            text = screen_text(app)
            assert "calc-partial × codex-cli" in text and "goal → blocked" in text
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 30, "back to comparison")
            # and from the tests table's plain column
            tests.focus()
            tests.move_cursor(column=2)
            await pilot.press("enter")
            await _reader_ready(pilot, app)
            assert "calc-partial × plain" in screen_text(app)

    run_async(go)


def test_compare_from_the_drill_down(tree):
    async def go():
        app = _app(tree)
        async with app.run_test(size=SIZE) as pilot:
            await _ready(pilot, app)
            app.screen.query_one("#grid").focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), 30, "drill-down")
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 30, "comparison")
            assert app.screen.task_name == TASK

    run_async(go)


def test_expanded_lines_fold_at_the_view_width_and_lose_nothing():
    from console.widgets.stepview import detail_lines
    from runner.results.trajectory import Step

    msg = "word " * 100 + "\nshort line"
    lines = [t.plain for t in detail_lines(Step(0, 0, 10, "agent", message=msg), width=80)]
    body = [ln[3:] for ln in lines[1:-1]]  # between the title line and the byte-range line
    assert all(len(ln) <= 80 for ln in lines)
    assert "".join(body[:-1]) == msg.splitlines()[0] and body[-1] == "short line"


def test_a_planted_steps_time_role_and_tool_name_reach_the_screen_without_a_control_character(tmp_path):
    """An agent can write its trajectory.json while it runs: the timestamp, the source and a tool's
    name are its words like the message, and an escape in them would write to the operator's
    terminal (a clipboard write by OSC 52, a title, a cleared screen)."""
    from console.widgets.stepview import detail_lines, header_text

    clip, title = "\x1b]52;c;ZXZpbA==\x1b\\", "\x1b]0;P\x1b\\"
    doc = {
        "schema_version": "ATIF-v1.7",
        "steps": [
            {
                "step_id": 1,
                "timestamp": "2026-12-01T" + title,
                "source": "\x1b[2J\x9b2J",
                "message": "hello",
                "tool_calls": [{"tool_call_id": "a", "function_name": clip, "arguments": {"cmd": "ls"}}],
                "observation": {"results": [{"source_call_id": "a", "content": "ok"}]},
            }
        ],
    }
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(doc))
    ix = StepIndex(path)
    while ix.index_more(1 << 20):
        pass
    step = ix.step(0)
    assert (clip[:4], title[:4]) == (step.commands[0].tool[:4], step.time[:4])  # the reader keeps them
    shown = [header_text(step, 2).plain] + [t.plain for t in detail_lines(step)]
    bad = [ln for ln in shown if any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in ln)]
    assert not bad, bad
