"""Helpers for the console tests: real trees, a real runner, real Docker; driving the App."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from trial_writes import finish_trial

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO_ROOT / "runner" / "demo" / "tasks"
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("MARATHON_UPDATE_SNAPSHOTS") == "1"
FIXED_TS = "2026-01-01T00:00:00.000000Z"


def marathon(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_config(
    out: Path, *tasks: str, arms: str = "oracle,nop", concurrency: int = 4, tasks_dir: Path = DEMO_TASKS
) -> None:
    """Write ``<out>/.driver_env`` with the runner's own functions (as ``marathon run`` would)."""
    from runner.schedule.config import resolve, write_driver_env

    flags = {
        "tasks_dir": str(tasks_dir),
        "arms": arms.split(","),
        "concurrency": concurrency,
        "max_passes": 2,
    }
    if tasks:
        flags["tasks"] = list(tasks)
    out.mkdir(parents=True, exist_ok=True)
    write_driver_env(resolve(out, flags, resume=False))


def slow_task_dir(root: Path, *tasks: str) -> Path:
    """A tasks dir holding copies of the demo tasks ``tasks`` whose verifiers first sleep ten minutes:
    their trials are still running when a test acts on the runner (oracle's own work takes seconds,
    and on a loaded machine the run could end before the console showed its pair or its container)."""
    for task in tasks:
        shutil.copytree(DEMO_TASKS / task, root / task)
        test_sh = root / task / "tests" / "test.sh"
        test_sh.write_text(test_sh.read_text().replace("\n", "\nsleep 600\n", 1))
    return root


def normalise(src: Path, dst: Path) -> Path:
    """Copy a real tree and pin its clock-dependent fields, so a screen of it is deterministic."""
    shutil.copytree(src, dst, symlinks=True)
    for res in dst.rglob("result.json"):
        try:
            d = json.loads(res.read_text())
        except ValueError:
            continue
        for k in ("started_at", "finished_at"):
            if k in d and d[k]:
                d[k] = "2026-01-01T00:00:00.000000" if k == "started_at" else "2026-01-01T00:00:10.000000"
        for sub in ("agent_execution", "agent_setup", "environment_setup", "verifier"):
            if isinstance(d.get(sub), dict):
                d[sub]["started_at"] = "2026-01-01T00:00:01.000000"
                d[sub]["finished_at"] = "2026-01-01T00:00:09.000000"
        res.write_text(json.dumps(d))
    ev = dst / ".runner" / "events.jsonl"
    if ev.exists():
        lines = []
        for raw in ev.read_text().splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            rec["ts"] = FIXED_TS
            lines.append(json.dumps(rec))
        ev.write_text("\n".join(lines) + "\n")
    for p in (dst / ".runner" / "registry.json", dst / ".runner" / "lock"):
        p.unlink(missing_ok=True)
    return dst


def capture(tree: Path, size: tuple[int, int], keys=(), probe: Callable | None = None):
    """The console's screen on ``tree`` (no watcher, no Docker, a fixed clock) after ``keys``, as
    text, and whatever ``probe(app)`` reads from it then."""
    from textual_screen import screen_text

    from console.app import make_app

    got = {}

    async def go():
        app = make_app(tree, watch=False, docker=False, offer_start=False, clock=lambda: 0.0)
        async with app.run_test(size=size) as pilot:
            await wait_for(  # the grid, and the runner's panel (it comes by a worker of its own)
                pilot,
                lambda: (
                    bool(app.main.cells) and app.main.last_change_at is not None and app.main.info is not None
                ),
                30,
                "first grid and runner panel",
            )
            await settled(pilot, app)
            for k in keys:
                await pilot.press(k)
                await settled(pilot, app)
            got["screen"], got["probe"] = screen_text(app), probe(app) if probe else None

    run_async(go)
    return got["screen"], got["probe"]


def rewrite_partial(metrics: Path, partial: float) -> list[str]:
    """Rewrite a trial's metrics.json with another partial score, as a finishing harbor trial writes
    it (``trial_writes.finish_trial``: the metrics, then result.json); the paths written."""
    d = json.loads(metrics.read_text())
    d["partial_score"] = partial
    return finish_trial(metrics.parent.parent, {"metrics.json": json.dumps(d)})


def check_snapshot(name: str, text: str) -> None:
    """Compare a screen capture with tests/console/snapshots/<name>.txt (MARATHON_UPDATE_SNAPSHOTS=1 rewrites)."""
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE or not path.exists():
        if not UPDATE and os.environ.get("CI") == "true":
            pytest.fail(f"snapshot {path.name} missing (run with MARATHON_UPDATE_SNAPSHOTS=1 and commit it)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    expected = path.read_text()
    if text != expected:
        (path.parent / f"{name}.actual.txt").write_text(text)
        pytest.fail(
            f"screen differs from {path} (actual written next to it)\n--- expected\n{expected}\n--- actual\n{text}"
        )


def run_async(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


async def settled(pilot, app, timeout: float = 30.0) -> None:
    """Wait until the whole screen is painted (the footer too) and two looks 0.1 s apart agree: on
    a loaded machine the grid can be drawn before the footer, and a capture then missed the footer."""
    from textual_screen import screen_text

    last = None
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause(0.1)
        now = screen_text(app)
        if now == last and now.splitlines() and now.splitlines()[-1].strip():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the screen did not settle in {timeout}s:\n{now}")
        last = now


async def wait_for(
    pilot, predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Let the app process messages until ``predicate()`` holds (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.2)


def runner_pid(out: Path) -> int | None:
    from runner.ops.procs import Registry

    e = Registry(out).runner_entry()
    return e.pid if e else None


def stop_runner_if_alive(out: Path) -> None:
    """Teardown: stop what a test started (registered PIDs only) and remove its Docker objects."""
    from runner.ops.cleanup import act_cleanup, plan_cleanup
    from runner.ops.procs import act_stop, plan_stop

    plan = plan_stop(out)
    if plan.targets:
        act_stop(plan, grace_sec=30)
    try:
        clean = plan_cleanup(out)
        if not clean.empty:
            act_cleanup(clean)
    except Exception:  # noqa: BLE001 - best effort in teardown; the test asserts emptiness itself
        pass


def docker_leftovers(out: Path) -> list[str]:
    from runner.ops.cleanup import plan_cleanup

    plan = plan_cleanup(out)
    return [o.name for o in plan.containers + plan.networks]


class Tmux:
    """A private tmux server (-L) with a fixed window size: send-keys in, capture-pane out."""

    def __init__(self, name: str) -> None:
        self.sock = f"marathon-test-{os.getpid()}-{name}"
        self.session = name

    def run(self, *args: str) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True, timeout=30)
        return r.stdout

    def start(self, out, cols: int = 100, rows: int = 30, command: str | None = None) -> int:
        """Run ``marathon console OUT`` (or ``marathon <command>``) in a fresh tmux session."""
        env = (
            f"LITELLM_LOCAL_MODEL_COST_MAP=True HARBOR_TELEMETRY=0 PYTHONPATH={REPO_ROOT} TERM=xterm-256color"
        )
        args = command if command is not None else f"console {out}"
        cmd = f"cd {REPO_ROOT} && exec env {env} {sys.executable} -m marathon.cli {args}"
        self.run("new-session", "-d", "-s", self.session, "-x", str(cols), "-y", str(rows), cmd)
        return int(self.run("list-panes", "-t", self.session, "-F", "#{pane_pid}").split()[0])

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.3)
        raise AssertionError(f"{text!r} not on screen after {timeout}s:\n{self.screen()}")

    def kill_server(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=30)
