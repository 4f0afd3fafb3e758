"""runner.results.verifier_tests: per-test outcomes from real verifier output, pytest, cargo, metrics.json, garbage."""

from __future__ import annotations

import json
import os

from reader_data import RECORDED, trial_of

from runner.results import verifier_tests as vt
from runner.results.verifier_tests import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    disagreements,
    parse_line,
    parse_stdout,
    read_outcomes,
)

ARMS = ("plain", "goal", "ssh-goal", "codex-cli", "heartbeat")


def test_recorded_outcomes_match_the_verifier_counts_of_every_arm():
    for arm in ARMS:
        trial = trial_of(RECORDED, arm)
        got = read_outcomes(trial)
        metrics = json.loads((trial / "verifier" / "metrics.json").read_text())
        d = got.as_dict()
        assert got.source == "verifier/test-stdout.txt"
        assert len(d) == metrics["total"]
        assert sum(1 for v in d.values() if v == PASS) == metrics["passed"]
        assert sum(1 for v in d.values() if v == FAIL) == metrics["failed"]


def test_the_tests_plain_failed_and_the_others_passed_are_the_disagreements():
    per_arm = {arm: read_outcomes(trial_of(RECORDED, arm)) for arm in ARMS}
    plain = per_arm["plain"].as_dict()
    assert disagreements(per_arm) == [n for n, v in plain.items() if v == FAIL] == ["mul", "div", "div_zero"]
    assert disagreements({a: per_arm[a] for a in ("goal", "heartbeat")}) == []


def test_pytest_verbose_and_summary_lines():
    lines = [
        "============================= test session starts ==============================",
        "tests/test_outputs.py::test_decode_empty PASSED                          [ 33%]",
        "tests/test_outputs.py::test_decode_frame[big-1] FAILED                   [ 66%]",
        "tests/test_outputs.py::test_skip SKIPPED (no zstd)                       [100%]",
        "=========================== short test summary info ============================",
        "PASSED tests/test_outputs.py::test_decode_empty",
        "FAILED tests/test_outputs.py::test_decode_frame[big-1] - AssertionError: 3 != 4",
        "ERROR tests/test_outputs.py::test_setup_broke - RuntimeError",
        "XFAIL tests/test_outputs.py::test_known_bug",
        "========================= 1 failed, 1 passed in 0.12s ==========================",
    ]
    got, truncated = parse_stdout(lines)
    assert dict(got) == {
        "tests/test_outputs.py::test_decode_empty": PASS,
        "tests/test_outputs.py::test_decode_frame[big-1]": FAIL,
        "tests/test_outputs.py::test_skip": SKIP,
        "tests/test_outputs.py::test_setup_broke": ERROR,
        "tests/test_outputs.py::test_known_bug": SKIP,
    }
    assert not truncated


def test_cargo_lines():
    lines = [
        "running 3 tests",
        "test frame::tests::header ... ok",
        "test frame::tests::checksum ... FAILED",
        "test huff::tests::slow ... ignored",
        "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out",
    ]
    got, _ = parse_stdout(lines)
    assert dict(got) == {
        "frame::tests::header": PASS,
        "frame::tests::checksum": FAIL,
        "huff::tests::slow": SKIP,
    }


def test_metrics_json_fields_when_stdout_names_none(tmp_path):
    v = tmp_path / "verifier"
    v.mkdir()
    (v / "test-stdout.txt").write_text("all done\n")
    (v / "metrics.json").write_text(json.dumps({"tests": {"a": "passed", "b": False, "c": "weird"}}))
    got = read_outcomes(tmp_path)
    assert got.as_dict() == {"a": PASS, "b": FAIL} and got.source == "verifier/metrics.json"
    (v / "metrics.json").write_text(json.dumps({"results": [{"name": "x", "status": "failed"}, {"name": 3}]}))
    assert read_outcomes(tmp_path).as_dict() == {"x": FAIL}


def test_garbage_long_lines_and_special_files_are_skipped(tmp_path):
    assert parse_line("x" * (vt.MAX_LINE + 1) + ": PASS") is None
    assert parse_line("\x00\xff: PASS") is None
    assert parse_line("sub: error AttributeError('x')") is None
    v = tmp_path / "verifier"
    v.mkdir()
    os.mkfifo(v / "test-stdout.txt")  # never opened: reading it would block
    (v / "metrics.json").write_bytes(b"\xff{not json")
    assert read_outcomes(tmp_path).outcomes == ()
    assert read_outcomes(tmp_path / "missing").outcomes == ()


def test_a_huge_output_is_read_up_to_its_cap(tmp_path):
    v = tmp_path / "verifier"
    v.mkdir()
    with open(v / "test-stdout.txt", "wb") as fh:
        fh.write(b"t1: PASS\n")
        fh.truncate(1 << 30)  # sparse: a gigabyte, read only up to the cap
    got = read_outcomes(tmp_path)
    assert got.as_dict() == {"t1": PASS} and got.truncated
