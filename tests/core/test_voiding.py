"""The voiding table (runner.results.rules.VOIDING): one case per row, read from trial files the way the
runner reads them (runner.ops.void.classify_trial), and the same verdict whatever the arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.ops.void import classify_trial
from runner.results import rules

DAEMON = "Error response from daemon"
COMPOSE = "Docker compose command failed for environment calc-partial. Command: docker compose exec main sh"

#: (row, exception type or None, agent started, message, runner stop reason); None type = no exception
CASES = [
    ("no_result", "-", True, "", None),
    ("finished", None, True, "", None),
    ("finished", None, True, "", "SIGTERM"),  # a job that finished before the stop is a result
    ("stopped_by_runner", "CancelledError", True, "", "SIGTERM"),
    ("stopped_by_runner", "RuntimeError", True, "boom in the agent", "SIGINT"),
    ("harbor_cause", "EnvironmentStartTimeoutError", False, "x", None),  # sandbox_failed
    ("harbor_cause", "SandboxLikelyOutOfMemoryError", True, "x", None),
    ("harbor_cause", "CancelledError", True, "", None),
    (
        "before_agent",
        "RuntimeError",
        False,
        f"{COMPOSE} ... Return code: 1. Stderr: {DAEMON}: pull denied",
        None,
    ),
    ("before_agent", "RuntimeError", False, "Agent install failed", None),
    ("pool_exhausted", "RuntimeError", True, "all predefined address pools have been fully subnetted", None),
    (
        "engine_gone",
        "RuntimeError",
        True,
        f"{COMPOSE}. Stderr: Cannot connect to the Docker daemon at unix:///x",
        None,
    ),
    (
        "environment_lost",
        "ArmFailure",
        True,
        "trial environment lost: the container exited under the agent",
        None,
    ),
    ("container_gone", "RuntimeError", True, f"{DAEMON}: container 0123456789abcdef is not running", None),
    ("container_gone", "RuntimeError", True, f"{DAEMON}: No such container: 0123456789ab", None),
    ("container_gone", "RuntimeError", True, f'{COMPOSE}. Stderr: service "main" is not running', None),
    # the arm's own failures after it started: scored, whatever daemon words they carry
    ("agent_failure", "RuntimeError", True, f"{COMPOSE}. Return code: 2. Stdout: {DAEMON}: conflict", None),
    ("agent_failure", "NonZeroAgentExitCodeError", True, f"codex exited 1; stderr: {DAEMON}: denied", None),
    (
        "agent_failure",
        "RuntimeError",
        True,
        f"{COMPOSE}. Return code: 127. Stderr: sh: codex: not found",
        None,
    ),
    ("agent_failure", "AgentTimeoutError", True, "timed out", None),
    ("agent_failure", "ApiRateLimitError", True, "429", None),
    ("agent_failure", "RuntimeError", True, "my container is not running the tests I wanted", None),
]


def write_trial(root: Path, arm: str, etype: str | None, agent_ran: bool, msg: str) -> Path:
    """A trial dir as harbor 0.25.0 leaves it (the fields classify_trial reads)."""
    t = root / arm / "calc-partial__abc1234"
    t.mkdir(parents=True)
    if etype == "-":
        return t  # harbor ended before writing result.json
    res = {
        "exception_info": {"exception_type": etype, "exception_message": msg} if etype else None,
        "agent_setup": {"started_at": "a", "finished_at": "b"},
        "agent_execution": {"started_at": "a", "finished_at": "b"} if agent_ran else None,
    }
    (t / "result.json").write_text(json.dumps(res))
    return t


@pytest.mark.parametrize(
    ("row", "etype", "ran", "msg", "stop"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_row_of_the_voiding_table(tmp_path, row, etype, ran, msg, stop):
    verdicts = {}
    for arm in ("plain", "goal", "ssh-goal", "codex-cli", "heartbeat"):
        v = classify_trial(write_trial(tmp_path, arm, etype, ran, msg), stopped_by=stop)
        verdicts[arm] = (v.kind, v.rule, v.reason)
    assert len(set(verdicts.values())) == 1, verdicts  # never depends on the arm
    kind, rule, reason = verdicts["plain"]
    assert rule == row
    want = {rules.VOID: "infra", rules.SCORED: "errored"}[
        next(r.verdict for r in rules.VOIDING if r.name == row)
    ]
    assert kind == ("done" if row == "finished" else want)
    if stop and kind == "infra":
        assert f"stopped by the runner ({stop})" in reason


def test_every_row_has_a_case_and_the_table_ends_with_the_scored_default():
    assert {c[0] for c in CASES} == {r.name for r in rules.VOIDING}
    assert rules.VOIDING[-1].verdict == rules.SCORED and rules.VOIDING[-1].applies(
        rules.TrialFacts(exception_type="x")
    )


def test_daemon_words_alone_never_void_an_arm_that_started():
    f = rules.TrialFacts(exception_type="RuntimeError", text=f"{DAEMON}: anything at all".lower())
    assert rules.voiding_rule(f).verdict == rules.SCORED
    assert (
        rules.voiding_rule(
            f.__class__(exception_type="RuntimeError", text=f.text, agent_started=False)
        ).verdict
        == rules.VOID
    )


def test_an_engine_outage_is_the_gates_business_not_the_breakers():
    """A dockerd restart fails every attempt that starts while it is down with the same words; the
    runner's gate waits for the engine, so those voided attempts must not pause the run."""
    assert rules.engine_outage(
        f"{COMPOSE}. Stdout: Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?"
    )
    assert rules.engine_outage("ArmFailure: trial environment lost: container 0123456789ab exited")
    assert rules.engine_outage(
        "harbor output: Docker daemon is not running. Please start Docker and try again."
    )
    assert not rules.engine_outage(f"{COMPOSE}. Stderr: {DAEMON}: pull access denied for img")
    assert not rules.engine_outage("401 invalid_api_key")
