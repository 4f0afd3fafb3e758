"""Tasks every arm failed alike: more often a broken environment than a hard task.

When every arm scores zero on a task with the same failure (the same build failure, the same
failing tests, the same exception), the task says more about its environment than about the arms:
a missing package fails every harness the same way (one public review of an agent benchmark found
missing packages that moved a model's score from 68.6 % to 78 %). Such a task pulls every arm's
mean down by the same amount and adds nothing to a paired comparison except n.

The rule (``failure``, ``find``): a task is **suspect** when at least two arms have a cell on it, every
arm of the comparison has one, and each of those cells is a failure with the same signature:

- a done cell with partial score 0 (a build failure counts as 0) and no reward above 0, whose
  failure is, in order: the verifier's build failure; no test passed (test pass rate 0); or the
  set of tests it names as failed or errored (read from the verifier's output, only for these
  cells), the same set in every arm;
- an errored cell (an agent failure the voiding table scored): the exception's type and its
  message's first line with numbers and hex ids masked (compared only when every arm has one).

With repeats (``marathon run --repeats K``) a cell fails only when each of its repeats does (done or
errored, none pending or running) and all of them alike; that failure is the cell's.

A failure with nothing to compare (a zero with tests it does not name) is never called alike.
Nothing here changes a score: the report marks the task with its evidence and counts it as
always; ``--exclude-suspect`` prints the other reading, labelled as such.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runner.results.attempts import DONE, ERRORED
from runner.results.cells import Cell

#: failure kinds, in the words the report uses
BUILD = "build failed"
NO_TEST = "no test passed"
TESTS = "same failing tests"
EXCEPTION = "same exception"
LABEL = "suspect: every arm failed alike"
#: failing test names shown in the evidence line
SHOW_TESTS = 5

_HEX = re.compile(r"\b(?:0x)?[0-9a-fA-F]{8,}\b")
_NUM = re.compile(r"\d+")
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Failure:
    """What one cell's failure was: its kind and what is compared across arms."""

    kind: str
    detail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suspect:
    """A task every arm failed alike, with the evidence."""

    task: str
    arms: tuple[str, ...]
    kind: str
    detail: tuple[str, ...]

    @property
    def evidence(self) -> str:
        """One line: what every arm's failure was."""
        arms = f"all {len(self.arms)} arms ({', '.join(self.arms)})"
        if self.kind == BUILD:
            return f"{arms}: the verifier's build failed"
        if self.kind == NO_TEST:
            return f"{arms}: partial 0, no test passed"
        if self.kind == TESTS:
            names = list(self.detail[:SHOW_TESTS])
            more = len(self.detail) - len(names)
            tail = f" and {more} more" if more > 0 else ""
            return f"{arms}: partial 0, the same {len(self.detail)} failing test(s): {', '.join(names)}{tail}"
        exc = ": ".join(x for x in self.detail if x)
        return f"{arms}: errored with the same exception: {exc}"

    def as_dict(self) -> dict[str, object]:
        return {
            "task": self.task,
            "arms": list(self.arms),
            "kind": self.kind,
            "detail": list(self.detail),
            "evidence": self.evidence,
        }


def _message(text: str | None) -> str | None:
    """An exception message's first line with numbers and hex ids masked (they name containers,
    ports, trials: the same failure in two arms differs in them)."""
    if not text:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = _NUM.sub("#", _HEX.sub("<id>", first))
    return _WS.sub(" ", first).strip()[:200] or None


def _errored_failure(cell: Cell) -> Failure | None:
    live = [a for a in cell.attempts if not a.voided]
    if not live:
        return None
    att = live[-1]
    excs = [(t.exception_type, t.exception_message) for t in att.trials.values() if t.exception_type]
    if not excs and att.job is not None and att.job.exception_types:
        excs = [(t, None) for t in att.job.exception_types]
    if not excs:
        return None
    types = sorted({t for t, _ in excs})
    msgs = sorted({msg for _, m in excs if (msg := _message(m))})
    return Failure(EXCEPTION, (", ".join(types), " | ".join(msgs)))


def _trial_dir(cell: Cell) -> str | None:
    att = next((a for a in cell.attempts if a.stamp == cell.scored_by), None)
    if att is None or not att.job_dir or not att.trials:
        return None
    return os.path.join(att.job_dir, sorted(att.trials)[0])


def failure(cell: Cell | None) -> Failure | None:
    """The cell's failure signature, or None when the cell is no failure (a score above 0, not
    finished, voided, unreadable) or its failure cannot be compared (a zero with unnamed tests).
    With repeats: the failure every repeat shares, else None."""
    if cell is None:
        return None
    if cell.repeats:
        fails = [failure(p) for p in cell.repeats]
        if any(f is None for f in fails):
            return None
        return _alike([f for f in fails if f is not None])
    if cell.status == ERRORED:
        return _errored_failure(cell)
    if cell.status != DONE:
        return None
    if cell.reward is not None and cell.reward > 0:
        return None
    if cell.build_failed:  # a scored 0 (rules.partial_score)
        return Failure(BUILD)
    if cell.partial is None and cell.reward is None:
        return None
    if cell.partial is not None and cell.partial > 0:
        return None
    if cell.pass_rate == 0:
        return Failure(NO_TEST)
    tdir = _trial_dir(cell)
    if tdir is None:
        return None
    from runner.results.verifier_tests import ERROR, FAIL, read_outcomes  # only for these cells

    failing = tuple(n for n, o in read_outcomes(tdir).outcomes if o in (FAIL, ERROR))
    return Failure(TESTS, tuple(sorted(failing))) if failing else None


def _alike(fails: list[Failure]) -> Failure | None:
    first = fails[0]
    if any(f.kind != first.kind for f in fails):
        return None
    if first.kind != EXCEPTION:
        return first if all(f.detail == first.detail for f in fails) else None
    if any(f.detail[0] != first.detail[0] for f in fails):
        return None
    known = {f.detail[1] for f in fails} - {""}
    if len(known) > 1:  # two arms that say why, and differently, did not fail alike (found by a
        return None  # probe: "disk full" and "network down" beside an arm without a message)
    if any(f.detail[1] == "" for f in fails):  # a message is not known for every arm: the type is
        return Failure(EXCEPTION, (first.detail[0], ""))  # what they share
    return first


def find(
    cells: Mapping[tuple[str, str], Cell], arms: Iterable[str], tasks: Iterable[str]
) -> dict[str, Suspect]:
    """The suspect tasks of a comparison (``arms``: every arm it compares), by task."""
    arms = list(arms)
    out: dict[str, Suspect] = {}
    if len(arms) < 2:
        return out
    for task in tasks:
        row = [cells.get((task, a)) for a in arms]
        if any(c is None or not _could_fail(c) for c in row):
            continue  # cheap test first: only tasks where every arm is a zero or errored are read
        fails = [failure(c) for c in row]
        if any(f is None for f in fails):
            continue
        same = _alike([f for f in fails if f is not None])
        if same is not None:
            out[task] = Suspect(task, tuple(arms), same.kind, same.detail)
    return out


def _could_fail(c: Cell) -> bool:
    if c.status == ERRORED:
        return True
    if c.status != DONE:
        return False
    return not (c.reward is not None and c.reward > 0) and not (c.partial is not None and c.partial > 0)
