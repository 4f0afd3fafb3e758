"""The arms of one task side by side: which trial each column shows, and the rows it shows.

Figures come from ``runner.results.model`` cells (never re-derived here); what the agent did (commands,
failed commands, last message) from ``runner.results.trajectory``; per-test outcomes from
``runner.results.verifier_tests``. No textual import: the comparison screen renders these rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from console import view
from runner.results.cells import Cell
from runner.results.records import TrialRecord
from runner.results.trajectory import TrajectoryFacts, trajectory_facts
from runner.results.tree import repeat_of
from runner.results.verifier_tests import TestOutcomes, read_outcomes

Key = tuple[str, str]  # (task, arm)

#: the figure rows, in order (label, key)
ROWS: tuple[tuple[str, str], ...] = (
    ("status", "status"),
    ("reward", "reward"),
    ("partial", "partial"),
    ("pass rate", "pass_rate"),
    ("build", "build"),
    ("time / budget", "time"),
    ("tokens in/out", "tokens"),
    ("cost (harbor)", "cost"),  # the trial's own figure; the ledger's is the grid's and the arm's
    ("turns", "turns"),
    ("continuations", "continuations"),
    ("unblocks", "unblocks"),
    ("error events", "error_events"),
    ("final goal status", "goal_status"),
    ("commands", "commands"),
    ("failed commands", "failed_commands"),
    ("last agent message", "last_message"),
    ("attempt", "attempt"),
)


@dataclass(frozen=True)
class ArmTrial:
    """The trial a column shows: the attempt that scores the pair (else its latest), first trial."""

    arm: str
    stamp: str
    trial_dir: Path
    record: TrialRecord


def shown_trial(cell: Cell | None) -> ArmTrial | None:
    """The trial whose figures the cell shows: the scoring attempt's, else the latest live attempt's."""
    attempts = list(cell.attempts) if cell is not None else []
    if cell is None or not attempts:
        return None
    att = next((a for a in attempts if a.stamp == cell.scored_by), None)
    if att is None:
        live = [a for a in attempts if not a.voided and a.trials]
        att = live[-1] if live else attempts[-1]
    if att.trials:
        name, rec = sorted(att.trials.items())[0]
        return ArmTrial(cell.arm, att.stamp, Path(att.job_dir or "") / name, rec)
    if att.voided_trials:
        name, vt = sorted(att.voided_trials.items())[0]
        return ArmTrial(cell.arm, att.stamp, Path(vt.path), vt.record)
    return None


def figure_rows(
    cell: Cell | None,
    trial: ArmTrial | None,
    facts: TrajectoryFacts | None,
    budget: float | None = None,
    now: float | None = None,
) -> dict[str, str]:
    """The column of one arm: every row of ``ROWS`` as text (``…`` while the trajectory is read)."""
    receipt = trial.record.receipt if trial else None
    pending = "…" if facts is None else "-"
    ok_facts = facts is not None and facts.error is None
    status = view.status_of(cell)
    c = cell if cell is not None else Cell(task="", arm="")
    has_tokens = c.n_input_tokens is not None or c.n_output_tokens is not None
    reps = f" {view.repeat_count(c)}" if c.repeats else ""  # a run with repeats: done of K
    spread = f" {sd}" if c.repeats and (sd := view.repeat_spread(c)) else ""
    return {
        "status": status + reps,
        "reward": view.num(c.reward),
        "partial": view.num(c.partial) + spread,
        "pass_rate": view.pct(c.pass_rate),
        "build": "FAILED" if c.build_failed else ("ok" if status == "done" else "-"),
        "time": view.elapsed_text(cell, budget, now) if cell is not None else "-",
        "tokens": f"{view.num(c.n_input_tokens)}/{view.num(c.n_output_tokens)}" if has_tokens else "-",
        "cost": view.money(c.cost_usd),
        "turns": view.num(receipt.turns if receipt else None),
        "continuations": view.num(c.continuations),
        "unblocks": view.num(c.unblocks),
        "error_events": view.num(c.error_events),
        "goal_status": str(c.goal_status or "-"),
        "commands": str(facts.commands) if ok_facts else pending,
        "failed_commands": str(facts.failed_commands) if ok_facts else pending,
        "last_message": (facts.last_agent_message or "-") if ok_facts else pending,
        "attempt": short_stamp(trial.stamp) if trial else "-",
    }


def short_stamp(stamp: str) -> str:
    """``2026-12-01__08-14-54`` as ``12-01 08:14`` (five columns must fit 130 characters); a
    repeat k >= 2 adds `` r<k>``."""
    k = repeat_of(stamp)
    rep = f" r{k}" if k > 1 else ""
    if len(stamp) >= 17 and stamp[10:12] == "__":
        return f"{stamp[5:10]} {stamp[12:17].replace('-', ':')}{rep}"
    return stamp[:16] + rep


#: the pairs table's columns (the report's figures, fewer of them: the partial's difference only)
PAIR_HEADS = ["a", "b", "partial diff [95 %]", "Holm p", "MDE partial / reward / pass", "tasks needed"]


@dataclass(frozen=True)
class PairTable:
    """The paired comparisons over every task, with the report's figures and words: the partial
    difference with its interval, the sign test's Holm p, MDE and tasks needed per measure."""

    level: str  # the level and power the MDE is stated at
    rows: list[list[str]]
    underpowered: list[str]  # the pairs whose differences are below their MDE


def pair_table(out: Path, cells: Mapping[Key, Cell], arms: Sequence[str]) -> PairTable:
    """Compute the paired comparisons of ``arms`` over ``cells`` (a worker calls this: the
    bootstrap intervals of a large tree take seconds unless the tree's index remembers them)."""
    from runner.results import power, report
    from runner.results.index import remembered_intervals

    tasks = sorted({k[0] for k in cells})
    with remembered_intervals(out):
        pairs = report.paired(dict(cells), list(arms), tasks)
    block = power.block(pairs)
    rows = [
        [
            p["a"],
            p["b"],
            report.fmt_diff(p["partial_n"], p["partial_diff"], p["partial_diff_ci"]),
            report.fmt_p(p["sign_test_p_holm"]),
            *report.power_cells(p),
        ]  # fmt: skip
        for p in pairs
        if p["n"]
    ]
    level = (
        f"MDE: the smallest true difference detected with {block['power'] * 100:.0f} % power at the "
        f"Holm-adjusted level {power.fmt_level(block['alpha_holm'])} ({block['alpha']:g} over "
        f"{block['family']} pairs); tasks needed: to detect the observed difference"
    )
    return PairTable(level, rows, power.underpowered_lines(block, lambda m: m.replace("_", " ")))


def read_arm(trial: ArmTrial) -> tuple[TrajectoryFacts, TestOutcomes]:
    """Read one column's files (a worker calls this: a trajectory can be large)."""
    return trajectory_facts(trial.trial_dir), read_outcomes(trial.trial_dir)
