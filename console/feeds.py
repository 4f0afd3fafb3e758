"""Worker-side readers: everything the console shows is read here, through ``runner``, and posted.

Widgets never read files; the App's workers call these functions (in threads) and post the
frozen records they return. Each reader is cheap when nothing changed, so an idle console stays idle.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.results.attempts import VoidedTrial
from runner.results.cells import Cell, arm_order
from runner.results.events import EventReader
from runner.results.hosts import HostUse
from runner.results.model import RunModel
from runner.results.prices import Money
from runner.results.records import TrialRecord
from runner.results.run_progress import RunProgress, Tally, event_time
from runner.results.runs import Pieces

if TYPE_CHECKING:
    from runner.results.projection import Projection  # numpy: imported when first projected
    from runner.schedule.fleet.cluster import NodeState

Key = tuple[str, str]
#: an event field as the tail shows it (nested values are left out)
Scalar = str | int | float | bool | None


# -- runner state --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunnerInfo:
    """The runner as its registry, configuration, claims and events describe it."""

    alive: bool
    pid: int | None = None
    argv: tuple[str, ...] = ()
    max_passes: int | None = None
    concurrency: int | None = None
    running: int = 0
    claims: int = 0
    config_line: str = ""
    has_config: bool = False
    budget_sec: float | None = None
    progress: RunProgress = field(default_factory=RunProgress)

    @property
    def paused(self) -> str | None:
        """The circuit breaker's one-line reason, until a runner starts again."""
        return self.progress.paused


def read_runner_info(out: Path, events: EventTailReader | None = None) -> RunnerInfo:
    """Is the runner alive (by its registry entry: PID + create time, never by pattern), and how is it set up."""
    from runner.ops.procs import Registry
    from runner.schedule.claims import list_claims
    from runner.schedule.config import read_driver_env, stored_config
    from runner.schedule.harbor_run import ROLE_HARBOR

    entry = None
    running = 0
    try:
        reg = Registry(out)
        entry = reg.runner_entry()
        running = sum(1 for e in reg.live_entries() if e.role == ROLE_HARBOR)
    except Exception:  # noqa: BLE001 - an unreadable registry shows as "not running", never crashes
        entry = None
    try:  # the runner's own reading of .driver_env (what a restart would run)
        has_config, cfg = bool(read_driver_env(out)), stored_config(out)
    except Exception:  # noqa: BLE001 - an unreadable config shows as none, never crashes
        has_config, cfg = False, None
    try:
        claims = len(list_claims(out))
    except Exception:  # noqa: BLE001 - an unreadable claims dir shows as none, never crashes
        claims = 0
    line = []
    if cfg is not None:
        line.append(f"arms {','.join(cfg.arms)}")
        if cfg.model:
            line.append(f"model {cfg.model}")
        line.append(f"goal {cfg.goal_timeout_sec}s")
    return RunnerInfo(
        alive=entry is not None,
        pid=entry.pid if entry else None,
        argv=tuple(entry.argv) if entry else (),
        max_passes=cfg.max_passes if cfg else None,
        concurrency=cfg.concurrency if cfg else None,
        running=running,
        claims=claims,
        config_line=" · ".join(line),
        has_config=has_config,
        budget_sec=cfg.goal_timeout_sec if cfg else None,
        progress=events.tally.snapshot() if events else RunProgress(),
    )


# -- events.jsonl --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunEvent:
    """One line of events.jsonl as the tail shows it: when, what, which pair, the other fields."""

    kind: str
    at: float | None = None
    ts: str = ""
    task: str | None = None
    arm: str | None = None
    fields: tuple[tuple[str, Scalar], ...] = ()

    @classmethod
    def of(cls, ev: Mapping[str, object]) -> RunEvent:
        skip = {"ts", "event", "task", "arm", "run_id"}
        ts = ev.get("ts")
        return cls(
            kind=str(ev.get("event") or "?"),
            at=event_time(ev),
            ts=ts if isinstance(ts, str) else "",
            task=str(ev["task"]) if ev.get("task") else None,
            arm=str(ev["arm"]) if ev.get("arm") else None,
            fields=tuple(
                (str(k), v) for k, v in ev.items() if k not in skip and isinstance(v, (str, int, float, bool))
            ),
        )


@dataclass
class EventTailReader:
    """What the console derives from events.jsonl, fed by the one incremental reader
    (``runner.results.events.EventReader``, a torn last line waits): the last ``backlog`` new
    events per call, every event folded into the run's tally (``runner.results.run_progress``)."""

    out: Path
    tally: Tally = field(default_factory=Tally)
    backlog: int = 200
    reader: EventReader | None = None

    def read_new(self) -> list[RunEvent]:
        if self.reader is None:
            self.reader = EventReader(self.out)
        events = self.reader.read_new()
        if self.reader.restarted:
            self.tally = Tally()
        for ev in events:
            self.tally.add(ev)
        return [RunEvent.of(ev) for ev in events[-self.backlog :]]


# -- docker pool ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolView:
    """Docker address-pool accounting with the gate's cap (``runner.ops.docker_pool``)."""

    capacity: int
    used_ours: int
    used_foreign: int
    free: int
    gate_cap: int
    empty_ours: int = 0


def read_pool(out: Path, projects: Iterable[str] | None = None) -> tuple[PoolView | None, str | None]:
    """Address-pool accounting with the gate's cap, or a one-line reason it is unavailable."""
    try:
        from runner.ops import docker_pool

        status = docker_pool.pool_status(out, projects=set(projects) if projects is not None else None)
        cap, _margin = docker_pool.gate_limits(capacity=status.capacity)
        view = PoolView(
            status.capacity, status.used_ours, status.used_foreign, status.free, cap, len(status.empty_ours)
        )
        return view, None
    except Exception as exc:  # noqa: BLE001 - Docker down is shown, not fatal
        return None, str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


# -- the cluster (a run with --cluster) -----------------------------------------------------------
def cluster_of(out: Path) -> str | None:
    """The Ray cluster the tree's runs use (``--cluster``, kept in ``.driver_env``), or None."""
    from runner.errors import UserError
    from runner.schedule.fleet.probe import tree_cluster

    try:
        return tree_cluster(out)
    except UserError:  # a .driver_env that cannot be read: the runner panel says so, not a crash
        return None


class NodesReader:
    """The cluster's account of its nodes (alive, slots), through the head's API, one call a poll."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._fleet = None

    def read(self) -> tuple[tuple[NodeState, ...] | None, str | None]:
        """The cluster's nodes by IP, or why it does not answer."""
        try:
            from runner.schedule.fleet.cluster import Fleet

            self._fleet = self._fleet or Fleet.connect(self.cluster)
            nodes = self._fleet.nodes().values()
            return tuple(sorted(nodes, key=lambda n: (n.node_ip, n.node_id))), None
        except Exception as exc:  # noqa: BLE001 - a head that does not answer is shown, not fatal
            self._fleet = None
            return None, (str(exc).splitlines() or [type(exc).__name__])[0][:120]


# -- the results tree ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArmSummary:
    """One arm's summary row (``runner.results.report.arm_summary``): means over done cells with n and the
    95 % interval of the mean partial, and the run's spend over every attempt."""

    n: int = 0
    flagged: int = 0  # of n: cells counted as failures by the hole rule (``rules.counts_in_means``)
    partial: float | None = None
    pass_rate: float | None = None
    reward: float | None = None
    partial_ci: tuple[float, float] | None = None
    build_failed: int = 0
    cost_usd: float | None = None
    spend_usd: float | None = None
    spend_input_tokens: int | None = None
    spend_output_tokens: int | None = None
    #: the gateway's ledger priced (``runner.results.prices``): every attempt's spend, live; None
    #: without a ledger, or when some of it is unpriced (``ledger_unpriced``)
    ledger_spend_usd: float | None = None
    ledger_unpriced: bool = False
    #: calls cut before their usage arrived (the provider may bill them): the spend is a lower bound
    ledger_unmetered: int = 0
    #: attempts live at a gateway found dead (``report.gateway_deaths``): their calls in flight have
    #: no line, so the spend is a lower bound by those too
    gateway_deaths: int = 0
    audit_differs: bool = False  # the fairness audit found an undeclared difference in this arm
    #: the receipts' figures summed over the arm's cells (``report.RECEIPT_SUMS``; the arms panel)
    continuations: int = 0
    unblocks: int = 0
    error_events: int = 0

    @classmethod
    def of(cls, d: Mapping[str, object], audit_differs: bool = False) -> ArmSummary:
        """From the report's JSON record of one arm (its contract: docs/results.md). Its cost is the
        one the report's table shows (``money_shown``: the gateway's ledger's when the arm has calls
        there; harbor's $0.0000 for a model its map lacks stood beside the ledger's figure)."""
        from runner.results.prices import money_shown

        def number(v: object) -> float | None:
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        def f(name: str) -> float | None:
            return number(d.get(name))

        def i(name: str) -> int | None:
            v = d.get(name)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        ci = d.get("partial_ci")
        return cls(
            n=i("n") or 0,
            flagged=i("flagged_in_n") or 0,
            partial=f("partial"),
            pass_rate=f("pass_rate"),
            reward=f("reward"),
            partial_ci=(float(ci[0]), float(ci[1]))
            if isinstance(ci, (list, tuple)) and len(ci) == 2
            else None,
            build_failed=i("build_failed") or 0,
            cost_usd=number(money_shown(d)[0]),
            spend_usd=f("spend_usd"),
            spend_input_tokens=i("spend_input_tokens"),
            spend_output_tokens=i("spend_output_tokens"),
            ledger_spend_usd=f("ledger_spend_usd"),
            ledger_unpriced=bool(d.get("cost_unpriced")),
            ledger_unmetered=i("ledger_unmetered_calls") or 0,
            audit_differs=audit_differs,
            continuations=i("continuations") or 0,
            unblocks=i("unblocks") or 0,
            error_events=i("error_events") or 0,
        )


@dataclass(frozen=True)
class TreeSnapshot:
    """Cell values from the watcher: all cells (``full``) or only the changed ones (None: gone)."""

    cells: Mapping[Key, Cell | None]
    full: bool
    tasks: tuple[str, ...]
    arms: tuple[str, ...]
    summary: Mapping[str, ArmSummary]
    alarm: str | None
    notes: tuple[str, ...]
    scanned_at: float  # time.time() of the scan that produced these values
    history: Mapping[Key, Cell | None] = field(default_factory=dict)  # all-time cells, for drill-down
    hosts: tuple[HostUse, ...] = ()  # a cluster run's hosts as the tree records them (host.json)
    #: tasks every arm failed alike (``runner.results.suspect``): task -> the evidence line
    suspect: Mapping[str, str] = field(default_factory=dict)
    #: the ledger's spend of the cells above that have ledger calls (``CellSpend``), live
    spend: Mapping[Key, CellSpend] = field(default_factory=dict)
    #: the run's spend projected to completion (``runner.results.projection``, as ``marathon status``
    #: shows it), at most every ``PROJECTION_SEC``; None without a ledger
    projection: Projection | None = None
    #: every value was read or checked against its files (False: the first paint's values, taken
    #: from the scan index unchecked; ``TreeFeed.load``)
    checked: bool = True
    #: when the current run's runners ran (``RunModel.run_pieces``): what its rates are over
    run_pieces: Pieces = ()
    #: what the current run's own attempts spent, USD and tokens (``RunModel.run_spend``): the
    #: rates' numerator, at most every ``PROJECTION_SEC`` while lines land
    run_spend: tuple[float | None, int | None] = (None, None)


@dataclass(frozen=True)
class CellSpend:
    """What a cell cost the run on the gateway's ledger: every attempt's tokens priced (``usd``
    None: unpriced, ``why``), running attempts' calls included as each call's line lands."""

    usd: float | None
    tokens: int
    why: tuple[str, ...] = ()
    #: its scoring attempt was ended by its own spend cap (``--max-spend-attempt``), scored
    capped: bool = False


def cell_spend(money: Money, cell: Cell | None) -> CellSpend | None:
    """A cell's ``CellSpend`` (None: no call of it on the ledger)."""
    if cell is None:
        return None
    cost = money.spend(cell)
    if cost is None:
        return None
    return CellSpend(cost.usd, cost.input + cost.output, tuple(cost.unpriced), money.spend_capped(cell))


#: how often the console's projection of the run's spend is recomputed while lines land
PROJECTION_SEC = 5.0


def _projection(model: RunModel, money: Money, scope: str) -> Projection | None:
    """``runner.results.projection.projection_of`` with the run's cap (its ``--max-spend``)."""
    from runner.results.caps import read_caps
    from runner.results.projection import projection_of

    try:
        return projection_of(model, money, scope, read_caps(model.out).run_usd)
    except Exception:  # noqa: BLE001 - a projection bug must not take the grid down
        return None


class TreeFeed:
    """Owns the ``runner.results.model.RunModel`` on the worker side and turns its changes into snapshots.

    Only the watcher worker calls it (the model is not thread-safe); the App gets the frozen cells.
    """

    def __init__(self, out: Path, scope: str = "run") -> None:
        self.out = Path(out)
        self.scope = scope
        self.model: RunModel | None = None
        self._trial_projects: dict[str, set[str]] = {}
        #: the tree's compose projects (for the pool gauge), replaced whole so other threads may read it
        self.projects: frozenset[str] | None = None
        #: the ledger priced, kept across updates (``_money_for``) and what it was made for
        self._money: Money | None = None
        self._money_of: tuple | None = None
        self._projection: Projection | None = None
        self._run_spend: tuple[float | None, int | None] = (None, None)
        self._run_spend_at = -PROJECTION_SEC
        self._projected_at = -PROJECTION_SEC
        self._frozen = False  # ``load`` froze the heap (``release`` unfreezes it)
        #: the arms' summary rows of the last snapshot, and the scope and priced ledger they were made with
        self._summary: dict[str, ArmSummary] = {}
        self._summary_of: str | None = None
        self._summary_money: Money | None = None
        self._released = False
        self._freezing = threading.Lock()  # load (the tree worker) against release (the App's exit)

    def load(self, trust_index: bool = False) -> TreeSnapshot:
        """The whole tree, read once. ``trust_index``: the scan index's entries as they are, their
        files not checked (``RunModel.load``): the console's first paint, a third sooner on a big
        tree, shown as unchecked until the ``rescan`` that must follow at once."""
        first = self.model is None
        self.model = RunModel.load(self.out, trust_index=trust_index)
        if first:
            # The model lives as long as the console (rescans refresh it in place) and its tens of
            # thousands of records hold no cycles: out of the cyclic GC's reach, they are not
            # re-walked by every collection the summaries and the grid trigger (half of those
            # steps' time on a 2,010-task tree); records a refresh replaces are still freed by
            # their reference counts. ``release`` gives them back when the console closes.
            with self._freezing:
                if not self._released:
                    gc.freeze()
                    self._frozen = True
        return self._snapshot(None)

    def release(self) -> None:
        """The console closes: what ``load`` froze goes back to the cyclic GC (a process that opens
        many consoles, a test session, would otherwise keep every closed one's cycles for good)."""
        with self._freezing:
            self._released = True
            if self._frozen:
                self._frozen = False
                gc.unfreeze()

    def rescan(self, full: bool = False) -> TreeSnapshot | None:
        """Re-read everything; a snapshot of only the cells that changed (None when nothing did)."""
        if self.model is None:
            return self.load()
        before = (self.model.tasks, self.model.arms)
        was_checked = self.model.checked
        changed = self.model.refresh()
        if full or before != (self.model.tasks, self.model.arms):
            return self._snapshot(None)
        # the first checked scan after an unchecked load: a snapshot even when nothing changed
        return self._snapshot(changed) if changed or not was_checked else None

    def update_projects(self, cells: Iterable[Cell | None] | None = None) -> bool:
        """Keep the compose projects of the tree's trials current, reading only trials not seen yet
        (of the given cells, or of the whole model); True when the set changed."""
        from runner.ops.docker_pool import trial_projects

        if self.model is None:
            return False
        attempts = self.model.attempts() if cells is None else [a for c in cells if c for a in c.attempts]
        before = self.projects
        for att in attempts:
            if not att.job_dir:
                continue
            for name in att.trials:
                tdir = os.path.join(att.job_dir, name)
                if tdir not in self._trial_projects:
                    found = trial_projects(Path(tdir))
                    if found:  # a trial without harbor's config.json yet is looked at again next time
                        self._trial_projects[tdir] = found
        self.projects = frozenset().union(*self._trial_projects.values())
        return self.projects != before

    def update(self, paths: Iterable[str]) -> TreeSnapshot | None:
        if self.model is None:
            return self.load()
        changed = self.model.update(paths)
        if not changed:
            return None
        return self._snapshot(changed)

    def watch_roots(self) -> list[Path]:
        """The out dir, plus its voided root once it exists (voided trials show in drill-down)."""
        from runner.results.tree import voided_root

        roots = [self.out]
        vr = voided_root(self.out)
        if vr.is_dir():
            roots.append(vr)
        return roots

    def _money_for(self, changed: set[Key] | None) -> Money:
        """The model's ``Money``, re-pricing only the attempts of the changed cells (a new one after a
        full scan, a new ledger object, or a run with other prices)."""
        m = self.model
        assert m is not None
        run = m.current_run
        ident = (id(m.ledger), m.run_prices, run.model if run else None)
        if changed is None or self._money is None or ident != self._money_of:
            self._money, self._money_of = m.money(), ident
        else:
            self._money.forget(a for k in changed if (c := m.cells.get(k)) is not None for a in c.attempts)
            self._money.cut = m.spend_cuts()  # an attempt its spend cap ended while the console watched
        return self._money

    def _snapshot(self, changed: set[Key] | None) -> TreeSnapshot:
        m = self.model
        assert m is not None
        scoped = m.scoped(self.scope)
        if changed is not None:
            cells: dict[Key, Cell | None] = {k: scoped.get(k) for k in changed}
            history: dict[Key, Cell | None] = {k: m.cells.get(k) for k in changed}
        else:
            cells, history = dict(scoped), dict(m.cells)
        money = self._money_for(changed)
        # an update changes only its cells' arms' rows: the others are kept (with the same scope and
        # prices), since each arm's row reads only that arm's cells; the alarms and the audit are
        # made anew (they compare the arms)
        same = changed is not None and self._summary_of == self.scope and self._summary_money is money
        summary, alarm = arm_summary(
            m, self.scope, money, previous=self._summary if same else None, only={k[1] for k in changed or ()}
        )
        self._summary, self._summary_of, self._summary_money = summary, self.scope, money
        # a bootstrap: not on every line, and not before the first grid (a finished run's console
        # shows its spend; a running one's updates bring the projection within PROJECTION_SEC)
        if money.exists and changed is not None and time.monotonic() - self._projected_at >= PROJECTION_SEC:
            self._projection = _projection(m, money, self.scope)
            self._projected_at = time.monotonic()
        if m.checked and (changed is None or time.monotonic() - self._run_spend_at >= PROJECTION_SEC):
            # (not for the first paint from the index unchecked: a pass over every attempt, about a
            # tenth of a second on 10,000 of them; the checked scan right after it brings it)
            self._run_spend, self._run_spend_at = m.run_spend(money), time.monotonic()
        spend: dict[Key, CellSpend] = {}
        if money.exists:
            for k, c in cells.items():
                if (s := cell_spend(money, c)) is not None:
                    spend[k] = s
        notes = [f"excluded {e.path}: {e.reason}" for e in m.excluded]
        if m.unreadable:
            notes.append(f"{len(m.unreadable)} unreadable file(s), last good values shown")
        tasks = tuple(sorted({k[0] for k in scoped}))
        arms = tuple(arm_order(k[1] for k in scoped))
        return TreeSnapshot(
            cells, changed is None, tasks, arms, summary, alarm, tuple(notes), time.time(), history,
            tuple(m.host_use()), suspect_tasks(scoped, arms, tasks), spend,
            self._projection if money.exists else None, m.checked, m.run_pieces, self._run_spend,
        )  # fmt: skip


def arm_summary(
    model: RunModel,
    scope: str,
    money: Money | None = None,
    previous: Mapping[str, ArmSummary] | None = None,
    only: Collection[str] = (),
) -> tuple[dict[str, ArmSummary], str | None]:
    """Per-arm summary, the infrastructure-bias alarm and the fairness audit (``runner.results.report``,
    ``runner.results.audit``). Intervals computed before for the same cells come from the tree's
    index (``runner.results.index.remembered_intervals``, as for `marathon status`): a console
    opened on a finished run neither imports numpy nor bootstraps before its first grid.

    ``previous``: the rows of a summary made with the same scope and prices; only the arms in
    ``only`` (those whose cells changed since) and arms it lacks are summed again (one trial
    finishing on a 2,010-task tree re-read every arm's 2,010 cells: most of the update's time)."""
    from runner.results import report
    from runner.results.alarms import infrastructure, provider_errors, provider_outages
    from runner.results.index import remembered_intervals

    cells = model.scoped(scope)
    arms = arm_order(k[1] for k in cells)
    redo = [a for a in arms if previous is None or a in only or a not in previous]
    mine = cells if len(redo) == len(arms) else {k: c for k, c in cells.items() if k[1] in redo}
    try:
        money = money if money is not None else model.money()
        with remembered_intervals(model.out):  # (the report's per-arm rows: one pass over the cells)
            rows, _ = report.arm_summaries(mine, redo, money=money if money.exists else None, total=False)
        alarms = [r["message"] for r in infrastructure(cells, arms) if r["alarm"]]
        alarms += [r["message"] for r in provider_errors(cells, arms, model.ledger) if r["alarm"]]
        alarms += [f"FLAG {r['message']}" for r in provider_outages(cells, arms, model.ledger, model.out)]
        au = report.full_audit(cells, arms, model)  # the receipts' setup facts and the wire's parameters
        alarms += au["lines"] + au["wire"]["lines"]
        differing = set(au["arms_differing"])  # the summary row's warning mark
        deaths = report.gateway_deaths(model.out, cells)
        summary = {
            arm: replace(
                ArmSummary.of(rows[arm]) if arm in rows else previous[arm],  # type: ignore[index]
                audit_differs=arm in differing,
                gateway_deaths=deaths.get(arm, 0),
            )
            for arm in arms
        }
    except Exception as exc:  # noqa: BLE001 - a summary bug must not take the grid down
        return {}, f"summary unavailable: {exc}"
    return summary, "; ".join(alarms) or None


def suspect_tasks(cells: Mapping[Key, Cell], arms: Iterable[str], tasks: Iterable[str]) -> dict[str, str]:
    """The tasks every arm failed alike, each with its evidence (the report's rule and words)."""
    from runner.results import suspect

    try:
        return {t: f"{suspect.LABEL}: {s.evidence}" for t, s in suspect.find(cells, arms, tasks).items()}
    except Exception:  # noqa: BLE001 - a marking bug must not take the grid down
        return {}


@dataclass(frozen=True)
class TrialRow:
    """One trial of a pair in the drill-down: live or voided, with the attempt it belongs to."""

    stamp: str
    trial: str
    path: str
    record: TrialRecord
    voided: bool
    reason: str | None
    run_id: str | None
    host: str | None = None  # the host its attempt's host.json names (a cluster run)
    repeat: int = 1  # the repeat of the pair its attempt belongs to (``marathon run --repeats``)


def list_trials(cell: Cell | None) -> list[TrialRow]:
    """The trials of one pair across attempts (passes), voided ones included, newest attempt first;
    with repeats, repeat by repeat (repeat 1 first), newest attempt first within each."""
    rows: list[TrialRow] = []
    if cell is None:
        return rows
    atts = sorted(cell.attempts, key=lambda a: a.stamp, reverse=True)
    atts.sort(key=lambda a: a.repeat)  # stable: newest first within a repeat
    for att in atts:
        host = att.host.short() if att.host is not None else None
        for name, rec in sorted(att.trials.items()):
            path = str(Path(att.job_dir or "") / name)
            rows.append(TrialRow(att.stamp, name, path, rec, False, att.reason, att.run_id, host, att.repeat))
        vt: VoidedTrial
        for name, vt in sorted(att.voided_trials.items()):
            rows.append(
                TrialRow(att.stamp, name, vt.path, vt.record, True, vt.reason, att.run_id, host, att.repeat)
            )
    return rows
