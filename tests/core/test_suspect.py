"""Tasks every arm failed alike (runner/results/suspect.py), on a tree built from recorded real files.

The tree (tests/core/suspect_tree.py) has one task every arm failed the same way and near misses
around it; the rule must mark that one and no other, the report must show it with its evidence,
count it as always in the default reading, and leave it out only in the labelled other reading.
"""

from __future__ import annotations

import json
import shutil

import pytest
import suspect_tree
from suspect_tree import ARMS, BUILD, OK_PARTIALS, SOME_TESTS, SUSPECT, done, errored, stdout_failing

from marathon import cli
from runner.results import suspect
from runner.results.model import RunModel
from runner.results.report import build_report, render


@pytest.fixture(scope="module")
def sus_tree(tmp_path_factory):
    return suspect_tree.build(tmp_path_factory.mktemp("suspect") / "out")


@pytest.fixture
def sus_copy(sus_tree, tmp_path):
    dst = tmp_path / "out"
    shutil.copytree(sus_tree, dst, symlinks=True)
    return dst


def _find(out):
    m = RunModel.load(out, index=False)
    cells = m.scoped("all")
    return suspect.find(cells, m.arms, m.tasks)


def test_every_arm_failing_one_task_alike_marks_it_and_no_other(sus_tree):
    found = _find(sus_tree)
    assert list(found) == [SUSPECT]
    s = found[SUSPECT]
    assert s.kind == suspect.BUILD and s.arms == ("plain", "goal", "heartbeat")
    assert s.evidence == "all 3 arms (plain, goal, heartbeat): the verifier's build failed"


def test_the_same_failing_tests_in_every_arm_are_alike(sus_copy):
    heart = suspect_tree.trial_dir(sus_copy, "zero-tests-differ", "heartbeat").parent.parent.parent
    shutil.rmtree(heart)
    done(
        sus_copy,
        "zero-tests-differ",
        "heartbeat",
        SOME_TESTS,
        stdout=stdout_failing("div", "mul", "div_zero"),
    )
    found = _find(sus_copy)
    assert set(found) == {SUSPECT, "zero-tests-differ"}
    s = found["zero-tests-differ"]
    assert s.kind == suspect.TESTS and s.detail == ("div", "div_zero", "mul")
    assert "the same 3 failing test(s): div, div_zero, mul" in s.evidence


def test_the_same_exception_in_every_arm_is_alike_numbers_and_ids_masked(sus_copy):
    shutil.rmtree(sus_copy / "crash-differs")
    for arm, port in zip(ARMS, (41001, 41002, 41003), strict=True):
        errored(
            sus_copy,
            "crash-differs",
            arm,
            message=f"connection refused: 127.0.0.1:{port} (container 3f9a2c1b7e)",
        )
    found = _find(sus_copy)
    assert set(found) == {SUSPECT, "crash-differs"}
    assert found["crash-differs"].kind == suspect.EXCEPTION
    assert found["crash-differs"].evidence.endswith(
        "errored with the same exception: RuntimeError: connection refused: #.#.#.#:# (container <id>)"
    )


def test_two_arms_that_say_why_and_differently_are_not_alike_beside_one_that_does_not(sus_copy):
    """Found by a probe: every arm errored with RuntimeError, two with messages that differ ("disk
    full", "network down") and one with none, and the task was marked suspect (an empty message
    made the type alone count). Messages that are known must agree; a missing one is no evidence
    either way."""
    shutil.rmtree(sus_copy / "crash-differs")
    for arm, msg in zip(ARMS, ("disk full", "network down", ""), strict=True):
        errored(sus_copy, "crash-differs", arm, message=msg)
    assert set(_find(sus_copy)) == {SUSPECT}
    shutil.rmtree(sus_copy / "crash-differs")
    for arm, msg in zip(ARMS, ("disk full", "disk full", ""), strict=True):
        errored(sus_copy, "crash-differs", arm, message=msg)
    assert set(_find(sus_copy)) == {SUSPECT, "crash-differs"}  # the known ones agree: alike


def test_an_arm_without_the_task_or_with_a_score_is_never_alike(sus_copy):
    shutil.rmtree(sus_copy / SUSPECT / "heartbeat")
    assert _find(sus_copy) == {}  # heartbeat has not run env-broken: not every arm
    done(sus_copy, SUSPECT, "heartbeat", {"partial_score": 0.05, "pass_rate": 0.2})
    assert _find(sus_copy) == {}
    shutil.rmtree(sus_copy / SUSPECT / "heartbeat")
    done(sus_copy, SUSPECT, "heartbeat", BUILD)
    assert list(_find(sus_copy)) == [SUSPECT]


def _means(rep, arm):
    return rep["arm_summary"][arm]["partial"], rep["arm_summary"][arm]["n"]


def test_the_default_reading_counts_the_suspect_task_and_the_other_reading_leaves_it_out(sus_tree):
    model = RunModel.load(sus_tree)
    default = build_report(model)
    other = build_report(model, exclude_suspect=True)
    assert [s["task"] for s in default["suspect"]] == [SUSPECT] == [s["task"] for s in other["suspect"]]
    assert default["suspect_excluded"] is False and other["suspect_excluded"] is True
    # plain: the ok tasks, env-broken (0, build), zero-mixed (0), zero-tests-differ (0), one-solves (0),
    # zero-unnamed (0); crash-differs errored: not counted
    zeros = 5
    plain = [p[0] for p in OK_PARTIALS.values()]
    want = sum(plain) / (len(plain) + zeros)
    assert _means(default, "plain") == (pytest.approx(want, abs=1e-4), len(plain) + zeros)
    assert _means(other, "plain") == (pytest.approx(sum(plain) / (len(plain) + zeros - 1), abs=1e-4), 9)
    assert SUSPECT in default["tasks"] and SUSPECT not in other["tasks"]
    pg = next(p for p in default["paired"] if (p["a"], p["b"]) == ("plain", "goal"))
    po = next(p for p in other["paired"] if (p["a"], p["b"]) == ("plain", "goal"))
    assert po["n"] == pg["n"] - 1 and SUSPECT not in po["tasks"]


def test_report_shows_the_mark_and_evidence_in_every_format_and_labels_the_other_reading(sus_tree, capsys):
    evidence = "all 3 arms (plain, goal, heartbeat): the verifier's build failed"
    rep = build_report(RunModel.load(sus_tree))
    md = render(rep, "md")
    assert f"- {SUSPECT}: suspect: every arm failed alike: {evidence}" in md
    assert f"| {SUSPECT} ⚠suspect |" in md and "OTHER READING" not in md
    html = render(rep, "html")
    assert f"{SUSPECT} ⚠suspect" in html and evidence.replace("'", "&#x27;") in html
    assert cli.main(["report", str(sus_tree), "--format", "json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["suspect"] == [
        {"task": SUSPECT, "arms": list(ARMS), "kind": "build failed", "detail": [], "evidence": evidence}
    ]
    for fmt in ("md", "html"):
        assert cli.main(["report", str(sus_tree), "--format", fmt, "--exclude-suspect"]) == 0
        out = capsys.readouterr().out
        assert (
            "OTHER READING: the 1 suspect task(s) every arm failed alike are excluded from every figure"
            in out
        )
        assert "env-broken" in out  # named in the label and the suspect list, never in the matrix
    assert cli.main(["report", str(sus_tree), "--format", "json", "--exclude-suspect"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["suspect_excluded"] is True and SUSPECT not in js["cells"]
