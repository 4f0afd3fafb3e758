"""Worker-side readers: everything the console shows is read here, through ``runner``, and posted.

Widgets never read files; the App's workers call these functions (in threads) and post the
records they return. Each reader is cheap when nothing changed, so an idle console stays idle.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.results.tree import events_path


# -- runner state --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunnerInfo:
    alive: bool
    pid: int | None = None
    argv: tuple[str, ...] = ()
    pass_no: int | None = None
    max_passes: int | None = None
    concurrency: int | None = None
    running: int = 0
    gate_waits: int = 0
    claims: int = 0
    config_line: str = ""
    has_config: bool = False
    run_id: str | None = None
    budget_sec: float | None = None
    paused: str | None = None  # the circuit breaker's one-line reason, until a runner starts again


def read_runner_info(out: Path, events: EventTailReader | None = None) -> RunnerInfo:
    """Is the runner alive (by its registry entry: PID + create time, never by pattern), and how is it set up."""
    from runner.ops.procs import Registry
    from runner.schedule.config import read_driver_env

    entry = None
    running = 0
    try:
        reg = Registry(out)
        entry = reg.runner_entry()
        running = sum(1 for e in reg.live_entries() if e.role != "runner")
    except Exception:  # noqa: BLE001 - an unreadable registry shows as "not running", never crashes
        entry = None
    try:
        env = read_driver_env(out)
    except Exception:  # noqa: BLE001
        env = {}
    try:
        claims = sum(1 for p in (out / ".claims").iterdir() if p.suffix == ".claim")
    except OSError:
        claims = 0

    def as_int(name: str) -> int | None:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            return None

    cfg = []
    if env.get("MARATHON_ARMS"):
        cfg.append(f"arms {env['MARATHON_ARMS']}")
    if env.get("MARATHON_MODEL"):
        cfg.append(f"model {env['MARATHON_MODEL']}")
    if env.get("GOAL_TIMEOUT_SEC"):
        cfg.append(f"goal {env['GOAL_TIMEOUT_SEC']}s")
    st = events.state if events else {}
    return RunnerInfo(
        alive=entry is not None,
        pid=entry.pid if entry else None,
        argv=tuple(entry.argv) if entry else (),
        pass_no=st.get("pass_no"),
        max_passes=as_int("MARATHON_MAX_PASSES"),
        concurrency=as_int("MARATHON_CONCURRENCY"),
        running=running,
        gate_waits=st.get("gate_waits", 0),
        claims=claims,
        config_line=" · ".join(cfg),
        has_config=bool(env),
        run_id=st.get("run_id"),
        budget_sec=as_int("GOAL_TIMEOUT_SEC"),
        paused=st.get("paused"),
    )


# -- events.jsonl --------------------------------------------------------------------------------
@dataclass
class EventTailReader:
    """Reads only what was appended to events.jsonl since the last call (a torn last line waits)."""

    out: Path
    offset: int = 0
    inode: int | None = None
    state: dict[str, Any] = field(default_factory=dict)
    backlog: int = 200

    def read_new(self) -> list[dict]:
        path = events_path(self.out)
        try:
            st = os.stat(path)
        except OSError:
            return []
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset = st.st_ino, 0
            self.state = {}
        if st.st_size == self.offset:
            return []
        with open(path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(st.st_size - self.offset)
        end = data.rfind(b"\n") + 1
        self.offset += end
        events = []
        for raw in data[:end].splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ev, dict):
                events.append(ev)
                self._track(ev)
        return events[-self.backlog :]

    def _track(self, ev: dict) -> None:
        kind = str(ev.get("event", ""))
        if kind == "runner_start":
            self.state = {"run_id": ev.get("run_id"), "gate_waits": 0}
        if "pass" in kind and isinstance(ev.get("pass"), int):
            self.state["pass_no"] = ev["pass"]
        elif isinstance(ev.get("pass_no"), int):
            self.state["pass_no"] = ev["pass_no"]
        if kind == "run_paused":
            self.state["paused"] = str(ev.get("reason") or "paused by the circuit breaker")
        if "gate" in kind and "wait" in kind:
            self.state["gate_waits"] = self.state.get("gate_waits", 0) + 1


# -- docker pool ---------------------------------------------------------------------------------
def read_pool(out: Path, projects: set[str] | None = None) -> tuple[Any, str | None]:
    """Address-pool accounting with the gate's cap, or a one-line reason it is unavailable."""
    try:
        from runner.ops import docker_pool

        status = docker_pool.pool_status(out, projects=projects)
        cap, _margin = docker_pool.gate_limits(capacity=status.capacity)
        d = status.to_json()
        d["gate_cap"] = cap
        return d, None
    except Exception as exc:  # noqa: BLE001 - Docker down is shown, not fatal
        return None, str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


# -- the results tree ------------------------------------------------------------------------------
@dataclass
class TreePayload:
    cells: dict[tuple[str, str], Any]
    full: bool
    tasks: list[str]
    arms: list[str]
    summary: dict[str, Any]
    alarm: str | None
    notes: list[str]
    scanned_at: float
    history: dict[tuple[str, str], Any] = field(default_factory=dict)  # all-time cells (drill-down)


class TreeFeed:
    """Owns the ``runner.results.model.RunModel`` on the worker side and turns its changes into payloads.

    Only the watcher worker calls it (the model is not thread-safe); the App gets copies of cells.
    """

    def __init__(self, out: Path, scope: str = "run") -> None:
        self.out = Path(out)
        self.scope = scope
        self.model: Any = None
        self._trial_projects: dict[str, set[str]] = {}
        #: the tree's compose projects (for the pool gauge), replaced whole so other threads may read it
        self.projects: frozenset[str] | None = None

    def load(self) -> TreePayload:
        from runner.results.model import RunModel

        self.model = RunModel.load(self.out)
        return self._payload(None)

    def rescan(self, full: bool = False) -> TreePayload | None:
        """Re-read everything; a payload of only the cells that changed (None when nothing did)."""
        if self.model is None:
            return self.load()
        before = (self.model.tasks, self.model.arms)
        changed = self.model.refresh()
        if full or before != (self.model.tasks, self.model.arms):
            return self._payload(None)
        return self._payload(changed) if changed else None

    def update_projects(self, cells: Any = None) -> bool:
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

    def update(self, paths) -> TreePayload | None:
        if self.model is None:
            return self.load()
        changed = self.model.update(paths)
        if not changed:
            return None
        return self._payload(changed)

    def watch_roots(self) -> list[Path]:
        """The out dir, plus its voided root once it exists (voided trials show in drill-down)."""
        from runner.results.tree import voided_root

        roots = [self.out]
        vr = voided_root(self.out)
        if vr.is_dir():
            roots.append(vr)
        return roots

    def _payload(self, changed: set | None) -> TreePayload:
        m = self.model
        cells = m.scoped(self.scope)
        if changed is not None:
            cells = {k: cells.get(k) for k in changed}
            history = {k: m.cells.get(k) for k in changed}
        else:
            cells = dict(cells)
            history = dict(m.cells)
        summary, alarm = arm_summary(m, self.scope)
        notes = [f"excluded {e.path}: {e.reason}" for e in m.excluded]
        if m.unreadable:
            notes.append(f"{len(m.unreadable)} unreadable file(s), last good values shown")
        tasks = sorted({k[0] for k in m.scoped(self.scope)})
        from runner.results.model import arm_order

        arms = arm_order(k[1] for k in m.scoped(self.scope))
        return TreePayload(cells, changed is None, tasks, arms, summary, alarm, notes, time.time(), history)


def arm_summary(model: Any, scope: str) -> tuple[dict[str, Any], str | None]:
    """Per-arm summary, the infrastructure-bias alarm and the fairness audit (``runner.results.report``,
    ``runner.results.audit``)."""
    from runner.results import audit, report
    from runner.results.model import arm_order

    cells = model.scoped(scope)
    arms = arm_order(k[1] for k in cells)
    try:
        summary = {arm: report.arm_summary([c for k, c in cells.items() if k[1] == arm]) for arm in arms}
        alarms = [r["message"] for r in report.infrastructure(cells, arms) if r.get("alarm")]
        au = audit.audit(cells, arms)
        alarms += au["lines"]
        for arm in au["arms_differing"]:
            summary[arm]["audit_differs"] = True  # the summary row's warning mark
    except Exception as exc:  # noqa: BLE001 - a summary bug must not take the grid down
        return {}, f"summary unavailable: {exc}"
    return summary, "; ".join(alarms) or None


def list_trials(model_cells: dict, task: str, arm: str) -> list[dict]:
    """The trials of one pair across attempts (passes), voided ones included, newest attempt first."""
    cell = model_cells.get((task, arm))
    rows: list[dict] = []
    if cell is None:
        return rows
    for att in sorted(cell.attempts, key=lambda a: a.stamp, reverse=True):
        for name, rec in sorted(att.trials.items()):
            job_dir = att.job_dir or ""
            rows.append(
                {
                    "stamp": att.stamp,
                    "trial": name,
                    "path": str(Path(job_dir) / name),
                    "record": rec,
                    "attempt_status": att.status,
                    "voided": False,
                    "reason": att.reason,
                    "run_id": att.run_id,
                }
            )
        for name, vt in sorted(att.voided_trials.items()):
            rows.append(
                {
                    "stamp": att.stamp,
                    "trial": name,
                    "path": vt.path,
                    "record": vt.record,
                    "attempt_status": "voided",
                    "voided": True,
                    "reason": vt.reason,
                    "run_id": att.run_id,
                }
            )
    return rows
