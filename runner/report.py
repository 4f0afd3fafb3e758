"""The comparison report: matrix, per-arm summary, paired comparisons, infrastructure-bias alarm.

Built from the results model only (``build_report(model) -> dict``), then rendered as md, json,
csv or html. The dict is the JSON contract other tools read:

    arms, tasks, cells[task][arm]{reward, partial, pass_rate, build_failed, status, cost_usd,
    n_input_tokens, n_output_tokens, ...}, arm_summary[arm]{n, reward, partial, pass_rate,
    build_failed, cost_usd, ...}, paired[...], infrastructure[...], disclosures{arm: [...]}

Why paired: the arms may have run different task sets (the field's ``ssh-goal`` ran extra hard
tasks), so per-arm means are not comparable; pairs compare only cells both arms completed.
Why the alarm: when one arm's error or void rate is significantly higher, the difference is most
likely infrastructure, not capability (runbook pitfall 1).
"""

from __future__ import annotations

import csv
import html
import io
import json
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

from modes import profiles
from runner import stats
from runner.model import DONE, ERRORED, STATUSES, VOIDED, Cell, RunModel

FORMATS = ("md", "json", "csv", "html")
ALARM_P = 0.05
ALARM_TEXT = "suspect infrastructure before capability"
CELL_FIELDS = (
    "status",
    "reward",
    "partial",
    "pass_rate",
    "build_failed",
    "cost_usd",
    "n_input_tokens",
    "n_output_tokens",
)


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(v, nd)


def cell_dict(c: Cell) -> dict[str, Any]:
    return {
        "status": c.status,
        "reward": _r(c.reward),
        "partial": _r(c.partial),
        "pass_rate": _r(c.pass_rate),
        "build_failed": c.build_failed,
        "cost_usd": _r(c.cost_usd, 6),
        "n_input_tokens": c.n_input_tokens,
        "n_output_tokens": c.n_output_tokens,
        "wall_sec": _r(c.wall_sec, 1),
        "attempts": c.n_attempts,
        "errored_attempts": c.n_errored,
        "voided_attempts": c.n_voided,
        "continuations": c.continuations,
        "unblocks": c.unblocks,
        "error_events": c.error_events,
        "goal_status": c.goal_status,
        "scored_by": c.scored_by,
        "newer": c.newer,
        "unreadable": c.unreadable,
        "note": c.note,
    }


def _score(c: Cell, field: str) -> float | None:
    """A done cell's measure for means; build failures count as 0 (never dropped)."""
    v = getattr(c, field)
    if v is None and c.build_failed and field in ("partial", "pass_rate"):
        return 0.0
    return v


def arm_summary(cells: list[Cell]) -> dict[str, Any]:
    done = [c for c in cells if c.status == DONE]
    counts = {s: sum(1 for c in cells if c.status == s) for s in STATUSES}

    def m(field: str) -> float | None:
        return _r(stats.mean([v for c in done if (v := _score(c, field)) is not None]))

    def s(field: str) -> int | float | None:
        vals = [getattr(c, field) for c in cells if getattr(c, field) is not None]
        return sum(vals) if vals else None

    cost_all = s("cost_usd_all")
    return {
        "n": len(done),
        "reward": m("reward"),
        "partial": m("partial"),
        "pass_rate": m("pass_rate"),
        "build_failed": sum(1 for c in done if c.build_failed),
        "cost_usd": _r(cost_all, 6) if cost_all is not None else None,
        "n_input_tokens": s("n_input_tokens"),
        "n_output_tokens": s("n_output_tokens"),
        "cells": len(cells),
        **counts,
        "attempts": sum(c.n_attempts for c in cells),
        "errored_attempts": sum(c.n_errored for c in cells),
        "voided_attempts": sum(c.n_voided for c in cells),
        "continuations": s("continuations"),
        "unblocks": s("unblocks"),
        "error_events": s("error_events"),
    }


def paired(cells: dict[tuple[str, str], Cell], arms: list[str], tasks: list[str]) -> list[dict[str, Any]]:
    """Each pair of arms over the tasks both completed: means, mean difference, wins, sign test."""
    out = []
    for a, b in combinations(arms, 2):
        both = [
            t
            for t in tasks
            if (ca := cells.get((t, a))) is not None
            and (cb := cells.get((t, b))) is not None
            and ca.status == DONE
            and cb.status == DONE
        ]
        row: dict[str, Any] = {"a": a, "b": b, "n": len(both), "tasks": both}
        for field in ("reward", "partial", "pass_rate"):
            pa = [(_score(cells[(t, a)], field), _score(cells[(t, b)], field)) for t in both]
            pa = [(x, y) for x, y in pa if x is not None and y is not None]
            row[f"{field}_a"] = _r(stats.mean([x for x, _ in pa]))
            row[f"{field}_b"] = _r(stats.mean([y for _, y in pa]))
            row[f"{field}_diff"] = _r(stats.mean([x - y for x, y in pa]))
            row[f"{field}_n"] = len(pa)
        pp = [(_score(cells[(t, a)], "partial"), _score(cells[(t, b)], "partial")) for t in both]
        wins = sum(1 for x, y in pp if x is not None and y is not None and x > y)
        losses = sum(1 for x, y in pp if x is not None and y is not None and x < y)
        ties = sum(1 for x, y in pp if x is not None and y is not None and x == y)
        row.update(wins=wins, losses=losses, ties=ties, sign_test_p=_r(stats.sign_test(wins, losses)))
        out.append(row)
    return out


def infrastructure(cells: dict[tuple[str, str], Cell], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm: errored + voided attempts vs the rest, against all other arms (Fisher's exact test)."""
    per = {}
    for arm in arms:
        atts = [a for (t, ar), c in cells.items() if ar == arm for a in c.attempts]
        bad = sum(1 for a in atts if a.status in (ERRORED, VOIDED))
        per[arm] = (bad, len(atts))
    out = []
    for arm in arms:
        bad, n = per[arm]
        obad = sum(per[o][0] for o in arms if o != arm)
        on = sum(per[o][1] for o in arms if o != arm)
        p = stats.fisher_exact(bad, n - bad, obad, on - obad) if n and on else 1.0
        rate = bad / n if n else None
        orate = obad / on if on else None
        alarm = bool(rate is not None and orate is not None and rate > orate and p < ALARM_P)
        out.append(
            {
                "arm": arm,
                "bad_attempts": bad,
                "attempts": n,
                "rate": _r(rate),
                "others_rate": _r(orate),
                "p_value": _r(p, 6),
                "alarm": alarm,
                "message": f"{arm}: error/void rate {bad}/{n} vs {obad}/{on} for the others (Fisher p={p:.3g}): {ALARM_TEXT}"
                if alarm
                else "",
            }
        )
    return out


def build_report(model: RunModel, scope: str = "all") -> dict[str, Any]:
    cells = model.scoped(scope)
    arms = [a for a in model.arms if any(k[1] == a for k in cells)]
    tasks = sorted({k[0] for k in cells})
    stand_ins = [a for a in arms if profiles.mode_for(a) is None]
    return {
        "schema": "marathon-report-v1",
        "out": str(model.out),
        "scope": scope if model.runs else "all",
        "run_id": model.run_id,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "arms": arms,
        "tasks": tasks,
        "cells": {t: {a: cell_dict(cells[(t, a)]) for a in arms if (t, a) in cells} for t in tasks},
        "arm_summary": {a: arm_summary([c for k, c in cells.items() if k[1] == a]) for a in arms},
        "paired": paired(cells, arms, tasks),
        "infrastructure": infrastructure(cells, arms),
        "disclosures": profiles.disclosures([a for a in arms if a in profiles.ARMS]),
        "stand_ins": stand_ins,
        "excluded": [{"path": e.path, "reason": e.reason} for e in model.excluded],
        "unreadable": model.unreadable,
        "notes": {
            "means": "over done cells; build failures count as partial 0 and pass rate 0",
            "cost_usd": "arm_summary cost_usd sums every attempt (errored and voided too); cells show the scoring attempt",
            "paired": "only tasks both arms completed; wins/losses by partial score; two-sided sign test",
            "infrastructure": f"errored+voided attempts vs the other arms, Fisher's exact test; alarm at p < {ALARM_P}",
        },
    }


# ------------------------------------------------------------------------------------ rendering


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _cell_text(c: dict[str, Any] | None) -> str:
    """reward / partial / pass rate, with the build-failure mark ✗."""
    if c is None:
        return ""
    if c["status"] != DONE:
        return c["status"]
    mark = " ✗build" if c["build_failed"] else ""
    return f"{_f(c['reward'], 2)} / {_f(c['partial'], 2)} / {_f(c['pass_rate'], 2)}{mark}"


def render_json(rep: dict[str, Any]) -> str:
    return json.dumps(rep, indent=2, ensure_ascii=False) + "\n"


#: cell statuses of a pair whose file broke a safe-open rule or was changed after its verifier
NOT_SCORED = ("unreadable", "tampered")


def render_md(rep: dict[str, Any]) -> str:
    arms, tasks = rep["arms"], rep["tasks"]
    lines = [f"# marathon report: {rep['out']}", ""]
    lines.append(f"Scope: {rep['scope']}" + (f" (run {rep['run_id']})" if rep["run_id"] else "") + ".")
    lines += ["", "## Infrastructure-bias alarm", ""]
    alarms = [r for r in rep["infrastructure"] if r["alarm"]]
    lines += [f"- **ALARM** {r['message']}" for r in alarms] or [
        "No arm's error/void rate is significantly higher."
    ]
    lines += [
        "",
        "| arm | errored+voided | attempts | rate | others | Fisher p |",
        "|---|---|---|---|---|---|",
    ]
    for r in rep["infrastructure"]:
        lines.append(
            f"| {r['arm']} | {r['bad_attempts']} | {r['attempts']} | {_f(r['rate'])} | {_f(r['others_rate'])} | {_f(r['p_value'], 4)} |"
        )
    lines += ["", "## Results (reward / partial / test pass rate; ✗build = build failed, counted as 0)", ""]
    lines.append("| task | " + " | ".join(arms) + " |")
    lines.append("|---" * (len(arms) + 1) + "|")
    for t in tasks:
        row = [_cell_text(rep["cells"][t].get(a)) for a in arms]
        lines.append(f"| {t} | " + " | ".join(row) + " |")
    lines += ["", "## Per arm (means over done cells)", ""]
    lines.append(
        "| arm | n | reward | partial | pass rate | build failed | cost USD | errored | voided | pending | running |"
    )
    lines.append("|---" * 11 + "|")
    for a in arms:
        s = rep["arm_summary"][a]
        lines.append(
            f"| {a} | {s['n']} | {_f(s['reward'])} | {_f(s['partial'])} | {_f(s['pass_rate'])} | {s['build_failed']} | "
            f"{_f(s['cost_usd'], 4)} | {s['errored']} | {s['voided']} | {s['pending']} | {s['running']} |"
        )
    lines += ["", "## Paired comparisons (only tasks both arms completed)", ""]
    lines.append(
        "| a | b | n | partial a | partial b | diff | wins/losses/ties | sign p | reward a | reward b |"
    )
    lines.append("|---" * 10 + "|")
    for p in rep["paired"]:
        if not p["n"]:
            continue  # no task both completed: nothing to compare (still listed in the JSON)
        lines.append(
            f"| {p['a']} | {p['b']} | {p['n']} | {_f(p['partial_a'])} | {_f(p['partial_b'])} | {_f(p['partial_diff'])} | "
            f"{p['wins']}/{p['losses']}/{p['ties']} | {_f(p['sign_test_p'], 4)} | {_f(p['reward_a'])} | {_f(p['reward_b'])} |"
        )
    lines += ["", "## Disclosed deviations", ""]
    if rep["disclosures"]:
        for a, ds in rep["disclosures"].items():
            lines += [f"- **{a}**: {d}" for d in ds]
    else:
        lines.append("None for the arms in this report.")
    if rep["stand_ins"]:
        lines.append(f"- Stand-in arms (not among the five arms): {', '.join(rep['stand_ins'])}.")
    if rep["excluded"]:
        lines += ["", "## Excluded", ""] + [f"- `{e['path']}`: {e['reason']}" for e in rep["excluded"]]
    hostile = [
        (t, a, c) for t in tasks for a in arms if (c := rep["cells"][t].get(a)) and c["status"] in NOT_SCORED
    ]
    if hostile:
        lines += ["", "## Not scored: a file refused or tampered with", ""]
        lines += [f"- {t} × {a}: **{c['status']}**: {c['note']}" for t, a, c in hostile]
    if rep["unreadable"]:
        lines += ["", "## Unreadable files (half-written ones show their last good values)", ""] + [
            f"- `{u}`" for u in rep["unreadable"]
        ]
    return "\n".join(lines) + "\n"


def render_csv(rep: dict[str, Any]) -> str:
    buf = io.StringIO()
    cols = ["task", "arm", *CELL_FIELDS, "attempts", "errored_attempts", "voided_attempts", "note"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for t in rep["tasks"]:
        for a in rep["arms"]:
            c = rep["cells"][t].get(a)
            if c is None:
                continue
            w.writerow([t, a] + ["" if c[k] is None else c[k] for k in cols[2:]])
    return buf.getvalue()


def render_html(rep: dict[str, Any]) -> str:
    e = html.escape
    parts = []
    arms, tasks = rep["arms"], rep["tasks"]
    parts.append(f"<h1>marathon report</h1><p>{e(rep['out'])} &middot; scope {e(rep['scope'])}</p>")
    alarms = [r for r in rep["infrastructure"] if r["alarm"]]
    parts.append("<h2>Infrastructure-bias alarm</h2>")
    parts += [f'<p class="alarm">ALARM: {e(r["message"])}</p>' for r in alarms] or [
        "<p>No arm's error/void rate is significantly higher.</p>"
    ]
    parts.append("<table><tr><th>arm</th><th>errored+voided</th><th>attempts</th><th>Fisher p</th></tr>")
    for r in rep["infrastructure"]:
        parts.append(
            f"<tr><td>{e(r['arm'])}</td><td>{r['bad_attempts']}</td><td>{r['attempts']}</td><td>{_f(r['p_value'], 4)}</td></tr>"
        )
    parts.append("</table><h2>Results: reward / partial / test pass rate</h2><table><tr><th>task</th>")
    parts += [f"<th>{e(a)}</th>" for a in arms]
    parts.append("</tr>")
    for t in tasks:
        parts.append(f"<tr><td>{e(t)}</td>")
        for a in arms:
            c = rep["cells"][t].get(a)
            cls = e(c["status"]) + (" build" if c and c["build_failed"] else "") if c else ""
            parts.append(f'<td class="{cls}" title="{e(c["note"]) if c else ""}">{e(_cell_text(c))}</td>')
        parts.append("</tr>")
    parts.append("</table><h2>Per arm</h2><table><tr>")
    heads = ["arm", "n", "reward", "partial", "pass rate", "build failed", "cost USD", "errored", "voided"]
    parts += [f"<th>{h}</th>" for h in heads] + ["</tr>"]
    for a in arms:
        s = rep["arm_summary"][a]
        vals = [a, s["n"], _f(s["reward"]), _f(s["partial"]), _f(s["pass_rate"]), s["build_failed"]]
        vals += [_f(s["cost_usd"], 4), s["errored"], s["voided"]]
        parts.append("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in vals) + "</tr>")
    parts.append("</table><h2>Paired comparisons</h2><table><tr>")
    heads = ["a", "b", "n", "partial a", "partial b", "diff", "W/L/T", "sign p"]
    parts += [f"<th>{h}</th>" for h in heads] + ["</tr>"]
    for p in (p for p in rep["paired"] if p["n"]):
        vals = [p["a"], p["b"], p["n"], _f(p["partial_a"]), _f(p["partial_b"]), _f(p["partial_diff"])]
        vals += [f"{p['wins']}/{p['losses']}/{p['ties']}", _f(p["sign_test_p"], 4)]
        parts.append("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in vals) + "</tr>")
    parts.append("</table><h2>Disclosed deviations</h2><ul>")
    for a, ds in rep["disclosures"].items():
        parts += [f"<li><b>{e(a)}</b>: {e(d)}</li>" for d in ds]
    if rep["stand_ins"]:
        parts.append(f"<li>Stand-in arms: {e(', '.join(rep['stand_ins']))}</li>")
    parts.append("</ul>")
    if rep["excluded"]:
        parts.append("<h2>Excluded</h2><ul>")
        parts += [f"<li>{e(x['path'])}: {e(x['reason'])}</li>" for x in rep["excluded"]]
        parts.append("</ul>")
    style = (
        "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        ".errored{background:#fdd}.voided{background:#eee}.build{color:#a00}.alarm{color:#a00;font-weight:bold}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>marathon report</title><style>{style}</style>'
        f"</head><body>{''.join(parts)}</body></html>\n"
    )


RENDERERS = {"md": render_md, "json": render_json, "csv": render_csv, "html": render_html}


def render(rep: dict[str, Any], fmt: str) -> str:
    return RENDERERS[fmt](rep)
