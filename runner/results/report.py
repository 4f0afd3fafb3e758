"""The comparison report: matrix, per-arm summary, paired comparisons, infrastructure-bias alarm.

Built from the results model only (``build_report(model) -> dict``), then rendered as md, json,
csv or html. The dict is the JSON contract other tools read:

    schema "marathon-report-v2", arms, tasks, cells[task][arm]{reward, partial, pass_rate,
    build_failed, status, cost_usd, n_input_tokens, n_output_tokens, spend_usd, ...},
    arm_summary[arm]{n, reward, partial, pass_rate, *_ci, build_failed, cost_usd, cost_per_solved,
    spend_usd, ...}, paired[{a, b, n, *_diff, *_diff_ci, wins, losses, ties, sign_test_p,
    sign_test_p_holm}], infrastructure[...], bootstrap{method, resamples, seed, confidence},
    disclosures{arm: [...]}, masked{arm: [{what, why, config_keys}]}, masked_config_keys

Why cost apart from spend: an arm's cost is what its scored attempts cost (the sum of its cells);
what errored and voided attempts cost is the run's spend, not the arm's, or an arm that hit more
infrastructure would look more expensive. Why intervals on every difference: with 15 tasks a
mean difference of 0.06 from 8 wins and 2 losses may well be noise.

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
from runner.results import audit, clusters, power, rules, stats, suspect
from runner.results.model import DONE, ERRORED, STATUSES, VOIDED, Cell, RunModel, scored_values

FORMATS = ("md", "json", "csv", "html")
#: The JSON contract's version. v2: cell and arm cost/tokens are the scoring attempts' (spend_* is
#: every attempt), per-arm and paired 95 % intervals, Holm-adjusted p, p-values unrounded.
SCHEMA = "marathon-report-v2"
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


def _score(c: Cell, field: str) -> float | None:
    """A done cell's measure for means; build failures count as 0 (never dropped). With repeats it
    is the task's mean over its done repeats (``runner.results.model.combine_repeats``): the mean of
    ``cell_values``, the value every mean, interval and paired difference takes per task."""
    return rules.scored_measure(getattr(c, field), c.build_failed, field)


def cell_values(c: Cell, field: str) -> list[float]:
    """A counted cell's values of a measure, one per done repeat: its task's cluster
    (``runner.results.clusters``; ``runner.results.model.scored_values``). One value without repeats."""
    return scored_values(c, field)


MEASURES = ("reward", "partial", "pass_rate")
PAIR_MEASURES = ("partial", "reward", "pass_rate")  # the paired table leads with partial (wins are by it)


def spend(c: Cell) -> tuple[float | None, int | None, int | None]:
    """What a pair cost the run: cost and input/output tokens of every attempt's trials, the
    errored and the voided ones too (voided trials are read where they were moved to).

    Why apart from the cell's cost: an arm that hit more infrastructure errors spent more, but that
    is the run's cost, not the arm's; the arm's cost is its scoring attempts'.
    """
    atts = c.attempts
    if len(atts) == 1 and len(atts[0].trials) == 1 and not atts[0].voided_trials:
        # the usual pair: one attempt of one trial (sum() of one value is the value)
        (t,) = atts[0].trials.values()
        return t.cost_usd, t.n_input_tokens, t.n_output_tokens
    recs = [t for a in atts for t in (*a.trials.values(), *(v.record for v in a.voided_trials.values()))]

    def total(field: str):
        vals = [v for t in recs if (v := getattr(t, field)) is not None]
        return sum(vals) if vals else None

    return total("cost_usd"), total("n_input_tokens"), total("n_output_tokens")


def _scored(c: Cell, field: str):
    """A cell's cost or tokens as the arm's: the scoring attempt's, None when the cell is not done."""
    return getattr(c, field) if c.status == DONE else None


def cell_dict(c: Cell) -> dict[str, Any]:
    s_cost, s_in, s_out = spend(c)
    f = c.figures  # the cell's figures, read from their record once (not through ten properties)
    return {
        "status": c.status,
        "reward": _r(f.reward),
        "partial": _r(f.partial),
        "pass_rate": _r(f.pass_rate),
        "build_failed": f.build_failed,
        "cost_usd": _r(_scored(c, "cost_usd"), 6),
        "n_input_tokens": _scored(c, "n_input_tokens"),
        "n_output_tokens": _scored(c, "n_output_tokens"),
        "spend_usd": _r(s_cost, 6),
        "spend_input_tokens": s_in,
        "spend_output_tokens": s_out,
        "wall_sec": _r(f.wall_sec, 1),
        "attempts": c.n_attempts,
        "errored_attempts": c.n_errored,
        "voided_attempts": c.n_voided,
        "continuations": f.continuations,
        "unblocks": f.unblocks,
        "error_events": f.error_events,
        "goal_status": f.goal_status,
        "deadline_hit": f.deadline_hit,
        "scored_by": c.scored_by,
        "host": c.scored_on,
        "newer": c.newer,
        "unreadable": c.unreadable,
        "note": c.note,
        **(repeat_dict(c) if c.repeats else {}),
    }


def repeat_dict(c: Cell) -> dict[str, Any]:
    """A cell's repeats (``marathon run --repeats K``, K > 1): how many are done, the spread of each
    measure over them (sample standard deviation), and each repeat's own figures."""
    return {
        "repeats": c.k,
        "repeats_done": c.repeats_done,
        **{f"{m}_sd": _r(clusters.spread(scored_values(c, m))) for m in MEASURES},
        "by_repeat": [
            {
                "repeat": r,
                "status": p.status,
                "reward": _r(p.reward),
                "partial": _r(p.partial),
                "pass_rate": _r(p.pass_rate),
                "build_failed": p.build_failed,
                "cost_usd": _r(_scored(p, "cost_usd"), 6),
                "wall_sec": _r(p.wall_sec, 1),
                "attempts": p.n_attempts,
                "scored_by": p.scored_by,
                "note": p.note,
            }
            for r, p in enumerate(c.parts, 1)
        ],
    }


def _ci(values: list[float]) -> list[float] | None:
    ci = stats.bootstrap_mean_ci(values)
    return None if ci is None else [_r(ci[0]), _r(ci[1])]


def _total(got: list) -> Any:
    """The sum of what is known (in order: sum() compensates floats); None when nothing is."""
    got = [v for v in got if v is not None]
    return sum(got) if got else None


#: the receipt figures an arm's summary sums over all its cells
RECEIPT_SUMS = ("continuations", "unblocks", "error_events")


def arm_summary(cells: list[Cell]) -> dict[str, Any]:
    """One arm's figures over its cells: means (with 95 % bootstrap intervals) over done cells,
    the arm's cost over its scoring attempts, and the run's spend over every attempt.

    One pass over the cells and one over the done ones (a 10,000-cell tree's status called this
    for every figure in turn, half a million attribute reads)."""
    # in task order: the bootstrap draws positions, so the same tree must list its cells the same way
    done = sorted((c for c in cells if c.status == DONE), key=lambda c: (c.task, c.arm))
    counts = dict.fromkeys(STATUSES, 0)
    attempts = errored = voided = 0
    receipts: dict[str, list] = {k: [] for k in RECEIPT_SUMS}
    spends: tuple[list, list, list] = ([], [], [])
    for c in cells:
        for p in c.repeats or (c,):  # with repeats, each repeat is counted by its status
            if p.status in counts:
                counts[p.status] += 1
        attempts += len(c.attempts)
        for a in c.attempts:
            errored += a.status == ERRORED
            voided += a.status == VOIDED
        f = c.figures
        for k, got in receipts.items():
            got.append(getattr(f, k))
        for got, v in zip(spends, spend(c), strict=True):
            got.append(v)
    vals: dict[str, list[float]] = {m: [] for m in MEASURES}
    cost, tok_in, tok_out = [], [], []
    solved = build_failed = 0
    for c in done:
        for m, got in vals.items():  # the task's value: with repeats, the mean of its done repeats
            if (v := _score(c, m)) is not None:
                got.append(v)
        f = c.figures
        cost.append(f.cost_usd)
        tok_in.append(f.n_input_tokens)
        tok_out.append(f.n_output_tokens)
        if c.repeats:  # solved and build failures are counted per attempt, as the cost is summed
            solved += sum(1 for p in c.repeats if p.status == DONE and p.reward == 1.0)
            build_failed += sum(1 for p in c.repeats if p.status == DONE and p.build_failed)
        else:
            solved += f.reward == 1.0
            build_failed += bool(f.build_failed)
    cost_usd = _total(cost)
    return {
        "n": len(done),
        **{m: _r(stats.mean(vals[m])) for m in MEASURES},
        **{f"{m}_ci": _ci(vals[m]) for m in MEASURES},
        "build_failed": build_failed,
        "cost_usd": _r(cost_usd, 6),
        "n_input_tokens": _total(tok_in),
        "n_output_tokens": _total(tok_out),
        "solved": solved,
        "cost_per_solved": _r(cost_usd / solved, 6) if cost_usd is not None and solved else None,
        "spend_usd": _r(_total(spends[0]), 6),
        "spend_input_tokens": _total(spends[1]),
        "spend_output_tokens": _total(spends[2]),
        "cells": len(cells),
        **counts,
        "attempts": attempts,
        "errored_attempts": errored,
        "voided_attempts": voided,
        **{k: _total(got) for k, got in receipts.items()},
        **pass_k(done),
    }


def pass_k(done: list[Cell]) -> dict[str, Any]:
    """pass@K and pass^K of an arm's done cells when they have K > 1 repeats (none without): per
    task the unbiased estimate from its n >= K done repeats of which c solved it (reward 1;
    ``runner.results.clusters.pass_at_k``/``pass_hat_k``), averaged over those tasks, with the
    bootstrap interval over tasks; ``pass_k_n`` tasks had K done repeats."""
    k = max((c.k for c in done), default=1)
    if k < 2:
        return {}
    at, hat = [], []
    for c in done:
        rewards = [p.reward for p in c.parts if p.status == DONE and p.reward is not None]
        if len(rewards) >= k:
            solved = sum(1 for r in rewards if r == 1.0)
            at.append(clusters.pass_at_k(len(rewards), solved, k))
            hat.append(clusters.pass_hat_k(len(rewards), solved, k))
    return {
        "pass_k": k,
        "pass_k_n": len(at),
        "pass_at_k": _r(stats.mean(at)),
        "pass_at_k_ci": _ci(at),
        "pass_hat_k": _r(stats.mean(hat)),
        "pass_hat_k_ci": _ci(hat),
    }


def common_done(cells: dict[tuple[str, str], Cell], a: str, b: str, tasks: list[str]) -> list[str]:
    """The tasks both arms completed: the only cells a paired comparison may use."""
    return [
        t
        for t in tasks
        if (ca := cells.get((t, a))) is not None
        and (cb := cells.get((t, b))) is not None
        and ca.status == DONE
        and cb.status == DONE
    ]


def paired(cells: dict[tuple[str, str], Cell], arms: list[str], tasks: list[str]) -> list[dict[str, Any]]:
    """Each pair of arms over the tasks both completed: means, mean difference a - b with its paired
    bootstrap 95 % interval (per measure), wins/losses/ties by partial, the exact sign test and its
    Holm adjustment across every pair that has a common task."""
    out = []
    diffs: dict[tuple[str, str, str], list[float]] = {}  # per-task differences, for the power figures
    scores: dict[tuple[str, str], tuple[float | None, ...]] = {}  # each cell's measures, read once

    def score(key: tuple[str, str]) -> tuple[float | None, ...]:
        got = scores.get(key)
        if got is None:
            got = scores[key] = tuple(_score(cells[key], f) for f in MEASURES)
        return got

    for a, b in combinations(arms, 2):
        both = common_done(cells, a, b, tasks)
        row: dict[str, Any] = {"a": a, "b": b, "n": len(both), "tasks": both}
        sa, sb = [score((t, a)) for t in both], [score((t, b)) for t in both]
        for i, field in enumerate(MEASURES):
            pa = [(x[i], y[i]) for x, y in zip(sa, sb, strict=True) if x[i] is not None and y[i] is not None]
            d = diffs[(a, b, field)] = [x - y for x, y in pa]
            row[f"{field}_a"] = _r(stats.mean([x for x, _ in pa]))
            row[f"{field}_b"] = _r(stats.mean([y for _, y in pa]))
            row[f"{field}_diff"] = _r(stats.mean(d))
            row[f"{field}_diff_ci"] = _ci(d)
            row[f"{field}_n"] = len(pa)
            if field == "partial":  # wins and losses are by partial
                pp = pa
        wins = sum(1 for x, y in pp if x > y)
        losses = sum(1 for x, y in pp if x < y)
        ties = sum(1 for x, y in pp if x == y)
        row.update(wins=wins, losses=losses, ties=ties, sign_test_p=stats.sign_test(wins, losses))
        row["sign_test_p_holm"] = None
        out.append(row)
    family = [r for r in out if r["n"]]
    for r, p in zip(family, stats.holm([r["sign_test_p"] for r in family]), strict=True):
        r["sign_test_p_holm"] = p
    power.annotate(out, diffs)  # MDE and tasks needed per measure, at the Holm level
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


def build_report(model: RunModel, scope: str = "all", exclude_suspect: bool = False) -> dict[str, Any]:
    """The report's dict; ``exclude_suspect``: the other reading, every figure without the tasks
    every arm failed alike (``runner.results.suspect``), labelled as such."""
    cells = model.scoped(scope)
    arms = [a for a in model.arms if any(k[1] == a for k in cells)]
    tasks = sorted({k[0] for k in cells})
    suspects = suspect.find(cells, arms, tasks)
    if exclude_suspect:
        cells = {k: c for k, c in cells.items() if k[0] not in suspects}
        tasks = [t for t in tasks if t not in suspects]
    pairs = paired(cells, arms, tasks)
    stand_ins = [a for a in arms if profiles.mode_for(a) is None]
    repeats = max((c.k for c in cells.values()), default=1)
    return {
        "schema": SCHEMA,
        "out": str(model.out),
        "scope": scope if model.runs else "all",
        "run_id": model.run_id,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "arms": arms,
        "tasks": tasks,
        "cells": {t: {a: cell_dict(cells[(t, a)]) for a in arms if (t, a) in cells} for t in tasks},
        "arm_summary": {a: arm_summary([c for k, c in cells.items() if k[1] == a]) for a in arms},
        "paired": pairs,
        "power": power.block(pairs),
        "suspect": [s.as_dict() for s in suspects.values()],
        "suspect_excluded": exclude_suspect,
        "infrastructure": infrastructure(cells, arms),
        "audit": audit.audit(cells, arms),
        "bootstrap": {
            "method": "percentile",
            "resamples": stats.BOOTSTRAP_RESAMPLES,
            "seed": stats.BOOTSTRAP_SEED,
            "confidence": stats.CONFIDENCE,
        },
        "disclosures": profiles.disclosures([a for a in arms if a in profiles.ARMS]),
        "masked": profiles.masked([a for a in arms if a in profiles.ARMS]),
        "masked_config_keys": list(profiles.masked_config_keys()),
        "stand_ins": stand_ins,
        "excluded": [{"path": e.path, "reason": e.reason} for e in model.excluded],
        "unreadable": model.unreadable,
        "notes": {
            "means": "over done cells; build failures count as partial 0 and pass rate 0",
            "cost_usd": "what the arm cost: its scoring attempts (done cells), equal to the sum of the cells' cost_usd",
            "spend_usd": "what the run cost: every attempt, errored and voided ones too",
            "cost_per_solved": "cost_usd over the cells with reward 1",
            "intervals": "95 % percentile bootstrap of the mean (paired: of the per-task differences), fixed seed",
            "paired": "only tasks both arms completed; wins/losses by partial score; two-sided exact sign test, "
            "Holm-adjusted across every pair with a common task",
            "infrastructure": f"errored+voided attempts vs the other arms, Fisher's exact test; alarm at p < {ALARM_P}",
            "power": "per pair and measure: MDE and tasks needed (runner.results.power)",
            "suspect": f"{suspect.LABEL}: counted as any task unless suspect_excluded (the other reading)",
            **({"repeats": REPEATS_NOTE} if repeats > 1 else {}),
        },
        "repeats": repeats,
    }


#: what a report of a run with repeats says about them (its ``notes.repeats``)
REPEATS_NOTE = (
    "K attempts per (task, arm): a cell is done once one repeat is, and shows the mean of its done repeats "
    "with their spread (sd); every mean and interval averages within a task first and resamples tasks "
    "(cluster bootstrap), paired comparisons pair the two arms' task means; done/errored/... count repeats, "
    "n counts tasks; pass@K / pass^K: at least one / every one of K attempts solves a task (unbiased, from "
    "the tasks with K done repeats)"
)


# ------------------------------------------------------------------------------------ rendering


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


MINUS = "\u2212"
P_FLOOR = 1e-4


def fmt_p(p: float | None) -> str:
    """A p-value for reading: four decimals, and ``<1e-4`` below that (never ``0.0000``)."""
    if p is None:
        return "-"
    return "<1e-4" if p < P_FLOOR else f"{p:.4f}"


def fmt_signed(v: float | None, nd: int = 2) -> str:
    """``+0.06`` / ``\u22120.03``: a difference always carries its sign (zero reads ``+0.00``)."""
    if v is None:
        return "-"
    t = f"{v:+.{nd}f}"
    if t.startswith("-") and float(t) == 0:
        t = "+" + t[1:]
    return t.replace("-", MINUS)


def fmt_diff(n: int, diff: float | None, ci: list[float] | None, nd: int = 2) -> str:
    """``n = 15, diff +0.06 [\u22120.03, +0.15]``: a paired difference is never shown without n and interval."""
    if diff is None:
        return f"n = {n}, diff -"
    iv = f" [{fmt_signed(ci[0], nd)}, {fmt_signed(ci[1], nd)}]" if ci else ""
    return f"n = {n}, diff {fmt_signed(diff, nd)}{iv}"


def fmt_mean(mean: float | None, ci: list[float] | None, nd: int = 2) -> str:
    """``0.53 [0.41, 0.66]``: a mean with its 95 % interval."""
    if mean is None:
        return "-"
    iv = f" [{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]" if ci else ""
    return f"{mean:.{nd}f}{iv}"


def _cell_text(c: dict[str, Any] | None) -> str:
    """reward / partial / pass rate, with the build-failure mark ✗; with repeats, the means over the
    done repeats, then how many are done and the spread of the partial (``2/3 sd 0.12``)."""
    if c is None:
        return ""
    reps = f" ({c['repeats_done']}/{c['repeats']}" if "repeats" in c else ""
    if reps and c["status"] == DONE and c.get("partial_sd") is not None:
        reps += f" sd {_f(c['partial_sd'], 2)}"
    reps += ")" if reps else ""
    if c["status"] != DONE:
        return c["status"] + reps
    mark = " ✗build" if c["build_failed"] else ""
    return f"{_f(c['reward'], 2)} / {_f(c['partial'], 2)} / {_f(c['pass_rate'], 2)}{mark}{reps}"


def render_json(rep: dict[str, Any], pretty: bool = False) -> str:
    """One line for scripts (the indenting encoder was the largest part of a 10,000-trial report);
    ``pretty`` indents for a human."""
    return dump_json(rep, pretty) + "\n"


def dump_json(d: Any, pretty: bool = False) -> str:
    """The JSON of ``status --json`` and ``report --format json``: compact, or indented with ``pretty``."""
    if pretty:
        return json.dumps(d, indent=2, ensure_ascii=False)
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"))


#: cell statuses of a pair whose file broke a safe-open rule or was changed after its verifier
NOT_SCORED = ("unreadable", "tampered")


def arm_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-arm table (heads, rows) every format shows: means with intervals, the arm's cost
    (scoring attempts) beside the run's spend (every attempt)."""
    k = rep.get("repeats", 1)
    many = k > 1  # with repeats: pass@K and pass^K beside the means; n counts tasks, the rest repeats
    heads = ["arm", "n", "reward", "partial", "pass rate", *([f"pass@{k}", f"pass^{k}"] if many else [])]
    heads += ["build failed", "solved", "cost USD", "cost/solved", "spend USD", *(["done"] if many else [])]
    heads += ["errored", "voided", "pending", "running"]
    rows = []
    for a in rep["arms"]:
        s = rep["arm_summary"][a]
        passes = [
            fmt_mean(s.get("pass_at_k"), s.get("pass_at_k_ci")),
            fmt_mean(s.get("pass_hat_k"), s.get("pass_hat_k_ci")),
        ]
        rows.append(
            [a, str(s["n"])]
            + [fmt_mean(s[f], s[f"{f}_ci"]) for f in MEASURES]
            + (passes if many else [])
            + [str(s["build_failed"]), str(s["solved"]), _f(s["cost_usd"], 4), _f(s["cost_per_solved"], 4)]
            + [_f(s["spend_usd"], 4)]
            + [str(s[k]) for k in ((("done",) if many else ()) + ("errored", "voided", "pending", "running"))]
        )
    return heads, rows


def pair_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The paired table (heads, rows): per measure ``n = 15, diff +0.06 [\u22120.03, +0.15]``, wins/
    losses/ties by partial, the sign test's p and its Holm adjustment. Pairs without a common task
    are left out here (still listed in the JSON)."""
    heads = ["a", "b", "partial", "reward", "pass rate", "W/L/T", "sign p", "Holm p"]
    heads += ["MDE (partial / reward / pass)", "tasks needed (partial / reward / pass)"]
    rows = []
    for p in rep["paired"]:
        if not p["n"]:
            continue
        rows.append(
            [p["a"], p["b"]]
            + [fmt_diff(p[f"{f}_n"], p[f"{f}_diff"], p[f"{f}_diff_ci"]) for f in PAIR_MEASURES]
            + [
                f"{p['wins']}/{p['losses']}/{p['ties']}",
                fmt_p(p["sign_test_p"]),
                fmt_p(p["sign_test_p_holm"]),
            ]
            + power_cells(p)
        )
    return heads, rows


def power_cells(p: dict[str, Any]) -> list[str]:
    """A pair's MDE and tasks needed per measure (``runner.results.power``), as ``0.13 / - / 0.12``."""
    mde = " / ".join(_f(p.get(f"{f}_mde"), 2) for f in PAIR_MEASURES)
    need = " / ".join(
        power.fmt_tasks(p.get(f"{f}_tasks_needed"), p.get(f"{f}_tasks_needed_over")) for f in PAIR_MEASURES
    )
    return [mde, need]


def power_lines(rep: dict[str, Any]) -> list[str]:
    """What the MDE means, and the pairs whose reported differences are below it."""
    block = rep.get("power")
    if not block or not block["family"]:
        return []
    out = [power.headline(block)]
    under = power.underpowered_lines(block, lambda m: m.replace("_", " "))
    if under:
        out.append(
            'Underpowered: these differences are smaller than the run can detect; a "no difference" '
            "among them is not evidence of none:"
        )
        out += under
    return out


def repeats_line(rep: dict[str, Any]) -> str | None:
    """What a report of a run with repeats says about them (None without)."""
    k = rep.get("repeats", 1)
    if k < 2:
        return None
    what = REPEATS_NOTE.split(": ", 1)[1]
    return f"Repeats: K = {k} attempts per (task, arm). {what[0].upper()}{what[1:]}."


def suspect_lines(rep: dict[str, Any]) -> list[str]:
    """The tasks every arm failed alike, with the evidence, and which reading this is."""
    sus = rep.get("suspect") or []
    if not sus:
        return []
    how = (
        "Excluded from every figure of this reading (the other reading, --exclude-suspect)."
        if rep.get("suspect_excluded")
        else "Counted like any task (the default reading); --exclude-suspect prints the other reading."
    )
    return [f"{s['task']}: {suspect.LABEL}: {s['evidence']}" for s in sus] + [how]


def reading_banner(rep: dict[str, Any]) -> str | None:
    """The label of the other reading: never mistaken for the default one."""
    if not rep.get("suspect_excluded"):
        return None
    names = ", ".join(s["task"] for s in rep.get("suspect") or []) or "none"
    return (
        f"OTHER READING: the {len(rep.get('suspect') or [])} suspect task(s) every arm failed alike are "
        f"excluded from every figure ({names}). The default reading (without --exclude-suspect) counts them."
    )


def _task_label(rep: dict[str, Any], t: str) -> str:
    return f"{t} ⚠suspect" if any(s["task"] == t for s in rep.get("suspect") or []) else t


def _audit_lines(rep: dict[str, Any], alarm) -> list[str]:
    """The audit's red lines, or what was compared and found equal (never a silent pass)."""
    au = rep["audit"]
    if au["lines"]:
        return [alarm(t) for t in au["lines"]]
    facts = sorted({f for fs in au["compared"].values() for f in fs}, key=list(audit.LABELS).index)
    if not facts:
        return ["No arm recorded its setup (no receipts): nothing to compare."]
    missing = [a for a, fs in au["compared"].items() if not fs]
    out = [f"No undeclared difference between arms in: {', '.join(audit.LABELS[f] for f in facts)}."]
    if missing:
        out.append(f"Not recorded by: {', '.join(missing)}.")
    return out


def masked_lines(rep: dict[str, Any]) -> list[str]:
    """The differences each arm's harness makes by design (modes.profiles), which the fairness
    audit does not flag, and the config.toml keys it masks for every arm before hashing."""
    out = [
        f"{a} (by design, not compared): " + "; ".join(f"{m['what']}: {m['why']}" for m in ms)
        for a, ms in rep.get("masked", {}).items()
    ]
    if out and rep.get("masked_config_keys"):
        out.append(
            "config.toml keys masked for every arm before its hash is compared: "
            + ", ".join(rep["masked_config_keys"])
        )
    return out


def _md_table(heads: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["None."]
    out = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def render_md(rep: dict[str, Any]) -> str:
    arms, tasks = rep["arms"], rep["tasks"]
    lines = [f"# marathon report: {rep['out']}", ""]
    if banner := reading_banner(rep):
        lines += [f"**{banner}**", ""]
    lines.append(f"Scope: {rep['scope']}" + (f" (run {rep['run_id']})" if rep["run_id"] else "") + ".")
    if line := repeats_line(rep):
        lines += ["", line]
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
            f"| {r['arm']} | {r['bad_attempts']} | {r['attempts']} | {_f(r['rate'])} | {_f(r['others_rate'])} | {fmt_p(r['p_value'])} |"
        )
    lines += ["", "## Fairness audit (setup facts from the receipts, per task)", ""]
    lines += _audit_lines(rep, lambda t: f"- **ALARM** {t}")
    lines += ["", "## Results (reward / partial / test pass rate; ✗build = build failed, counted as 0)", ""]
    lines.append("| task | " + " | ".join(arms) + " |")
    lines.append("|---" * (len(arms) + 1) + "|")
    for t in tasks:
        row = [_cell_text(rep["cells"][t].get(a)) for a in arms]
        lines.append(f"| {_task_label(rep, t)} | " + " | ".join(row) + " |")
    lines += ["", "## Per arm (means over done cells, 95 % bootstrap intervals)", ""]
    lines += _md_table(*arm_table(rep))
    lines += [
        "",
        "## Paired comparisons (only tasks both arms completed; diff = a − b, 95 % paired bootstrap)",
        "",
    ]
    lines += _md_table(*pair_table(rep))
    if power_text := power_lines(rep):
        lines += ["", power_text[0]] + (
            ["", power_text[1], ""] + [f"- {t}" for t in power_text[2:]] if len(power_text) > 1 else []
        )
    if sus := suspect_lines(rep):
        lines += [
            "",
            "## Suspect tasks (every arm failed alike: more often the environment than the task)",
            "",
        ]
        lines += [f"- {t}" for t in sus[:-1]] + ["", sus[-1]]
    lines += ["", "## Disclosed deviations", ""]
    if rep["disclosures"]:
        for a, ds in rep["disclosures"].items():
            lines += [f"- **{a}**: {d}" for d in ds]
    else:
        lines.append("None for the arms in this report.")
    lines += [f"- {t}" for t in masked_lines(rep)]
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
    if rep.get("repeats", 1) > 1:
        cols[-1:-1] = ["repeats", "repeats_done", *(f"{m}_sd" for m in MEASURES)]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for t in rep["tasks"]:
        for a in rep["arms"]:
            c = rep["cells"][t].get(a)
            if c is None:
                continue
            w.writerow([t, a] + ["" if c.get(k) is None else c[k] for k in cols[2:]])
    return buf.getvalue()


def _html_table(heads: list[str], rows: list[list[str]]) -> str:
    e = html.escape
    if not rows:
        return "<p>None.</p>"
    head = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def render_html(rep: dict[str, Any]) -> str:
    e = html.escape
    parts = []
    arms, tasks = rep["arms"], rep["tasks"]
    parts.append(f"<h1>marathon report</h1><p>{e(rep['out'])} &middot; scope {e(rep['scope'])}</p>")
    if line := repeats_line(rep):
        parts.append(f'<p class="note">{e(line)}</p>')
    if banner := reading_banner(rep):
        parts.append(f'<p class="alarm">{e(banner)}</p>')
    alarms = [r for r in rep["infrastructure"] if r["alarm"]]
    parts.append("<h2>Infrastructure-bias alarm</h2>")
    parts += [f'<p class="alarm">ALARM: {e(r["message"])}</p>' for r in alarms] or [
        "<p>No arm's error/void rate is significantly higher.</p>"
    ]
    parts.append("<table><tr><th>arm</th><th>errored+voided</th><th>attempts</th><th>Fisher p</th></tr>")
    for r in rep["infrastructure"]:
        parts.append(
            f"<tr><td>{e(r['arm'])}</td><td>{r['bad_attempts']}</td><td>{r['attempts']}</td><td>{e(fmt_p(r['p_value']))}</td></tr>"
        )
    parts.append("</table><h2>Fairness audit</h2>")
    parts += [
        f'<p class="alarm">{e(t)}</p>' if t.startswith("ALARM ") else f"<p>{e(t)}</p>"
        for t in _audit_lines(rep, lambda t: f"ALARM {t}")
    ]
    parts.append("<h2>Per arm (means over done cells, 95 % bootstrap intervals)</h2>")
    parts.append(_html_table(*arm_table(rep)))
    parts.append("<h2>Paired comparisons (diff = a − b, 95 % paired bootstrap)</h2>")
    parts.append(_html_table(*pair_table(rep)))
    if power_text := power_lines(rep):
        parts.append(f'<p class="note">{e(power_text[0])}</p>')
        if len(power_text) > 1:
            parts.append(f'<p class="alarm">{e(power_text[1])}</p><ul>')
            parts += [f"<li>{e(t)}</li>" for t in power_text[2:]]
            parts.append("</ul>")
    if sus := suspect_lines(rep):
        parts.append("<h2>Suspect tasks (every arm failed alike)</h2><ul>")
        parts += [f'<li class="suspect">{e(t)}</li>' for t in sus[:-1]]
        parts.append(f"</ul><p>{e(sus[-1])}</p>")
    from runner.results import plots

    parts.append("<h2>Figures</h2>")
    for fid, title, svg in plots.figures(rep):
        parts.append(f'<figure id="fig-{fid}"><figcaption>{e(title)}</figcaption>{svg}</figure>')
    parts.append("<h2>Results: reward / partial / test pass rate</h2><table><tr><th>task</th>")
    parts += [f"<th>{e(a)}</th>" for a in arms]
    parts.append("</tr>")
    for t in tasks:
        parts.append(f"<tr><td>{e(_task_label(rep, t))}</td>")
        for a in arms:
            c = rep["cells"][t].get(a)
            cls = e(c["status"]) + (" build" if c and c["build_failed"] else "") if c else ""
            parts.append(f'<td class="{cls}" title="{e(c["note"]) if c else ""}">{e(_cell_text(c))}</td>')
        parts.append("</tr>")
    parts.append("</table>")
    parts.append("<h2>Disclosed deviations</h2><ul>")
    for a, ds in rep["disclosures"].items():
        parts += [f"<li><b>{e(a)}</b>: {e(d)}</li>" for d in ds]
    parts += [f"<li>{e(t)}</li>" for t in masked_lines(rep)]
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
        ".suspect{color:#a60}.note{max-width:60em}"
        "figure{display:inline-block;vertical-align:top;margin:0.5em 1em 0.5em 0}figcaption{font-weight:bold;margin-bottom:4px}figure svg{max-width:100%;height:auto}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>marathon report</title><style>{style}</style>'
        f"</head><body>{''.join(parts)}</body></html>\n"
    )


RENDERERS = {"md": render_md, "json": render_json, "csv": render_csv, "html": render_html}


def render(rep: dict[str, Any], fmt: str, pretty: bool = False) -> str:
    if fmt == "json":
        return render_json(rep, pretty)
    return RENDERERS[fmt](rep)
