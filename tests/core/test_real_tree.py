"""The model, status and report on trees made by real harbor runs (oracle, nop, test agents)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from treefix import verifier_wrote

from marathon import cli
from runner.results import tree
from runner.results.attempts import DONE, ERRORED
from runner.results.model import RunModel
from runner.results.report import build_report, render
from runner.results.tree import INDEX_DIR

TASKS = ["build-gate", "calc-partial", "two-stage", "words-passrate"]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and mtime_ns: proves a command modified nothing (but
    its own cache, the scan index under ``<out>/.marathon``)."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != INDEX_DIR]
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            snap[p] = (st.st_size, st.st_mtime_ns)
    return snap


def test_oracle_scores_one_on_every_demo_task(mini_tree):
    m = RunModel.load(mini_tree)
    assert m.tasks == TASKS
    for t in TASKS:
        c = m.cells[(t, "oracle")]
        assert (c.status, c.reward, c.partial, c.pass_rate, c.build_failed) == (DONE, 1.0, 1.0, 1.0, False)


def test_nop_gives_each_verifier_shape_its_defined_partial(mini_tree):
    m = RunModel.load(mini_tree)
    calc, words, build, two = (
        m.cells[(t, "nop")] for t in ("calc-partial", "words-passrate", "build-gate", "two-stage")
    )
    assert all(c.status == DONE and c.reward == 0.0 for c in (calc, words, build, two))
    assert calc.partial == pytest.approx(0.2) and calc.pass_rate == pytest.approx(0.2)
    assert words.partial == pytest.approx(0.4) and words.pass_rate == pytest.approx(0.4)
    assert build.build_failed and build.partial == 0.0
    # the s3-clone overwrite: the blend zeroes the partial while most gate tests passed
    assert two.partial == 0.0 and two.pass_rate is not None and two.pass_rate > 0.5


def test_test_agents_make_errored_pairs_that_are_never_done(core_tree):
    m = RunModel.load(core_tree)
    crash, sleeper, exit1 = (
        m.cells[("calc-partial", "crash")],
        m.cells[("words-passrate", "sleeper")],
        m.cells[("build-gate", "exit1")],
    )
    for c, exc in (
        (crash, "RuntimeError"),
        (sleeper, "AgentTimeoutError"),
        (exit1, "NonZeroAgentExitCodeError"),
    ):
        assert c.status == ERRORED, c
        assert c.reward is None and c.partial is None  # errored is never a score
        assert exc in c.note
        (att,) = c.attempts
        assert att.job is not None and att.job.n_errored == 1 and not att.job.done
    # crash skipped the verifier; the timeout was verified (harbor still scores it) but stays errored
    assert next(iter(crash.attempts[0].trials.values())).reward is None
    assert next(iter(sleeper.attempts[0].trials.values())).exception_type == "AgentTimeoutError"
    assert crash.n_input_tokens == 7  # set before the crash, kept by harbor


def test_partial_agent_receipt_figures_tokens_and_cost(core_tree):
    c = RunModel.load(core_tree).cells[("calc-partial", "partial")]
    assert c.status == DONE and c.partial == pytest.approx(0.4) and c.reward == 0.0
    assert (c.continuations, c.unblocks, c.error_events, c.goal_status) == (2, 1, 1, "complete")
    assert (c.n_input_tokens, c.n_output_tokens, c.cost_usd) == (1200, 300, pytest.approx(0.0125))


def test_stand_in_arms_get_pending_cells_for_tasks_they_did_not_run(core_tree):
    m = RunModel.load(core_tree)
    assert set(m.arms) == {"oracle", "nop", "crash", "sleeper", "exit1", "partial"}
    assert m.cells[("two-stage", "crash")].status == "pending"
    assert len(m.cells) == 4 * 6


def test_report_json_contract_on_a_real_tree(core_tree):
    rep = json.loads(render(build_report(RunModel.load(core_tree)), "json"))
    assert rep["tasks"] == TASKS
    assert {"arms", "tasks", "cells", "arm_summary", "paired", "disclosures"} <= set(rep)
    cell = rep["cells"]["calc-partial"]["nop"]
    for k in (
        "reward",
        "partial",
        "pass_rate",
        "build_failed",
        "status",
        "cost_usd",
        "n_input_tokens",
        "n_output_tokens",
    ):
        assert k in cell
    nop = rep["arm_summary"]["nop"]
    assert nop["n"] == 4 and nop["build_failed"] == 1
    assert nop["partial"] == pytest.approx((0.2 + 0.4 + 0.0 + 0.0) / 4)  # build failure counted as 0
    assert rep["arm_summary"]["partial"]["cost_usd"] == pytest.approx(0.0125)
    pair = next(p for p in rep["paired"] if {p["a"], p["b"]} == {"nop", "oracle"})
    assert pair["n"] == 4
    pair = next(p for p in rep["paired"] if {p["a"], p["b"]} == {"nop", "partial"})
    assert pair["n"] == 1 and pair["tasks"] == ["calc-partial"]  # only cells both completed
    assert rep["stand_ins"] and rep["disclosures"] == {}  # stand-ins carry no disclosures


@pytest.mark.parametrize("fmt", ["md", "csv", "html", "json"])
def test_report_command_writes_each_format_and_modifies_nothing(core_tree, tmp_path, fmt, capsys):
    RunModel.load(core_tree)  # makes the scan index: from here on only its own dir may change
    before = snapshot(core_tree.parent)
    target = tmp_path / f"report.{fmt}"
    assert cli.main(["report", str(core_tree), "--format", fmt, "--out", str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        row = next(r for r in rows if r["task"] == "build-gate" and r["arm"] == "nop")
        assert row["build_failed"] == "True" and row["status"] == "done"
    elif fmt == "md":
        assert "✗build" in text and "| build-gate |" in text and "Paired comparisons" in text
    elif fmt == "html":
        assert text.startswith("<!doctype html>") and "calc-partial" in text
    else:
        assert json.loads(text)["arms"]
    assert snapshot(core_tree.parent) == before


def test_status_command_counts_per_arm(core_tree, capsys):
    RunModel.load(core_tree)  # makes the scan index: from here on only its own dir may change
    before = snapshot(core_tree.parent)
    assert cli.main(["status", str(core_tree), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["per_arm"]["oracle"]["done"] == 4
    assert d["per_arm"]["crash"]["errored"] == 1 and d["per_arm"]["crash"]["pending"] == 3
    assert d["per_arm"]["partial"]["continuations"] == 2
    assert cli.main(["status", str(core_tree)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[1].split()[:3] == ["arm", "done", "run"]
    assert "calc-partial x crash: errored: RuntimeError" in text
    assert snapshot(core_tree.parent) == before


def test_one_changed_trial_is_reread_without_rescanning(tree_copy):
    m = RunModel.load(tree_copy)
    before = dict(m.cells)
    (trial,) = tree.list_dirs(
        tree_copy / "calc-partial" / "nop" / m.cells[("calc-partial", "nop")].scored_by / "nop"
    )
    metrics = (
        tree_copy
        / "calc-partial/nop"
        / m.cells[("calc-partial", "nop")].scored_by
        / "nop"
        / trial
        / "verifier/metrics.json"
    )
    metrics.write_text(json.dumps({"passed": 3, "failed": 2, "total": 5, "partial_score": 0.6}))
    verifier_wrote(metrics)
    assert m.update([metrics]) == {("calc-partial", "nop")}
    assert m.cells[("calc-partial", "nop")].partial == pytest.approx(0.6)
    assert all(m.cells[k] is before[k] for k in before if k != ("calc-partial", "nop"))
    # a file the model does not show changes nothing
    assert m.update([metrics.parent.parent / "trial.log"]) == set()


def test_a_task_dir_removed_whole_leaves_the_grid_whatever_order_its_deletions_come_in(tree_copy):
    """``rm -r`` of a task dir: the watcher reports the dir and its children in one batch, in any
    order; a child read after the dir put the task back as a pending row until a full rescan."""
    m = RunModel.load(tree_copy)
    task = "calc-partial"
    paths = sorted(p for p in (tree_copy / task).rglob("*"))
    assert any(k[0] == task for k in m.cells)
    shutil.rmtree(tree_copy / task)
    m.update([tree_copy / task, *paths])  # the dir first, then its children
    assert task not in m.tasks and not any(k[0] == task for k in m.cells)
    assert m.cells == RunModel.load(tree_copy).cells


def test_job_summary_reading_agrees_with_reading_each_trial(core_tree):
    """The cold load's shortcut (a finished one-trial job found from its summary) reads each trial
    as an update does: the same record but for how it was found."""
    from dataclasses import replace

    from runner.results import records as results

    m = RunModel.load(core_tree, index=False)
    summarised = 0
    for c in m.cells.values():
        for att in c.attempts:
            for name, rec in att.trials.items():
                full = results.read_trial(f"{att.job_dir}/{name}")
                assert not full.from_summary
                summarised += rec.from_summary
                assert replace(rec, from_summary=False) == full, att.job_dir
    assert summarised == 9  # every finished, unerrored one-trial job; the errored ones were read in full


def test_a_trial_cut_short_reads_unreadable_at_load_as_when_watched(tree_copy):
    """A finished job's trial whose result.json lost its end: its job summary still names it and
    holds its reward, but a fresh load reads the trial unreadable, as the update a watcher makes
    does (which keeps its last good value, marked stale). A load read it as done from the summary,
    unmarked, while the console, watching, said the file was unreadable."""
    from runner.results import records as results

    m = RunModel.load(tree_copy, index=False)
    att = next(a for c in m.cells.values() for a in c.attempts for t in a.trials.values() if t.from_summary)
    name = next(iter(att.trials))
    path = f"{att.job_dir}/{name}/{results.RESULT_JSON}"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 3)
    loaded = RunModel.load(tree_copy, index=False)
    rec = next(a for c in loaded.cells.values() for a in c.attempts if a.job_dir == att.job_dir).trials[name]
    assert rec.state == results.UNREADABLE and rec.reward is None and "JSONDecodeError" in rec.error
    m.update([path])
    watched = next(a for c in m.cells.values() for a in c.attempts if a.job_dir == att.job_dir).trials[name]
    assert watched.stale and watched.error == rec.error
