"""How a cell, a summary and an event read on screen: pure formatting, no IO, no widgets.

The cell records come from ``runner.results.model``. Fields are read with defaults so that a
record missing a figure shows a dash instead of crashing the console.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any

from rich.text import Text

STATUS_GLYPH = {
    "done": "✓",
    "running": "▶",
    "errored": "✗",
    "pending": "·",
    "voided": "⊘",
    "unreadable": "?",
    "tampered": "!",
}
STATUS_STYLE = {
    "done": "green",
    "running": "yellow",
    "errored": "bold red",
    "pending": "dim",
    "voided": "magenta",
    "unreadable": "red",
    "tampered": "bold red",
}
#: order used when sorting by status (most urgent first)
STATUS_RANK = {
    "tampered": 0,
    "errored": 0,
    "unreadable": 1,
    "running": 2,
    "voided": 3,
    "pending": 4,
    "done": 5,
}

#: data younger than this reads "live" (the watcher confirms the tree every 2 s when idle)
LIVE_SEC = 5.0

SORT_KEYS = ("name", "partial", "reward", "pass_rate", "cost", "status")


def get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def status_of(cell: Any) -> str:
    s = get(cell, "status", "pending")
    return str(getattr(s, "value", s) or "pending")


def num(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}f}"


def pct(v: Any) -> str:
    if v is None:
        return "-"
    return f"{round(float(v) * 100):d}%"


def duration(sec: Any) -> str:
    if sec is None:
        return "-"
    sec = int(sec)
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m"
    return f"{sec // 3600}h{(sec % 3600) // 60:02d}"


def money(v: Any) -> str:
    return "-" if v is None else f"${v:.2f}"


def cell_text(cell: Any, wide: bool = False, budget: float | None = None, now: float | None = None) -> Text:
    """One grid cell: status glyph, partial, pass rate, build-failure mark (+ more when wide)."""
    status = status_of(cell)
    glyph = STATUS_GLYPH.get(status, "?")
    style = STATUS_STYLE.get(status, "")
    if cell is None:
        return Text("·", style="dim")
    partial = get(cell, "partial")
    rate = get(cell, "pass_rate")
    bf = "B" if get(cell, "build_failed") else " "
    body = f"{glyph}{num(partial):>4} {pct(rate):>4}{bf}"
    if wide:
        body += f" r{num(get(cell, 'reward'), 1)} {money(get(cell, 'cost_usd'))}"
        body += f" {elapsed_text(cell, budget, now)}"
    text = Text(body, style=style)
    if get(cell, "newer") or get(cell, "unreadable"):
        text.append("*", style="bold")
    return text


def elapsed_sec(cell: Any, now: float | None = None) -> float | None:
    """Wall time of the scoring attempt; for a running pair, time since its job started."""
    wall = get(cell, "wall_sec")
    if status_of(cell) == "running" or wall is None:
        attempts = get(cell, "attempts") or ()
        if attempts and now is not None:
            job = get(attempts[-1], "job")
            started = get(job, "started_at")
            if isinstance(started, str):
                from datetime import datetime

                try:
                    t = datetime.fromisoformat(started.replace("Z", "+00:00"))
                    if t.tzinfo is None:
                        t = t.replace(tzinfo=UTC)
                    return max(0.0, now - t.timestamp())
                except ValueError:
                    pass
    return wall


def elapsed_text(cell: Any, budget: float | None = None, now: float | None = None) -> str:
    """Elapsed against the budget (the arms' goal timeout), e.g. ``12m/1h29``."""
    wall = elapsed_sec(cell, now)
    if wall is None and not budget:
        return "-"
    return f"{duration(wall)}/{duration(budget)}" if budget else duration(wall)


def cell_detail(task: str, arm: str, cell: Any, budget: float | None = None, now: float | None = None) -> str:
    """The one-line description of the cell under the cursor."""
    if cell is None:
        return f"{task} × {arm}: no attempt yet"
    parts = [
        f"{task} × {arm}: {status_of(cell)}",
        f"reward {num(get(cell, 'reward'))}",
        f"partial {num(get(cell, 'partial'))}",
        f"pass {pct(get(cell, 'pass_rate'))}",
    ]
    if get(cell, "build_failed"):
        parts.append("BUILD FAILED")
    parts.append(f"time {elapsed_text(cell, budget, now)}")
    parts.append(f"cost {money(get(cell, 'cost_usd'))}")
    tin, tout = get(cell, "n_input_tokens"), get(cell, "n_output_tokens")
    if tin is not None or tout is not None:
        parts.append(f"tok {num(tin)}/{num(tout)}")
    attempts = get(cell, "attempts")
    if attempts:
        n = attempts if isinstance(attempts, int) else len(attempts)
        parts.append(f"attempts {n}")
    if get(cell, "continuations") is not None:
        parts.append(
            f"receipt cont {get(cell, 'continuations')} unbl {get(cell, 'unblocks')} err {get(cell, 'error_events')}"
        )
    if get(cell, "newer"):
        parts.append(f"newer attempt {get(cell, 'newer')}")
    if get(cell, "note"):
        parts.append(str(get(cell, "note")))
    if get(cell, "unreadable") and status_of(cell) not in ("unreadable", "tampered"):
        parts.append("a file is unreadable (last good value kept)")
    return " · ".join(parts)


def sort_value(cell: Any, key: str) -> tuple:
    """Sort key for a row by one cell: missing values last, best first for scores."""
    if key == "status":
        return (STATUS_RANK.get(status_of(cell), 9),)
    field = {"partial": "partial", "reward": "reward", "pass_rate": "pass_rate", "cost": "cost_usd"}[key]
    v = get(cell, field)
    if v is None:
        return (1, 0.0)
    return (0, -float(v)) if key != "cost" else (0, float(v))


def matches(filter_text: str, *names: str) -> bool:
    """Case-insensitive substring filter over row/column names; ``!x`` inverts (as in k9s)."""
    f = filter_text.strip().lower()
    if not f:
        return True
    invert = f.startswith("!")
    if invert:
        f = f[1:]
    hit = any(f in n.lower() for n in names)
    return hit != invert


def age_text(scanned_at: float | None, now: float | None = None) -> str:
    if scanned_at is None:
        return "no data yet"
    age = max(0.0, (now if now is not None else time.time()) - scanned_at)
    return f"data {duration(age)} old" if age >= LIVE_SEC else "data live"


def event_line(ev: Mapping[str, Any]) -> str:
    """One events.jsonl record as a short line: time, kind, task/arm, the rest."""
    ts = ev.get("ts") or ev.get("time") or ev.get("at") or ""
    if isinstance(ts, (int, float)):
        ts = time.strftime("%H:%M:%S", time.localtime(ts))
    elif isinstance(ts, str) and "T" in ts:
        ts = ts.split("T", 1)[1][:8]
    kind = ev.get("event") or ev.get("kind") or ev.get("type") or "?"
    where = "/".join(str(ev[k]) for k in ("task", "arm") if ev.get(k))
    skip = {"ts", "time", "at", "event", "kind", "type", "task", "arm", "run_id"}
    rest = " ".join(f"{k}={v}" for k, v in ev.items() if k not in skip and not isinstance(v, (dict, list)))
    return " ".join(x for x in (str(ts), str(kind), where, rest) if x)


def _compact(v: float) -> str:
    """A mean in three characters for the narrow summary: ``.41``, ``.00``, ``1.0``."""
    t = f"{v:.2f}"
    if t == "1.00":
        return "1.0"
    return t[1:] if t.startswith("0.") else t


def summary_line(arm: str, s: Any, wide: bool = False, one_line: bool = False) -> str:
    """The per-arm summary under an arm column: mean partial and pass rate over done cells, then
    n and the 95 % interval of the mean partial (a mean is never shown without them), + reward,
    build failures and cost when wide. Two lines, or one when ``one_line`` (arm-major column)."""
    if s is None:
        return "-"
    line = f"{num(get(s, 'partial'))} {pct(get(s, 'pass_rate')):>4}"
    if get(s, "audit_differs"):
        line = "\u26a0" + line  # the fairness audit found an undeclared difference in this arm
    ci = get(s, "partial_ci")
    n = get(s, "n", 0)
    if wide:
        line += f" r{num(get(s, 'reward'))}"
        if get(s, "build_failed"):
            line += f" B{get(s, 'build_failed')}"
        if get(s, "cost_usd") is not None:
            line += f" {money(get(s, 'cost_usd'))}"
        second = f"n{n} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"n{n}"
    else:
        second = f"n{n} {_compact(ci[0])}-{_compact(ci[1])}" if ci else f"n{n}"
    return f"{line} {second}" if one_line else f"{line}\n{second}"


def receipts_of(cells: Iterable[Any]) -> tuple[int, int, int]:
    """Summed receipt figures (continuations, unblocks, error events) over cells."""
    c = u = e = 0
    for cell in cells:
        c += get(cell, "continuations", 0) or 0
        u += get(cell, "unblocks", 0) or 0
        e += get(cell, "error_events", 0) or 0
    return c, u, e
