"""The small panels of the main screen. Each is given records and renders them; none reads files."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from rich.text import Text
from textual.widgets import Static

from console import view


class RunnerPanel(Static):
    """Alive or not, PID, configuration, pass, concurrency, gate waits."""

    def show(self, info: Any, readonly: bool) -> None:
        t = Text()
        if info is None:
            t.append("runner: ?\n", style="dim")
        elif view.get(info, "alive"):
            t.append("runner ● alive", style="bold green")
            t.append(f" pid {view.get(info, 'pid')}\n")
        else:
            t.append("runner ○ not running\n", style="bold yellow")
        if info is not None:
            t.append(f"pass {view.get(info, 'pass_no') or '-'}/{view.get(info, 'max_passes') or '-'}")
            t.append(f" run {view.get(info, 'running', 0)}/{view.get(info, 'concurrency') or '-'}")
            t.append(f" gate {view.get(info, 'gate_waits', 0)}\n")
            cfg = view.get(info, "config_line")
            t.append(cfg or "no .driver_env", style="dim")
        if readonly:
            t.append(" READONLY", style="bold reverse")
        self.update(t)


class PoolGauge(Static):
    """Docker address pool: ours, foreign, free, against the gate's cap."""

    def show(self, status: Any, error: str | None) -> None:
        if error:
            self.update(Text(f"pool: {error}", style="red"))
            return
        if status is None:
            self.update(Text("pool: checking…", style="dim"))
            return
        cap = view.get(status, "capacity", 0) or 0
        ours = view.get(status, "used_ours", 0) or 0
        foreign = view.get(status, "used_foreign", 0) or 0
        free = view.get(status, "free", 0) or 0
        gate_cap = view.get(status, "gate_cap") or cap
        width = 18
        n_ours = round(width * ours / cap) if cap else 0
        n_for = round(width * foreign / cap) if cap else 0
        bar = Text("[")
        bar.append("█" * n_ours, style="cyan")
        bar.append("▒" * n_for, style="magenta")
        bar.append(" " * max(0, width - n_ours - n_for))
        bar.append("]")
        t = Text("nets ")
        t.append_text(bar)
        t.append(f"\nours {ours} other {foreign} free {free}\ncap {gate_cap} of {cap}")
        empty = view.get(status, "empty_ours") or []
        if empty:
            t.append(f" · {len(empty)} empty ours", style="yellow")
        self.update(t)


class ReceiptsPanel(Static):
    """Continuations, unblocks and error events, per arm and for the selected cell."""

    def show(self, per_arm: Mapping[str, tuple[int, int, int]], selected: Any, label: str) -> None:
        t = Text("receipts  cont unbl err\n", style="bold")
        for arm, (c, u, e) in per_arm.items():
            t.append(f"{arm[:9]:<9} {c:>4} {u:>4} {e:>3}\n", style="red" if e else "")
        if selected is not None:
            c, u, e = view.receipts_of([selected])
            t.append(f"{label[:9]:<9} {c:>4} {u:>4} {e:>3}", style="reverse")
        self.update(t)


class EventTail(Static):
    """The last lines of the runner's events.jsonl (bounded)."""

    def __init__(self, *args, max_lines: int = 200, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lines: deque[str] = deque(maxlen=max_lines)

    def add(self, events: Iterable[Mapping[str, Any]]) -> None:
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
