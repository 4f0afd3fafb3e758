"""The cell matrix: every task x arm seen or planned, each cell built from its pair's attempts, kept
current by rebuilding only the pairs a change touched.

Why a module of its own: which cells to rebuild after a change, and the all-time versus run scopes,
are the model's one piece of bookkeeping across pairs; the cells themselves are pure functions of
their attempts (``runner.results.cells``), the attempts come from the scanner
(``runner.results.scan``) and their runs from the run log (``runner.results.runs``). Cross-pair
rules: K (``repeats``) is the same for every pair, and a task with a measure (partial score, reward,
test pass rate) somewhere makes a done cell of it without that measure a hole (``task_measures``).
"""

from __future__ import annotations

from dataclasses import replace

from runner.results.attempts import DONE, Attempt, Key, refresh_attempt
from runner.results.cells import Cell, arm_measures, build_pair_cell, claimed_repeats, shared_measures
from runner.results.ledger import Ledger
from runner.results.runs import RunLog
from runner.results.scan import TreeScan


def _add_measures(by_arm: dict[str, int], a: Attempt) -> None:
    """Or a done attempt's measures into its arm's (``cells.shared_measures``); an attempt not done,
    or whose metrics say in progress, has none to give and makes no arm done."""
    f = a.figures
    if a.status == DONE and not f.in_progress_metrics:
        by_arm[a.arm] = by_arm.get(a.arm, 0) | arm_measures(f)


class CellMatrix:
    """The cells of one tree's scan and run log (``cells``: all time; ``scoped``: the current run)."""

    def __init__(self, scan: TreeScan, runs: RunLog) -> None:
        self.scan = scan
        self.run_log = runs
        self.cells: dict[Key, Cell] = {}
        self._scoped_cache: dict[str, dict[Key, Cell]] = {}
        self._built_repeats = 1  # the K the cells were last built with
        self._filled: set[Key] = set()  # pending cells the last matrix fill added
        #: per task, the measures its arms' done attempts share (``cells.shared_measures``; a task
        #: with none is absent): ``build_cell``'s ``task_measures``
        self._task_measures: dict[str, int] = {}
        #: the gateway's ledger (``runner.results.ledger``; empty without one): the wire's tokens
        self.ledger = Ledger()

    @property
    def repeats(self) -> int:
        """K, the repeats every pair is read with: the current run's ``--repeats`` or the highest
        repeat an attempt of the tree names, whichever is more (1 for a tree without repeats)."""
        runs = self.run_log.runs
        planned = runs[-1].repeats if runs else 1
        return max(planned, max(self.scan.repeat_n, default=1))

    def scoped(self, scope: str = "run") -> dict[Key, Cell]:
        """Cells counted in the current run (``"run"``) or over all time (``"all"``).

        The run scope is the pairs the current run planned (its last ``runner_start``'s tasks x
        arms) plus any it ran (its starts: ``RunLog.current_ids``), each cell as the runner reads it:
        every attempt of the pair in the tree. A runner skips a pair some earlier start finished
        (``scan.pair_done``), so a cell that counted only the current run's attempts stayed pending
        for ever while the runner, `health` and its exit said done (found by a probe: a second
        `marathon demo` on a finished tree showed every arm at 0 done). Without any runner start
        recorded, the run scope is all time.
        """
        if scope == "all" or not self.run_log.runs:
            return self.cells
        cached = self._scoped_cache.get(scope)
        if cached is not None:
            return cached
        run = self.run_log.runs[-1]
        ids = self.run_log.current_ids()
        keys: set[Key] = {(t, a) for t in run.tasks for a in run.arms}
        keys.update((att.task, att.arm) for att in self.scan.attempts.values() if att.run_id in ids)
        cells = {k: self.cells[k] for k in sorted(keys) if k in self.cells}
        self._scoped_cache[scope] = cells
        return cells

    def rebuild(self, pairs: set[Key] | None) -> set[Key]:
        """Recompute the cells of ``pairs`` (all when None); return those that changed."""
        by_pair, attempts, dirty = self.scan.by_pair, self.scan.attempts, self.scan.dirty
        self._scoped_cache.clear()
        old = dict(self.cells)
        full = pairs is None
        k_rep = self.repeats
        if pairs is None:
            pairs = set(by_pair) | set(self.cells)
            self.cells = {}
        elif k_rep != self._built_repeats:  # a run with more repeats, or a repeat beyond them: every cell
            pairs = set(by_pair) | set(self.cells)
        self._built_repeats = k_rep
        changed: set[Key] = set()
        per: dict[Key, list[Attempt]] = {}
        for k in pairs:
            atts = per[k] = []
            for ak in by_pair.get(k, ()):
                a = attempts.get(ak)
                if a is None:
                    continue
                if not full:  # a cold load assigned runs already (RunLog.assign)
                    rid = self.run_log.run_of(a)
                    if rid != a.run_id:
                        a = attempts[ak] = replace(a, run_id=rid)
                        dirty.add(ak)
                if full or ak in dirty:  # only attempts re-read since the last rebuild
                    refresh_attempt(a, self.ledger)
                atts.append(a)
        # which measures each task has somewhere (``build_cell``'s task_measures); a task that gained
        # or lost one rebuilds all its cells
        tasks = {k[0] for k in pairs}
        now: dict[str, int] = {}
        if full:  # every attempt is in ``per``: each task's measures in one pass
            arms_of: dict[str, dict[str, int]] = {}
            for atts in per.values():
                for a in atts:
                    _add_measures(arms_of.setdefault(a.task, {}), a)
            now = {t: m for t, by_arm in arms_of.items() if (m := shared_measures(by_arm))}
        else:
            now = {t: m for t in tasks if (m := self._measures_of_task(t))}
        known = self._task_measures
        flipped = {t for t in tasks if now.get(t, 0) != known.get(t, 0)}
        for t in tasks:
            if t in now:
                known[t] = now[t]
            else:
                known.pop(t, None)
        if flipped:
            for k in by_pair:
                if k[0] in flipped and k not in per:
                    pairs.add(k)
                    per[k] = [a for ak in by_pair[k] if (a := attempts.get(ak)) is not None]
        for k, atts in per.items():
            if not atts:
                self.cells.pop(k, None)  # the matrix fill below adds it back as pending if it belongs
                continue
            self.cells[k] = build_pair_cell(k[0], k[1], atts, self.scan.claimed.get(k, ()), k_rep,
                                            known.get(k[0], 0))  # fmt: skip
        dirty.clear()
        self._fill_matrix()
        if not old:  # a first scan: every cell is new
            return set(self.cells)
        for k in pairs | (set(old) ^ set(self.cells)) | self._filled:
            o, n = old.get(k), self.cells.get(k)
            if o is not n and o != n:
                changed.add(k)
        return changed

    def _measures_of_task(self, task: str) -> int:
        by_pair, attempts = self.scan.by_pair, self.scan.attempts
        by_arm: dict[str, int] = {}
        for arm in self.scan.arms_seen:
            for ak in by_pair.get((task, arm), ()):
                a = attempts.get(ak)
                if a is not None:
                    _add_measures(by_arm, a)
        return shared_measures(by_arm)

    def _fill_matrix(self) -> None:
        """Every task x arm seen or planned has a cell; a pair with no attempt is pending (or claimed)."""
        with_attempts = {k for k, v in self.scan.by_pair.items() if v}
        tasks = {k[0] for k in with_attempts} | self.scan.task_dirs | {k[0] for k in self.scan.claims}
        arms = {k[1] for k in with_attempts} | {k[1] for k in self.scan.claims}
        if self.run_log.runs:
            tasks |= set(self.run_log.runs[-1].tasks)
            arms |= set(self.run_log.runs[-1].arms)
        for k in [k for k, c in self.cells.items() if not c.attempts]:
            if k[0] not in tasks or k[1] not in arms:
                del self.cells[k]
        self._filled = set()
        k_rep = self.repeats
        for t in tasks:
            for a in arms:
                k = (t, a)
                c = self.cells.get(k)
                claimed = self.scan.claimed.get(k, frozenset())
                if c is None or (not c.attempts and (claimed_repeats(c) != claimed or c.k != k_rep)):
                    self.cells[k] = build_pair_cell(t, a, (), claimed, k_rep)
                    self._filled.add(k)
