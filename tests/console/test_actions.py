"""Every console action through a Pilot, against a real runner, real harbor trials and real Docker.

The runner is started by the console itself (key R, from .driver_env) and must never be the
console's child; stop (T), kill (K), cleanup (C) and void (V) go through the confirmation dialog
that shows the exact plan, and Cancel is what Enter does by default (that one needs no engine: it
runs on the recorded tree).
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from console_support import (
    docker_leftovers,
    run_async,
    runner_pid,
    slow_task_dir,
    wait_for,
    write_config,
)
from textual_screen import screen_text

from console.app import make_app
from console.screens.confirm import ConfirmScreen, MessageScreen
from console.screens.drill import DrillScreen

SIZE = (120, 36)


def _app(out, **kw):
    kw.setdefault("runner_sec", 0.5)
    kw.setdefault("pool_sec", 5)
    return make_app(out, **kw)


def _on_screen(app) -> str:
    """What the console shows now (every screen of its stack, the top last) and whether an action is
    under way: a wait that times out says what was in the way (a dialog left open, a worker's
    failure, an action still planning)."""
    shown = []
    for scr in app.screen_stack:
        text = getattr(scr, "title_text", None) or getattr(scr, "plan_text", None) or ""
        shown.append(f"{type(scr).__name__}({str(text)[:200]!r})")
    return f"screens {' > '.join(shown)}; busy {app.main.busy!r}"


async def _confirm(pilot, app, what: str, timeout: float = 240) -> str:
    """Wait for the confirmation dialog, return its plan text, press y. The plan is made in a worker
    and asks the engine (containers, networks: an inspect per network) and the process table, so it
    gets the outcome's time on a loaded machine, not less."""
    try:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout, f"{what} dialog")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_on_screen(app)}") from None
    plan = app.screen.plan_text
    await pilot.press("y")
    return plan


async def _outcome(pilot, app, timeout: float = 240) -> str:
    try:
        await wait_for(pilot, lambda: isinstance(app.screen, MessageScreen), timeout, "action outcome")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_on_screen(app)}") from None
    shown = app.screen
    text = shown.title_text + "\n" + shown.text
    await pilot.press("enter")
    # the message goes in the app's own time (on a loaded machine after ``press`` returned: the CI
    # run of 2026-12-07 read the stack a moment early); then the main screen is back (a second
    # message under it, a worker's failure, would take the next key)
    await wait_for(pilot, lambda: app.screen is not shown, 30, "the message closed")
    assert not isinstance(app.screen, (MessageScreen, ConfirmScreen)), _on_screen(app)
    return text


def _containers_of(out) -> int:
    from runner.ops.cleanup import plan_cleanup

    return len(plan_cleanup(out).containers)


@pytest.mark.docker
def test_start_offer_and_graceful_stop(docker_engine, fresh_out, tmp_path):
    """Opening the console on a tree with a config but no runner offers to start one; R starts it
    detached (not our child, own session); T stops it gracefully and it cleans up after itself. The
    trial's verifier sleeps, so the runner is still running when T is pressed (with oracle alone on
    calc-partial it could finish first on a loaded machine: then T has nothing to stop)."""
    out = fresh_out
    write_config(
        out, "calc-partial", arms="oracle", tasks_dir=slow_task_dir(tmp_path / "tasks", "calc-partial")
    )

    async def go():
        app = _app(out)
        async with app.run_test(size=SIZE) as pilot:
            plan = await _confirm(pilot, app, "start offer")
            assert "--resume" in plan and "detached" in plan
            text = await _outcome(pilot, app)
            assert "runner started" in text, text
            pid = runner_pid(out)
            assert pid is not None
            proc = psutil.Process(pid)
            assert proc.ppid() != os.getpid(), "the runner must not be the console's child"
            assert os.getsid(pid) != os.getsid(0), "the runner must have its own session"
            await wait_for(
                pilot, lambda: app.main.info is not None and app.main.info.alive, 30, "runner alive"
            )
            # live grid: the pair appears and goes running/done while we watch
            await wait_for(pilot, lambda: ("calc-partial", "oracle") in app.main.cells, 120, "pair in grid")
            await pilot.press("T")
            plan = await _confirm(pilot, app, "stop")
            assert f"pid {pid:>7}" in plan and "argv" in plan
            text = await _outcome(pilot, app)
            assert "FAILED" not in text, text
            assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
            await wait_for(pilot, lambda: not app.main.info.alive, 10, "runner shown as stopped")

    run_async(go)
    assert docker_leftovers(out) == []


@pytest.mark.docker
def test_kill_stops_runner_and_trials_and_removes_docker_objects(docker_engine, fresh_out, tmp_path):
    """K while trials run: the plan lists the runner and harbor PIDs with argv and the compose
    containers/networks; after it, nothing of the run is alive or left in Docker. (The trials'
    verifiers sleep: they are still running when K is pressed.)"""
    out = fresh_out
    tasks = slow_task_dir(tmp_path / "tasks", "calc-partial", "words-passrate")
    write_config(out, "calc-partial", "words-passrate", arms="oracle", concurrency=2, tasks_dir=tasks)

    async def go():
        app = _app(out)
        async with app.run_test(size=SIZE) as pilot:
            await _confirm(pilot, app, "start offer")
            await _outcome(pilot, app)
            pid = runner_pid(out)
            await wait_for(pilot, lambda: _containers_of(out) > 0, 240, "a trial container")
            await pilot.press("K")
            plan = await _confirm(pilot, app, "kill")
            assert f"pid {pid:>7}" in plan and "harbor" in plan
            assert "containers to remove" in plan and "networks to remove" in plan
            text = await _outcome(pilot, app)
            assert "STILL ALIVE" not in text and "FAILED" not in text, text
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    run_async(go)
    assert docker_leftovers(out) == []


@pytest.mark.docker
def test_cleanup_only_removes_leftovers_of_a_crashed_runner(docker_engine, fresh_out, tmp_path):
    """A runner killed with SIGKILL leaves containers and compose networks; C removes exactly those.
    (The trial's verifier sleeps: its container is still there when the runner is killed.)"""
    out = fresh_out
    write_config(
        out, "calc-partial", arms="oracle", tasks_dir=slow_task_dir(tmp_path / "tasks", "calc-partial")
    )

    async def go():
        app = _app(out)
        async with app.run_test(size=SIZE) as pilot:
            await _confirm(pilot, app, "start offer")
            await _outcome(pilot, app)
            await wait_for(pilot, lambda: _containers_of(out) > 0, 240, "a trial container")
            # crash the run: SIGKILL the runner's and its harbor jobs' process groups (our own PIDs)
            from runner.ops.procs import Registry

            for e in Registry(out).live_entries():
                try:
                    os.killpg(e.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await wait_for(pilot, lambda: not app.main.info.alive, 30, "runner shown dead")
            assert _containers_of(out) > 0
            await pilot.press("C")
            plan = await _confirm(pilot, app, "cleanup")
            assert "com.docker.compose.project" in plan
            text = await _outcome(pilot, app)
            assert "FAILED" not in text, text

    run_async(go)
    assert docker_leftovers(out) == []


def test_cancel_is_the_default_and_readonly_disables_actions(mini_tree, tmp_path):
    """Enter on a confirmation dialog cancels (V on a trial: nothing is moved); --readonly hides and
    refuses every action."""
    import shutil

    from runner.results.tree import INDEX_DIR, voided_root

    out = tmp_path / "ro"
    shutil.copytree(mini_tree, out)

    def listing() -> list:  # all but the scan index (a cache the console may write)
        return sorted(p.relative_to(out) for p in out.rglob("*") if p.relative_to(out).parts[0] != INDEX_DIR)

    before = listing()

    async def go():
        app = _app(out, offer_start=False, docker=False)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "grid"
            )
            await pilot.pause()
            app.screen.query_one("#grid").move_to("calc-partial", "nop")
            await wait_for(
                pilot, lambda: app.main.selected == ("calc-partial", "nop"), 10, "cursor on the pair"
            )
            await pilot.press("enter")
            await wait_for(
                pilot, lambda: isinstance(app.screen, DrillScreen) and bool(app.screen.trials), 10, "drill"
            )
            await pilot.press("V")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30, "void dialog")
            assert "calc-partial" in app.screen.plan_text
            await pilot.press("enter")  # focused button: Cancel
            await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), 10, "dialog closed")
            await wait_for(pilot, lambda: app.main.busy is None, 10, "no action running")

        ro = _app(out, readonly=True, docker=False)
        async with ro.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: bool(ro.main.cells), 30, "grid")
            for key in ("R", "T", "K", "C"):
                await pilot.press(key)
                await pilot.pause(0.3)
                assert not isinstance(ro.screen, ConfirmScreen), key
            footer = screen_text(ro).splitlines()[-1]
            assert "Kill" not in footer and "Cleanup" not in footer

    run_async(go)
    assert listing() == before
    assert not voided_root(out).exists()


@pytest.mark.docker
def test_void_and_rerun_from_drill_down(docker_engine, fresh_out):
    """V on a finished trial moves it under marathon-voided/ with a README; the drill-down lists it
    as voided; R reruns the pair and it is done again."""
    out = fresh_out
    write_config(out, "calc-partial", arms="nop")

    async def go():
        app = _app(out)
        async with app.run_test(size=SIZE) as pilot:
            await _confirm(pilot, app, "start offer")
            await _outcome(pilot, app)
            key = ("calc-partial", "nop")
            await wait_for(
                pilot, lambda: str(getattr(app.main.cells.get(key), "status", "")) == "done", 240, "pair done"
            )
            await wait_for(pilot, lambda: runner_pid(out) is None, 60, "runner finished")
            app.screen.query_one("#grid").focus()
            app.main.selected = key
            app.action_open()
            await wait_for(
                pilot, lambda: isinstance(app.screen, DrillScreen) and bool(app.screen.trials), 10, "drill"
            )
            trial_path = app.screen.trial.path
            await pilot.press("V")
            plan = await _confirm(pilot, app, "void")
            assert trial_path.split("/")[-1] in plan or "calc-partial" in plan
            text = await _outcome(pilot, app)
            assert "moved to" in text, text
            from runner.results.tree import voided_root

            readmes = list(voided_root(out).rglob("README.md"))
            assert readmes, "void README written"
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, DrillScreen) and any(t.voided for t in app.screen.trials),
                30,
                "voided trial listed",
            )
            await pilot.press("escape")
            await pilot.press("R")
            await _confirm(pilot, app, "start")
            await _outcome(pilot, app)
            await wait_for(
                pilot,
                lambda: (
                    str(getattr(app.main.cells.get(key), "status", "")) == "done" and runner_pid(out) is None
                ),
                240,
                "pair rerun and done",
            )

    run_async(go)
    assert docker_leftovers(out) == []
