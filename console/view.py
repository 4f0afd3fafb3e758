"""How a cell, a summary, an event and the run's progress read on screen: pure formatting of the
runner's typed records, no IO, no widgets.

A number is never cut: every figure is formatted whole, and a layout that has no room for the next
figure leaves it out (``fit``). The grid's column width decides how many figures a cell shows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING

from rich.text import Text

from console.feeds import ArmSummary, CellSpend, RunEvent, RunnerInfo
from modes import safetext
from runner.results.cells import Cell
from runner.results.records import parse_time
from runner.results.run_progress import long_duration
from runner.results.tree import stamp_time

if TYPE_CHECKING:
    from runner.results.projection import Projection  # numpy: not at the console's start

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

#: what the grid's cells show, cycled by a key: (name, label in the top bar)
CELL_MODES: tuple[tuple[str, str], ...] = (
    ("score", "partial+pass"),
    ("reward", "reward"),
    ("cost", "cost"),
    ("time", "time/budget"),
    ("tokens", "tokens in/out"),
)


# -- strings from the tree --------------------------------------------------------------------------
def clean(s: object, cap: int | None = None) -> str:
    """A string from the tree (a name, a note, a test id, a log line) as the screen may show it:
    ``modes.safetext.clean`` (no ESC, OSC 52, bidi override or undecodable byte reaches the terminal,
    and none makes an SVG screenshot invalid XML). Every widget that shows such a string takes it
    from here or from ``plain``."""
    return safetext.clean(s, cap)


def plain(s: object, style: str = "", cap: int | None = None, **kw: object) -> Text:
    """A string from the tree as a ``Text``: cleaned, and never read as console markup (a DataTable
    reads a ``str`` cell as markup: ``[/]`` in a name would raise, ``[link=…]`` would style)."""
    return Text(clean(s, cap), style=style, **kw)  # type: ignore[arg-type]


# -- figures, each formatted whole ------------------------------------------------------------------
def status_of(cell: Cell | None) -> str:
    return str(cell.status or "pending") if cell is not None else "pending"


def num(v: float | int | bool | None, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}f}"


def pct(v: float | None) -> str:
    """A fraction as a whole percent, rounded from its exact value (``0.355`` is 0.35499... in binary:
    35 %, as the report's ``0.35``; ``v * 100`` rounded in floating point first gave 36 %)."""
    if v is None:
        return "-"
    return f"{Decimal(float(v) + 0.0).scaleb(2).quantize(Decimal(1), ROUND_HALF_EVEN) + 0:f}%"


def duration(sec: float | None) -> str:
    if sec is None or not math.isfinite(sec):
        return "-"
    sec = int(sec)
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m"
    return f"{sec // 3600}h{(sec % 3600) // 60:02d}"


def money(v: float | None) -> str:
    return "-" if v is None else f"${v:.2f}"


def spend_text(s: CellSpend) -> str:
    """A cell's ledger spend: ``$1.23``, or ``$?`` when some of its tokens are unpriced."""
    return money(s.usd) if s.usd is not None else "$?"


def count(n: float | None) -> str:
    """A token count in at most five characters: ``640``, ``12.3k``, ``378k``, ``4.2M``."""
    if n is None:
        return "-"
    n = float(n)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{n:.0f}"


def fit(parts: Sequence[str], width: int, sep: str = " ") -> str:
    """As many of ``parts`` as fit in ``width``, in order, each whole; the first that does not fit
    ends the line (a shorter one after it would read out of order)."""
    out = ""
    for p in parts:
        cand = p if not out else out + sep + p
        if len(cand.rstrip()) > width:
            break
        out = cand
    return out.rstrip()


# -- a grid cell ------------------------------------------------------------------------------------
def elapsed_sec(cell: Cell | None, now: float | None = None) -> float | None:
    """Wall time of the scoring attempt; for a running pair, time since its job started."""
    if cell is None:
        return None
    wall = cell.wall_sec
    if (status_of(cell) == "running" or wall is None) and cell.attempts and now is not None:
        att = cell.attempts[-1]
        started = _job_started(att.job.started_at if att.job is not None else None, att.stamp, now)
        if started is not None:
            return max(0.0, now - started)
    return wall


#: how far harbor's job start may lie outside [the runner's stamp, now] and still be believed
_START_SLACK_SEC = 120.0


def _job_started(started_at: str | None, stamp: str, now: float) -> float | None:
    """When an attempt's harbor job started. harbor writes the job's ``started_at`` without a zone,
    in the local time of the host it runs on (``datetime.now()``): read here as this host's local
    time (it was read as UTC, which put every running pair of a UTC+8 host at 0 s for eight hours).
    When that reading does not fall between the runner's stamp (UTC, the runner's clock, taken just
    before harbor starts) and now, as on a fleet host in another zone, or there is none, the stamp
    is the start."""
    st = stamp_time(stamp)
    floor = st.timestamp() if st is not None else None
    t = parse_time(started_at)
    if t is not None:
        at = t.timestamp()  # a naive time is local time
        if (floor is None or at >= floor - _START_SLACK_SEC) and at <= now + _START_SLACK_SEC:
            return at
    return floor


def elapsed_text(cell: Cell | None, budget: float | None = None, now: float | None = None) -> str:
    """Elapsed against the budget (the arms' goal timeout), e.g. ``12m/1h29``."""
    wall = elapsed_sec(cell, now)
    if wall is None and not budget:
        return "-"
    return f"{duration(wall)}/{duration(budget)}" if budget else duration(wall)


def tokens_text(cell: Cell) -> str:
    if cell.n_input_tokens is None and cell.n_output_tokens is None:
        return "-"
    return f"{count(cell.n_input_tokens)}/{count(cell.n_output_tokens)}"


def repeat_count(cell: Cell) -> str:
    """A cell's repeats at a glance (a run with repeats): ``×3`` when all three are done, else
    ``2/3`` (done of K); "" for a pair of one repeat."""
    if not cell.repeats:
        return ""
    done = cell.repeats_done
    return f"×{cell.k}" if done == cell.k else f"{done}/{cell.k}"


def repeat_spread(cell: Cell) -> str:
    """The spread of a cell's repeats' partial scores: ``±.12`` (their standard deviation)."""
    from runner.results.cells import scored_values
    from runner.results.clusters import spread

    sd = spread(scored_values(cell, "partial")) if cell.repeats else None
    return "" if sd is None else "±" + _compact(sd)


def cell_figures(
    cell: Cell,
    mode: str,
    budget: float | None = None,
    now: float | None = None,
    spend: CellSpend | None = None,
) -> list[str]:
    """The figures of a cell in the order ``mode`` ranks them, each padded to its usual width so
    the columns line up; the grid shows as many as its column has room for. The pass rate carries
    the build-failure mark ``B`` (a verifier whose build failed scores no test). With repeats, the
    figures are the means over the done repeats, the repeat count (``repeat_count``) comes second
    and the spread of the partial scores (``±.12``) after the pass rate. With the gateway's ledger
    (``spend``) the cost is what the cell cost the run there, every attempt, running ones as their
    calls land; without it, harbor's figure for the scoring attempt."""
    partial = num(cell.partial).rjust(4)
    rate = pct(cell.pass_rate).rjust(4) + ("B" if cell.build_failed else " ")
    reward = "r" + num(cell.reward)
    cost = spend_text(spend) if spend is not None else money(cell.cost_usd)
    took = elapsed_text(cell, budget, now)
    tokens = tokens_text(cell)
    order = {
        "score": [partial, rate, reward, cost, took],
        "reward": [num(cell.reward).rjust(4), "p" + num(cell.partial), rate],
        "cost": [cost.rjust(5), tokens, took],
        "time": [took.rjust(5), partial, rate],
        "tokens": [tokens.rjust(5), cost],
    }
    # a figure the cell does not have yet is left out, not shown as a dash
    got = [f for f in order.get(mode, order["score"]) if f.strip(" B").lstrip("rp$") not in ("-", "")]
    if cell.repeats:
        if mode == "score" and (sd := repeat_spread(cell)):
            got.insert(min(2, len(got)), sd)
        got.insert(min(1, len(got)), repeat_count(cell))
    return got


def cell_text(
    cell: Cell | None,
    mode: str = "score",
    width: int = 11,
    budget: float | None = None,
    now: float | None = None,
    spend: CellSpend | None = None,
) -> Text:
    """One grid cell in at most ``width`` characters: status glyph, the figures of ``mode`` that
    fit, ``B`` when the verifier's build failed, ``*`` for a newer attempt or an unreadable file."""
    if cell is None:
        return Text("·", style="dim")
    status = status_of(cell)
    newer = "*" if cell.newer or cell.unreadable else ""
    figures = cell_figures(cell, mode, budget, now, spend)
    room = width - 1 - len(newer)
    body = fit(figures, room)
    if cell.build_failed and "B" not in body:  # the mark stays in sight when its figure does not fit
        body = fit(figures, room - 1) + "B"
    text = Text(STATUS_GLYPH.get(status, "?") + body, style=STATUS_STYLE.get(status, ""))
    if newer:
        text.append(newer, style="bold")
    return text


def cell_detail(
    task: str,
    arm: str,
    cell: Cell | None,
    budget: float | None = None,
    now: float | None = None,
    width: int = 1000,
    spend: CellSpend | None = None,
) -> str:
    """The one-line description of a cell (under the grid, atop the drill-down), in ``width``."""
    task, arm = clean(task, 80), clean(arm, 80)
    if cell is None:
        return fit([f"{task} × {arm}: no attempt yet"], width) or f"{task} × {arm}"
    parts = [
        f"{task} × {arm}: {status_of(cell)}" + (" (flagged: counted as a failure)" if cell.flagged else ""),
        f"reward {num(cell.reward)}",
        f"partial {num(cell.partial)}",
        f"pass {pct(cell.pass_rate)}",
    ]
    if cell.build_failed:
        parts.append("BUILD FAILED")
    if cell.repeats:  # the mean above is of the done repeats: each one, then their spread
        flagged = f", {cell.flagged_repeats} flagged (a failure)" if cell.flagged_repeats else ""
        parts.append(f"repeats {cell.repeats_done}/{cell.k} done{flagged}")
        parts.append(" ".join(f"r{r} {repeat_figure(p)}" for r, p in enumerate(cell.repeats, 1)))
        if sd := repeat_spread(cell):
            parts.append(f"partial sd {sd.lstrip('±')}")
    parts.append(f"time {elapsed_text(cell, budget, now)}")
    if spend is None:  # harbor's figure for the scoring attempt
        parts.append(f"cost {money(cell.cost_usd)}")
    else:  # the gateway's ledger: what every attempt of the cell cost, live (harbor's is reconciled)
        parts.append(f"spend {spend_text(spend)} ({count(spend.tokens)} tok on the ledger)")
        if spend.capped:
            parts.append("ended by its spend cap (scored, like a deadline)")
    if cell.n_input_tokens is not None or cell.n_output_tokens is not None:
        parts.append(f"tok {num(cell.n_input_tokens)}/{num(cell.n_output_tokens)}")
    if cell.attempts:
        parts.append(f"attempts {len(cell.attempts)}")
    if cell.continuations is not None:
        parts.append(f"receipt cont {cell.continuations} unbl {cell.unblocks} err {cell.error_events}")
    if cell.newer:
        parts.append(f"newer attempt {cell.newer}")
    if cell.note:
        parts.append(clean(cell.note))
    if cell.unreadable and status_of(cell) not in ("unreadable", "tampered"):
        parts.append("a file is unreadable (last good value kept)")
    return fit(parts, width, " · ") or parts[0][:width]


def repeat_figure(part: Cell) -> str:
    """One repeat in a line: its glyph and, when done, its partial score (``✓0.50``, ``✗``, ``▶``;
    a repeat flagged by the hole rule carries ``⚑``)."""
    glyph = STATUS_GLYPH.get(status_of(part), "?") + ("\u2691" if part.flagged else "")
    return glyph + (num(part.partial) if status_of(part) == "done" and part.partial is not None else "")


def sort_value(cell: Cell | None, key: str, spend: CellSpend | None = None) -> tuple:
    """Sort key for a row by one cell: missing values last, best first for scores, cheapest first
    by the cost the cell shows (its ledger spend when it has calls on the ledger, else harbor's
    cost: a probe found the sort on harbor's $0 while every cell showed its spend)."""
    if key == "status":
        return (STATUS_RANK.get(status_of(cell), 9),)
    if cell is None:
        return (1, 0.0)
    cost = spend.usd if spend is not None else cell.cost_usd
    v = {"partial": cell.partial, "reward": cell.reward, "pass_rate": cell.pass_rate, "cost": cost}[key]
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


#: the top bar while the grid shows the scan index's values, not yet checked against the files
UNCHECKED = "data as indexed, checking"


def age_text(scanned_at: float | None, now: float | None = None) -> str:
    if scanned_at is None:
        return "no data yet"
    age = max(0.0, (now if now is not None else time.time()) - scanned_at)
    return f"data {duration(age)} old" if age >= LIVE_SEC else "data live"


def event_line(ev: RunEvent) -> str:
    """One events.jsonl record as a short line: time, kind, task/arm, the rest."""
    ts = ev.ts.split("T", 1)[1][:8] if "T" in ev.ts else ev.ts
    where = "/".join(x for x in (ev.task, ev.arm) if x)
    rest = " ".join(f"{k}={v}" for k, v in ev.fields)
    return clean(" ".join(x for x in (ts, ev.kind, where, rest) if x), 400)


# -- the per-arm summary ----------------------------------------------------------------------------
def _compact(v: float) -> str:
    """A bound in three characters for a narrow column: ``.41``, ``.00``, ``1.0``."""
    t = f"{v:.2f}"
    if t == "1.00":
        return "1.0"
    return t[1:] if t.startswith("0.") else t


def summary_lines(s: ArmSummary | None, width: int = 11, one_line: bool = False) -> list[str]:
    """The per-arm summary in ``width``: mean partial and pass rate over done cells, then n and the
    95 % interval of the mean partial (a mean is never shown without them), then reward, build
    failures and cost as room allows. Lines of at most ``width`` (one line when ``one_line``)."""
    if s is None:
        return ["-"]
    mark = "\u26a0" if s.audit_differs else ""  # the fairness audit found an undeclared difference
    if s.n == 0:  # no done cell: no mean to show
        return [mark + "-", "n0"]
    means = [mark + num(s.partial), pct(s.pass_rate).rjust(4), "r" + num(s.reward)]
    if s.build_failed:
        means.append(f"B{s.build_failed}")
    if s.cost_usd is not None:
        means.append(money(s.cost_usd))
    if s.ledger_spend_usd is not None or s.ledger_unpriced:  # Σ: the arm's spend on the ledger
        means.append("Σ" + ("$?" if s.ledger_unpriced else at_least(s) + money(s.ledger_spend_usd)))
    n = f"n{s.n}" + (f" \u2691{s.flagged}" if s.flagged else "")  # ⚑: flagged cells among n
    wide_ci = f"[{s.partial_ci[0]:.2f}, {s.partial_ci[1]:.2f}]" if s.partial_ci else ""
    short_ci = f"{_compact(s.partial_ci[0])}-{_compact(s.partial_ci[1])}" if s.partial_ci else ""
    if one_line:
        for ci in (wide_ci, short_ci):
            line = fit([*means[:2], n, *([ci] if ci else []), *means[2:]], width)
            if not ci or ci in line:
                return [line]
        return [fit([*means[:2], n, short_ci], width)]
    first = fit(means, width)
    for ci in (wide_ci, short_ci):
        second = fit([n, ci], width) if ci else n
        if not ci or len(second) > len(n):
            return [first, second]
    return [first, n, short_ci]


def summary_widths(s: ArmSummary | None) -> tuple[int, int, int]:
    """Widths of the one-line summary: everything, the means with n and the wide interval, the
    means with n and the compact interval (the arm-major column takes the widest that leaves room)."""
    full = len(summary_lines(s, 200, True)[0])
    if s is None or s.partial_ci is None:
        return full, full, full
    core = [
        num(s.partial),
        pct(s.pass_rate).rjust(4),
        f"n{s.n}" + (f" \u2691{s.flagged}" if s.flagged else ""),
    ]
    wide = len(" ".join([*core, f"[{s.partial_ci[0]:.2f}, {s.partial_ci[1]:.2f}]"]))
    short = len(" ".join([*core, f"{_compact(s.partial_ci[0])}-{_compact(s.partial_ci[1])}"]))
    return full, wide + (1 if s.audit_differs else 0), short + (1 if s.audit_differs else 0)


def summary_line(s: ArmSummary | None, width: int = 11, one_line: bool = False) -> str:
    return "\n".join(summary_lines(s, width, one_line))


# -- the run: progress, spend rate, how it ended -----------------------------------------------------
def clock(at: float | None) -> str:
    return time.strftime("%H:%M", time.localtime(at)) if at is not None else "?"


def progress_text(
    info: RunnerInfo | None,
    spend_usd: float | None,
    spend_tokens: int | None,
    now: float,
    pieces: tuple = (),
) -> str:
    """The top bar's run figures: pairs done, elapsed, ETA at the current concurrency, spend per hour.
    ``spend_usd`` / ``spend_tokens``: what the current run's own attempts spent
    (``RunModel.run_spend``). Elapsed and the rates are over the time its runners ran (``pieces``,
    ``RunModel.run_pieces``, as `marathon status` takes them), the runner's own clock when the tree
    has no runner start read yet."""
    if info is None or info.progress.started_at is None:
        return ""
    p = info.progress
    from runner.results.run_progress import per_hour
    from runner.results.runs import span_sec

    elapsed = span_sec(pieces, now) if pieces else p.elapsed_sec(now)
    parts = [f"{p.done}/{p.total} {p.unit}", f"elapsed {duration(elapsed)}"]
    if p.end is None:
        eta = p.eta_sec()
        parts.append(f"ETA {duration(eta)}" if eta is not None else "ETA -")
    usd, tok = per_hour(spend_usd, elapsed), per_hour(spend_tokens, elapsed)
    if usd is not None or tok is not None:
        parts.append(f"{count(tok)} tok/h {money(usd)}/h")
    return " · ".join(parts)


def at_least(s: ArmSummary) -> str:
    """``≥`` before an arm's ledger spend when it is a lower bound: calls cut before their usage
    arrived, or attempts live at a gateway found dead (their calls in flight have no line)."""
    return "≥" if s.ledger_unmetered or s.gateway_deaths else ""


def arms_spend_text(
    summary: dict[str, ArmSummary] | Iterable[tuple[str, ArmSummary]], projection: Projection | None = None
) -> str:
    """The top bar's live spend per arm from the gateway's ledger: ``spend $1.23 (projected $4.10
    [3.80, 4.52]; cap $10.00 in 2.1 h): plain $0.40 goal $0.83`` ("" without a ledger; ``$?`` for
    an arm with unpriced tokens, and then no total; ``≥$0.40`` for an arm with calls cut before
    their usage arrived or attempts live at a gateway found dead, as `status` and the report say it:
    a lower bound)."""
    items = list(summary.items()) if isinstance(summary, dict) else list(summary)
    per = [(a, s) for a, s in items if s.ledger_spend_usd is not None or s.ledger_unpriced]
    if not per:
        return ""
    arms = " ".join(
        f"{clean(a, 24)} {'$?' if s.ledger_unpriced else at_least(s) + money(s.ledger_spend_usd)}"
        for a, s in per
    )
    if any(s.ledger_unpriced for _a, s in per):
        return f"spend unpriced: {arms}"
    total = math.fsum(s.ledger_spend_usd or 0.0 for _a, s in per)
    lower = "≥" if any(at_least(s) for _a, s in per) else ""
    return f"spend {lower}{money(total)}{projection_text(projection, total)}: {arms}"


def projection_text(p: Projection | None, spent_now: float | None = None) -> str:
    """`` (projected $4.10 [3.80, 4.52]; cap $10.00 in 2.1 h)``: the projection's figures that exist.
    ``spent_now``: the spend shown beside it, which may be newer than the projection (it is made at
    most every few seconds): what was spent since moves the projected total and its interval alike."""
    if p is None or p.unpriced:
        return ""
    shift = spent_now - p.spent if spent_now is not None and p.spent is not None else 0.0
    parts = []
    if p.projected is not None:
        iv = f" [{p.interval[0] + shift:.2f}, {p.interval[1] + shift:.2f}]" if p.interval else ""
        parts.append(f"projected {money(p.projected + shift)}{iv}")
    if p.cap is not None:
        if p.time_to_cap_sec == 0:
            parts.append(f"cap {money(p.cap)} reached")
        elif p.time_to_cap_sec is not None:
            parts.append(f"cap {money(p.cap)} in {duration(p.time_to_cap_sec)}")
        else:
            parts.append(f"cap {money(p.cap)}")
    return f" ({'; '.join(parts)})" if parts else ""


def run_end_text(info: RunnerInfo | None) -> str | None:
    """How the run ended, once the runner is gone: its own exit record, or that it died."""
    if info is None or info.alive or info.progress.started_at is None:
        return None
    p = info.progress
    if p.end is not None:
        took = long_duration(p.end.at - p.started_at) if p.end.at is not None else "?"
        if p.end.paused:
            return (
                f"run paused after {p.end.done}/{p.end.total} {p.unit} in {took}: {p.end.paused}; `R` resumes"
            )
        if p.end.done >= p.end.total:
            return f"{p.end.done}/{p.end.total} {p.unit} done in {took}"
        return f"runner stopped ({p.end.reason}): {p.end.done}/{p.end.total} {p.unit} done in {took}; `R` resumes"
    return (
        f"runner died at {clock(p.last_event_at)} (its last event), {p.done}/{p.total} {p.unit} done; "
        "`R` restarts it"
    )


def gate_text(info: RunnerInfo | None, now: float) -> str | None:
    """A gate wait (the disks, the address pool) long enough to be worth waking the operator for."""
    from runner.results.run_progress import GATE_ALARM_SEC

    if info is None or not info.alive:
        return None
    waited = info.progress.gate_waited_sec(now)
    if waited is None or waited < GATE_ALARM_SEC:
        return None
    why = f" ({info.progress.gate_reason})" if info.progress.gate_reason else ""
    return f"gate waiting {long_duration(waited)} since {clock(info.progress.gate_waiting_since)}{why}"
