"""The operator console: the App owns the state, its workers read, the screens render.

Data flows one way: workers (tree watcher, runner/events poller, Docker pool poller) read through
``runner`` and post messages; the App merges them into its state and pushes attributes down to the
widgets in batches. Actions are planned in a worker, confirmed in a dialog that shows the exact
plan (Cancel focused), then carried out in a worker. The runner is never a child of the console.

``make_app`` is the one factory used by ``marathon console``, ``marathon demo`` and the tests.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from console import actions, view
from console.feeds import EventTailReader, Key, NodesReader, TreeFeed, cluster_of, read_pool, read_runner_info
from console.keys import KEYS
from console.messages import ActionDone, EventsData, Heartbeat, NodesData, PoolData, RunnerData, TreeData
from console.screens.confirm import ConfirmScreen, MessageScreen
from console.screens.drill import DrillScreen
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.widgets.grid import Grid
from modes import safetext
from runner.results.cells import Cell

#: watchfiles: yield a batch after STEP ms of quiet, at most DEBOUNCE ms after the first change
WATCH_STEP_MS = 40
WATCH_DEBOUNCE_MS = 250
#: heartbeat of the watcher when nothing changes (also how often a quit or a new voided root is seen)
WATCH_TIMEOUT_MS = 2000
POLL_DELAY_MS = 2000  # --poll (NFS): how often the tree is polled (a stat of every file)
GRID_ONLY = frozenset({"filter", "sort", "transpose", "cell_mode", "open", "scope", "pause", "compare"})


def _bindings() -> list[Binding]:
    out = []
    for k in KEYS:
        if not k.action or k.where not in ("grid", "any"):
            continue
        if k.action in ("command_palette", "back"):
            continue
        out.append(Binding(k.keys, k.action, k.short or k.action, show=k.show, id=k.action))
    return out


class ConsoleApp(App[int]):
    # absolute: Textual resolves a relative path beside the file of the instance's class, which for
    # a subclass (a test's, an embedding tool's) is not this one
    CSS_PATH = str(Path(__file__).with_name("console.tcss"))
    TITLE = "marathon console"
    BINDINGS = _bindings()
    COMMAND_PALETTE_BINDING = "ctrl+p"

    def __init__(
        self,
        out: Path,
        *,
        readonly: bool = False,
        poll: bool = False,
        watch: bool = True,
        rescan_sec: float = 300.0,
        runner_sec: float = 2.0,
        pool_sec: float = 15.0,
        docker: bool = True,
        offer_start: bool = True,
        clock: Callable[[], float] = time.time,
        screenshot_to: Path | str | None = None,
    ) -> None:
        super().__init__()
        self.out = Path(out).resolve()
        self.readonly = readonly
        self.poll = poll
        self.watch_enabled = watch
        self.rescan_sec = rescan_sec
        self.runner_sec = runner_sec
        self.pool_sec = pool_sec
        self.docker = docker
        self.offer_start = offer_start and not readonly
        self.clock = clock
        self.main = MainScreen(self.out, clock, readonly)
        #: --screenshot: save the screen here once the grid is populated, then exit
        self.screenshot_to = Path(screenshot_to) if screenshot_to else None
        self._offered = False
        self._stop = threading.Event()
        self._rescan_now = threading.Event()
        self._pool_wake = threading.Event()
        self._painted = threading.Event()  # the first full grid is on screen
        #: the watcher's watches are up and the tree was read once after they were (what changed
        #: before is shown): from here a change is on screen within the watcher's debounce
        self.watching = threading.Event()
        self._feed = TreeFeed(self.out)
        self._ppid = os.getppid()

    # ------------------------------------------------------------------------------ lifecycle
    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        self.tree_worker()
        self.runner_worker()
        if self.docker:
            self.pool_worker()
        else:
            self.main.pool_error = "not polled (--no-docker)"
        cluster = cluster_of(self.out)
        if cluster is not None:
            self.nodes_worker(cluster)
        self.main.polling = self.poll
        self.set_interval(1.0, self._tick)
        if not self.is_headless:
            self._install_hangup_guard()

    def exit(self, *args, **kwargs) -> None:  # noqa: D102 - stop workers promptly before Textual's exit
        self._stop.set()
        self._pool_wake.set()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        self._stop.set()
        self._pool_wake.set()
        self._feed.release()

    def _install_hangup_guard(self) -> None:
        """Exit cleanly when the terminal goes away (ssh dropped, tmux closed): never spin on a dead tty."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._terminal_gone)
            except (NotImplementedError, RuntimeError):
                pass

    def _terminal_gone(self) -> None:
        self._stop.set()
        self._pool_wake.set()
        # the terminal is gone: restoring it would block or fail; leave at once, cleanly
        threading.Timer(3.0, lambda: os._exit(0)).start()
        self.exit(0)

    def _tick(self) -> None:
        """Once a second: the main screen's clocks, and the dead-terminal watchdog (Dolphie's)."""
        if not self.is_headless:
            try:
                tty_ok = os.isatty(sys.__stdin__.fileno())
            except (OSError, ValueError, AttributeError):
                tty_ok = False
            if not tty_ok or os.getppid() != self._ppid:
                self._terminal_gone()
                return
        self.main.tick()

    def painted(self) -> None:
        """The main screen has shown a grid: the watcher may now set up its (many) watches, and a
        ``--screenshot`` run saves it and exits."""
        # after the next refresh: the watcher's inotify setup holds the GIL for seconds on a large
        # tree (watchfiles builds its watches in one call), so it must not start before the grid is
        # on the terminal
        self.call_after_refresh(self._painted.set)
        if self.screenshot_to is not None:
            target, self.screenshot_to = self.screenshot_to, None
            self.call_after_refresh(lambda: (self.action_screenshot(str(target)), self.exit(0)))

    # -------------------------------------------------------------------------------- workers
    @work(thread=True, group="tree", exclusive=True, exit_on_error=False, name="reading the tree")
    def tree_worker(self) -> None:
        """Load the tree, then follow it with watchfiles (or polling); full rescan every ``rescan_sec``."""
        # Watching, the first paint takes the scan index's entries unchecked (a third sooner on a
        # 2,010-task tree: no lstat of their 64,000 files) and says so; the checked scan follows
        # right after it. Not watching (--screenshot), what is shown first is all that is shown.
        self.post_message(TreeData(self._feed.load(trust_index=self.watch_enabled)))
        if not self.watch_enabled:
            return
        # set up the inotify watches (tens of thousands of dirs on a big tree) after the first paint
        self._painted.wait(5.0)
        if self._feed.model is not None and not self._feed.model.checked and not self._stop.is_set():
            snap = self._feed.rescan()
            if snap is not None:
                self.post_message(TreeData(snap))
        from console.treewatch import WatchSettings, watch

        last_full = last_projects = time.monotonic()
        rescan_every = self.rescan_sec
        if self.docker:
            self._feed.update_projects()
        while not self._stop.is_set():
            roots = self._feed.watch_roots()
            settings = WatchSettings(
                [str(r) for r in roots], WATCH_DEBOUNCE_MS, WATCH_STEP_MS, WATCH_TIMEOUT_MS, self.poll,
                POLL_DELAY_MS,
            )  # fmt: skip
            first = True
            try:
                for changes in watch(settings, self._stop):
                    t0 = time.monotonic()
                    # first: the watches are set up now, what changed before them is read by a
                    # rescan; None: changes were lost (a file name watchfiles cannot report)
                    if first or changes is None:
                        first = False
                        snap = self._feed.rescan()
                        last_full = time.monotonic()
                        if snap is not None:
                            self.post_message(TreeData(snap))
                        self.watching.set()
                        if changes is None:
                            continue
                    snap = self._feed.update([p for _, p in changes]) if changes else None
                    if snap is not None:
                        self.post_message(TreeData(snap, changed_at=t0))
                        if self.docker and self._feed.update_projects(snap.history.values()):
                            self._pool_wake.set()  # a new trial: its networks are ours from now on
                    else:
                        self.post_message(Heartbeat(time.time()))
                    if self._rescan_now.is_set() or t0 - last_full >= rescan_every:
                        full = self._rescan_now.is_set()
                        self._rescan_now.clear()
                        snap = self._feed.rescan(full=full)
                        last_full = time.monotonic()
                        # a safety net, not a poll: on a huge tree keep it under ~0.5 % of a core
                        rescan_every = max(self.rescan_sec, 200 * (last_full - t0))
                        if snap is not None:
                            self.post_message(TreeData(snap))
                    if self.docker and time.monotonic() - last_projects >= self.pool_sec / 2:
                        self._feed.update_projects()
                        last_projects = time.monotonic()
                    if self._feed.watch_roots() != roots:
                        # the voided root appeared (a trial was voided): watch it too, and read it
                        snap = self._feed.rescan()
                        if snap is not None:
                            self.post_message(TreeData(snap))
                        break
            except OSError as exc:
                # e.g. the inotify watch limit: fall back to polling and say so
                self.poll = True
                self.call_from_thread(setattr, self.main, "polling", True)
                self.post_message(ActionDone("watching: falling back to polling", str(exc), ok=False))
            if self._stop.wait(0.05):
                break

    @work(thread=True, group="runner", exclusive=True, exit_on_error=False, name="reading the runner")
    def runner_worker(self) -> None:
        """Runner liveness (registry), configuration, claims and new events; posts only changes."""
        reader = EventTailReader(self.out)
        last = None
        while not self._stop.is_set():
            events = reader.read_new()
            if events:
                self.post_message(EventsData(tuple(events)))
            info = read_runner_info(self.out, reader)
            if info != last:
                last = info
                self.post_message(RunnerData(info))
            self._stop.wait(self.runner_sec)

    @work(thread=True, group="pool", exclusive=True, exit_on_error=False, name="reading the Docker pool")
    def pool_worker(self) -> None:
        """Docker address-pool accounting, sparingly (lazydocker's CPU lesson)."""
        last = None
        while self._feed.projects is None and not self._stop.wait(0.2):
            pass  # the tree worker computes the tree's compose projects once, then keeps them current
        while not self._stop.is_set():
            status, error = read_pool(self.out, self._feed.projects)
            if (status, error) != last:
                last = (status, error)
                self.post_message(PoolData(status, error))
            self._pool_wake.wait(self.pool_sec)
            self._pool_wake.clear()

    @work(thread=True, group="nodes", exclusive=True, exit_on_error=False, name="asking the Ray cluster")
    def nodes_worker(self, cluster: str) -> None:
        """The cluster's Docker hosts (alive, slots) for the hosts panel, as sparingly as the pool."""
        reader, last = NodesReader(cluster), None
        while not self._stop.is_set():
            got = reader.read()
            if got != last:
                last = got
                self.post_message(NodesData(*got))
            self._stop.wait(min(self.pool_sec, 5.0))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every worker's failure, the console's and its screens', is shown here, once, by name."""
        if event.state is not WorkerState.ERROR:
            return
        worker = event.worker
        if worker.group == "action":
            self.main.busy = None
        err = worker.error
        self.notify(f"{worker.name} failed", severity="error")
        self.push_screen(MessageScreen(f"{worker.name}: failed", f"{type(err).__name__}: {err}"))
        if self.screenshot_to is not None and worker.group == "tree":
            # a --screenshot run would wait for a grid that never comes: save what failed and exit 1
            target, self.screenshot_to = self.screenshot_to, None
            self.call_after_refresh(lambda: (self.action_screenshot(str(target)), self.exit(1)))

    # ------------------------------------------------------------------------------- messages
    def on_tree_data(self, msg: TreeData) -> None:
        self.main.apply_tree(msg.snapshot)

    def on_heartbeat(self, msg: Heartbeat) -> None:
        self.main.scanned_at = msg.at

    def on_runner_data(self, msg: RunnerData) -> None:
        self.main.info = info = msg.info
        first, self._offered = not self._offered, True
        if first and self.offer_start and not info.alive and info.has_config:
            self.action_start_runner()  # attach, or offer to start one: only when the console opens

    def on_events_data(self, msg: EventsData) -> None:
        self.main.add_events(msg.events)

    def on_pool_data(self, msg: PoolData) -> None:
        self.main.pool, self.main.pool_error = msg.status, msg.error

    def on_nodes_data(self, msg: NodesData) -> None:
        self.main.nodes, self.main.nodes_error = msg.nodes, msg.error

    def on_action_done(self, msg: ActionDone) -> None:
        self.main.busy = None
        self.push_screen(MessageScreen(msg.title, msg.text))
        self.notify(safetext.clean(msg.title), severity="information" if msg.ok else "error", markup=False)

    def drill_downs(self) -> Iterator[DrillScreen]:
        """Open drill-downs, also under a dialog (they must not miss an update)."""
        return (s for s in self.screen_stack if isinstance(s, DrillScreen))

    def refresh_drill_downs(self, history: Mapping[Key, Cell]) -> None:
        for scr in self.drill_downs():
            cell = history.get((scr.pair_task, scr.pair_arm))
            if cell is not None and cell is not scr.cell:
                scr.load_trials(cell)

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``--readonly`` disables every destructive action (hidden from footer, help and palette)."""
        if self.readonly and action in {k.action for k in KEYS if k.destructive}:
            return False
        if action in GRID_ONLY and not isinstance(self.screen, MainScreen):
            return False
        return True

    def action_filter(self) -> None:
        self.main.open_filter()

    def action_sort(self) -> None:
        i = view.SORT_KEYS.index(self.main.sort_key)
        self.main.set_view(sort_key=view.SORT_KEYS[(i + 1) % len(view.SORT_KEYS)])

    def action_transpose(self) -> None:
        self.main.set_view(arm_major=not self.main.arm_major)

    def action_cell_mode(self) -> None:
        modes = [m for m, _ in view.CELL_MODES]
        self.main.set_view(mode=modes[(modes.index(self.main.mode) + 1) % len(modes)])

    def action_scope(self) -> None:
        self.main.scope = self._feed.scope = "all" if self.main.scope == "run" else "run"
        self._rescan_now.set()  # applied by the next (full) rescan, in the tree worker
        self.notify(f"scope: {self.main.scope}")

    def action_rescan(self) -> None:
        self._rescan_now.set()
        self.notify("rescanning the whole tree")

    def action_pause(self) -> None:
        self.main.paused = not self.main.paused

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.readonly))

    def action_screenshot(self, path: str | None = None) -> str:
        """Save the current screen (any screen: grid, reader, comparison) as SVG, with Textual's
        own export, so what the docs show is what the console draws."""
        target = Path(path) if path else Path.cwd() / time.strftime("marathon-console-%Y%m%dT%H%M%S.svg")
        saved = self.save_screenshot(filename=target.name, path=str(target.parent))
        self.notify(f"screenshot: {saved}")
        return saved

    def action_open(self) -> None:
        sel = self.main.selected
        if not sel:  # on a label or the mean row: said, not silently nothing (a probe)
            self.notify("move the cursor onto a cell (a task × an arm) to open it", markup=False)
            return
        cell = self.main.history.get(sel) or self.main.cells.get(sel)
        budget = self.main.info.budget_sec if self.main.info else None
        spend = functools.partial(self.main.spend_of, sel)
        self.push_screen(DrillScreen(self.out, sel[0], sel[1], cell, budget, self.clock, spend))

    def action_compare(self, task: str | None = None) -> None:
        """The arms of the selected task side by side (from the grid, or a drill-down's ``c``)."""
        task = task or (
            self.main.selected[0] if self.main.selected else self.main.query_one("#grid", Grid).current_task()
        )
        if task is None:  # the mean row: said, not silently nothing (a probe)
            self.notify("move the cursor onto a task to compare its arms", markup=False)
            return
        from console.screens.compare import CompareScreen

        cells = {a: self.main.cells.get((task, a)) for a in self.main.arms}
        budget = self.main.info.budget_sec if self.main.info else None
        self.push_screen(
            CompareScreen(
                self.out,
                task,
                self.main.arms,
                cells,
                budget,
                self.clock(),
                all_cells=self.main.cells,
                suspect=self.main.suspect.get(task),
            )
        )

    def action_start_runner(self) -> None:
        self.request(actions.START)

    def action_stop_runner(self) -> None:
        self.request(actions.STOP)

    def action_kill(self) -> None:
        self.request(actions.KILL)

    def action_cleanup(self) -> None:
        self.request(actions.CLEANUP)

    def action_web_viewer(self) -> None:
        """harbor's web viewer of this tree (``runner.ops.viewer``): the running one, or one started
        now, detached and registered like the runner; the dialog says how to reach it."""

        def start_or_show() -> None:
            from runner.ops.viewer import start_or_show

            acc, started = start_or_show(self.out)
            title = "harbor's web viewer: " + ("started" if started else "already running")
            self.post_message(ActionDone(title, acc.render(), ok=True))

        self.notify("harbor's web viewer: starting or finding it")
        self.run_worker(start_or_show, name="harbor's web viewer", group="viewer", exclusive=True,
                        thread=True, exit_on_error=False)  # fmt: skip

    def request(self, kind: str, trial_path: str | None = None) -> None:
        """Plan ``kind`` in a worker, then confirm, then act; refused in read-only mode."""
        if self.readonly:
            self.notify("read-only console: actions are disabled", severity="warning")
            return
        if self.main.busy:
            self.notify(f"busy: {self.main.busy}", severity="warning")
            return
        self.main.busy = f"planning {kind}"

        def plan() -> None:
            self.call_from_thread(self._confirm, actions.plan_action(kind, self.out, trial_path=trial_path))

        self.run_worker(plan, name=f"{actions.TITLES[kind]}: planning", group="action", exclusive=True,
                        thread=True, exit_on_error=False)  # fmt: skip

    def _confirm(self, planned: actions.Planned) -> None:
        self.main.busy = None
        if not planned.possible:
            self.push_screen(MessageScreen(f"{planned.title}: nothing to do", planned.text))
            return

        def decided(ok: bool | None) -> None:
            if ok:
                self.main.busy = planned.kind
                self.run_worker(lambda: self._act(planned), name=planned.title, group="action",
                                exclusive=True, thread=True, exit_on_error=False)  # fmt: skip

        self.push_screen(ConfirmScreen(planned.title, planned.text), decided)

    def _act(self, planned: actions.Planned) -> None:
        ok, text = actions.act(planned)
        self.post_message(ActionDone(f"{planned.title}: {'done' if ok else 'FAILED'}", text, ok=ok))

    # ---------------------------------------------------------------------- command palette
    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        for k in KEYS:
            if not k.action or k.action in ("command_palette", "back", "quit", "help", "open"):
                continue
            if self.readonly and k.destructive:
                continue
            if k.where not in ("grid", "any"):
                continue
            yield SystemCommand(
                f"{k.short or k.action}: {k.help}", f"key {k.key_label}", getattr(self, f"action_{k.action}")
            )


def make_app(out: Path | str, **kwargs) -> ConsoleApp:
    """The one app factory (CLI, ``marathon demo``, tests)."""
    return ConsoleApp(Path(out), **kwargs)


def run_console(out: Path | str, *, readonly: bool = False, poll: bool = False, **kwargs) -> int:
    """Run the console in this terminal until the operator quits; the runner is left running."""
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    app = make_app(out, readonly=readonly, poll=poll, **kwargs)
    app.run()
    return int(app.return_code or 0)


def screenshot_console(out: Path | str, target: Path | str, size: tuple[int, int] = (130, 40)) -> int:
    """``marathon console --screenshot``: no terminal needed; the grid once populated, as SVG, then exit.
    Read-only and offering nothing: a script's screenshot never starts or stops anything."""
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    app = make_app(out, readonly=True, watch=False, offer_start=False, screenshot_to=target)
    app.run(headless=True, size=size)
    return int(app.return_code or 0)
