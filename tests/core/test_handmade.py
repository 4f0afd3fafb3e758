"""Cases real runs cannot easily produce, made by copying real harbor trial files and editing them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from treefix import verifier_wrote

from marathon import cli
from runner.results import scan, tree
from runner.results.attempts import DONE, ERRORED, RUNNING, VOIDED
from runner.results.model import RunModel

LATER = "20991231T235959Z"  # a stamp later than any real run's


def attempt_dir(out: Path, task: str, arm: str) -> Path:
    """The stamp dir of a pair's original (real) attempt: the earliest stamp."""
    return out / task / arm / tree.list_dirs(out / task / arm)[0]


def trial_of(stamp_dir: Path, job: str) -> Path:
    (trial,) = tree.list_dirs(stamp_dir / job)
    return stamp_dir / job / trial


def clone(out: Path, task: str, arm: str, stamp: str = LATER, to_arm_dir: str | None = None) -> Path:
    """Copy a pair's attempt to a new stamp (optionally under another arm dir); return the trial dir."""
    src = attempt_dir(out, task, arm)
    dst = out / task / (to_arm_dir or arm) / stamp
    shutil.copytree(src, dst, symlinks=True)
    return trial_of(dst, arm)


def edit_json(path: Path, **changes) -> None:
    d = json.loads(path.read_text())
    for k, v in changes.items():
        if "." in k:
            a, b = k.split(".")
            d[a][b] = v
        else:
            d[k] = v
    path.write_text(json.dumps(d))


INITIALIZED = {"phase": "initialized", "passed": 0, "partial_score": 0.0}


def test_rerun_with_initialized_metrics_keeps_previous_score(tree_copy):
    trial = clone(tree_copy, "calc-partial", "nop")
    (trial / "verifier/metrics.json").write_text(json.dumps(INITIALIZED))
    c = RunModel.load(tree_copy).cells[("calc-partial", "nop")]
    assert c.status == DONE and c.partial == pytest.approx(0.2)  # never a fabricated 0
    assert c.scored_by != LATER and "no score yet" in c.note


def test_initialized_metrics_written_over_a_read_score_keeps_it(tree_copy):
    m = RunModel.load(tree_copy)
    metrics = trial_of(attempt_dir(tree_copy, "calc-partial", "nop"), "nop") / "verifier/metrics.json"
    metrics.write_text(json.dumps(INITIALIZED))
    m.update([metrics])
    assert m.cells[("calc-partial", "nop")].partial == pytest.approx(0.2)


def test_two_stage_overwrite_keeps_the_pass_rate_beside_a_zero_partial(tree_copy):
    metrics = trial_of(attempt_dir(tree_copy, "two-stage", "nop"), "nop") / "verifier/metrics.json"
    s3 = {
        "stage": "correctness",
        "pytest": {
            "auth": {"passed": 12, "failed": 0, "total": 12},
            "objects": {"passed": 38, "failed": 7, "total": 45},
        },
        "gates_passed": 16,
        "gates_total": 22,
        "partial_score": 0.0,
        "partial_score_formula": "0.5 * unit_tests_score + 0.5 * cua_rubric_score",
    }
    metrics.write_text(json.dumps(s3))
    verifier_wrote(metrics)
    c = RunModel.load(tree_copy).cells[("two-stage", "nop")]
    assert c.partial == 0.0 and c.pass_rate == pytest.approx(50 / 57)


def test_newer_running_attempt_never_replaces_a_done_score(tree_copy):
    trial = clone(tree_copy, "calc-partial", "nop")
    (trial / "result.json").unlink()
    edit_json(
        trial.parent / "result.json",
        finished_at=None,
        **{"stats.n_completed_trials": 0, "stats.n_running_trials": 1},
    )
    c = RunModel.load(tree_copy).cells[("calc-partial", "nop")]
    assert (c.status, c.newer) == (DONE, RUNNING) and c.partial == pytest.approx(0.2)
    assert c.n_attempts == 2 and "newer attempt" in c.note


def test_newer_errored_attempt_never_replaces_a_done_score(tree_copy):
    trial = clone(tree_copy, "calc-partial", "nop")
    exc = {
        "exception_type": "RuntimeError",
        "exception_message": "x",
        "exception_traceback": "",
        "occurred_at": None,
    }
    edit_json(trial / "result.json", exception_info=exc)
    edit_json(trial.parent / "result.json", **{"stats.n_errored_trials": 1})
    c = RunModel.load(tree_copy).cells[("calc-partial", "nop")]
    assert (c.status, c.newer, c.scored_by) == (
        DONE,
        ERRORED,
        attempt_dir(tree_copy, "calc-partial", "nop").name,
    )
    assert c.n_errored == 1


def test_leftover_dir_of_another_owner_is_excluded_and_arm_pid_counts_as_arm(tree_copy, capsys):
    if os.geteuid() != 0:
        pytest.skip("needs root to chown a leftover dir to another uid")
    task = tree_copy / "calc-partial"
    os.rename(task / "nop", task / "nop-4242")  # the field's driver: "<arm>" was not writable
    shutil.copytree(task / "oracle", task / "nop")  # leftover of an earlier round: reward 1 inside
    (stamp,) = tree.list_dirs(task / "nop")
    os.rename(task / "nop" / stamp / "oracle", task / "nop" / stamp / "nop")
    for dirpath, dirnames, filenames in os.walk(task / "nop"):
        for n in [dirpath, *(os.path.join(dirpath, x) for x in dirnames + filenames)]:
            os.lchown(n, 12345, 12345)
    m = RunModel.load(tree_copy)
    c = m.cells[("calc-partial", "nop")]
    assert c.status == DONE and c.reward == 0.0 and c.partial == pytest.approx(0.2)
    assert [a.arm_dir for a in c.attempts] == ["nop-4242"]
    (ex,) = m.excluded
    assert ex.path == "calc-partial/nop" and "uid 12345" in ex.reason
    assert "nop-4242" not in m.arms
    assert cli.main(["status", str(tree_copy)]) == 0
    assert "excluded: calc-partial/nop: owned by uid 12345" in capsys.readouterr().out
    # the runner's skip test agrees: a done result only in a leftover dir is not done
    assert scan.pair_done(tree_copy, "calc-partial", "nop")
    os.rename(task / "nop-4242", tree_copy / "nop-4242-moved-away")
    assert not scan.pair_done(tree_copy, "calc-partial", "nop")
    assert scan.pair_done(tree_copy, "calc-partial", "oracle")


def test_json_truncated_mid_write_never_raises_and_keeps_the_last_good_value(tree_copy):
    m = RunModel.load(tree_copy)
    stamp_dir = attempt_dir(tree_copy, "build-gate", "oracle")
    result = trial_of(stamp_dir, "oracle") / "result.json"
    good = result.read_bytes()
    result.write_bytes(good[: len(good) // 2])
    assert m.update([result]) == {("build-gate", "oracle")}
    c = m.cells[("build-gate", "oracle")]
    assert c.reward == 1.0 and c.unreadable and "unreadable" in c.note
    result.write_bytes(good)
    m.update([result])
    assert not m.cells[("build-gate", "oracle")].unreadable
    # cold load of a truncated trial and job result: no exception, the cell says so
    result.write_bytes(good[:100])
    job = stamp_dir / "oracle" / "result.json"
    job.write_bytes(job.read_bytes()[:50])
    c = RunModel.load(tree_copy).cells[("build-gate", "oracle")]
    assert c.unreadable and c.reward is None and c.status == RUNNING


def test_empty_files_are_not_scores(tree_copy):
    trial = trial_of(attempt_dir(tree_copy, "calc-partial", "oracle"), "oracle")
    (trial / "verifier/metrics.json").write_text("")
    c = RunModel.load(tree_copy).cells[("calc-partial", "oracle")]
    # a finished trial's verifier file emptied (here after harbor wrote result.json: tampered too)
    # is a hole the agent could have made: never a score, counted against the arm (the hole rule)
    assert c.status in ("unreadable", "tampered") and c.flagged and c.partial is None and c.reward is None
    (trial / "result.json").write_text("")
    (trial.parent / "result.json").write_text("")
    c = RunModel.load(tree_copy).cells[("calc-partial", "oracle")]
    assert c.unreadable and c.partial is None


@pytest.mark.parametrize("fmt", ["md", "json", "csv", "html"])
def test_unicode_task_names_in_status_and_every_report_format(tree_copy, capsys, fmt):
    name = "calc-部分-é"
    os.rename(tree_copy / "calc-partial", tree_copy / name)
    m = RunModel.load(tree_copy)
    assert m.cells[(name, "nop")].partial == pytest.approx(0.2)
    assert cli.main(["report", str(tree_copy), "--format", fmt]) == 0
    assert name in capsys.readouterr().out
    assert cli.main(["status", str(tree_copy)]) == 0


def test_voided_trials_show_as_voided_attempts_with_their_reason(tree_copy):
    stamp_dir = attempt_dir(tree_copy, "calc-partial", "crash")
    trial = trial_of(stamp_dir, "crash")
    dst = tree.voided_trial_dir(tree_copy, "calc-partial", "crash", stamp_dir.name, "crash", trial.name)
    m = RunModel.load(tree_copy)
    dst.parent.mkdir(parents=True)
    os.rename(trial, dst)
    (dst / "README.md").write_text(
        "# Voided\n\nenvironment start failed: all predefined address pools have been fully subnetted\n"
    )
    changed = m.update([trial, dst])
    assert ("calc-partial", "crash") in changed
    c = m.cells[("calc-partial", "crash")]
    assert c.status == VOIDED and c.n_voided == 1 and "address pools" in c.note
    assert RunModel.load(tree_copy).cells[("calc-partial", "crash")] == c
    # the pair is rerun and done: done, the voided attempt still listed
    shutil.copytree(attempt_dir(tree_copy, "calc-partial", "nop"), tree_copy / "calc-partial/crash" / LATER)
    os.rename(
        tree_copy / "calc-partial/crash" / LATER / "nop", tree_copy / "calc-partial/crash" / LATER / "crash"
    )
    m.update([tree_copy / "calc-partial/crash" / LATER])
    c = m.cells[("calc-partial", "crash")]
    assert c.status == DONE and [a.status for a in c.attempts] == [VOIDED, DONE]


def test_counts_are_scoped_to_the_current_run_by_stamps_and_events_never_mtimes(tree_copy):
    """The run scope is the pairs the current run planned, read as its runner reads them (every
    attempt in the tree: it skips a pair an earlier start finished), plus the pairs it ran; which
    run ran an attempt is told by its job event or its stamp, never by file times."""
    clone(tree_copy, "calc-partial", "crash", stamp="20991231T235900Z")  # run by r2 (its stamp)
    events = tree.events_path(tree_copy)
    events.parent.mkdir()
    lines = [
        {"ts": "2000-01-01T00:00:00Z", "event": "runner_start", "run_id": "r1"},
        {
            "ts": "2099-12-31T23:58:00Z",
            "event": "runner_start",
            "run_id": "r2",
            "tasks": ["calc-partial", "two-stage"],
            "arms": ["nop"],
        },
    ]
    events.write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = RunModel.load(tree_copy)
    run = m.scoped("run")
    assert m.run_id == "r2"
    assert set(run) == {("calc-partial", "nop"), ("two-stage", "nop"), ("calc-partial", "crash")}
    # the planned pairs r1 finished are done in r2's scope, as r2's runner counted them (it ran neither)
    assert run[("calc-partial", "nop")].status == DONE and run[("two-stage", "nop")].status == DONE
    assert all(run[k] == m.scoped("all")[k] for k in run)
    # file times say nothing: push every mtime far into the future and the past
    for i, (dirpath, dirnames, filenames) in enumerate(os.walk(tree_copy)):
        for n in dirnames + filenames:
            t = 4102444800 if i % 2 else 946684800
            os.utime(os.path.join(dirpath, n), (t, t))
    # (the pairs in scope, not their statuses: the tamper rule reads the verifier files' own times)
    assert set(RunModel.load(tree_copy).scoped("run")) == set(run)
    # an explicit job event wins over the stamp's time: r1 ran that attempt, so r2 ran no crash pair
    with events.open("a") as f:
        f.write(
            json.dumps(
                {
                    "ts": 1,
                    "event": "job_start",
                    "run_id": "r1",
                    "task": "calc-partial",
                    "arm": "crash",
                    "stamp": "20991231T235900Z",
                }
            )
            + "\n"
        )
    m.update([events])
    assert set(m.scoped("run")) == {("calc-partial", "nop"), ("two-stage", "nop")}


def test_a_resumed_run_counts_what_it_resumed(tree_copy):
    """Found by a probe: after a runner killed and restarted (``health --fix``: a runner start of its
    own, ``resumed``), the run scope counted the restart's attempts only, so the pairs its
    predecessor finished read as pending and the means were over the rest. A resumed start goes on
    with the run it resumed (the pairs its starts ran are in it, planned again or not); a fresh
    start (not ``resumed``) begins another: its plan, read as its runner reads it."""
    clone(tree_copy, "two-stage", "nop", stamp="20991231T235930Z")
    events = tree.events_path(tree_copy)
    events.parent.mkdir()
    plan = {"tasks": ["calc-partial", "two-stage"], "arms": ["nop"]}
    rest = {"tasks": ["two-stage"], "arms": ["nop"]}
    lines = [
        {"ts": "2000-01-01T00:00:00Z", "event": "runner_start", "run_id": "r0", **plan},
        {"ts": "2099-12-31T23:58:00Z", "event": "runner_start", "run_id": "r1", **plan},
        {"ts": "2099-12-31T23:59:00Z", "event": "runner_start", "run_id": "r2", "resumed": True, **rest},
        {"ts": 1, "event": "job_start", "run_id": "r1", "task": "calc-partial", "arm": "nop",
         "stamp": attempt_dir(tree_copy, "calc-partial", "nop").name},
    ]  # fmt: skip
    events.write_text("".join(json.dumps(x) + "\n" for x in lines))
    m = RunModel.load(tree_copy)
    run = m.scoped("run")
    # calc-partial done by r1 (before the restart), two-stage by r2 (after it): both in the run
    assert {k: c.status for k, c in run.items()} == {
        ("calc-partial", "nop"): DONE,
        ("two-stage", "nop"): DONE,
    }
    # a fresh start after them is another run: its plan alone (two-stage, done as its runner reads it)
    with events.open("a") as f:
        f.write(
            json.dumps({"ts": "2099-12-31T23:59:50Z", "event": "runner_start", "run_id": "r3", **rest}) + "\n"
        )
    m.update([events])
    assert {k: c.status for k, c in m.scoped("run").items()} == {("two-stage", "nop"): DONE}


def test_a_new_attempt_is_followed_file_by_file(tree_copy):
    m = RunModel.load(tree_copy)
    src = trial_of(attempt_dir(tree_copy, "words-passrate", "sleeper"), "sleeper")
    job = tree_copy / "words-passrate/sleeper" / LATER / "sleeper"
    job.mkdir(parents=True)
    assert m.update([job.parent]) == {("words-passrate", "sleeper")}
    assert m.cells[("words-passrate", "sleeper")].status == RUNNING
    shutil.copytree(attempt_dir(tree_copy, "words-passrate", "nop") / "nop", job, dirs_exist_ok=True)
    (trial,) = tree.list_dirs(job)
    m.update([job / "result.json", job / trial])
    c = m.cells[("words-passrate", "sleeper")]
    assert c.status == DONE and c.pass_rate == pytest.approx(0.4) and c.n_errored == 1
    assert src.exists()


def test_the_total_rows_interval_resamples_tasks_not_cells(handmade):
    """Found by a probe: the total row (every arm's cells together) took its interval over the cells
    as if independent, where a task's cells share the task: 1.7 times too narrow on a 25-task,
    five-arm tree. It resamples tasks, each bringing the mean of its cells, as every interval does."""
    from runner.results import clusters
    from runner.results.report import _score, arm_summaries, counted

    m = RunModel.load(handmade)
    cells = m.scoped("all")
    per_arm, total = arm_summaries(cells, m.arms)
    by_task: dict[str, list[float]] = {}
    for (task, _arm), c in sorted(cells.items()):
        if counted(c) and (v := _score(c, "partial")) is not None:
            by_task.setdefault(task, []).append(v)
    lo, hi = clusters.bootstrap_ci(list(by_task.values()))
    assert total["partial_ci"] == pytest.approx([lo, hi], rel=1e-12)
    assert total["n"] == sum(len(v) for v in by_task.values()) > len(by_task)  # n still counts cells
    assert per_arm  # the arms' own rows: one cell per task, unchanged


def test_a_cells_scores_read_the_same_in_the_report_and_the_console(tree_copy):
    """Found by a probe: the report rounded a cell's scores to 4 places and then printed them to 2
    (a partial of 0.134951 read 0.14 in md and html, 0.13 in the console), and the console's percent
    rounded 0.355 x 100 in floating point (36 %, the report's 0.35). Both print the value as read."""
    from console.view import cell_detail
    from runner.results.report import build_report, render

    metrics = trial_of(attempt_dir(tree_copy, "calc-partial", "nop"), "nop") / "verifier/metrics.json"
    metrics.write_text(json.dumps({"partial_score": 0.134951, "pass_rate": 0.355}))
    verifier_wrote(metrics)
    m = RunModel.load(tree_copy)
    c = m.cells[("calc-partial", "nop")]
    assert (c.status, c.partial, c.pass_rate) == (DONE, 0.134951, 0.355)
    rep = build_report(m)
    assert rep["cells"]["calc-partial"]["nop"]["partial"] == 0.134951
    for fmt in ("md", "html"):
        assert " / 0.13 / 0.35" in render(rep, fmt), fmt
    line = cell_detail("calc-partial", "nop", c)
    assert "partial 0.13" in line and "pass 35%" in line, line
    # the arm's mean and the pair's difference the same way (found by the next review): nop's mean
    # of 0.139804, 0.4, 0 and 0 is 0.134951, oracle's 1.0; rounded to 4 first they read 0.14, −0.86
    metrics.write_text(json.dumps({"partial_score": 0.139804, "pass_rate": 0.355}))
    verifier_wrote(metrics)
    rep = build_report(RunModel.load(tree_copy))
    nop = rep["arm_summary"]["nop"]
    (pair,) = [p for p in rep["paired"] if {p["a"], p["b"]} == {"nop", "oracle"}]
    assert nop["partial"] == pytest.approx(0.134951, abs=1e-12) and abs(
        pair["partial_diff"]
    ) == pytest.approx(0.865049, abs=1e-12)
    md = render(rep, "md")
    assert "| nop | 4 | 0.00 [0.00, 0.00] | 0.13 [" in md and "diff −0.87 [" in md, md


def test_tasks_run_modified_are_said_in_every_report_and_status(tree_copy, capsys):
    """`--allow-modified` promised that every report says so; a probe found none did. The runner
    records them (its runner_start's config); report (md, html, json) and status name them."""
    from runner.results.report import MODIFIED, build_report, render

    events = tree.events_path(tree_copy)
    events.parent.mkdir()
    start = {"ts": "2026-12-01T00:00:00Z", "event": "runner_start", "run_id": "r1",
             "config": {"modified_tasks": ["two-stage", "no-such-task"]}}  # fmt: skip
    events.write_text(json.dumps(start) + "\n")
    rep = build_report(RunModel.load(tree_copy))
    assert rep["modified_tasks"] == ["two-stage"]  # of the tasks the report covers
    for fmt in ("md", "html"):
        assert MODIFIED.split(" (")[0] in render(rep, fmt) and "two-stage" in render(rep, fmt), fmt
    assert cli.main(["status", str(tree_copy), "--all"]) == 0
    assert f"{MODIFIED}: no-such-task, two-stage" in capsys.readouterr().out


def test_runner_starts_by_different_marathon_versions_are_flagged(tree_copy, tmp_path):
    """A probe found a run started by one marathon, stopped, and resumed and reported by another
    read as one run. Each runner start records its marathon (``runner.version``: the package's
    version and the checkout's commit); two or more versions in a tree are a FLAG in the report."""
    from runner.results.report import VERSIONS, build_report, render
    from runner.version import _git_commit, marathon_version

    assert marathon_version().startswith("0.1.0")
    fake = tmp_path / "co"
    (fake / ".git" / "refs" / "heads").mkdir(parents=True)
    (fake / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert _git_commit(fake) is None  # a ref that does not exist yet: nothing said
    (fake / ".git" / "packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/main\n")
    assert _git_commit(fake) == "ab" * 20
    (fake / ".git" / "refs" / "heads" / "main").write_text("cd" * 20 + "\n")
    assert _git_commit(fake) == "cd" * 20
    (fake / ".git" / "HEAD").write_text("ef" * 20 + "\n")  # detached
    assert _git_commit(fake) == "ef" * 20
    # a worktree of a real repository (its .git a file naming its own git dir; refs in the common one)
    repo, wt = tmp_path / "repo", tmp_path / "wt"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", "-b", "side", str(wt)], check=True)
    head = subprocess.run(
        ["git", "-C", str(wt), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    assert (wt / ".git").is_file() and _git_commit(wt) == head.stdout.strip() == _git_commit(repo)

    events = tree.events_path(tree_copy)
    events.parent.mkdir()
    starts = [("r1", "0.1.0+gaaaaaaaaaaaa"), ("r2", "0.1.0+gaaaaaaaaaaaa"), ("r3", "0.1.0+gbbbbbbbbbbbb")]
    events.write_text("".join(json.dumps({"ts": f"2026-12-01T00:0{i}:00Z", "event": "runner_start", "run_id": r,
                                          "marathon": v, "resumed": i > 0}) + "\n"
                              for i, (r, v) in enumerate(starts)))  # fmt: skip
    rep = build_report(RunModel.load(tree_copy))
    assert [(v["marathon"], v["runs"]) for v in rep["versions"]] == [
        ("0.1.0+gaaaaaaaaaaaa", ["r1", "r2"]),
        ("0.1.0+gbbbbbbbbbbbb", ["r3"]),
    ]
    for fmt in ("md", "html"):
        assert VERSIONS in render(rep, fmt), fmt
    events.write_text(json.dumps({"ts": "2026-12-01T00:00:00Z", "event": "runner_start", "run_id": "r1",
                                  "marathon": "0.1.0+gaaaaaaaaaaaa"}) + "\n")  # fmt: skip
    rep = build_report(RunModel.load(tree_copy))
    assert rep["versions"] == [] and rep["made_by"] == ["0.1.0+gaaaaaaaaaaaa"]
    # a report written by another marathon than the run's says its declared differences are its own
    assert rep["generated_by"] == marathon_version() != "0.1.0+gaaaaaaaaaaaa"
    assert "the declared differences and masks below are this version's" in render(rep, "md")
    events.write_text(json.dumps({"ts": "2026-12-01T00:00:00Z", "event": "runner_start", "run_id": "r1",
                                  "marathon": marathon_version()}) + "\n")  # fmt: skip
    assert "masks below are this version's" not in render(build_report(RunModel.load(tree_copy)), "html")
