"""``marathon plan-size``: tasks and repeats a comparison needs, from a pilot tree."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "tasks and repeats needed to detect a target difference per pair, from a pilot run's tree"
DESCRIPTION = (
    "Read a pilot output tree (a small run, or a recorded one; never changes its results; keeps a cache "
    "in OUT/.marathon) and print, per "
    "pair of arms, the pilot's n (tasks both arms completed), the spread of the per-task differences, "
    "the minimum detectable effect at the pilot's size, and the tasks needed to detect --diff (default: "
    "each pair's observed difference) with 80 % power at the Holm-adjusted level of the full "
    "comparison (every pair of the pilot's arms, or of --arms N; two-sided paired t test, never fewer "
    "tasks than the report's sign test needs to reach that level), for each number of --repeats. A "
    "pilot with one attempt per pair cannot tell the spread between tasks from the spread between "
    "attempts, so with repeats the tasks needed are a range. Exit 0; 2 on bad input."
)


def _number(text: str, lo: float, hi: float, what: str) -> float:
    """A flag's number within [lo, hi]: outside it the power computation has no meaning for a plan
    (a level of 1e-300, a power of 1 - 1e-16 that no finite run reaches) or no answer in floats."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"{what} from {lo:g} to {hi:g}: {text}")
    return v


def _power(text: str) -> float:
    # at least even odds: a power at or below the level is met by no difference at all (a probe's
    # --power 0.2 --alpha 0.5 read "MDE >1" beside "2 tasks needed")
    return _number(text, 0.5, 0.999, "a power")


def _alpha(text: str) -> float:
    return _number(text, 1e-6, 0.2, "a level")


def _arms(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of arms: {text!r}") from None
    if not 2 <= k <= 100:
        raise argparse.ArgumentTypeError(f"arms from 2 to 100: {text}")
    return k


def _diff(text: str) -> float:
    return _number(text, 1e-6, 1.0, "a difference of scores")


def _repeats(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of whole numbers: {text!r}") from None
    if not ks or any(not 1 <= k <= 100 for k in ks):
        raise argparse.ArgumentTypeError(f"repeats from 1 to 100: {text!r}")
    return sorted(set(ks))


def configure(p: argparse.ArgumentParser) -> None:
    from runner.results.power import ALPHA, POWER

    p.add_argument(
        "out", nargs="?", type=Path, help="pilot output tree (default $MARATHON_OUT or ./marathon-out)"
    )
    p.add_argument(
        "--diff", type=_diff, help="the true difference to detect (default: each pair's observed one)"
    )
    p.add_argument(
        "--measure", choices=("partial", "reward", "pass_rate"), default="partial", help="default partial"
    )
    p.add_argument("--power", type=_power, default=POWER, help=f"default {POWER}")
    p.add_argument(
        "--alpha", type=_alpha, default=ALPHA, help=f"family-wise level, Holm-adjusted (default {ALPHA})"
    )
    p.add_argument(
        "--repeats",
        type=_repeats,
        default=[1, 2, 3],
        help="attempts per (task, arm) to plan for (default 1,2,3)",
    )
    p.add_argument(
        "--arms",
        type=_arms,
        help="arms the full run compares: the Holm level is over their pairs (default: the pilot's arms)",
    )
    p.add_argument("--run", action="store_true", help="only the pilot's current run (default: all time)")
    p.add_argument(
        "--exclude-suspect",
        action="store_true",
        help="leave out the tasks every arm failed alike (the other reading; see marathon report)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (one line)")
    p.add_argument("--pretty", action="store_true", help="with --json: indented for a human")


def _tasks(t: dict) -> str:
    """One K's tasks needed: ``39``, ``20-39`` (a range: the pilot cannot split the spread),
    ``>1,000,000``."""
    from runner.results.power import fmt_tasks

    hi = fmt_tasks(t["high"], t["over"])
    return hi if t["low"] == t["high"] else f"{fmt_tasks(t['low'])}-{hi}"


def render(d: dict) -> str:
    """The plan as a table for a terminal: the tree's path and its task and arm names through
    ``modes.safetext.clean`` (no control, bidi or undecodable character reaches the terminal)."""
    from modes.safetext import clean
    from runner.results.power import fmt_level, fmt_mde, fmt_signed

    measure = d["measure"].replace("_", " ")
    target = f"{d['target']:.3g}" if d["target"] is not None else "each pair's observed difference"
    lines = [
        f"marathon plan-size {clean(d['out'], None)}: {measure}; target {target}",
        f"{d['power'] * 100:.0f} % power at the Holm-adjusted level {fmt_level(d['alpha_holm'])} "
        f"({d['alpha']:g} over {d['family']} pair(s)); {d['method']}",
    ]
    if d.get("suspect_excluded"):
        lines.append(
            f"other reading: {len(d['suspect'])} suspect task(s) excluded: "
            + ", ".join(clean(t, 60) for t in d["suspect"])
        )
    if not d["pairs"]:
        lines.append("no pair of arms has a task both completed: nothing to plan from")
        return "\n".join(lines)
    heads = ["pair", "n", "K", "diff", "sd", "MDE now", "target"] + [f"tasks K={k}" for k in d["repeats"]]
    rows = []
    for p in d["pairs"]:
        needed = [_tasks(t) for t in p["tasks_needed"]] or ["-"] * len(d["repeats"])
        diff = fmt_signed(p["diff"], 3)
        rows.append(
            [
                f"{clean(p['a'], 60)} vs {clean(p['b'], 60)}",
                str(p["n"]),
                f"{p['pilot_repeats']:.1f}",
                diff,
                _num(p["sd"], 3),
                fmt_mde(p["mde"], p.get("below_sign_floor", False)),
                _num(p["target"], 2),
            ]
            + needed
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    for r in [heads, *rows]:
        lines.append(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    floor = d.get("sign_floor_holm")
    if floor is not None:
        lines.append(
            f"The report's test (the sign test) passes Holm's first step only with {floor} or more untied "
            "tasks: no plan is for fewer; a pilot pair whose untied tasks all one way could not pass Holm "
            "detects nothing (MDE now >1)."
        )
    if any(t["low"] != t["high"] for p in d["pairs"] for t in p["tasks_needed"]):
        lines.append(
            "A range for K > 1: this pilot has one attempt per (task, arm), so it cannot split the spread into "
            "the part between tasks and the part between attempts of a task. Low end: all of it between "
            "attempts (repeats average it away); high end: all of it between tasks (repeats do not help). A "
            "pilot with repeats gives one figure."
        )
    return "\n".join(lines)


def _num(v: float | None, nd: int) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def run(args: argparse.Namespace) -> int:
    from runner.results import tree
    from runner.results.model import open_tree
    from runner.results.planning import plan
    from runner.results.report import dump_json
    from runner.results.suspect import find

    model = open_tree(args.out or tree.default_out())
    cells = model.scoped("run" if args.run else "all")
    arms = [a for a in model.arms if any(k[1] == a for k in cells)]
    tasks = sorted({k[0] for k in cells})
    suspects = find(cells, arms, tasks)
    if args.exclude_suspect:
        cells = {k: c for k, c in cells.items() if k[0] not in suspects}
        tasks = [t for t in tasks if t not in suspects]
    got = plan(
        cells, arms, tasks, measure=args.measure, target=args.diff, alpha=args.alpha, pw=args.power,
        repeats=args.repeats, compared=args.arms,
    )  # fmt: skip
    d = {
        "out": str(model.out),
        **got.as_dict(),
        "suspect": sorted(suspects),
        "suspect_excluded": args.exclude_suspect,
    }
    print(dump_json(d, args.pretty) if args.json else render(d))
    return 0
