"""`marathon demo` (the varied run): the five real arms on the mini-benchmark show what marathon is
for -- partial scores that differ by arm, a deadline scored as partial, a build failure, a LoopX
unblock counted, a real setup failure voided and rerun, non-zero paired differences -- while the
bias alarm stays quiet and the fairness audit finds nothing (docs/arms.md, "The demo's scenarios").

Everything real: harbor, Docker, codex, LoopX; the scripted model is the one stand-in. Read back
through ``marathon report --format json``, the contract other tools read.
"""

from __future__ import annotations

import json

import pytest
from console_support import docker_leftovers, marathon

from marathon.commands.demo import SETUP_FAULT_PAIR
from modes.profiles import ARMS, DEFAULT_ARMS
from runner.results.tree import VOID_README, events_path, voided_root

# ~5 min on this 2-core machine with the five real arms; longer when it is shared
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def varied(demo_varied_run):
    """The session's varied demo run (tests/conftest.py), read back through the JSON report."""
    out, r = demo_varied_run
    report = json.loads(marathon("report", str(out), "--format", "json").stdout)
    return out, r, report


def _cells(report):
    return [(t, a, c) for t, row in report["cells"].items() for a, c in row.items()]


def test_every_pair_is_done(varied):
    out, r, report = varied
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "20/20 pairs done" in r.stdout
    assert report["arms"] == list(DEFAULT_ARMS)
    assert [c["status"] for _, _, c in _cells(report)] == ["done"] * 20
    assert docker_leftovers(out) == []


def test_partial_scores_differ_by_arm(varied):
    _, _, report = varied
    spread = {t: {c["partial"] for c in row.values()} for t, row in report["cells"].items()}
    assert any(len(s) >= 3 for s in spread.values()), spread
    assert any(0 < c["partial"] < 1 for _, _, c in _cells(report))


def test_a_deadline_is_scored_as_partial(varied):
    _, _, report = varied
    hit = {(t, a) for t, a, c in _cells(report) if c["deadline_hit"]}
    # the never-finish pair; a slow machine may add another arm's deadline, never remove this one
    assert ("words-passrate", "goal") in hit, hit
    c = report["cells"]["words-passrate"]["goal"]
    assert c["status"] == "done" and 0 < c["partial"] < 1 and c["errored_attempts"] == 0


def test_a_build_failure_is_a_scored_zero(varied):
    _, _, report = varied
    failed = [(t, a, c) for t, a, c in _cells(report) if c["build_failed"]]
    assert [(t, a) for t, a, _ in failed] == [("build-gate", "goal")]
    assert failed[0][2]["partial"] == 0.0 and failed[0][2]["voided_attempts"] == 0


def test_a_loopx_self_lock_is_unblocked_and_counted(varied):
    _, _, report = varied
    unblocked = [(t, a) for t, a, c in _cells(report) if (c["unblocks"] or 0) >= 1]
    assert unblocked and all(ARMS[a].loopx for _, a in unblocked), unblocked
    assert ("calc-partial", "codex-cli") in unblocked
    assert report["cells"]["calc-partial"]["codex-cli"]["reward"] == 1.0  # resumed, then solved
    assert report["arm_summary"]["codex-cli"]["unblocks"] >= 1


def test_a_setup_failure_is_voided_with_its_readme_and_the_pair_rerun(varied):
    out, _, report = varied
    task, arm = SETUP_FAULT_PAIR.split("/")
    voided = [(t, a) for t, a, c in _cells(report) if c["voided_attempts"]]
    assert voided == [(task, arm)]
    c = report["cells"][task][arm]
    assert c["status"] == "done" and c["attempts"] == 2 and c["reward"] == 1.0
    (readme,) = (voided_root(out) / task / arm).glob(f"*/{VOID_README}")
    text = readme.read_text()
    assert "injected setup failure" in text and "before the agent ran" in text
    events = [json.loads(x) for x in events_path(out).read_text().splitlines()]
    assert [e["next_pass"] for e in events if e["event"] == "retry"] == [2]


def test_paired_differences_are_non_zero_and_the_alarm_and_audit_are_quiet(varied):
    _, _, report = varied
    assert any(p["n"] == 4 and p["partial_diff"] for p in report["paired"])
    assert [i for i in report["infrastructure"] if i["alarm"]] == []
    plain = next(i for i in report["infrastructure"] if i["arm"] == "plain")
    assert plain["bad_attempts"] == 1 and plain["p_value"] >= 0.05  # 1 of 5 vs 0 of 16: p = 0.24
    assert report["audit"]["lines"] == [] and report["audit"]["differences"] == []
