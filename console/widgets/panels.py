"""The small panels of the main screen. Each renders reactive attributes that the main screen binds
to its own (``data_bind``); none reads files, none is painted from outside."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from console import view
from console.feeds import PoolView, RunEvent, RunnerInfo
from modes import safetext
from runner.results.hosts import HostUse
from runner.results.run_progress import progress_bar

if TYPE_CHECKING:
    from runner.schedule.fleet.cluster import NodeState

#: per arm: (arm, (continuations, unblocks, error events))
Receipts = tuple[tuple[str, tuple[int, int, int]], ...]
BAR = 8


class RunnerPanel(Widget):
    """Alive or not, PID, configuration, pass, concurrency, gate waits."""

    info: reactive[RunnerInfo | None] = reactive(None)
    readonly: reactive[bool] = reactive(False)

    def render(self) -> Text:
        info = self.info
        t = Text()
        if info is None:
            t.append("runner: ?\n", style="dim")
        elif info.alive:
            t.append("runner ● alive", style="bold green")
            t.append(f" pid {info.pid}\n")
        else:
            t.append("runner ○ not running\n", style="bold yellow")
        if info is not None:
            p = info.progress
            t.append(f"pass {p.pass_no or '-'}/{info.max_passes or '-'}")
            t.append(f" run {info.running}/{info.concurrency or '-'}")
            t.append(f" gate {p.gate_waits}\n")
            t.append(safetext.clean(info.config_line) or "no .driver_env", style="dim")
        if self.readonly:
            t.append(" READONLY", style="bold reverse")
        return t


class PoolGauge(Widget):
    """Docker address pool: ours, foreign, free, against the gate's cap."""

    pool: reactive[PoolView | None] = reactive(None)
    pool_error: reactive[str | None] = reactive(None)

    def render(self) -> Text:
        if self.pool_error:
            return Text(f"pool: {self.pool_error}", style="red")
        s = self.pool
        if s is None:
            return Text("pool: checking…", style="dim")
        width = 18
        n_ours = round(width * s.used_ours / s.capacity) if s.capacity else 0
        n_for = round(width * s.used_foreign / s.capacity) if s.capacity else 0
        t = Text("nets [")
        t.append("█" * n_ours, style="cyan")
        t.append("▒" * n_for, style="magenta")
        t.append(" " * max(0, width - n_ours - n_for))
        t.append("]")
        t.append(
            f"\nours {s.used_ours} other {s.used_foreign} free {s.free}\ncap {s.gate_cap} of {s.capacity}"
        )
        if s.empty_ours:
            t.append(f" · {s.empty_ours} empty ours", style="yellow")
        return t


class HostsPanel(Widget):
    """A cluster run's Docker hosts: alive or lost (the cluster's word), this tree's pairs running
    there against the host's slots, and which pairs. Hidden for a single-host tree."""

    hosts: reactive[tuple[HostUse, ...]] = reactive((), layout=True)
    nodes: reactive[tuple[NodeState, ...] | None] = reactive(None, layout=True)
    nodes_error: reactive[str | None] = reactive(None)

    def get_content_width(self, container, viewport) -> int:
        return max((len(line) for line in self.render().plain.splitlines()), default=0)

    def watch_hosts(self) -> None:
        self.display = bool(self.hosts or self.nodes)

    def watch_nodes(self) -> None:
        self.display = bool(self.hosts or self.nodes)

    def render(self) -> Text:
        rows = host_rows(self.hosts, self.nodes)
        t = Text("hosts", style="bold")
        if self.nodes_error:
            t.append(f"  cluster: {safetext.clean(self.nodes_error)}", style="red")
        elif self.nodes is None:
            t.append("  cluster: asking…", style="dim")
        t.append("\n")
        rows = [(safetext.clean(r[0], None), *r[1:]) for r in rows]
        w = min(max([len(r[0]) for r in rows] + [4]), 26)
        for name, alive, slots, running in rows:
            glyph, style = {True: ("●", "green"), False: ("○ lost", "bold red"), None: ("?", "dim")}[alive]
            t.append(f"{glyph} ", style=style)
            t.append(f"{name[:w]:<{w}} ")
            total = "-" if slots is None else f"{slots:g}"
            t.append(f"{len(running)}/{total} ")
            t.append(
                safetext.clean(", ".join(f"{task}/{arm}" for task, arm in running), None)[:60] or "idle",
                style="dim",
            )
            t.append("\n")
        return t


def host_rows(
    hosts: tuple[HostUse, ...], nodes: tuple[NodeState, ...] | None
) -> list[tuple[str, bool | None, float | None, tuple[tuple[str, str], ...]]]:
    """(name, alive, slots, running pairs) per host: every host the tree names, matched to its Ray
    node by node id, then every Docker node of the cluster the tree has not used yet."""
    by_id = {n.node_id: n for n in nodes or ()}
    rows = []
    for u in hosts:
        n = by_id.pop(u.node_id, None)
        rows.append((u.name, None if n is None else n.alive, None if n is None else n.slots, u.running))
    rows += [(n.node_ip, n.alive, n.slots, ()) for n in by_id.values() if n.docker_host]
    return rows


class ArmsPanel(Widget):
    """Per arm: the run's progress bar (done, running, of the pairs it has) and the receipts'
    continuations, unblocks and error events over its cells."""

    # its width follows its content (arm names, the progress column once a run reports it)
    info: reactive[RunnerInfo | None] = reactive(None, layout=True)
    receipts: reactive[Receipts] = reactive((), layout=True)

    def get_content_width(self, container, viewport) -> int:
        return max((len(line) for line in self.render().plain.splitlines()), default=0)

    def render(self) -> Text:
        progress = {a.arm: a for a in self.info.progress.arms} if self.info is not None else {}
        got = dict(self.receipts)
        names = list(got) + [a for a in progress if a not in got]
        shown = {a: safetext.clean(a, None) for a in names}
        w = min(max([len(a) for a in shown.values()] + [3]), 12)
        bar = BAR if self.app.size.width >= 120 else BAR // 2  # a narrow terminal keeps the events readable
        head = f"{'arm':<{w}} " + (f"{'progress':<{bar + 6}} " if progress else "")
        t = Text(f"{head}cont unbl err\n", style="bold")
        for arm in names:
            t.append(f"{shown[arm][:w]:<{w}} ")
            a = progress.get(arm)
            if a is not None:
                t.append(progress_bar(a.done, a.running, a.total, bar), style="cyan")
                t.append(f" {f'{a.done}/{a.total}':<5} ")
            elif progress:
                t.append(" " * (bar + 7))
            c, u, e = got.get(arm, (0, 0, 0))
            t.append(f"{c:>4} {u:>4} {e:>3}\n", style="red" if e else "")
        return t


class EventTail(Static):
    """The last lines of the runner's events.jsonl (bounded)."""

    def __init__(self, *args, max_lines: int = 200, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lines: deque[str] = deque(maxlen=max_lines)

    def add(self, events: Iterable[RunEvent]) -> None:
        for ev in events:
            self.lines.append(view.event_line(ev))
        self.redraw()

    def redraw(self) -> None:
        height = max(1, self.size.height or 5)
        shown = list(self.lines)[-height:]
        self.update(
            Text("\n".join(shown) if shown else "(no runner events yet)", no_wrap=True, overflow="ellipsis")
        )

    def on_resize(self) -> None:
        self.redraw()
