"""Bad input for status/report, the textual-free import, and the exact tests behind the report."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from marathon import cli
from runner.errors import EXIT_USAGE
from runner.results import stats
from runner.results.attempts import DONE, ERRORED, Attempt
from runner.results.cells import build_cell
from runner.results.report import infrastructure, paired

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_runner_imports_without_textual_in_a_fresh_interpreter():
    code = (
        "import sys, runner, runner.results.model, runner.results.report, runner.results.records, runner.results.stats, marathon.cli;"
        "import marathon.commands.status, marathon.commands.report;"
        "marathon.cli.build_parser();"
        "print('textual' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def _listing(p: Path) -> list[tuple[str, int]]:
    return sorted((str(q), q.lstat().st_mtime_ns) for q in p.rglob("*"))


@pytest.mark.parametrize("command", ["status", "report"])
@pytest.mark.parametrize("case", ["missing", "file", "empty", "not_a_tree", "job_dir"])
def test_bad_input_gives_one_line_and_exit_2_and_modifies_nothing(tmp_path, capsys, command, case):
    target = tmp_path / "x"
    if case == "file":
        target.write_text("hello")
    elif case == "empty":
        target.mkdir()
    elif case == "not_a_tree":
        (target / "src" / "pkg").mkdir(parents=True)
        (target / "README.md").write_text("a project")
    elif case == "job_dir":
        target.mkdir()
        (target / "result.json").write_text("{}")
        (target / "config.json").write_text("{}")
    before = _listing(tmp_path)
    assert cli.main([command, str(target)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("marathon: ") and err.count("\n") == 1, err
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    "command, case",
    [
        (command, case)
        for command in ("status", "report", "health", "plan-size", "net", "void")
        for case in ("name_too_long", "link_loop", "empty")
        if not (case == "empty" and command in ("net", "void"))  # they take any dir as OUT
    ],
)
def test_a_path_no_tree_can_be_at_is_one_line_and_exit_2(tmp_path, capsys, command, case):
    """Found by a probe of the CLI (2026-12-06): a name of 300 bytes was 'internal error: OSError'
    (exit 1) in every command, a link loop the same in health, and health on an empty dir said
    'OK: nothing to fix' (exit 0) where status refuses it."""
    target = tmp_path / ("a" * 300)
    if case == "link_loop":
        target = tmp_path / "loop"
        target.symlink_to(target)
    elif case == "empty":
        target = tmp_path / "empty"
        target.mkdir()
    args = [command, str(target)] if command != "void" else [command, str(target), str(tmp_path)]
    before = _listing(tmp_path)
    assert cli.main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("marathon: ") and err.count("\n") == 1 and "internal error" not in err, err
    assert _listing(tmp_path) == before


def test_void_of_a_dir_outside_the_tree_and_net_with_no_trial_are_one_line(tmp_path, capsys):
    (tmp_path / "out" / ".runner").mkdir(parents=True)
    assert cli.main(["void", str(tmp_path), str(tmp_path / "out")]) == EXIT_USAGE
    assert "is not inside the output tree" in capsys.readouterr().err  # not Python's wording
    assert cli.main(["net", "-n", "0"]) == EXIT_USAGE
    assert "-n must be at least 1" in capsys.readouterr().err


def test_report_refuses_to_write_into_the_tree(tmp_path, capsys):
    out = tmp_path / "out"
    (out / ".runner").mkdir(parents=True)
    assert cli.main(["report", str(out), "--out", str(out / "r.md")]) == EXIT_USAGE
    assert "inside the output tree" in capsys.readouterr().err
    assert not (out / "r.md").exists()
    # a link is followed before the check: a link to the tree, or to a dir inside it, is the tree
    (tmp_path / "to-tree").symlink_to(out)
    (tmp_path / "into-tree").symlink_to(out / ".runner")
    for via in (tmp_path / "to-tree" / "r.md", tmp_path / "into-tree" / "r.md"):
        assert cli.main(["report", str(out), "--out", str(via)]) == EXIT_USAGE
        assert "inside the output tree" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "to-tree"), "--out", str(out / "r.md")]) == EXIT_USAGE
    assert sorted(p.name for p in out.rglob("*")) == [".runner"]
    # nor into its voided attempts beside it: a void's README.md and void.json are its only record
    from runner.results.tree import voided_root

    readme = voided_root(out) / "t" / "a" / "s" / "README.md"
    readme.parent.mkdir(parents=True)
    readme.write_text("# Voided: why\n")
    assert cli.main(["report", str(out), "--out", str(readme)]) == EXIT_USAGE
    assert "inside the tree's voided attempts" in capsys.readouterr().err
    assert readme.read_text() == "# Voided: why\n"


def test_report_out_writes_to_a_device_or_fifo_and_never_replaces_it(tmp_path, capsys):
    """``--out /dev/stdout`` or ``/dev/null`` is written to, as with a shell's ``>``; the temp file
    and rename that keep a regular file whole must never replace a device by a file (found when a
    probe's ``--out /dev/full`` replaced the machine's /dev/full)."""
    out = tmp_path / "out"
    (out / ".runner").mkdir(parents=True)
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    assert cli.main(["report", str(out), "--out", str(null)]) == 0, capsys.readouterr().err
    assert stat.S_ISCHR(null.lstat().st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert cli.main(["report", str(out), "--out", str(fifo), "--format", "json"]) == 0
    reader.join(30)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and json.loads(got[0])["out"] == str(out)
    kept = tmp_path / "private.md"  # an existing report keeps its permissions
    kept.write_text("old")
    kept.chmod(0o600)
    assert cli.main(["report", str(out), "--out", str(kept)]) == 0
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text() != "old"
    link = tmp_path / "link.md"  # through a link, its target is written and the link stays
    link.symlink_to(tmp_path / "target.md")
    assert cli.main(["report", str(out), "--out", str(link)]) == 0
    assert link.is_symlink() and (tmp_path / "target.md").read_text().startswith("#")


def test_a_tree_with_only_a_runner_start_is_all_pending(tmp_path, capsys):
    out = tmp_path / "out"
    (out / ".runner").mkdir(parents=True)
    ev = {"ts": 1, "event": "runner_start", "run_id": "r1", "tasks": ["a", "b"], "arms": ["plain", "goal"]}
    (out / ".runner/events.jsonl").write_text(json.dumps(ev) + "\n")
    assert cli.main(["status", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["arms"] == ["plain", "goal"] and d["per_arm"]["plain"]["pending"] == 2


def test_fisher_exact_matches_published_values():
    # R: fisher.test(matrix(c(3,1,1,3),2))$p.value = 0.4857; the tea-tasting table.
    assert stats.fisher_exact(3, 1, 1, 3) == pytest.approx(0.485714, abs=1e-6)
    # R: fisher.test(matrix(c(1,11,9,3),2))$p.value = 0.002759 (Wikipedia's example)
    assert stats.fisher_exact(1, 9, 11, 3) == pytest.approx(0.002759, abs=1e-6)
    assert stats.fisher_exact(0, 0, 0, 0) == 1.0
    assert stats.fisher_exact(5, 0, 0, 5) == pytest.approx(0.007937, abs=1e-6)


def test_sign_test():
    assert stats.sign_test(0, 0) == 1.0
    assert stats.sign_test(8, 0) == pytest.approx(2 / 256)
    assert stats.sign_test(3, 3) == 1.0


def _att(task: str, arm: str, stamp: str, status: str) -> Attempt:
    return Attempt(task=task, arm=arm, arm_dir=arm, stamp=stamp, status=status)


def test_bias_alarm_fires_when_one_arm_errors_much_more():
    cells = {}
    for i in range(10):
        t = f"t{i}"
        for arm in ("goal", "heartbeat", "codex-cli"):
            cells[(t, arm)] = build_cell(t, arm, [_att(t, arm, "s1", DONE)])
        # plain errors on 7 tasks before it gets through
        atts = [_att(t, "plain", "s0", ERRORED)] if i < 7 else []
        cells[(t, "plain")] = build_cell(t, "plain", atts + [_att(t, "plain", "s1", DONE)])
    rows = {r["arm"]: r for r in infrastructure(cells, ["plain", "goal", "heartbeat", "codex-cli"])}
    assert rows["plain"]["alarm"] and rows["plain"]["p_value"] < 0.001
    assert "suspect infrastructure before capability" in rows["plain"]["message"]
    assert not any(rows[a]["alarm"] for a in ("goal", "heartbeat", "codex-cli"))


def test_paired_uses_only_cells_both_arms_completed():
    cells = {
        ("t1", "a"): build_cell("t1", "a", [_att("t1", "a", "s", DONE)]),
        ("t1", "b"): build_cell("t1", "b", [_att("t1", "b", "s", ERRORED)]),
        ("t2", "a"): build_cell("t2", "a", [_att("t2", "a", "s", DONE)]),
        ("t2", "b"): build_cell("t2", "b", [_att("t2", "b", "s", DONE)]),
    }
    (row,) = paired(cells, ["a", "b"], ["t1", "t2"])
    assert row["n"] == 1 and row["tasks"] == ["t2"]


def test_status_json_of_an_empty_runner_tree_is_valid(tmp_path, capsys):
    out = tmp_path / "out"
    (out / ".claims").mkdir(parents=True)
    (out / ".claims" / "t1__plain.claim").write_text(str(os.getpid()))
    assert cli.main(["status", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["per_arm"]["plain"]["running"] == 1 and d["claims"] == ["t1__plain"]


def test_receipt_written_by_the_arms_is_read_with_every_figure(tmp_path):
    from modes.receipt import Receipt
    from runner.results.records import read_receipt

    r = Receipt(arm="goal", mode=None, disclosures=[], agent="x", codex_version="0", model="m", provider={})
    r.continuations, r.unblocks, r.turns, r.goal_status_final = 3, 2, 5, "complete"
    r.errors, r.deadline_hit = ["e1", "e2"], True
    r.write(tmp_path / "agent")
    got = read_receipt(tmp_path)
    assert (got.continuations, got.unblocks, got.errors, got.goal_status_final) == (3, 2, 2, "complete")
    assert (got.turns, got.deadline_hit, got.arm) == (5, True, "goal")


def _write_done_pair(out: Path, task: str, arm: str, partial: float) -> None:
    """A minimal finished harbor job (the fields harbor 0.25.0 writes that the model reads)."""
    job = out / task / arm / "20261129T080000Z" / arm
    trial = job / f"{task}__abcdefg"
    (trial / "verifier").mkdir(parents=True)
    stats = {"n_completed_trials": 1, "n_errored_trials": 0, "n_running_trials": 0, "n_pending_trials": 0}
    (job / "result.json").write_text(
        json.dumps({"finished_at": "2026-11-29T08:01:00", "n_total_trials": 1, "stats": stats})
    )
    res = {"verifier_result": {"rewards": {"reward": 0.0}}, "exception_info": None}
    (trial / "result.json").write_text(json.dumps(res))
    (trial / "verifier" / "metrics.json").write_text(json.dumps({"partial_score": partial}))


def test_report_discloses_the_arms_deviations_automatically(tmp_path, capsys):
    from modes.profiles import ARMS

    out = tmp_path / "out"
    for arm, p in (("plain", 0.5), ("heartbeat", 0.25), ("goal", 0.75)):
        _write_done_pair(out, "t1", arm, p)
    assert cli.main(["report", str(out), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["arms"] == ["plain", "goal", "heartbeat"]  # canonical order
    assert rep["disclosures"] == {a: list(ARMS[a].disclosures) for a in ("plain", "heartbeat")}
    assert rep["stand_ins"] == []
    assert cli.main(["report", str(out), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "generic_cli" in md and "codex exec" in md
    assert rep["cells"]["t1"]["goal"]["partial"] == 0.75


@pytest.mark.parametrize("v, n", [(0.7, 15), (0.3, 6), (0.1, 10), (0.4 - 0.1, 6)])
def test_an_interval_holds_the_mean_it_stands_beside_when_every_value_is_the_same(v, n):
    """Found by a review: every task 0.7 read 0.6999999999999998 beside [0.7000000000000001, ...] in
    the JSON (numpy's pairwise sum against ``sum() / n``), and a reader that checks lo <= mean <= hi
    failed. The report's intervals (cells, pairs, pass@k) and the total row's clustered one."""
    from runner.results import report

    m = stats.mean([v] * n)
    lo, hi = report._ci([v] * n)
    assert lo <= m <= hi and hi - lo < 1e-9
    cells = tuple(SimpleNamespace(task=f"t{i}") for i in range(n))
    lo, hi = report._task_ci(cells, (v,) * n)
    assert lo <= m <= hi


def test_a_journal_that_cannot_be_read_is_said_never_a_silent_all_time(mini_tree, tmp_path, capsys):
    """Found by a probe: the run's events.jsonl replaced by a FIFO, a dir or a symlink loop read as a
    tree without a journal ("(all time)", health "OK"); it is an unreadable file like any other."""
    import shutil

    for kind in ("fifo", "dir", "loop"):
        out = tmp_path / kind
        shutil.copytree(mini_tree, out, symlinks=True)
        journal = out / ".runner" / "events.jsonl"
        journal.parent.mkdir(exist_ok=True)
        if kind == "fifo":
            os.mkfifo(journal)
        elif kind == "dir":
            journal.mkdir()
        else:
            journal.symlink_to(journal)
        assert cli.main(["status", str(out)]) == 0
        said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("unreadable:")]
        assert said and said[0].startswith(f"unreadable: {journal}: "), (kind, said)


def test_a_wall_time_is_a_span_that_can_be_or_none():
    """Found by a probe: a finish before the start read as 0 s of wall time, one in the year 9999
    as 8,000 years; neither is a duration."""
    from runner.results.records import _span_sec

    assert _span_sec("2026-12-01T08:00:00Z", "2026-12-01T08:01:30Z") == 90.0
    assert _span_sec("2026-12-01T08:01:30Z", "2026-12-01T08:00:00Z") is None
    assert _span_sec("2026-12-01T08:00:00Z", "9999-12-31T00:00:00Z") is None
    assert _span_sec("0001-01-01T00:00:00Z", "2026-12-01T08:00:00Z") is None
    assert _span_sec("2026-12-01T08:00:00", "2026-12-01T08:00:01Z") is None  # naive against aware
