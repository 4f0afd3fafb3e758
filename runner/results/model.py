"""The results model: one scanner turns an output tree into cells (task x arm), and keeps them current.

Everything that shows results (status, report, the console, the runner's skip decision) reads this
one model, so they cannot disagree. The scoring rules come from ``runner.results.rules``; files become typed
records in ``runner.results``; paths come from ``runner.results.tree``.

Public API (stable; other areas build on it):

    RunModel.load(out) -> RunModel          cold scan of the whole tree (and its voided trials)
    model.update(paths) -> set[(task, arm)] re-read only what the changed paths touch (watchfiles feed)
    model.refresh() -> set[(task, arm)]     re-scan everything, return the cells that changed
    model.cells: dict[(task, arm), Cell]    all-time cells; every task x arm seen (or planned) has one
    model.scoped(scope="run"|"all")         cells counted in the current run only, or all time
    model.tasks, model.arms                 sorted task names; arms in canonical order (modes.ARMS first)
    model.excluded: list[Excluded]          dirs left out (leftover dirs of another owner), with reason
    model.runs: list[Run]; model.run_id     runner starts from <out>/.runner/events.jsonl; the current one
    model.claims: set[(task, arm)]          pairs with a claim file in <out>/.claims (any repeat)
    model.money(prices=()) -> Money         the ledger's cost of attempts and cells (runner.results.prices)
    model.repeats -> int                    K: attempts per pair the cells are read with (1 without repeats)
    model.unreadable: list[str]             files unreadable at the last read ("path: why"; the journal first)
    model.is_output_tree / model.n_attempts facts for "not an output tree" / "empty tree" messages
    scan.pair_done(out, task, arm, repeat=1) the runner's skip test: the model's dirs and exclusions
    open_tree(out) -> RunModel              load for a command; one-line UserError on bad input

    Cell: task, arm, status (pending|running|done|errored|voided), reward, partial, pass_rate,
          build_failed, cost_usd, cost_usd_all, n_input_tokens, n_output_tokens, wall_sec,
          continuations, unblocks, error_events, goal_status, deadline_hit, run_id, attempts,
          scored_by, newer, claimed, unreadable, note, repeats (each repeat's cell when K > 1;
          ``parts``: those or the cell itself), k, repeats_done
    Attempt: task, arm, arm_dir, stamp, repeat, job_dir, job, trials, voided_trials, status, voided,
          reason, run_id, and the attempt's own reward/partial/pass_rate/... (``Attempt.figures``)
    cells.scored_values(cell, measure)      a cell's values, one per counted repeat (its task's cluster)

Where each job lives (this class is their facade, the one object every reader holds):
- ``runner.results.scan``: scanning the tree into attempts (full and by changed path), the dirs it
  excludes, claims, markers, the scan index, ``pair_done``;
- ``runner.results.runs``: run assignment from ``.runner/events.jsonl`` (``Run``, ``RunLog``);
- ``runner.results.matrix``: the cell matrix (which cells to rebuild, ``repeats``, the run scope);
- ``runner.results.cells`` / ``runner.results.attempts``: what a cell and an attempt are and show
  (the scoring rules: ``build_cell``, ``build_pair_cell``, ``combine_repeats``, ``scored_values``).

Thread-safety: the model is not locked; the console feeds ``update`` from one worker and reads the
cells it returns.
"""

from __future__ import annotations

import gc
import math
import os
import stat
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from runner.results import ledger_memo, tree
from runner.results.attempts import RUNNING, Attempt, Key
from runner.results.caps import attempt_cuts
from runner.results.cells import Cell, arm_order
from runner.results.hosts import HostUse
from runner.results.ledger import Ledger, LedgerReader
from runner.results.matrix import CellMatrix
from runner.results.prices import Money, finite_costs, pricer_of
from runner.results.records import EMPTY, INVALID, OK, TAMPERED, UNREADABLE
from runner.results.runs import Pieces, Run, RunLog
from runner.results.scan import Excluded, TreeScan

#: the version of a runner start made before starts recorded theirs
NOT_RECORDED = "(not recorded)"


#: a result.json that is a plain file (read, or a write cut short: a crash, a full disk), its values
#: perhaps refused: what makes a dir a tree (not one refused as a symlink or a FIFO)
_READ = frozenset({OK, INVALID, TAMPERED, UNREADABLE, EMPTY})


class RunModel:
    """The cells of one output tree. Build with ``RunModel.load(out)``; keep current with ``update``.

    A facade over its three jobs: the scan (``_scan``), the run log (``_runs``) and the cell matrix
    (``_matrix``); a changed path goes to the one that holds it.
    """

    def __init__(self, out: Path | str) -> None:
        self.out = Path(os.path.abspath(out))
        self._out_s = str(self.out)
        self.voided_root = tree.voided_root(self.out)
        self._voided_s = str(self.voided_root)
        self._scan = TreeScan(self.out)
        self._runs = RunLog(self.out)
        self._matrix = CellMatrix(self._scan, self._runs)
        self._ledger_reader = LedgerReader(self.out)
        self.use_index = False  # RunModel.load turns it on: scans go through the scan index

    # ---------------------------------------------------------------- public

    @classmethod
    def load(cls, out: Path | str, index: bool = True, trust_index: bool = False) -> RunModel:
        """Scan the tree; ``index``: through the tree's scan index (``runner.results.index``), a cache that
        never changes a figure (off: read every file, keep no index).

        ``trust_index``: take the index's entries as they are, without the ``lstat`` of each of
        their files (a third of a warm scan: 64,000 on a 2,010-task tree); ``checked`` is then
        False until ``refresh``. For the console's first paint only, which says the grid is
        unchecked and runs the checked scan right after it; every command checks."""
        m = cls(out)
        m.use_index = index
        # Tens of thousands of small records and no cycles among them: the cyclic GC would only
        # re-walk them again and again during the scan.
        was = gc.isenabled()
        gc.disable()
        try:
            m._scan_all(trust_index)
        finally:
            if was:
                gc.enable()
        return m

    @property
    def cells(self) -> dict[Key, Cell]:
        """All-time cells; every task x arm seen (or planned) has one."""
        return self._matrix.cells

    @property
    def checked(self) -> bool:
        """Every record was read or taken from an index entry whose files are unchanged (False only
        after ``load(trust_index=True)``, until ``refresh``)."""
        return self._scan.checked

    @property
    def claims(self) -> set[Key]:
        """Pairs with a claim file in ``<out>/.claims`` (any repeat)."""
        return self._scan.claims

    @property
    def claimed(self) -> dict[Key, frozenset[int]]:
        """Per pair, the repeats with a claim file (``tree.claim_unit``)."""
        return self._scan.claimed

    @property
    def markers(self) -> set[str]:
        """Marathon's markers present at the tree's root (.runner, .claims, .driver_env)."""
        return self._scan.markers

    @property
    def index_hits(self) -> tuple[int, int] | None:
        """(attempts taken from the scan index, attempts read) of the last scan; None without one."""
        return self._scan.index_hits

    @property
    def runs(self) -> list[Run]:
        """Runner starts from ``<out>/.runner/events.jsonl``, oldest first."""
        return self._runs.runs

    @property
    def ledger(self) -> Ledger:
        """The gateway's ledger (``runner.results.ledger``): every model call on the wire; empty
        without a gateway."""
        return self._matrix.ledger

    @property
    def tasks(self) -> list[str]:
        return sorted({k[0] for k in self.cells})

    @property
    def arms(self) -> list[str]:
        return arm_order(k[1] for k in self.cells)

    @property
    def excluded(self) -> list[Excluded]:
        """Dirs left out, with why: another owner's, and voided attempts the journal records that
        are not where the tree's voided root is (a tree renamed or moved: they stay where the void
        put them, and no void count has them; until 2026-12-07 without a word, a probe found)."""
        gone = [
            Excluded(
                path=dest or f"{task}/{arm}/{stamp}",
                reason=f"a void of the journal's, not under {self.voided_root} (the tree renamed or moved?): "
                "not in the void counts",
                task=task,
                arm=tree.arm_of_dir(arm),
            )
            for (task, arm, stamp), dest in self._runs.voids.items()
            if not ((a := self._scan.attempts.get((task, arm, stamp))) is not None and a.voided_trials)
        ]
        return sorted([*self._scan.excluded.values(), *gone], key=lambda e: e.path)

    @property
    def run_id(self) -> str | None:
        return self.runs[-1].run_id if self.runs else None

    @property
    def repeats(self) -> int:
        """K, the repeats every pair is read with (``CellMatrix.repeats``; 1 without repeats)."""
        return self._matrix.repeats

    @property
    def current_run(self) -> Run | None:
        return self._runs.current

    @property
    def run_span(self) -> tuple[datetime | None, datetime | None]:
        """When the current run began (restarts that resumed it included) and ended (its last
        runner's exit; None while it runs): ``RunLog.current_span``."""
        return self._runs.current_span()

    @property
    def run_pieces(self) -> Pieces:
        """When the current run's runners ran (``RunLog.current_pieces``): what its rates are over."""
        return self._runs.current_pieces()

    @property
    def current_run_ids(self) -> frozenset[str]:
        """The run ids of the current run (its start and the restarts that resumed it)."""
        return self._runs.current_ids()

    def run_spend(self, money: Money) -> tuple[float | None, int | None]:
        """What the current run's own attempts spent (``current_run_ids``): USD and tokens from the
        gateway's ledger when the tree has one, else harbor's own figures; USD None when some are
        unpriced or none is known. The numerator of every rate of the run, over the time its
        runners ran (``runs.span_sec``): the run scope also holds earlier runs' attempts of its
        pairs, and a fresh run on a finished tree read their spend over its first minute as $58/h
        (found by a review). ``status``, the projection and the console's top bar take it here."""
        ids = self.current_run_ids
        usd: list[float] = []
        tokens, priced, known = 0, True, False
        for a in self.attempts():
            if a.run_id not in ids:
                continue
            if money.exists:
                cost = money.attempt(a)
                if cost is None:
                    continue
                known = True
                tokens += cost.input + cost.output
                if cost.usd is None:
                    priced = False
                else:
                    usd.append(cost.usd)
            else:
                f = a.figures
                if f.cost_usd is not None:
                    usd.append(f.cost_usd)
                    known = True
                tokens += (f.n_input_tokens or 0) + (f.n_output_tokens or 0)
        return (math.fsum(finite_costs(usd)) if known and priced else None), (tokens or None)

    @property
    def modified_tasks(self) -> list[str]:
        """Every task a runner of this tree ran modified (``--allow-modified``), sorted: the report
        and status say so (the flag's help promised it; a probe found nothing did)."""
        return sorted({t for r in self._runs.runs for t in r.modified})

    def versions(self) -> dict[str, list[str]]:
        """The marathon versions the tree's runner starts recorded (``(not recorded)`` for older
        ones), each with its run ids, in order of first use: a run resumed by an upgraded marathon
        ran its later part under other rules (the gateway's cuts, the caps), which the report flags."""
        got: dict[str, list[str]] = {}
        for r in self._runs.runs:
            got.setdefault(r.marathon or NOT_RECORDED, []).append(r.run_id)
        return got

    @property
    def n_attempts(self) -> int:
        return len(self._scan.attempts)

    @property
    def is_output_tree(self) -> bool:
        """Has marathon's markers (.runner, .claims, .driver_env) or at least one job dir with a
        result.json of harbor's (the job's or a trial's). Dirs alone in the shape
        ``task/arm/stamp/arm`` are not enough: `marathon status /usr` printed arms ``gdb`` and
        ``llvm`` with pairs running (a probe's find), as did a dir of another user's alone."""
        if self.markers:
            return True
        return any(
            (a.job is not None and a.job.state in _READ) or any(t.state in _READ for t in a.trials.values())
            for a in self._scan.attempts.values()
        )

    @property
    def unreadable(self) -> list[str]:
        """Every file of an attempt that could not be read, sorted (the cells' order is the scan's:
        the JSON of status and report listed them in another order each run), after the run's
        journal when it could not be read."""
        files = sorted(f for c in self.cells.values() for a in c.attempts for f in a.unreadable)
        # the run's journal too (its runs, scope and voids): a probe's FIFO there read "(all time)"
        return [self._runs.refused, *files] if self._runs.refused else files

    def attempts(self) -> list[Attempt]:
        return sorted(self._scan.attempts.values(), key=lambda a: a.key)

    def host_use(self) -> list[HostUse]:
        """Per host (``host.json`` of each attempt): its attempts by status and the pairs running
        there, sorted by host. Empty for a single-host run (no attempt records a host)."""
        nodes: dict[str, str] = {}
        counts: dict[str, dict[str, int]] = {}
        running: dict[str, list[tuple[str, str]]] = {}
        # (only the attempts with a host sorted: a single-host tree has none, and a stable sort keeps
        # the same order among them as sorting all)
        for a in sorted(
            [a for a in self._scan.attempts.values() if a.host is not None], key=lambda a: a.stamp
        ):
            name = a.host.short()
            nodes[name] = a.host.node_id  # the latest attempt's node
            c = counts.setdefault(name, {})
            c[a.status] = c.get(a.status, 0) + 1
            if a.status == RUNNING:
                running.setdefault(name, []).append((a.task, a.arm))
        return [
            HostUse(n, nodes[n], sum(c.values()), tuple(c.items()), tuple(sorted(running.get(n, ()))))
            for n, c in sorted(counts.items())
        ]

    def hosts(self) -> dict[str, dict[str, int]]:
        """Per host: its attempts, then its attempts by status (``host_use``, as ``status`` prints it)."""
        return {u.name: {"attempts": u.attempts, **dict(u.by_status)} for u in self.host_use()}

    def money(self, prices: Iterable[str] = ()) -> Money:
        """The ledger's cost of attempts and cells (``runner.results.prices``), priced with the
        current run's recorded ``--price`` items and then ``prices`` (a ``ValueError`` names a bad one)."""
        run = self.current_run
        pricer = pricer_of(self.run_prices, prices, run.model if run else None)
        return Money(self.ledger, pricer, self.spend_cuts())

    @property
    def run_prices(self) -> tuple[str, ...]:
        """The ``--price`` items every runner start of the tree recorded, oldest first (a later one
        wins for the same model): a resume that named one model's price dropped the others the run
        had been priced with, and its attempts read unpriced (found by a probe)."""
        return tuple(p for r in self._runs.runs for p in r.prices)

    def spend_cuts(self) -> frozenset[tuple[str, str, str]]:
        """The attempts their own spend cap ended (``runner.results.caps``: the gateway's records), as
        ``Money.cut`` takes them; one listing of a small dir, so a live reader asks on every update."""
        return frozenset(attempt_cuts(self.out))

    def scoped(self, scope: str = "run") -> dict[Key, Cell]:
        """Cells counted in the current run (``"run"``) or over all time (``"all"``): ``CellMatrix.scoped``."""
        return self._matrix.scoped(scope)

    def refresh(self) -> set[Key]:
        """Re-scan the whole tree; the cells that changed."""
        before = self.cells
        fresh = RunModel(self.out)
        fresh.use_index = self.use_index
        fresh._scan.prev = self._scan  # keep last good values of files that are unreadable now
        fresh._scan_all()
        fresh._scan.prev = None  # later updates keep values from their own attempts only
        self.__dict__.update(fresh.__dict__)
        return {k for k in set(before) | set(self.cells) if before.get(k) != self.cells.get(k)}

    def update(self, paths: Iterable[Path | str]) -> set[Key]:
        """Re-read only what the changed ``paths`` touch; return the (task, arm) cells that changed.

        Feed it watchfiles' changed paths (added, modified or deleted). A trial file re-reads that
        trial; a job result re-reads the job record; a new or removed dir re-lists just that dir;
        ``.runner/events.jsonl`` re-reads the new lines and re-scopes; ``.claims`` updates claims; a
        ledger's new lines count as a change of the cells they cost (their spend moved).
        """
        pairs: set[Key] = set()
        ledger_pairs: set[Key] = set()  # their spend on the ledger moved, whatever their figures do
        rescope = False
        for p in paths:
            ap = os.path.abspath(p)
            if ap == self._out_s or ap.startswith(self._out_s + os.sep):
                rel = ap[len(self._out_s) + 1 :]
                parts = tuple(x for x in rel.split(os.sep) if x)
                if parts[:1] == (tree.RUNNER_DIR,):  # the runner's journal: the run log's input
                    self._scan.markers.add(tree.RUNNER_DIR)
                    if parts[1:] == (tree.TREE_ID_FILE,) or len(parts) == 1:  # a fresh tree got its id
                        self.voided_root = tree.voided_root(self.out)
                        self._voided_s = str(self.voided_root)
                        self._scan.retarget_voided(self._voided_s, pairs)
                    if parts[1:] == (tree.EVENTS_FILE,) or len(parts) == 1:
                        self._runs.read()
                        rescope = True
                    if _ledger_news(parts):
                        spent = self._read_ledger()
                        pairs |= spent
                        ledger_pairs |= spent
                    continue
                r = self._scan.update_main(parts, pairs)
                rescope = rescope or r
            elif ap == self._voided_s or ap.startswith(self._voided_s + os.sep):
                rel = ap[len(self._voided_s) + 1 :]
                parts = tuple(x for x in rel.split(os.sep) if x)
                self._scan.update_voided(parts, pairs)
        if rescope:
            self._runs.assign(self._scan.attempts, self._scan.dirty)
            pairs |= set(self.cells)
        return self._matrix.rebuild(pairs) | (ledger_pairs & set(self.cells))

    def _scan_all(self, trust_index: bool = False) -> None:
        """A cold scan: the journal, the tree, each attempt's run, then every cell."""
        self._runs.read()
        kept = None
        if self.use_index:  # the ledger's sums as the last scan left them: only what is new is read
            got = ledger_memo.restore(self.out, self._ledger_reader)
            if got is not None:
                self._matrix.ledger, kept = got
        self._read_ledger()
        if self.use_index:
            ledger_memo.store(self.out, self._ledger_reader, self.ledger, kept)
        self._scan.scan_all(self.use_index, trust_index)
        self._runs.assign(self._scan.attempts, self._scan.dirty)
        self._matrix.rebuild(None)

    def _read_ledger(self) -> set[Key]:
        """Take in the new lines of the gateway's ledgers; mark the attempts they touch for a re-read
        of their figures (the scan's ``dirty``), and return their pairs."""
        touched = self.ledger.add_rows(self._ledger_reader.iter_new())  # streamed: never held whole
        if self._ledger_reader.restarted:  # a ledger replaced or truncated: read all of them again
            touched |= set(self.ledger.attempts)
            self._ledger_reader = LedgerReader(self.out)
            self._matrix.ledger = Ledger()
            touched |= self.ledger.add_rows(self._ledger_reader.iter_new())
        pairs: set[Key] = set()
        for task, arm, stamp in touched:
            for ak in self._scan.by_pair.get((task, tree.arm_of_dir(arm)), ()):
                if ak[1] == arm and ak[2] == stamp:
                    self._scan.dirty.add(ak)
                    pairs.add((task, tree.arm_of_dir(arm)))
        return pairs


def check_tree(out: Path | str) -> Path:
    """``out`` as an output tree a command may read, or a one-line ``UserError``: a missing path, a
    file, a name too long, a link loop, an unreadable dir, an empty dir, a dir that is not an output
    tree (with a hint when it is a harbor job dir inside one). Reads nothing beyond its listing."""
    from runner.errors import NotAnOutputTree, UserError

    p = Path(out)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UserError(
            f"{p}: no such directory (give the output tree, e.g. `marathon status OUT`)"
        ) from None
    except (OSError, ValueError) as exc:  # a name too long, a link loop, a NUL byte
        raise UserError(f"{p}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise NotAnOutputTree(f"{p}: not a directory; give the output tree's root dir")
    try:
        with os.scandir(p) as it:
            names = [e.name for e in it]
    except OSError as exc:
        raise UserError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    names = [n for n in names if n != tree.INDEX_DIR]  # the scan index alone is no result
    if not names and not tree.voided_root(p).is_dir():
        raise UserError(f"{p}: empty directory: no results yet (start a run with `marathon run {p}`)")
    if "result.json" in names or "config.json" in names:
        raise NotAnOutputTree(
            f"{p}: this is a harbor job dir; give the output tree root (the dir above <task>/<arm>/<stamp>/<arm>)"
        )
    return p


def open_tree(out: Path | str) -> RunModel:
    """Load the model of an output tree for a command, or raise a one-line ``UserError``.

    Bad input never modifies anything: a missing path, a file, an unreadable dir, an empty dir, a
    dir that is not an output tree (with a hint when it is a harbor jobs/job dir inside one).
    """
    from runner.errors import NotAnOutputTree

    p = check_tree(out)
    model = RunModel.load(p)
    # A command's model lives until the process exits: keep the collector from walking its tens of
    # thousands of records again (they hold no cycles; refcounting still frees them).
    gc.freeze()
    if not model.is_output_tree:
        raise NotAnOutputTree(
            f"{p}: not a marathon output tree (expected <task>/<arm>/<stamp>/<arm>/result.json or .runner/)"
        )
    return model


def _ledger_news(parts: tuple[str, ...]) -> bool:
    """Does a changed path under ``.runner`` (its parts) say the ledgers may have grown: a ledger
    file, or ``.runner`` or its gateway dir made (a file written in it before a watch on it was)."""
    if parts[1:] in ((), (tree.GATEWAY_DIR,)):
        return True
    return len(parts) == 3 and parts[1] == tree.GATEWAY_DIR and parts[2].startswith("ledger")
