"""Property tests: random trees and mangled JSON never make the scanner raise.

The file contents start from the shapes harbor 0.25.0 writes (job and trial result.json, metrics,
receipts) and are then truncated, emptied, replaced by garbage or by JSON that is not an object.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.results.attempts import STATUSES
from runner.results.model import RunModel
from runner.results.report import build_report, render

JOB = {
    "id": "06c54fac-d736-48e6-be33-5049480b3aeb",
    "started_at": "2026-11-29T07:57:23.814401",
    "finished_at": "2026-11-29T07:57:42.105802",
    "n_total_trials": 1,
    "stats": {"n_completed_trials": 1, "n_errored_trials": 0, "n_running_trials": 0, "n_pending_trials": 0},
}
TRIAL = {
    "task_name": "marathon-demo/calc-partial",
    "trial_name": "calc-partial__34YAoG8",
    "agent_result": {"n_input_tokens": 10, "n_output_tokens": 2, "cost_usd": 0.01},
    "verifier_result": {"rewards": {"reward": 0.0}},
    "exception_info": None,
    "started_at": "2026-11-29T07:57:24.090179Z",
    "finished_at": "2026-11-29T07:57:41.687876Z",
}
METRICS = [
    {"passed": 1, "failed": 4, "total": 5, "partial_score": 0.2},
    {"pass_rate": 0.4},
    {"phase": "build_failed", "passed": 0, "failed": 0, "partial_score": 0.0},
    {"phase": "initialized", "passed": 0, "partial_score": 0.0},
    {"pytest": {"a": {"passed": 3, "failed": 0, "total": 3}, "b": "x"}, "partial_score": 0.0},
]
RECEIPT = {"continuations": 2, "_unblock_count": 1, "errors": [1, 2], "final_goal_status": "complete"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)


@st.composite
def contents(draw, base: dict) -> bytes:
    """A file's bytes: the real shape, perturbed, truncated, empty, garbage or not an object."""
    kind = draw(st.sampled_from(["ok", "perturbed", "truncated", "empty", "garbage", "non_object", "deep"]))
    if kind == "empty":
        return b""
    if kind == "garbage":
        return draw(st.binary(max_size=40))
    if kind == "non_object":
        return json.dumps(draw(json_values)).encode()
    if kind == "deep":
        return b"[" * 100_000
    d = json.loads(json.dumps(base))
    if kind == "perturbed":
        for k in draw(st.lists(st.sampled_from(sorted(d)), max_size=3)):
            d[k] = draw(json_values)
    raw = json.dumps(d).encode()
    if kind == "truncated":
        raw = raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    return raw


names = st.sampled_from(["calc", "tâche-é", "a__b", "nop-123", ".hidden", "x" * 60, "result.json"])
trial_spec = st.fixed_dictionaries(
    {
        "name": names,
        "result": st.none() | contents(TRIAL),
        "metrics": st.none() | st.sampled_from(METRICS).flatmap(contents),
        "receipt": st.none() | contents(RECEIPT),
    }
)
attempt_spec = st.fixed_dictionaries(
    {
        "task": names,
        "arm_dir": st.sampled_from(["nop", "oracle", "plain-4242", "goal", ".x"]),
        "stamp": st.sampled_from(["20261129T075652Z", "20261129T080000Z", "garbage", "2026-11-29__08-00-00"]),
        "job": st.none() | contents(JOB),
        "trials": st.lists(trial_spec, max_size=3),
    }
)


def write_tree(out: Path, attempts: list[dict], events: bytes | None) -> list[Path]:
    written = []
    for a in attempts:
        job = out / a["task"] / a["arm_dir"] / a["stamp"] / a["arm_dir"].split("-")[0]
        try:
            job.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            continue
        files = [(job / "result.json", a["job"])]
        for t in a["trials"]:
            tdir = job / t["name"]
            files += [(tdir / "result.json", t["result"]), (tdir / "verifier" / "metrics.json", t["metrics"])]
            files += [(tdir / "agent" / "goal_receipt.json", t["receipt"])]
        for path, data in files:
            if data is None:
                continue
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir():
                    continue
                path.write_bytes(data)
                written.append(path)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue
    if events is not None:
        (out / ".runner").mkdir(exist_ok=True)
        (out / ".runner" / "events.jsonl").write_bytes(events)
        written.append(out / ".runner" / "events.jsonl")
    return written


events_spec = st.none() | st.lists(
    st.sampled_from(
        [
            b'{"ts": 1, "event": "runner_start", "run_id": "r1", "tasks": ["calc"], "arms": ["nop"]}\n',
            b'{"ts": "2026-11-29T08:00:00Z", "event": "runner_start", "run_id": "r2"}\n',
            b'{"event": "job_start", "run_id": "r2", "task": "calc", "arm": "nop", "stamp": "20261129T075652Z"}\n',
            b'{"event": "runner_start", "run_id": 5}\n',
            b"not json\n",
            b'{"ts": 1, "event": "runner_st',
        ]
    ),
    max_size=4,
).map(b"".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(attempt_spec, max_size=4), events_spec, st.lists(attempt_spec, max_size=3))
def test_random_trees_and_mangled_json_never_raise(first, events, second):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        write_tree(out, first, events)
        m = RunModel.load(out)
        assert all(c.status in STATUSES for c in m.cells.values())
        for scope in ("run", "all"):
            m.scoped(scope)
        for fmt in ("md", "json", "csv"):  # html (its plots, 0.25 s each) below, on fewer trees
            render(build_report(m), fmt)
        # the tree changes under the model: incremental updates never raise either
        changed = write_tree(out, second, None)
        m.update(changed + [p.parent for p in changed] + [out])
        assert all(c.status in STATUSES for c in m.cells.values())
        fresh = RunModel.load(out)
        assert {k for k, c in m.cells.items() if c.attempts} <= set(fresh.cells)
        m.refresh()  # a full re-scan that keeps last good values: lands on the fresh load's cells
        assert set(m.cells) == set(fresh.cells)
        stale = {k for k, c in m.cells.items() if c.unreadable}  # kept last good values on purpose
        assert {k: c.status for k, c in m.cells.items() if k not in stale} == {
            k: c.status for k, c in fresh.cells.items() if k not in stale
        }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(attempt_spec, max_size=4), events_spec)
def test_random_trees_render_as_html_with_their_plots(first, events):
    """The HTML report draws its plots from the same report dict; matplotlib makes each example
    cost ~0.25 s, so this runs fewer trees than the test above."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        write_tree(out, first, events)
        html = render(build_report(RunModel.load(out)), "html")
        assert html.lstrip().lower().startswith("<!doctype html")
