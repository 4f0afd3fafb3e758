"""Repeats (``marathon run --repeats K``) read from trees of recorded real harbor files, K = 2 and 3
(tests/core/repeats_tree.py): how a repeat is named, its cell, the report's means, intervals and
paired comparisons against a reference written out here (average within a task first, resample
tasks), pass@K and pass^K against counting subsets, plan-size from a pilot with repeats, the suspect
rule, claims and health per repeat, the runner's order and its event tally. No Docker."""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil
import statistics
import subprocess
from typing import Any

import numpy as np
import pytest
from core import repeats_tree as rt
from core.hostile_tree import strict_json

from marathon import cli
from runner.errors import UserError
from runner.results import clusters, report, stats, tree
from runner.results.attempts import DONE, ERRORED, PENDING, RUNNING
from runner.results.cells import scored_values
from runner.results.events import EventKind, EventLog
from runner.results.model import RunModel
from runner.results.run_progress import Tally
from runner.results.scan import pair_done
from runner.schedule import claims
from runner.schedule.config import RunConfig, parse_arm
from runner.schedule.lock import holder_for

SEED, RESAMPLES = stats.BOOTSTRAP_SEED, stats.BOOTSTRAP_RESAMPLES
KS = (2, 3)


@pytest.fixture(scope="module", params=KS, ids=lambda k: f"K{k}")
def rtree(request, tmp_path_factory):
    k = request.param
    return k, rt.build(tmp_path_factory.mktemp(f"repeats{k}") / "out", k)


def reference_ci(clusters_: list[list[float]]) -> tuple[float, float]:
    """The cluster bootstrap loop by loop: draw tasks with replacement (row by row from one
    generator, as numpy fills a (resamples, n) array), average each drawn task's values, then the
    drawn tasks; percentiles."""
    rng = np.random.default_rng(SEED)
    n = len(clusters_)
    means = [sum(c) / len(c) for c in clusters_]
    got = []
    for _ in range(RESAMPLES):
        drawn = rng.integers(0, n, n)
        got.append(sum(means[i] for i in drawn) / n)
    lo, hi = np.quantile(got, [0.025, 0.975])
    return float(lo), float(hi)


def r4(v: float) -> Any:
    """A mean or a spread as the report's JSON carries it: as computed (within another order of
    additions), never rounded (md prints 2 places from it)."""
    return pytest.approx(v, rel=1e-12, abs=1e-15)


def same(got: list[float] | None, want: tuple[float, float]) -> bool:
    """The report's interval is the reference's, within another order of additions."""
    return got is not None and all(abs(g - w) <= 1e-12 for g, w in zip(got, want, strict=True))


# ------------------------------------------------------------------------------------------- names


def test_a_repeat_is_named_in_its_stamp_and_claim_and_repeat_one_has_no_mark(tmp_path):
    assert tree.with_repeat("2026-01-01__10-00-00", 1) == "2026-01-01__10-00-00"
    assert tree.with_repeat("2026-01-01__10-00-00", 3) == "2026-01-01__10-00-00@r3"
    assert [tree.repeat_of(s) for s in ("20261130T100000Z", "x@r2", "x@r100", "x@r1", "x@r0", "x@r101")] == [
        1, 2, 100, 1, 1, 1,
    ]  # fmt: skip
    assert tree.stamp_time("20261130T100000Z@r3") == tree.stamp_time("20261130T100000Z") is not None
    assert tree.claim_path(tmp_path, "t", "plain").name == "t__plain.claim"
    assert tree.claim_path(tmp_path, "t", "plain", 2).name == "t__plain@r2.claim"
    assert tree.claim_unit("a__b__plain@r2.claim") == ("a__b", "plain", 2)
    assert tree.claim_unit("t__plain.claim") == ("t", "plain", 1)
    assert tree.claim_key("t__plain@r7.claim") == ("t", "plain")
    with pytest.raises(UserError):
        parse_arm("plain@r2")  # never an arm name: the mark cannot be read two ways


def test_an_arm_cannot_take_the_name_of_the_row_of_all_arms():
    """A review: ``--arms total=oracle`` gave `marathon status` two rows named total."""
    for total in ("total=oracle", "Total=pkg.mod:Agent"):
        with pytest.raises(UserError, match="the row of all arms together"):
            parse_arm(total)
    assert parse_arm("totals=oracle").name == "totals"


def test_the_repeats_knob_is_checked_and_recorded(tmp_path):
    from runner.schedule.config import read_driver_env, resolve, write_driver_env

    flags = {"tasks_dir": str(tmp_path), "arms": ["oracle", "nop"]}
    for bad in (0, 101):
        with pytest.raises(UserError, match="--repeats must be from 1 to 100"):
            resolve(tmp_path / "out", {**flags, "repeats": bad})
    cfg = resolve(tmp_path / "out", {**flags, "repeats": 3})
    write_driver_env(cfg)
    assert read_driver_env(cfg.out)["MARATHON_REPEATS"] == "3"
    assert resolve(cfg.out, {}, resume=True, environ={}).repeats == 3  # a restart keeps it
    assert resolve(cfg.out, {"repeats": 5}, resume=True, environ={}).repeats == 5  # a flag extends it


def test_the_runner_queues_every_repeat_of_every_pair_repeat_by_repeat(tmp_path):
    from runner.schedule.driver import Driver

    cfg = RunConfig(out=tmp_path, arms=("oracle", "nop"), repeats=3)
    units = Driver(cfg).units(["a", "b"])
    assert units[:4] == [("a", "oracle", 1), ("a", "nop", 1), ("b", "oracle", 1), ("b", "nop", 1)]
    assert len(units) == len(set(units)) == 12 and units[-1] == ("b", "nop", 3)
    assert Driver(RunConfig(out=tmp_path, arms=("oracle", "nop"))).units(["a"]) == [
        ("a", "oracle", 1),
        ("a", "nop", 1),
    ]


# ------------------------------------------------------------------------------------------- cells


def test_each_pair_has_a_cell_per_repeat_and_shows_their_mean(rtree):
    k, out = rtree
    m = RunModel.load(out)
    assert m.repeats == k
    for task in rt.TASKS:
        for arm in rt.ARMS:
            c = m.cells[(task, arm)]
            assert c.k == k and len(c.parts) == k
            want = rt.cluster(arm, task, k)
            assert scored_values(c, "partial") == pytest.approx(want)
            assert c.status == DONE and c.partial == pytest.approx(sum(want) / len(want))
            assert c.repeats_done == len(want)
    errored = m.cells[rt.ERRORED[:2]].parts[rt.ERRORED[2] - 1]
    assert errored.status == ERRORED and "errored" in m.cells[rt.ERRORED[:2]].note
    retried = m.cells[rt.RETRIED[:2]].parts[rt.RETRIED[2] - 1]
    assert retried.status == DONE and retried.n_attempts == 2 and retried.n_errored == 1
    voided = m.cells[rt.VOIDED[:2]].parts[rt.VOIDED[2] - 1]
    assert voided.status == DONE and voided.n_voided == 1
    built = m.cells[rt.BUILD[:2]].parts[rt.BUILD[2] - 1]
    assert built.build_failed and not m.cells[rt.BUILD[:2]].build_failed  # the others were not
    if k == 3:
        missing = m.cells[rt.MISSING[:2]]
        assert missing.parts[2].status == PENDING and missing.note.startswith("2/3 repeats done")
    # the attempts of every repeat, each of its own repeat
    c = m.cells[("t03", "plain")]
    assert sorted(a.repeat for a in c.attempts) == sorted([1, *range(1, k + 1)])


def test_a_repeat_is_done_on_its_own(rtree):
    k, out = rtree
    assert pair_done(out, "t02", "plain", 1) and not pair_done(out, "t02", "plain", 2)
    assert pair_done(out, "t03", "plain", 1)  # retried: done at its second attempt
    assert pair_done(out, "t04", "goal", 2)  # voided, then done
    assert pair_done(out, "t00", "goal", k) and not pair_done(out, "t00", "goal", k + 1)
    if k == 3:
        assert not pair_done(out, *rt.MISSING)


def test_a_tree_without_repeats_reads_as_it_always_did(handmade):
    m = RunModel.load(handmade)
    assert m.repeats == 1 and all(not c.repeats and c.parts == (c,) for c in m.cells.values())
    rep = report.build_report(m)
    assert rep["repeats"] == 1 and "repeats" not in rep["notes"]
    assert not any("repeats" in c or "by_repeat" in c for row in rep["cells"].values() for c in row.values())
    assert not any("pass_k" in s for s in rep["arm_summary"].values())
    assert "pass@" not in report.render_md(rep) and "Repeats:" not in report.render_md(rep)
    assert "repeats" not in report.render_csv(rep).splitlines()[0]


# ---------------------------------------------------------------------------------- the statistics


def test_means_and_intervals_average_within_a_task_then_resample_tasks(rtree):
    k, out = rtree
    rep = report.build_report(RunModel.load(out))
    assert rep["repeats"] == k
    for arm in rt.ARMS:
        s = rep["arm_summary"][arm]
        assert s["n"] == len(rt.TASKS)
        for m in report.MEASURES:
            cl = [rt.cluster(arm, t, k, m) for t in rt.TASKS]
            means = [sum(c) / len(c) for c in cl]
            assert s[m] == r4(sum(means) / len(means))
            assert same(s[f"{m}_ci"], reference_ci(cl))
    # pooling the attempts (each attempt a draw) would give another interval: the test can tell
    pooled = stats.bootstrap_mean_ci([v for t in rt.TASKS for v in rt.cluster("plain", t, k)])
    assert not same(rep["arm_summary"]["plain"]["partial_ci"], pooled)


def test_paired_comparisons_pair_the_task_means(rtree):
    k, out = rtree
    rep = report.build_report(RunModel.load(out))
    (row,) = rep["paired"]
    assert (row["a"], row["b"], row["n"]) == ("plain", "goal", len(rt.TASKS))
    for m in report.MEASURES:
        d = [
            statistics.fmean(rt.cluster("plain", t, k, m)) - statistics.fmean(rt.cluster("goal", t, k, m))
            for t in rt.TASKS
        ]
        assert row[f"{m}_diff"] == r4(sum(d) / len(d))
        assert same(row[f"{m}_diff_ci"], reference_ci([[x] for x in d]))
        if m == "partial":
            wins, losses = sum(x > 1e-12 for x in d), sum(x < -1e-12 for x in d)
            assert (row["wins"], row["losses"], row["ties"]) == (wins, losses, len(d) - wins - losses)
            assert row["sign_test_p"] == stats.sign_test(wins, losses)


def test_pass_at_k_and_pass_hat_k_count_the_subsets_of_k_attempts(rtree):
    k, out = rtree
    rep = report.build_report(RunModel.load(out))
    for arm in rt.ARMS:
        at, hat = [], []
        for t in rt.TASKS:
            solved = [v == 1.0 for v in rt.cluster(arm, t, k, "reward")]
            if len(solved) < k:
                continue
            subsets = list(itertools.combinations(solved, k))
            at.append(sum(any(s) for s in subsets) / len(subsets))
            hat.append(sum(all(s) for s in subsets) / len(subsets))
        s = rep["arm_summary"][arm]
        assert (s["pass_k"], s["pass_k_n"]) == (k, len(at))
        assert s["pass_at_k"] == r4(sum(at) / len(at)) and s["pass_hat_k"] == r4(sum(hat) / len(hat))
        assert same(s["pass_at_k_ci"], reference_ci([[v] for v in at]))
    # goal solves t00 in one repeat of K: pass@K above pass^K; plain solves t05 in every repeat
    assert rep["arm_summary"]["goal"]["pass_at_k"] > rep["arm_summary"]["goal"]["pass_hat_k"]
    assert rep["arm_summary"]["plain"]["pass_hat_k"] > 0


def test_counts_are_of_repeats_and_n_of_tasks(rtree):
    k, out = rtree
    s = report.build_report(RunModel.load(out))["arm_summary"]
    plain_errored = 1  # t02's repeat 2 (t03's repeat 1 errored, then was done)
    assert s["plain"]["done"] == len(rt.TASKS) * k - plain_errored and s["plain"]["errored"] == plain_errored
    assert s["goal"]["pending"] == (1 if k == 3 else 0)
    assert s["goal"]["build_failed"] == 1 and s["plain"]["n"] == s["goal"]["n"] == len(rt.TASKS)
    solved = sum(v == 1.0 for t in rt.TASKS for v in rt.cluster("plain", t, k, "reward"))
    assert s["plain"]["solved"] == solved


def test_the_cell_shows_its_repeats_and_their_spread_in_every_format(rtree):
    k, out = rtree
    rep = report.build_report(RunModel.load(out))
    c = rep["cells"]["t02"]["plain"]  # repeat 2 errored
    want = rt.cluster("plain", "t02", k)
    assert (c["repeats"], c["repeats_done"]) == (k, k - 1)
    assert c["partial_sd"] == (r4(statistics.stdev(want)) if len(want) > 1 else None)
    assert [r["status"] for r in c["by_repeat"]] == [DONE, ERRORED, *[DONE] * (k - 2)]
    assert [r["partial"] for r in c["by_repeat"] if r["status"] == DONE] == want
    md = report.render_md(rep)
    assert f"pass@{k}" in md and f"pass^{k}" in md and f"Repeats: K = {k}" in md
    # pass@K is over the tasks with K counted repeats (t02's errored repeat leaves one out): said
    s = rep["arm_summary"]["plain"]
    assert s["pass_k_n"] < s["n"] and f"(over {s['pass_k_n']} tasks)" in md
    assert f"(over {s['pass_k_n']} tasks)" in report.render_html(rep)
    sd = f" sd {c['partial_sd']:.2f}" if c["partial_sd"] is not None else ""
    assert f"| {c['reward']:.2f} / {c['partial']:.2f} / {c['pass_rate']:.2f} ({k - 1}/{k}{sd}) |" in md
    head = report.render_csv(rep).splitlines()[0].split(",")
    assert {"repeats", "repeats_done", "partial_sd"} <= set(head)
    strict_json(report.render_json(rep))


def _plant_hole(out, task: str, arm: str, repeat: int, outside) -> None:
    """A repeat's verifier/metrics.json replaced by a symlink out of the tree (what an agent with
    root in its container can do): a hole on the agent's side, flagged by the hole rule."""
    stamp_dir = out / task / arm / tree.with_repeat("20261130T100000Z", repeat)
    (metrics,) = stamp_dir.glob("*/*/verifier/metrics.json")
    metrics.unlink()
    metrics.symlink_to(outside)


def test_a_flagged_repeat_counts_against_its_arm_as_a_failure_among_the_repeats(tmp_path):
    """The hole rule with repeats: each repeat is its own cell under the rule, so a flagged repeat
    is a failure (every score 0) in its task's mean, never a repeat that drops out (which would
    lift the task's mean to its other repeats'); a pair all of whose repeats are flagged is a
    flagged cell that counts in n. The other reading (--exclude-flagged) leaves the flagged repeats
    out, labelled; every output stays strict JSON."""
    k, out = 2, rt.build(tmp_path / "out", 2)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"partial_score": 1.0, "passed": 9, "total": 9}))
    _plant_hole(out, "t06", "plain", 2, outside)  # plain's repeats on t06: 0.4, 0.1
    for r in (1, 2):
        _plant_hole(out, "t07", "goal", r, outside)  # goal's on t07: 0.7, 0.5
    m = RunModel.load(out, index=False)
    c = m.cells[("t06", "plain")]
    assert c.status == DONE and not c.flagged and c.flagged_repeats == 1
    assert c.parts[1].flagged and c.parts[1].status in ("unreadable", "tampered")
    assert scored_values(c, "partial") == [0.4, 0.0] and c.partial == pytest.approx(0.2)
    assert scored_values(c, "partial", exclude_flagged=True) == [0.4]
    assert "r2" in c.note and "flagged" in c.note
    g = m.cells[("t07", "goal")]
    assert g.flagged and g.status != DONE and g.flagged_repeats == 2 and g.partial is None
    assert scored_values(g, "partial") == [0.0, 0.0]

    def task_means(arm: str, exclude: bool) -> list[float]:
        got = []
        for t in rt.TASKS:
            vals = rt.cluster(arm, t, k)
            if (t, arm) == ("t06", "plain"):
                vals = vals[:1] if exclude else [vals[0], 0.0]
            if (t, arm) == ("t07", "goal"):
                if exclude:
                    continue
                vals = [0.0, 0.0]
            got.append(statistics.fmean(vals))
        return got

    rep = report.build_report(m)
    s = rep["arm_summary"]
    assert (s["plain"]["n"], s["plain"]["flagged"], s["plain"]["flagged_in_n"]) == (8, 1, 1)
    assert (s["goal"]["n"], s["goal"]["flagged"], s["goal"]["flagged_in_n"]) == (8, 2, 1)
    for arm in rt.ARMS:
        want = task_means(arm, False)
        assert s[arm]["partial"] == r4(statistics.fmean(want))
        assert same(s[arm]["partial_ci"], reference_ci([[v] for v in want]))
    (row,) = rep["paired"]
    assert (row["n"], row["flagged_a"], row["flagged_b"]) == (8, 1, 1)
    d = [a - b for a, b in zip(task_means("plain", False), task_means("goal", False), strict=True)]
    assert row["partial_diff"] == r4(statistics.fmean(d))
    assert [r["flagged"] for r in rep["cells"]["t06"]["plain"]["by_repeat"]] == [False, True]
    # the CSV (one row per cell) says so too: the done pair's cell is not flagged, one repeat is
    rows = {(r["task"], r["arm"]): r for r in csv.DictReader(io.StringIO(report.render_csv(rep)))}
    assert (rows["t06", "plain"]["flagged"], rows["t06", "plain"]["flagged_repeats"]) == ("False", "1")
    assert (rows["t07", "goal"]["flagged"], rows["t07", "goal"]["flagged_repeats"]) == ("True", "2")
    assert rows["t05", "plain"]["flagged_repeats"] == "0"
    assert "8 (1 flagged)" in report.render_md(rep)
    # the flagged repeat of a done pair is named among the holes too (a probe found only the count)
    for fmt in ("md", "html"):
        text = report.render(rep, fmt)
        assert "t06 (repeat 2) × plain" in text and "flagged: counted as a failure" in text, fmt
    strict_json(report.render_json(rep))
    # the other reading: the flagged repeats out, the pair of two flagged repeats out of n
    other = report.build_report(RunModel.load(out, index=False), exclude_flagged=True)
    o = other["arm_summary"]
    assert (o["plain"]["n"], o["goal"]["n"], o["plain"]["flagged_in_n"]) == (8, 7, 0)
    assert o["plain"]["partial"] == r4(statistics.fmean(task_means("plain", True)))
    assert o["goal"]["partial"] == r4(statistics.fmean(task_means("goal", True)))
    assert "other reading" in other["reading"]
    strict_json(report.render_json(other))
    # and its matrix cell shows the task mean that reading takes (a probe found the headline's 0.20,
    # its flagged repeat a 0, beside an arm mean that took 0.40), in every format
    oc = other["cells"]["t06"]["plain"]
    assert oc["partial"] == pytest.approx(0.4) and oc["partial_sd"] is None, oc
    assert rep["cells"]["t06"]["plain"]["partial"] == pytest.approx(0.2)
    rows = {(r["task"], r["arm"]): r for r in csv.DictReader(io.StringIO(report.render_csv(other)))}
    assert float(rows["t06", "plain"]["partial"]) == pytest.approx(0.4)
    (md_row,) = [ln for ln in report.render_md(other).splitlines() if ln.startswith("| t06 |")]
    assert "/ 0.40 /" in md_row.split("|")[2], md_row


def test_status_counts_repeats_and_prints_pass_at_k(rtree, capsys):
    k, out = rtree
    assert cli.main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"repeats: K = {k} per (task, arm)" in text and f"plain: n 8 tasks; pass@{k}" in text
    assert cli.main(["status", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["repeats"] == k and d["all_time_pairs"] == len(rt.TASKS) * len(rt.ARMS) * k


def test_plan_size_from_a_pilot_with_repeats_splits_the_spread(rtree, capsys):
    k, out = rtree
    assert cli.main(["plan-size", str(out), "--diff", "0.1", "--repeats", "1,4", "--json"]) == 0
    (p,) = json.loads(capsys.readouterr().out)["pairs"]
    ca = [rt.cluster("plain", t, k) for t in rt.TASKS]
    cb = [rt.cluster("goal", t, k) for t in rt.TASKS]
    sizes = [len(c) for c in ca + cb]
    assert p["pilot_repeats"] == pytest.approx(sum(sizes) / len(sizes))
    assert p["within_variance"] == round(clusters.within_variance(ca) + clusters.within_variance(cb), 4)
    assert all(t["low"] == t["high"] for t in p["tasks_needed"])  # one figure per K: no range
    assert p["tasks_needed"][0]["high"] > p["tasks_needed"][1]["high"]


# -------------------------------------------------------------------------- suspect, runs, updates


def test_a_task_is_suspect_only_when_every_repeat_of_every_arm_failed_alike(tmp_path):
    from core.handmade_tree import RECORDED, STAMP, _done_cell

    out = tmp_path / "out"
    out.mkdir()
    for arm in ("plain", "goal"):
        for r in (1, 2):
            stamp = tree.with_repeat(STAMP, r)
            _done_cell(RECORDED, out, "broken", arm, 0.0, 60, build_failed=True, stamp=stamp)
            # one repeat of one arm builds: not every repeat failed alike
            _done_cell(RECORDED, out, "near", arm, 0.0, 60, build_failed=(arm, r) != ("goal", 2), stamp=stamp)
    rep = report.build_report(RunModel.load(out))
    assert [s["task"] for s in rep["suspect"]] == ["broken"]


def test_a_run_planned_with_repeats_shows_the_repeats_not_started_and_the_claimed_ones(tmp_path):
    from core.handmade_tree import RECORDED, STAMP, _done_cell

    out = tmp_path / "out"
    out.mkdir()
    _done_cell(RECORDED, out, "t", "plain", 0.5, 60, stamp=STAMP)
    log = EventLog(out, "run-1")
    log.emit(EventKind.RUNNER_START, tasks=["t"], arms=["plain", "goal"], repeats=3, pid=1)
    assert claims.try_claim(out, "t", "plain", holder_for(1, "run-1"), repeat=2).acquired
    m = RunModel.load(out)
    c = m.cells[("t", "plain")]
    assert m.repeats == 3 and [p.status for p in c.parts] == [DONE, RUNNING, PENDING]
    assert [p.status for p in m.cells[("t", "goal")].parts] == [PENDING] * 3
    assert m.claimed == {("t", "plain"): frozenset({2})} and m.claims == {("t", "plain")}


def test_an_update_with_a_new_repeat_equals_a_fresh_load(rtree, tmp_path):
    k, src = rtree
    out = tmp_path / "out"
    shutil.copytree(src, out, symlinks=True)
    m = RunModel.load(out, index=False)
    new = out / "t06" / "goal" / tree.with_repeat("20261130T110000Z", k + 1)
    shutil.copytree(out / "t06" / "goal" / tree.with_repeat("20261130T100000Z", k), new)
    changed = m.update([new])
    assert m.repeats == k + 1 and ("t06", "goal") in changed and ("t00", "plain") in changed
    assert m.cells == RunModel.load(out, index=False).cells
    claim = claims.try_claim(out, "t00", "plain", holder_for(1, "run-1"), repeat=k + 1)
    assert claim.acquired
    assert m.update([tree.claim_path(out, "t00", "plain", k + 1)]) == {("t00", "plain")}
    assert m.cells[("t00", "plain")].parts[k].status == RUNNING


def test_the_tally_counts_each_repeat_of_a_pair():
    t = Tally()
    t.add({"event": "runner_start", "run_id": "r", "arms": ["plain"], "repeats": 2,
           "pairs_per_arm": {"plain": 4}, "already_done": {"plain": ["a"]}})  # fmt: skip
    t.add({"event": "job_start", "task": "a", "arm": "plain", "stamp": "s@r2"})
    t.add({"event": "job_start", "task": "b", "arm": "plain", "stamp": "s"})
    t.add({"event": "job_finish", "task": "a", "arm": "plain", "stamp": "s@r2", "status": "done"})
    p = t.snapshot()
    assert (p.done, p.total, p.arms[0].running, p.unit) == (2, 4, 1, "repeats")
    assert t.done["plain"] == {"a", "a@r2"}


# ---------------------------------------------------------------------------------- claims, health


def _dead_holder():
    p = subprocess.Popen(["sleep", "0.1"])
    h = holder_for(p.pid, "dead-run")
    p.wait()
    return h


def test_each_repeat_is_claimed_taken_over_and_released_on_its_own(tmp_path):
    out = tmp_path
    (out / tree.CLAIMS_DIR).mkdir()
    dead, me = _dead_holder(), holder_for(1, "run-2")
    assert claims.try_claim(out, "t", "plain", dead).acquired
    assert claims.try_claim(out, "t", "plain", dead, repeat=2).acquired
    got = {c.unit: c for c in claims.list_claims(out)}
    assert set(got) == {("t", "plain", 1), ("t", "plain", 2)} and got[("t", "plain", 2)].label == "t/plain@r2"
    took = claims.try_claim(out, "t", "plain", me, repeat=2)
    assert took.acquired and took.replaced is not None and took.replaced.repeat == 2
    assert claims.read_claim(tree.claim_path(out, "t", "plain")).holder == dead  # repeat 1 untouched
    assert claims.release(out, took.claim) and not tree.claim_path(out, "t", "plain", 2).exists()
    # a file whose name and content name different repeats is no claim
    bad = tree.claim_path(out, "t", "plain", 3)
    bad.write_text(tree.claim_path(out, "t", "plain").read_text())
    assert claims.read_claim(bad) is None


def test_health_counts_repeats_and_finds_a_stale_claim_of_one(rtree, tmp_path):
    from runner.schedule import health
    from runner.schedule.config import resolve, write_driver_env

    k, src = rtree
    out = tmp_path / "out"
    shutil.copytree(src, out, symlinks=True)
    flags = {"tasks_dir": str(tmp_path), "tasks": list(rt.TASKS), "arms": list(rt.ARMS), "repeats": k}
    write_driver_env(resolve(out, flags))
    assert claims.try_claim(out, "t02", "plain", _dead_holder(), repeat=2).acquired
    seen = health.look(out)
    done = len(rt.TASKS) * len(rt.ARMS) * k - 1 - (1 if k == 3 else 0)  # the errored and the missing one
    assert (seen.total, seen.done) == (len(rt.TASKS) * len(rt.ARMS) * k, done)
    (stale,) = health._check_claims(seen)
    assert stale.kind == "stale_claim" and stale.what.startswith("t02/plain@r2 held by dead")
    (dead,) = health._check_runner(seen)
    assert dead.what == f"no live runner and {seen.total - done} repeat(s) of pairs not done"


def test_a_cluster_job_counts_for_the_repeat_its_stamp_names(tmp_path):
    """The Ray launcher finds a running job per repeat (``runs_elsewhere``, ``adopt``, health's
    orphans) from the job's metadata, as the cluster reports it (``RayJobState`` records)."""
    from runner.schedule.fleet.cluster import RayJobState
    from runner.schedule.fleet.launch import active_units

    def job(sid: str, status: str, stamp: str) -> RayJobState:
        return RayJobState(sid, status, "", {"task": "t", "arm": "plain", "stamp": stamp}, None)

    class Answer:  # what Fleet.ours returns for the tree: the cluster's jobs of it
        def ours(self, out):
            return [job("a", "RUNNING", "s@r2"), job("b", "PENDING", "s"), job("c", "SUCCEEDED", "s@r3")]

    assert set(active_units(Answer(), tmp_path)) == {("t", "plain", 2), ("t", "plain", 1)}


def test_an_arm_with_no_counted_cell_has_the_pass_k_keys_null(rtree):
    """Found by a probe: with K > 1 an arm none of whose cells was counted (every repeat errored)
    had no ``pass_k`` / ``pass_at_k`` keys at all, where the JSON contract lists them per arm."""
    k, out = rtree
    m = RunModel.load(out, index=False)
    cells = {key: c for key, c in m.cells.items() if key[1] == "plain"}
    pending = {("tx", "goal"): m.cells[("t00", "goal")].__class__(task="tx", arm="goal")}  # never run
    s, _ = report.arm_summaries({**cells, **pending}, ["plain", "goal"], total=False)
    assert s["plain"]["pass_k"] == k and s["plain"]["pass_k_n"] > 0
    g = s["goal"]
    assert (g["n"], g["pass_k"], g["pass_k_n"], g["pass_at_k"], g["pass_hat_k"]) == (0, k, 0, None, None), g
