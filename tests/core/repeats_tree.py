"""Hand-made trees with repeats (``marathon run --repeats K``, K = 2 or 3) whose answers are known.

Made as tests/core/handmade_tree.py makes its tree: the real harbor attempts recorded in
tests/core/recorded, copied and edited, so building one needs no Docker. Repeat k >= 2 of a pair is
the stamp dir ``<stamp>@r<k>`` (``runner.results.tree.with_repeat``), as the runner names it.

Eight tasks x plain/goal; ``PLAIN``/``GOAL`` give each repeat's partial score (reward 1 only for a
partial of 1.0). Besides done repeats the trees hold what a real run with repeats leaves:

- ``BUILD``: a repeat whose verifier build failed (counted as partial 0);
- ``ERRORED``: a repeat whose only attempt errored (no value: its task has one fewer);
- ``RETRIED``: a repeat that errored first and was done at its second attempt;
- ``VOIDED``: a repeat whose first attempt was voided, then done;
- ``MISSING`` (K = 3 only): a repeat never started (pending).
"""

from __future__ import annotations

from pathlib import Path

from core.handmade_tree import EARLY, RECORDED, STAMP, _copy_attempt, _done_cell, _set_money

from runner.results import rules, tree

TASKS = [f"t{i:02d}" for i in range(8)]
ARMS = ("plain", "goal")
#: per task, the partial of repeats 1, 2, 3
PLAIN = [
    [1.0, 1.0, 0.0],
    [0.5, 0.7, 0.6],
    [0.2, 0.9, 0.4],
    [0.8, 0.8, 0.8],
    [0.0, 0.3, 0.6],
    [1.0, 1.0, 1.0],
    [0.4, 0.1, 0.7],
    [0.6, 0.5, 0.9],
]
GOAL = [
    [0.5, 1.0, 0.0],
    [0.4, 0.2, 0.3],
    [0.1, 0.0, 0.5],
    [0.9, 0.6, 0.8],
    [0.2, 0.2, 0.1],
    [1.0, 0.0, 1.0],
    [0.3, 0.4, 0.2],
    [0.7, 0.5, 0.6],
]
#: (task, arm, repeat) of the special repeats (see the module docstring)
BUILD = ("t01", "goal", 2)
ERRORED = ("t02", "plain", 2)
RETRIED = ("t03", "plain", 1)
VOIDED = ("t04", "goal", 2)
MISSING = ("t05", "goal", 3)
#: every repeat's wall seconds (a minute per task index, plus the repeat)
WALL = 300


def value(arm: str, task: str, repeat: int) -> float:
    """The partial score a repeat was given (before the special cases)."""
    table = PLAIN if arm == "plain" else GOAL
    return table[TASKS.index(task)][repeat - 1]


def cluster(arm: str, task: str, k: int, measure: str = "partial") -> list[float]:
    """What the (task, arm) cell's values must be: each done repeat's score, a build failure as 0,
    an errored or missing repeat left out (the reference the tests compare the report with)."""
    got = []
    for r in range(1, k + 1):
        if (task, arm, r) in (ERRORED, MISSING):
            continue
        if (task, arm, r) == BUILD:
            got.append(rules.scored_measure(None, True, measure) if measure != "reward" else 0.0)
            continue
        v = value(arm, task, r)
        got.append(v if measure != "reward" else (1.0 if v == 1.0 else 0.0))
    return got


def build(out: Path, k: int) -> Path:
    """The tree with ``k`` (2 or 3) repeats per (task, arm)."""
    assert k in (2, 3)
    out.mkdir(parents=True)
    for i, task in enumerate(TASKS):
        for arm in ARMS:
            for r in range(1, k + 1):
                unit = (task, arm, r)
                if unit == MISSING:
                    continue
                stamp = tree.with_repeat(STAMP, r)
                early = tree.with_repeat(EARLY, r)
                if unit in (ERRORED, RETRIED):
                    job = _copy_attempt(RECORDED, out, ("calc-partial", "crash"), task, arm, early)
                    _set_money(job, 0.5, 7, 1)
                    if unit == ERRORED:
                        continue
                if unit == VOIDED:
                    job = _copy_attempt(RECORDED, out, ("calc-partial", "crash"), task, arm, early)
                    _set_money(job, 0.25, 9, 2)
                    voided = tree.voided_root(out) / task / arm / early
                    voided.parent.mkdir(parents=True, exist_ok=True)
                    (out / task / arm / early).rename(voided)
                    (voided / tree.VOID_README).write_text("# Voided: environment start failed\n")
                _done_cell(
                    RECORDED, out, task, arm, value(arm, task, r), WALL + 60 * i + r,
                    build_failed=unit == BUILD, stamp=stamp,
                )  # fmt: skip
    return out
