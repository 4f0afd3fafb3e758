"""The operator console: the App owns the state, its workers read, the screens render.

Data flows one way: workers (tree watcher, runner/events poller, Docker pool poller) read through
``runner`` and post messages; the App merges them into its state and pushes attributes down to the
widgets in batches. Actions are planned in a worker, confirmed in a dialog that shows the exact
plan (Cancel focused), then carried out in a worker. The runner is never a child of the console.

``make_app`` is the one factory used by ``marathon console``, ``marathon demo`` and the tests.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text
from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from console import actions, view
from console.feeds import EventTailReader, TreeFeed, read_pool, read_runner_info
from console.keys import KEYS
from console.messages import ActionDone, EventsData, Heartbeat, PoolData, RunnerData, TreeData
from console.screens.confirm import ConfirmScreen, MessageScreen
from console.screens.drill import DrillScreen
from console.screens.help import HelpScreen
from console.screens.main import MainScreen
from console.widgets.grid import Grid
from console.widgets.panels import EventTail, PoolGauge, ReceiptsPanel, RunnerPanel

#: batching: cell updates that arrive within this window are applied in one repaint
FLUSH_SEC = 0.08
#: watchfiles: yield a batch after STEP ms of quiet, at most DEBOUNCE ms after the first change
WATCH_STEP_MS = 40
WATCH_DEBOUNCE_MS = 250
#: heartbeat of the watcher when nothing changes (also how often a quit or a new voided root is seen)
WATCH_TIMEOUT_MS = 2000
POLL_DELAY_MS = 2000  # --poll (NFS): how often the tree is polled (a stat of every file)
GRID_ONLY = frozenset({"filter", "sort", "transpose", "open", "scope", "pause", "compare"})


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
    CSS_PATH = "console.tcss"
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
        clock=time.time,
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
        #: --screenshot: save the screen here once the grid is populated, then exit
        self.screenshot_to = Path(screenshot_to) if screenshot_to else None
        # state (owned here, changed only by message handlers)
        self.cells: dict[tuple[str, str], Any] = {}
        self.history: dict[tuple[str, str], Any] = {}
        self.tasks: list[str] = []
        self.arms: list[str] = []
        self.summary: dict[str, Any] = {}
        self.alarm: str | None = None
        self.notes: list[str] = []
        self.scanned_at: float | None = None
        self.runner_info: Any = None
        self.pool_status: Any = None
        self.pool_error: str | None = None
        self.filter_text = ""
        self.sort_key = "name"
        self.arm_major = False
        self.scope = "run"
        self.paused = False
        self.selected: tuple[str, str] | None = None
        self.busy: str | None = None
        self.last_change_at: float | None = None  # monotonic time of the last applied cell change
        self._dirty: set[tuple[str, str]] = set()
        self.pending_events: list[dict] = []
        self._rebuild = True
        self._flush_pending = False
        self._offered = False
        self._stop = threading.Event()
        self._rescan_now = threading.Event()
        self._pool_wake = threading.Event()
        self._painted = threading.Event()  # the first full grid is on screen
        self._feed = TreeFeed(self.out)
        self._ppid = os.getppid()

    # ------------------------------------------------------------------------------ lifecycle
    def get_default_screen(self) -> Screen:
        return MainScreen()

    def on_mount(self) -> None:
        self.tree_worker()
        self.runner_worker()
        if self.docker:
            self.pool_worker()
        else:
            self.pool_error = "not polled (--no-docker)"
        self.set_interval(1.0, self._tick)
        if not self.is_headless:
            self._install_hangup_guard()
        self.call_after_refresh(self._paint_panels)

    def exit(self, *args, **kwargs) -> None:  # noqa: D102 - stop workers promptly before Textual's exit
        self._stop.set()
        self._pool_wake.set()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        self._stop.set()
        self._pool_wake.set()

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
        """Once a second: the data age on the top bar, and the dead-terminal watchdog (Dolphie's)."""
        if not self.is_headless:
            try:
                tty_ok = os.isatty(sys.__stdin__.fileno())
            except (OSError, ValueError, AttributeError):
                tty_ok = False
            if not tty_ok or os.getppid() != self._ppid:
                self._terminal_gone()
                return
        self._paint_topbar()

    # -------------------------------------------------------------------------------- workers
    @work(thread=True, group="tree", exclusive=True, exit_on_error=False)
    def tree_worker(self) -> None:
        """Load the tree, then follow it with watchfiles (or polling); full rescan every ``rescan_sec``."""
        try:
            payload = self._feed.load()
        except Exception as exc:  # noqa: BLE001
            self.post_message(ActionDone("cannot read the tree", str(exc), ok=False))
            return
        self.post_message(TreeData(**vars(payload)))
        if not self.watch_enabled:
            return
        # set up the inotify watches (tens of thousands of dirs on a big tree) after the first paint
        self._painted.wait(5.0)
        from watchfiles import watch

        last_full = last_projects = time.monotonic()
        rescan_every = self.rescan_sec
        if self.docker:
            self._feed.update_projects()
        while not self._stop.is_set():
            roots = self._feed.watch_roots()
            try:
                for changes in watch(
                    *roots,
                    watch_filter=None,
                    debounce=WATCH_DEBOUNCE_MS,
                    step=WATCH_STEP_MS,
                    stop_event=self._stop,
                    rust_timeout=WATCH_TIMEOUT_MS,
                    yield_on_timeout=True,
                    force_polling=self.poll or None,
                    poll_delay_ms=POLL_DELAY_MS,
                    ignore_permission_denied=True,
                    raise_interrupt=False,
                ):
                    t0 = time.monotonic()
                    if changes:
                        payload = self._feed.update([p for _, p in changes])
                        if payload is not None:
                            self.post_message(TreeData(**vars(payload), changed_at=t0))
                            if self.docker and self._feed.update_projects(payload.history.values()):
                                self._pool_wake.set()  # a new trial: its networks are ours from now on
                        else:
                            self.post_message(Heartbeat(time.time()))
                    else:
                        self.post_message(Heartbeat(time.time()))
                    if self._rescan_now.is_set() or t0 - last_full >= rescan_every:
                        full = self._rescan_now.is_set()
                        self._rescan_now.clear()
                        payload = self._feed.rescan(full=full)
                        last_full = time.monotonic()
                        # a safety net, not a poll: on a huge tree keep it under ~0.5 % of a core
                        rescan_every = max(self.rescan_sec, 200 * (last_full - t0))
                        if payload is not None:
                            self.post_message(TreeData(**vars(payload)))
                    if self.docker and time.monotonic() - last_projects >= self.pool_sec / 2:
                        self._feed.update_projects()
                        last_projects = time.monotonic()
                    if self._feed.watch_roots() != roots:
                        # the voided root appeared (a trial was voided): watch it too, and read it
                        payload = self._feed.rescan()
                        if payload is not None:
                            self.post_message(TreeData(**vars(payload)))
                        break
            except OSError as exc:
                # e.g. the inotify watch limit: fall back to polling and say so
                self.poll = True
                self.post_message(ActionDone("watching: falling back to polling", str(exc), ok=False))
            if self._stop.wait(0.05):
                break

    @work(thread=True, group="runner", exclusive=True, exit_on_error=False)
    def runner_worker(self) -> None:
        """Runner liveness (registry), configuration, claims and new events; posts only changes."""
        reader = EventTailReader(self.out)
        last = None
        while not self._stop.is_set():
            events = reader.read_new()
            if events:
                self.post_message(EventsData(events))
            info = read_runner_info(self.out, reader)
            if info != last:
                last = info
                self.post_message(RunnerData(info))
            self._stop.wait(self.runner_sec)

    @work(thread=True, group="pool", exclusive=True, exit_on_error=False)
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

    # ------------------------------------------------------------------------------- messages
    def on_tree_data(self, msg: TreeData) -> None:
        if msg.full:
            self.cells = dict(msg.cells)
            self.history = dict(msg.history)
            self._rebuild = True
        else:
            for k, c in msg.cells.items():
                if c is None:
                    self.cells.pop(k, None)
                else:
                    self.cells[k] = c
            self.history.update({k: c for k, c in msg.history.items() if c is not None})
            self._dirty |= set(msg.cells)
        if msg.tasks != self.tasks or msg.arms != self.arms:
            self._rebuild = True
        self.tasks, self.arms = list(msg.tasks), list(msg.arms)
        self.summary, self.alarm, self.notes = msg.summary, msg.alarm, msg.notes
        self.scanned_at = msg.scanned_at
        self._schedule_flush()

    def on_heartbeat(self, msg: Heartbeat) -> None:
        self.scanned_at = msg.at

    def on_runner_data(self, msg: RunnerData) -> None:
        self.runner_info = msg.info
        self._paint_panels()
        self._paint_detail()  # the circuit breaker's banner
        info = msg.info
        first, self._offered = not self._offered, True
        if first and self.offer_start and not info.alive and info.has_config:
            self.action_start_runner()  # attach, or offer to start one: only when the console opens

    def on_events_data(self, msg: EventsData) -> None:
        self.pending_events.extend(msg.events)
        try:
            tail = self.screen_main().query_one(EventTail)
        except RuntimeError:
            return
        tail.add(self.pending_events)
        self.pending_events.clear()

    def on_pool_data(self, msg: PoolData) -> None:
        self.pool_status, self.pool_error = msg.status, msg.error
        self._paint_panels()

    def on_action_done(self, msg: ActionDone) -> None:
        self.busy = None
        self._paint_topbar()
        self.push_screen(MessageScreen(msg.title, msg.text))
        self.notify(msg.title, severity="information" if msg.ok else "error")

    @on(Grid.Selected)
    def grid_selected(self, msg: Grid.Selected) -> None:
        self.selected = (msg.task, msg.arm) if msg.task else None
        self._paint_detail()
        self._paint_panels()
        if msg.open and self.selected:
            self.action_open()

    # -------------------------------------------------------------------------------- painting
    def screen_main(self) -> MainScreen:
        """The main screen once its widgets exist (messages can arrive before it is composed)."""
        for s in self.screen_stack:
            if isinstance(s, MainScreen) and s.is_mounted and s.query(Grid):
                return s
        raise RuntimeError("main screen not ready")

    def _schedule_flush(self) -> None:
        if self._flush_pending or self.paused:
            return
        self._flush_pending = True
        self.set_timer(FLUSH_SEC, self._flush_updates)

    def _flush_updates(self) -> None:
        self._flush_pending = False
        if self.paused:
            return
        try:
            main = self.screen_main()
        except RuntimeError:
            self.set_timer(FLUSH_SEC, self._schedule_flush)
            return
        grid = main.query_one(Grid)
        grid.budget = view.get(self.runner_info, "budget_sec")
        grid.now = self.clock()
        with self.batch_update():
            if self._rebuild:
                self._rebuild_grid(grid, main)
            elif self._dirty:
                if not grid.patch(self.cells, self._dirty, self.summary):
                    self._rebuild_grid(grid, main)
            self._dirty.clear()
            if self.pending_events:
                main.query_one(EventTail).add(self.pending_events)
                self.pending_events.clear()
            self._paint_detail()
            self._paint_panels()
            self._paint_topbar()
            for scr in self.screen_stack:  # also under a dialog: the drill-down must not miss an update
                if isinstance(scr, DrillScreen) and (scr.pair_task, scr.pair_arm) in self.history:
                    cell = self.history[(scr.pair_task, scr.pair_arm)]
                    if cell is not scr.cell:
                        scr.load_trials(cell)
        self.last_change_at = time.monotonic()
        self._painted.set()
        if self.screenshot_to is not None and self.cells:
            target, self.screenshot_to = self.screenshot_to, None
            self.call_after_refresh(lambda: (self.action_screenshot(str(target)), self.exit(0)))

    def visible_rows_cols(self) -> tuple[list[str], list[str]]:
        rows_all, cols = (self.arms, self.tasks) if self.arm_major else (self.tasks, self.arms)
        rows = [r for r in rows_all if view.matches(self.filter_text, r)]
        if self.sort_key != "name":
            col = None
            if self.selected:
                col = self.selected[0] if self.arm_major else self.selected[1]
            col = col if col in cols else (cols[0] if cols else None)
            if col is not None:

                def key(r: str):
                    pair = (col, r) if self.arm_major else (r, col)
                    return (view.sort_value(self.cells.get(pair), self.sort_key), r)

                rows.sort(key=key)
        return rows, cols

    def _rebuild_grid(self, grid: Grid, main: MainScreen) -> None:
        self._rebuild = False
        rows, cols = self.visible_rows_cols()
        width = main.size.width or 80
        grid.show(
            rows,
            cols,
            self.cells,
            self.summary,
            arm_major=self.arm_major,
            wide=width >= 120,
            width=width,
            keep=self.selected,
        )

    def _paint_topbar(self) -> None:
        try:
            main = self.screen_main()
        except RuntimeError:
            return
        right = Text()
        if self.busy:
            right.append(f"{self.busy}… ", style="bold yellow")
        if self.paused:
            right.append("PAUSED ", style="bold reverse")
        if self.filter_text:
            right.append(f"filter '{self.filter_text}' ", style="cyan")
        if self.sort_key != "name":
            right.append(f"sort {self.sort_key} ", style="cyan")
        right.append(f"{self.scope} ")
        if self.poll:
            right.append("poll ")
        right.append(view.age_text(self.scanned_at, self.clock()), style="dim")
        main.set_topbar(f"marathon {self.out.name}", right)

    def _paint_detail(self) -> None:
        try:
            main = self.screen_main()
        except RuntimeError:
            return
        from textual.widgets import Static

        if self.selected:
            t, a = self.selected
            line = view.cell_detail(
                t, a, self.cells.get(self.selected), view.get(self.runner_info, "budget_sec"), self.clock()
            )
        else:
            line = f"{len(self.tasks)} tasks × {len(self.arms)} arms" + (
                f" · {'; '.join(self.notes)}" if self.notes else ""
            )
        main.query_one("#detail", Static).update(Text(line, no_wrap=True, overflow="ellipsis"))
        alarm = main.query_one("#alarm", Static)
        paused = view.get(self.runner_info, "paused")
        alarm.display = bool(self.alarm or paused)
        banner = Text(no_wrap=True, overflow="ellipsis")
        if paused:
            banner.append(f"⏸ RUN PAUSED: {paused}", style="bold reverse red")
            if self.alarm:
                banner.append("  ")
        if self.alarm:
            banner.append(f"⚠ {self.alarm}", style="bold red")
        if paused or self.alarm:
            alarm.update(banner)

    def _paint_panels(self) -> None:
        try:
            main = self.screen_main()
        except RuntimeError:
            return
        main.query_one(RunnerPanel).show(self.runner_info, self.readonly)
        main.query_one(PoolGauge).show(self.pool_status, self.pool_error)
        per_arm = {a: view.receipts_of(c for k, c in self.cells.items() if k[1] == a) for a in self.arms}
        sel = self.cells.get(self.selected) if self.selected else None
        label = self.selected[0] if self.selected else ""
        main.query_one(ReceiptsPanel).show(per_arm, sel, label)

    # --------------------------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``--readonly`` disables every destructive action (hidden from footer, help and palette)."""
        if self.readonly and action in {k.action for k in KEYS if k.destructive}:
            return False
        if action in GRID_ONLY and not isinstance(self.screen, MainScreen):
            return False
        return True

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._rebuild = True
        self._flush_updates()

    def action_filter(self) -> None:
        if isinstance(self.screen, MainScreen):
            self.screen.open_filter(self.filter_text)

    def action_sort(self) -> None:
        i = view.SORT_KEYS.index(self.sort_key)
        self.sort_key = view.SORT_KEYS[(i + 1) % len(view.SORT_KEYS)]
        self._rebuild = True
        self._flush_updates()

    def action_transpose(self) -> None:
        self.arm_major = not self.arm_major
        self._rebuild = True
        self._flush_updates()

    def action_scope(self) -> None:
        self.scope = "all" if self.scope == "run" else "run"
        self._feed.scope = self.scope  # applied by the next (full) rescan, in the tree worker
        self._rescan_now.set()
        self.notify(f"scope: {self.scope}")

    def action_rescan(self) -> None:
        self._rescan_now.set()
        self.notify("rescanning the whole tree")

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self._schedule_flush()
        self._paint_topbar()

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
        if not self.selected:
            return
        t, a = self.selected
        self.push_screen(DrillScreen(self.out, t, a, self.history.get((t, a)) or self.cells.get((t, a))))

    def action_compare(self, task: str | None = None) -> None:
        """The arms of the selected task side by side (from the grid, or a drill-down's ``c``)."""
        task = task or (self.selected[0] if self.selected else None)
        if task is None:
            return
        from console.screens.compare import CompareScreen

        cells = {a: self.cells.get((task, a)) for a in self.arms}
        budget = view.get(self.runner_info, "budget_sec")
        self.push_screen(CompareScreen(self.out, task, self.arms, cells, budget, self.clock()))

    def action_start_runner(self) -> None:
        self.request(actions.START)

    def action_stop_runner(self) -> None:
        self.request(actions.STOP)

    def action_kill(self) -> None:
        self.request(actions.KILL)

    def action_cleanup(self) -> None:
        self.request(actions.CLEANUP)

    def request(self, kind: str, trial_path: str | None = None) -> None:
        """Plan ``kind`` in a worker, then confirm, then act; refused in read-only mode."""
        if self.readonly:
            self.notify("read-only console: actions are disabled", severity="warning")
            return
        if self.busy:
            self.notify(f"busy: {self.busy}", severity="warning")
            return
        self.busy = f"planning {kind}"
        self._paint_topbar()
        self._plan_worker(kind, trial_path)

    @work(thread=True, group="action", exclusive=True, exit_on_error=False)
    def _plan_worker(self, kind: str, trial_path: str | None) -> None:
        try:
            planned = actions.plan_action(kind, self.out, trial_path=trial_path)
        except Exception as exc:  # noqa: BLE001 - shown to the operator, one line
            self.post_message(ActionDone(f"{actions.TITLES[kind]}: cannot plan", str(exc), ok=False))
            return
        self.call_from_thread(self._confirm, planned)

    def _confirm(self, planned: actions.Planned) -> None:
        self.busy = None
        self._paint_topbar()
        if not planned.possible:
            self.push_screen(MessageScreen(f"{planned.title}: nothing to do", planned.text))
            return

        def decided(ok: bool | None) -> None:
            if ok:
                self.busy = planned.kind
                self._paint_topbar()
                self._act_worker(planned)

        self.push_screen(ConfirmScreen(planned.title, planned.text), decided)

    @work(thread=True, group="action", exclusive=True, exit_on_error=False)
    def _act_worker(self, planned: actions.Planned) -> None:
        try:
            ok, text = actions.act(planned)
        except Exception as exc:  # noqa: BLE001
            ok, text = False, f"failed: {exc}"
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
