"""The HTML report's figures, drawn from the report dict as inline SVG (no network, no GUI).

Why matplotlib: it is the field's default plotting library, long maintained, and writes SVG
offline with text as paths (``svg.fonttype = "path"``), so the file renders the same on any
machine without fonts or a CDN. It is used through ``matplotlib.figure.Figure`` directly, never
``pyplot``: no GUI backend and no global state touched.

Each figure is a function of the report dict only (the JSON contract), so the figures cannot
disagree with the tables beside them.
"""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

from modes import safetext
from runner.results import rules

FIGURES = ("means", "forest", "heatmap", "cost", "time")
TITLES = {
    "means": "Per-arm means over done cells, 95 % bootstrap intervals",
    "forest": "Paired differences of partial score (a \u2212 b), 95 % paired bootstrap intervals",
    "heatmap": "Partial score per task and arm (\u2717 = build failed, grey = not done)",
    "cost": "Cost (scoring attempts) vs mean partial score per arm",
    "time": "Time to finish per arm (done cells, wall seconds)",
}
MEASURE_LABELS = {"partial": "partial", "reward": "reward", "pass_rate": "pass rate"}


def _svg(fig: Any, salt: str) -> str:
    import matplotlib

    buf = io.StringIO()
    # text as paths: no font needed where the file is opened; a fixed salt: the same ids every time
    with (
        matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": f"marathon-{salt}"}),
        warnings.catch_warnings(),
    ):
        # a task name in a script DejaVu lacks draws as boxes; no reason to warn on every report
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font", category=UserWarning)
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    # inline in HTML: drop the XML prolog and DOCTYPE, keep the <svg> element
    return re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)


def _short(name: str, n: int = 24) -> str:
    """A label that cannot squeeze the plot away, break the SVG or run matplotlib's mathtext (task
    and arm names are free text: ``modes.safetext.clean``, and ``$`` escaped)."""
    return safetext.clean(name, n).replace("$", r"\$")


def _figure(w: float, h: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=100, layout="constrained")


def _err(mean: float | None, ci: list[float] | None) -> tuple[float, float]:
    if mean is None or not ci:
        return 0.0, 0.0
    return max(0.0, mean - ci[0]), max(0.0, ci[1] - mean)


def means(rep: dict[str, Any]) -> Any:
    arms = rep["arms"]
    fig = _figure(1.6 + 1.1 * max(1, len(arms)), 3.2)
    ax = fig.add_subplot()
    for k, field in enumerate(MEASURE_LABELS):
        xs, ys, lo, hi = [], [], [], []
        for i, a in enumerate(arms):
            s = rep["arm_summary"][a]
            if s[field] is None:
                continue
            e = _err(s[field], s[f"{field}_ci"])
            xs.append(i + (k - 1) * 0.22)
            ys.append(s[field])
            lo.append(e[0])
            hi.append(e[1])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=MEASURE_LABELS[field])
    ticks = []
    for a in arms:
        s = rep["arm_summary"][a]
        flagged = f" ({s['flagged_in_n']} flagged)" if s.get("flagged_in_n") else ""
        ticks.append(f"{_short(a, 16)}\nn = {s['n']}{flagged}")
    ax.set_xticks(range(len(arms)), ticks)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("mean")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return fig


def forest(rep: dict[str, Any]) -> Any:
    rows = [p for p in rep["paired"] if p["n"] and p["partial_diff"] is not None]
    fig = _figure(6.5, 1.0 + 0.4 * max(1, len(rows)))
    ax = fig.add_subplot()
    for i, p in enumerate(reversed(rows)):
        e = _err(p["partial_diff"], p["partial_diff_ci"]) if p["partial_diff_ci"] else (0.0, 0.0)
        lo = p["partial_diff"] - e[0]
        hi = p["partial_diff"] + e[1]
        ax.plot([lo, hi], [i, i], color="tab:blue")
        ax.plot([p["partial_diff"]], [i], "s", color="tab:blue")
    labels = [f"{_short(p['a'], 16)} \u2212 {_short(p['b'], 16)}  (n = {p['n']})" for p in reversed(rows)]
    ax.set_yticks(range(len(rows)), labels)
    ax.axvline(0, color="grey", lw=1, ls="--")
    ax.set_xlabel("difference of mean partial score")
    ax.set_xlim(-1.05, 1.05)
    if not rows:
        ax.text(0, 0, "no pair of arms has a common done task", ha="center")
    return fig


#: up to this many tasks the heatmap names each task and marks each cell; above it, the rows are
#: one raster image in a figure of bounded height (2,010 labelled rows took 1.2 GB and 30 s)
HEATMAP_LABELLED = 60
#: the time plot draws at most this many points per arm (evenly spaced in task order) over its box
TIME_POINTS = 400


def heatmap(rep: dict[str, Any]) -> Any:
    import numpy as np

    arms, tasks = rep["arms"], rep["tasks"]
    labelled = len(tasks) <= HEATMAP_LABELLED
    data = np.full((max(1, len(tasks)), max(1, len(arms))), np.nan)
    height = 1.0 + 0.3 * max(1, len(tasks)) if labelled else 1.0 + 0.3 * HEATMAP_LABELLED
    fig = _figure(1.8 + 0.9 * max(1, len(arms)), height)
    ax = fig.add_subplot()
    ax.set_facecolor("#dddddd")  # not done: grey
    for i, t in enumerate(tasks):
        for j, a in enumerate(arms):
            c = rep["cells"][t].get(a)
            if c and (c["status"] == "done" or c["flagged"]):
                v = rules.scored_measure(c["partial"], c["build_failed"], "partial", c["flagged"])
                data[i, j] = np.nan if v is None else v
    im = ax.imshow(
        np.ma.masked_invalid(data), vmin=0, vmax=1, cmap="viridis", aspect="auto", interpolation="nearest"
    )
    ax.set_xticks(range(len(arms)), [_short(a, 16) for a in arms])
    if labelled:
        for i, t in enumerate(tasks):
            for j, a in enumerate(arms):
                c = rep["cells"][t].get(a)
                if c and c["status"] == "done" and c["build_failed"]:
                    ax.text(
                        j, i, "\u2717", ha="center", va="center", color="red", fontsize=12, fontweight="bold"
                    )
                elif c and c["flagged"]:
                    ax.text(j, i, "flagged", ha="center", va="center", color="red", fontsize=7)
                elif c and c["status"] != "done":
                    ax.text(j, i, c["status"], ha="center", va="center", color="#555555", fontsize=7)
        ax.set_yticks(range(len(tasks)), [_short(t) for t in tasks], fontsize=8)
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{len(tasks):,} tasks in name order (the matrix below names and marks each)")
    fig.colorbar(im, ax=ax, label="partial score")
    return fig


def cost(rep: dict[str, Any]) -> Any:
    """Each arm's cost as its table shows it (``prices.money_shown``: the gateway's ledger's when the
    arm has calls there; the demo's points all sat at harbor's $0) against its mean partial score."""
    from runner.results.prices import money_shown

    fig = _figure(5.5, 3.4)
    ax = fig.add_subplot()
    points = []
    for a in rep["arms"]:
        s = rep["arm_summary"][a]
        usd, _per_solved, _spend, from_ledger = money_shown(s)
        if isinstance(usd, (int, float)) and s["partial"] is not None:
            points.append((a, s, usd, from_ledger))
    ledger = {p[3] for p in points}
    mixed = len(ledger) > 1  # some arms without a call on the ledger: harbor's figure, marked so
    for a, s, usd, from_ledger in points:
        name = _short(a, 16) + (" (harbor)" if mixed and not from_ledger else "")
        e = _err(s["partial"], s["partial_ci"])
        ax.errorbar([usd], [s["partial"]], yerr=[[e[0]], [e[1]]], fmt="o", capsize=3, label=name)
        ax.annotate(name, (usd, s["partial"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    shown = len(points)
    if mixed:
        source = "; the gateway's ledger, harbor's where marked"
    else:
        source = ", the gateway's ledger" if True in ledger else ""
    ax.set_xlabel(f"cost USD (scoring attempts{source})")
    ax.set_ylabel("mean partial score")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    if not shown:
        ax.text(0.5, 0.5, "no arm has a recorded cost", ha="center", transform=ax.transAxes)
    return fig


def time_to_finish(rep: dict[str, Any]) -> Any:
    arms = rep["arms"]
    fig = _figure(1.6 + 1.1 * max(1, len(arms)), 3.2)
    ax = fig.add_subplot()
    data = []
    for a in arms:
        data.append(
            [
                c[a]["wall_sec"]
                for c in rep["cells"].values()
                if a in c and c[a]["status"] == "done" and c[a]["wall_sec"] is not None
            ]
        )
    if not arms:
        ax.text(0.5, 0.5, "no arm yet", ha="center", transform=ax.transAxes)
        return fig
    ax.boxplot(
        [d or [float("nan")] for d in data], tick_labels=[_short(a, 16) for a in arms], showfliers=False
    )
    for i, d in enumerate(data):
        shown = d if len(d) <= TIME_POINTS else [d[k * len(d) // TIME_POINTS] for k in range(TIME_POINTS)]
        ax.plot([i + 1] * len(shown), shown, "o", alpha=0.5, color="tab:orange", ms=4)
    ax.set_ylabel("wall seconds")
    ax.grid(axis="y", alpha=0.3)
    return fig


_DRAW = {"means": means, "forest": forest, "heatmap": heatmap, "cost": cost, "time": time_to_finish}


def figures(rep: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every figure of the report as (id, title, inline SVG), in a fixed order."""
    return [(name, TITLES[name], _svg(_DRAW[name](rep), name)) for name in FIGURES]
