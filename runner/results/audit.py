"""The fairness audit: did every arm run with the same codex, transport, user, workdir, credential
names, model, provider, budget and image, task by task? From the receipts the arms wrote.

Why: the five arms must differ only in what ``modes/`` declares (who continues, the goal, the
LoopX profile); anything else that differs (another codex binary, another model, a shorter
budget) would pose as a difference in capability. Any undeclared difference is an alarm: a red
line in the report, a warning mark in the console's summary row.

A fact an arm did not record is not compared (older receipts, harbor's own agents): the audit
lists what it compared per arm, so "not recorded" is visible, never a silent pass.
"""

from __future__ import annotations

from typing import Any

from modes.profiles import masked_wire_params
from runner.results import ledger as L
from runner.results.attempts import DONE
from runner.results.cells import Cell

LABELS = {
    "codex_version": "codex version",
    "codex_in_container": "codex --version in the container",
    "codex_sha256": "codex sha256",
    "config_toml_sha256": "config.toml sha256 (declared differences masked)",
    "transport": "transport",
    "user": "user",
    "workdir": "workdir",
    "credential": "credential names",
    "model": "model",
    "provider_base_url": "provider base URL",
    "budget_sec": "budget_sec",
    "goal_timeout_sec": "GOAL_TIMEOUT_SEC deadline",
    "agent_timeout_sec": "harbor agent timeout",
    "image_digest": "image digest",
    "loopx_version": "LoopX version",
    "node_version": "LoopX's node version",
}
#: Facts that are the run's, not a task's: the same for every scored attempt of every task and arm
#: that records them. A resume with another ``--model`` or ``--goal-timeout-sec``, or after an
#: upgrade that changed codex or LoopX, made the rest of the run under other conditions, and the
#: audit (arms against arms, task by task) passed it: both arms of a task changed together (found
#: by a probe). Not here: the image digest, harbor's agent timeout, the workdir and the user (a
#: task's own: harbor runs the agent as the task's ``[agent].user``; tasks with their own users
#: read as a changed run), and the budget (clamped per trial by a long preparation: the task's
#: audit line says so).
RUN_WIDE = (
    "codex_version", "codex_in_container", "codex_sha256", "transport", "credential", "model",
    "goal_timeout_sec", "loopx_version", "node_version",
)  # fmt: skip
#: at most this many cells named per value of a run-wide fact that changed
NAMED = 3
#: Facts that ``modes/`` declares may differ between arms. Every arm drives the same codex over the
#: same transport with the same model, credentials and budget (modes/profiles.py), so none is.
DECLARED: frozenset[str] = frozenset()


def _in_order(c: Cell) -> list:
    """The cell's attempts, the one that scores it first, then the latest first."""
    if len(c.attempts) < 2:  # the usual pair (the console redoes the audit on every change)
        return list(c.attempts)
    atts = sorted(c.attempts, key=lambda a: a.stamp, reverse=True)
    if c.status == DONE and c.scored_by:
        atts.sort(key=lambda a: a.stamp != c.scored_by)  # stable: the scoring attempt first
    return atts


def _setup_of(c: Cell) -> dict[str, str]:
    """The setup facts of the attempt that scores the cell (else its latest attempt with a receipt)."""
    atts = _in_order(c)
    for a in atts:
        for t in a.trials.values():
            if t.receipt is not None and t.receipt.setup:
                return dict(t.receipt.setup)
    return {}


def audit(cells: dict[tuple[str, str], Cell], arms: list[str]) -> dict[str, Any]:
    """Per task, each setup fact across the arms that recorded it; undeclared differences listed.

    Returns ``{"compared": {arm: [facts]}, "differences": [{fact, label, task, values: {arm:
    value}}], "lines": ["arms differ in: codex sha256 (plain ≠ heartbeat)"], "arms_differing":
    [arm]}``. An arm is "differing" when its value is not the most common one of that task.
    """
    compared: dict[str, set[str]] = {a: set() for a in arms}
    by_task: dict[str, dict[str, dict[str, str]]] = {}
    for task in sorted({t for t, _ in cells}):
        setups = {a: _setup_of(c) for a in arms if (c := cells.get((task, a))) is not None}
        for a, s in setups.items():
            compared[a] |= set(s)
        by_task[task] = setups
    labels = {k: v for k, v in LABELS.items() if k not in DECLARED}
    diffs, lines, differing = _differences(by_task, labels, arms)
    lines = [f"arms differ in: {t}" for t in lines]
    changed = run_conditions(cells, arms, {(d["fact"], d["task"]) for d in diffs}, by_task)
    lines += [c["line"] for c in changed]
    return {
        "compared": {a: sorted(compared[a], key=list(LABELS).index) for a in arms},
        "declared": sorted(DECLARED),
        "differences": diffs,
        "run_conditions": changed,
        "lines": lines,
        "arms_differing": [a for a in arms if a in differing],
    }


def run_conditions(
    cells: dict[tuple[str, str], Cell],
    arms: list[str],
    flagged: set[tuple[str, str]] = frozenset(),
    setups: dict[str, dict[str, dict[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """The run-wide facts (``RUN_WIDE``) that are not the same across every scored attempt (each
    done repeat of a pair with repeats): ``[{fact, label, values: {value: [cells]}, line}]``, the
    cells named ``task × arm`` (``task@rK × arm`` for a repeat). ``flagged``: (fact, task) the
    arms-against-arms audit already has a line for (its tasks are left out of that fact here);
    ``setups``: the cells' setups it read (``_setup_of``, by task and arm), not read twice."""
    seen: dict[str, dict[str, list[str]]] = {}
    for (task, arm), c in sorted(cells.items()):
        if arm not in arms:
            continue
        for i, sub in enumerate(c.repeats or (c,), 1):
            if sub.status != DONE:
                continue
            got = setups.get(task, {}).get(arm) if setups is not None and not c.repeats else None
            setup = got if got is not None else _setup_of(sub)
            name = f"{task}@r{i} \u00d7 {arm}" if c.repeats and i > 1 else f"{task} \u00d7 {arm}"
            for fact in RUN_WIDE:
                if fact in setup and (fact, task) not in flagged:
                    seen.setdefault(fact, {}).setdefault(setup[fact], []).append(name)
    out = []
    for fact in RUN_WIDE:
        values = seen.get(fact, {})
        if len(values) < 2:
            continue
        ranked = sorted(values.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        parts = [
            f"{v}: {len(names)} cell(s), {', '.join(names[:NAMED])}{', ...' if len(names) > NAMED else ''}"
            for v, names in ranked
        ]
        line = f"the run's conditions changed: {LABELS[fact]} ({'; '.join(parts)})"
        out.append({"fact": fact, "label": LABELS[fact], "values": dict(ranked), "line": line})
    return out


def _differences(
    values_by_task: dict[str, dict[str, dict[str, str]]], labels: dict[str, str], arms: list[str]
) -> tuple[list[dict[str, Any]], list[str], set[str]]:
    """(differences, red lines, differing arms) of per-task, per-arm facts: any fact whose value is
    not the same for every arm that recorded it, named the way ``audit`` names its own."""
    diffs: list[dict[str, Any]] = []
    for task, per_arm in sorted(values_by_task.items()):
        if sum(1 for v in per_arm.values() if v) < 2:
            continue
        for fact in labels:
            values = {a: per_arm[a][fact] for a in arms if fact in per_arm.get(a, {})}  # in the arms' order
            if len(set(values.values())) > 1:
                diffs.append({"fact": fact, "label": labels[fact], "task": task, "values": values})
    by_fact: dict[str, list[dict[str, Any]]] = {}
    for d in diffs:
        by_fact.setdefault(d["fact"], []).append(d)
    lines, differing = [], set()
    for fact, ds in by_fact.items():
        groups: list[str] = []
        for d in ds:
            counts: dict[str, list[str]] = {}
            for a, v in d["values"].items():
                counts.setdefault(v, []).append(a)
            ranked = sorted(counts.values(), key=lambda g: (-len(g), arms.index(g[0])))
            differing.update(a for g in ranked[1:] for a in g)
            text = " \u2260 ".join(", ".join(g) for g in ranked)
            if text not in groups:
                groups.append(text)
        tasks_txt = f"; {len(ds)} task(s)" if len(ds) > 1 else f"; task {ds[0]['task']}"
        lines.append(f"{labels[fact]} ({'; '.join(groups)}{tasks_txt})")
    return diffs, lines, differing


def wire_audit(cells: dict[tuple[str, str], Cell], arms: list[str], ledger: L.Ledger) -> dict[str, Any]:
    """The wire fairness audit: per task, the request parameters that decide the model's behaviour
    (``runner.results.ledger.PARAMS``: model, reasoning effort, temperature, top_p, output limit, the
    tool list's and the instructions' sha256, ...) as the gateway saw each arm send them, from the
    ledger. A parameter an arm sent differently, and that ``modes.profiles`` does not declare for it
    (``Masked.wire_params``), is a red line like the config audit's, and the arm is marked.

    An attempt the ledger does not have (a run without the gateway) is not compared; ``compared``
    lists what was, so "not recorded" is visible, never a silent pass."""
    declared = masked_wire_params()
    labels = {k: v for k, v in L.PARAMS.items() if k not in declared}
    by_task: dict[str, dict[str, dict[str, str]]] = {}
    seen: set[str] = set()
    for (task, arm), c in cells.items():
        if arm not in arms:
            continue
        for a in _in_order(c):
            u = ledger.usage(a.task, a.arm_dir, a.stamp)
            if u is None or not u.forwarded:
                continue
            # (``param_value`` of each parameter the attempt sent, not of all twelve: 10,000 attempts)
            values = {k: u.param_value(k) for k, vals in u.params.items() if vals and k in labels}
            seen |= set(values)
            by_task.setdefault(task, {})[arm] = values
            break
    # a parameter some arms of a task sent and another never did is a difference too: that arm got
    # the provider's default (a probe's one arm sending temperature 0.2, the others none, passed)
    for per_arm in by_task.values():
        sent = {k for values in per_arm.values() for k in values}
        for values in per_arm.values():
            for k in sent - values.keys() - L.RECORDED_WHEN_PARSED:
                values[k] = L.NOT_SENT
    diffs, lines, differing = _differences(by_task, labels, arms)
    return {
        "compared": [labels[k] for k in labels if k in seen],
        "declared": sorted(declared),
        "arms_compared": sorted({a for per in by_task.values() for a in per}, key=arms.index),
        "differences": diffs,
        "lines": [f"arms sent the model different {t}" for t in lines],
        "arms_differing": [a for a in arms if a in differing],
    }
