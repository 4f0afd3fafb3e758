"""``marathon status``'s view of an output tree: the per-arm table and its JSON, from the results model.

Here and not in the command's module because ``marathon demo`` prints the same status at its end
(subcommands never import each other).
"""

from __future__ import annotations

from pathlib import Path


def _f(v, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _iso(t) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t is not None else None


def _spend_lacks(model, cells, per_arm: dict) -> dict:
    """Per arm, the calls the spend lacks: ``unmetered_calls`` (cut before their usage arrived) and
    ``gateway_deaths`` (attempts live at a gateway found dead: their calls in flight have no line),
    the report's ``ledger_unmetered_calls`` and ``gateway_deaths``; ``line``: one line, or ""."""
    from runner.results.report import gateway_deaths, spend_lacks_line

    unmetered = {a: n for a, s in per_arm.items() if (n := s.get("ledger_unmetered_calls"))}
    deaths = gateway_deaths(model.out, cells)
    return {
        "unmetered_calls": unmetered,
        "gateway_deaths": deaths,
        "line": spend_lacks_line(unmetered, deaths),
    }


def status_data(model, scope: str, exclude_flagged: bool = False, cap: float | None = None) -> dict:
    """The status of ``model``; ``cap``: a spend cap in USD the projection gives the time to (default:
    the run's ``--max-spend``, as its runner recorded it for the gateways)."""
    from runner.results.alarms import infrastructure, provider_errors, provider_outages
    from runner.results.caps import read_caps
    from runner.results.report import HEADLINE, OTHER_READING, arm_summaries, cell_dict
    from runner.results.tree import unit_label

    cells = model.scoped(scope)
    arms = [a for a in model.arms if any(k[1] == a for k in cells)]
    money = model.money()
    per_arm, total = arm_summaries(cells, arms, exclude_flagged, money)  # the total row in the same pass
    caps = read_caps(model.out)
    cap = cap if cap is not None else caps.run_usd
    spend = None
    if money.exists:  # (numpy, which the projection needs, is imported only for a tree with a ledger)
        from runner.results.projection import projection_of

        spend = projection_of(model, money, scope, cap)
    # the bias alarms of the report (runner.results.alarms), so a headless operator sees them too
    alarms = [r["message"] for r in infrastructure(cells, arms) if r["alarm"]]
    alarms += [r["message"] for r in provider_errors(cells, arms, model.ledger) if r["alarm"]]
    all_cells = model.scoped("all")
    repeats = max((c.k for c in cells.values()), default=1)
    return {
        "out": str(model.out),
        "scope": scope if model.runs else "all",
        "reading": OTHER_READING if exclude_flagged else HEADLINE,
        "exclude_flagged": exclude_flagged,
        "run_id": model.run_id,
        # the run's span: from its first start (a restart that resumed it goes on with it) to its exit
        "run_started": _iso(model.run_span[0]),
        "run_ended": _iso(model.run_span[1]),
        "modified_tasks": model.modified_tasks,
        "arms": arms,
        "per_arm": per_arm,
        "total": total,
        # the gateway's ledger priced (runner.results.prices) and projected (runner.results.projection)
        "spend": {**spend.as_dict(), "text": spend.text(), "prices": money.pricer.source_line()}
        if spend
        else None,
        # what the spend lacks (the report's money section says the same): calls cut before their
        # usage arrived, attempts live at a gateway found dead (status and the console said
        # nothing of either: found by a review)
        "spend_lacks": _spend_lacks(model, cells, per_arm) if spend else None,
        "caps": caps.to_json() if caps.any else None,
        "alarms": alarms,
        # scored attempts the provider failed for a minute or more: each its own flagged line
        "flags": [r["message"] for r in provider_outages(cells, arms, model.ledger, model.out)],
        # with repeats these count repeats (each pair K times), as every count of the table does
        "all_time_done": sum(c.repeats_done for c in all_cells.values()),
        "all_time_pairs": sum(c.k for c in all_cells.values()),
        "claims": sorted(unit_label(t, a, r) for (t, a), rs in model.claimed.items() for r in rs),
        "hosts": model.hosts(),
        "excluded": [{"path": e.path, "reason": e.reason} for e in model.excluded],
        "unreadable": model.unreadable,
        "repeats": repeats,
        "notes": [
            {
                "task": c.task,
                "arm": c.arm,
                **{k: v for k, v in cell_dict(c).items() if k in ("status", "flagged", "note")},
            }
            for c in sorted([c for c in cells.values() if c.note], key=lambda c: (c.arm, c.task))
        ],
    }


def render(d: dict) -> str:
    """The status table for a terminal: every name and note from the tree through
    ``modes.safetext.clean`` (no control, bidi or undecodable character reaches the terminal)."""
    from modes.safetext import clean
    from runner.results.prices import money_shown
    from runner.results.report import flagged_cost_line, fmt_mean

    head = f"marathon status {clean(d['out'], None)}"
    if d["scope"] == "run":
        ended = f", ended {d['run_ended']}" if d.get("run_ended") else ""
        head += f"  run {clean(d['run_id'])} (started {d['run_started'] or '?'}{ended})"
        unit = "repeats" if d.get("repeats", 1) > 1 else "pairs"
        head += f"; all time: {d['all_time_done']}/{d['all_time_pairs']} {unit} done"
    else:
        head += "  (all time)"
    cols = (
        "arm",
        "done",
        "run",
        "pend",
        "err",
        "void",
        "unrd",
        "tamp",
        "n",
        "flag",
        "reward",
        "partial [95% CI]",
        "pass",
        "build✗",
        "cont",
        "unbl",
        "errev",
        "cost$",
    )
    arms = {a: clean(a, 60) for a in d["arms"]}
    widths = (
        max([len("arm"), 5] + [len(a) for a in arms.values()]),
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        4,
        7,
        17,
        7,
        6,
        5,
        5,
        5,
        9,
    )
    lines = [
        head,
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths, strict=True))),
    ]
    if d.get("exclude_flagged"):
        lines.insert(1, f"reading: {d['reading']}")

    # each arm's cost as the report's table shows it (the ledger's, harbor's for an arm without calls
    # there); the total is the rows' sum when they mix the two (the ledger's total left the harbor
    # arms out: found by a review), and a line under the table names the harbor ones
    shown = {a: money_shown(d["per_arm"][a]) for a in d["arms"]}
    harbor = [a for a, v in shown.items() if not v[3] and v[0] is not None]
    mixed = bool(harbor) and any(v[3] for v in shown.values())

    def total_cost() -> object:
        if not mixed:
            return money_shown(d["total"])[0]
        got = [v[0] for v in shown.values() if v[0] is not None]
        return "unpriced" if any(isinstance(v, str) for v in got) else sum(got)

    def row(name: str, s: dict, cost: object) -> str:
        vals = (
            name, s["done"], s["running"], s["pending"], s["errored"], s["voided"],
            s.get("unreadable", 0), s.get("tampered", 0), s["n"], s["flagged_in_n"],
            _f(s["reward"]), fmt_mean(s["partial"], s["partial_ci"]), _f(s["pass_rate"]), s["build_failed"],
            _f(s["continuations"]), _f(s["unblocks"]), _f(s["error_events"]), _f(cost, 4),
        )  # fmt: skip
        return "  ".join(
            str(v).rjust(w) if i else str(v).ljust(w)
            for i, (v, w) in enumerate(zip(vals, widths, strict=True))
        )

    for a in d["arms"]:
        lines.append(row(arms[a], d["per_arm"][a], shown[a][0]))
    if len(d["arms"]) > 1:
        lines.append(row("total", d["total"], total_cost()))
    if mixed:
        lines.append(
            "cost$: the gateway's ledger's; harbor's own for "
            + ", ".join(arms[a] for a in harbor)
            + " (no call of theirs on the ledger); total: the rows' sum"
        )
    if fc := flagged_cost_line({"arms": d["arms"], "arm_summary": d["per_arm"]}):
        lines.append(clean(fc, None))
    if not d["arms"]:
        lines.append("no pairs yet")
    lines += repeats_lines(d)
    lines += [f"ALARM {clean(a, None)}" for a in d.get("alarms", ())]
    lines += [f"FLAG {clean(a, None)}" for a in d.get("flags", ())]
    if d.get("modified_tasks"):
        from runner.results.report import MODIFIED

        lines.append(f"{MODIFIED}: {', '.join(clean(t, 80) for t in d['modified_tasks'])}")
    if d.get("spend"):
        lines.append(clean(d["spend"]["text"], None))
        if (d.get("spend_lacks") or {}).get("line"):
            lines.append(clean(d["spend_lacks"]["line"], None))
        lines.append(clean(d["spend"]["prices"], None))
    caps = d.get("caps")
    if caps:
        parts = [f"run ${caps['run_usd']:.2f}" if caps.get("run_usd") else "",
                 f"each arm ${caps['arm_usd']:.2f}" if caps.get("arm_usd") else ""]  # fmt: skip
        if any(parts):
            lines.append(
                f"spend caps: {', '.join(p for p in parts if p)}; at a cap running attempts {caps['on_cap']}"
            )
        if caps.get("attempt_usd"):
            lines.append(
                f"each attempt's spend budget: ${caps['attempt_usd']:.2f} (at it the attempt ends, scored)"
            )
    for host, hrow in d.get("hosts", {}).items():
        rest = ", ".join(f"{n} {clean(k)}" for k, n in hrow.items() if k != "attempts")
        lines.append(f"host {clean(host)}: {hrow['attempts']} attempt(s) ({rest})")
    for e in d["excluded"]:
        lines.append(f"excluded: {clean(e['path'])}: {clean(e['reason'])}")
    for u in d["unreadable"]:
        lines.append(f"unreadable: {clean(u, None)}")
    for n in d["notes"]:
        lines.append(f"note: {clean(n['task'])} x {clean(n['arm'])}: {clean(n['note'], None)}")
    return "\n".join(lines)


def repeats_lines(d: dict) -> list[str]:
    """With repeats (K > 1): what the table counts, and each arm's pass@K and pass^K."""
    k = d.get("repeats", 1)
    if k < 2:
        return []
    from modes.safetext import clean
    from runner.results.report import fmt_mean

    lines = [
        f"repeats: K = {k} per (task, arm); the counts are repeats, the means are over tasks (n, each task "
        f"the mean of its counted repeats) with intervals that resample tasks"
    ]
    for a in d["arms"]:
        s = d["per_arm"][a]
        if s.get("pass_k"):
            lines.append(
                f"{clean(a)}: n {s['n']} tasks; pass@{k} {fmt_mean(s['pass_at_k'], s['pass_at_k_ci'])}, "
                f"pass^{k} {fmt_mean(s['pass_hat_k'], s['pass_hat_k_ci'])} (over the {s['pass_k_n']} task(s) "
                f"with {k} counted repeats)"
            )
    return lines


def show(
    out: Path,
    *,
    all_runs: bool = False,
    as_json: bool = False,
    pretty: bool = False,
    exclude_flagged: bool = False,
) -> int:
    """Print the status of ``out`` (``marathon status``); exit 0."""
    from runner.results.index import remembered_intervals
    from runner.results.model import open_tree
    from runner.results.report import dump_json

    model = open_tree(out)
    with remembered_intervals(model.out):
        d = status_data(model, "all" if all_runs else "run", exclude_flagged)
    print(dump_json(d, pretty) if as_json else render(d))
    return 0
