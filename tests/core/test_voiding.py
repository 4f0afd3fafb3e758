"""The voiding table (runner.results.rules.VOIDING): one case per row, read from trial files the way the
runner reads them (runner.ops.void.classify_trial), and the same verdict whatever the arm."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from modes import safetext
from modes.naming import compose_project
from runner.ops.death_watch import DeathWatch
from runner.ops.void import classify_trial
from runner.results import rules

#: the engine's events for a docker kill and a docker stop (tests/data/record_engine_events.py)
ENGINE_EVENTS = json.loads((Path(__file__).resolve().parents[1] / "data" / "engine-events.json").read_text())
TRIAL = "calc-partial__abc1234"

DAEMON = "Error response from daemon"
COMPOSE = "Docker compose command failed for environment calc-partial. Command: docker compose exec main sh"

#: (row, exception type or None, agent started, message, runner stop reason); None type = no exception
CASES = [
    ("no_result", "-", True, "", None),
    ("no_result", "-", True, "", "SIGTERM"),  # cancelled before harbor wrote its result: says so
    ("finished", None, True, "", None),
    ("finished", None, True, "", "SIGTERM"),  # a job that finished before the stop is a result
    # harbor has written a clean result for a trial it was cancelling (seen once in CI: "done ...
    # reward=None" after the runner's SIGTERM): without a finished verifier it is no score
    ("stopped_unverified", None, True, "", "SIGTERM"),
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
    # the model gateway died while the attempt was live at it (the runner's outages.jsonl): void,
    # whatever the trial says, finished or not
    ("gateway_failed", None, True, "", None),
    ("gateway_failed", "ArmFailure", True, "turn failed: stream disconnected", None),
    # an operator's spend cap stopped it (--on-cap stop; the runner's cuts.jsonl): void, whether it
    # finished, failed on a refused call, or never wrote its result
    ("spend_cap_stopped", None, True, "", "spend_cap_run"),
    ("spend_cap_stopped", "ArmFailure", True, "turn failed: 402 Payment Required", None),
    ("spend_cap_stopped", "-", True, "", "spend_cap_arm"),
    # killed under harbor's verifier: harbor's own words say nothing of it, the engine's events do
    (
        "container_died",
        "RewardFileNotFoundError",
        True,
        "No reward file found at /logs/verifier/reward.txt",
        None,
    ),
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
    # the agent's own words in a harness message never void (a probe: an agent whose tool printed the
    # daemon's words had its failure voided and rerun): harbor's installed agent's stdout and stderr
    (
        "agent_failure",
        "NonZeroAgentExitCodeError",
        True,
        "Command failed (exit 1): codex exec ...\nstdout: $ docker ps\nCannot connect to the Docker daemon at "
        "unix:///var/run/docker.sock. Is the docker daemon running?\nall predefined address pools have been "
        "fully subnetted\nstderr: Error response from daemon: No such container: 0123456789abcdef",
        None,
    ),
    # and what marathon's arms quote: a rollout's tool output, the in-sandbox driver's error
    (
        "agent_failure",
        "ArmFailure",
        True,
        "tool output in "
        + safetext.quote_agent(
            'rollout-1.jsonl: "unsupported call: no such container: 0123456789abcdef; trial environment lost"'
        ),
        None,
    ),
    (
        "agent_failure",
        "ArmFailure",
        True,
        "the driver in the sandbox failed: "
        + safetext.quote_agent(
            "Cannot connect to the Docker daemon\nall predefined address pools have been fully subnetted"
        ),
        None,
    ),
]


def write_trial(
    root: Path,
    arm: str,
    etype: str | None,
    agent_ran: bool,
    msg: str,
    finished_at: str = "",
    verifier_finished: str = "",
) -> Path:
    """A trial dir as harbor 0.25.0 leaves it (the fields classify_trial reads, indented as harbor
    writes them: ``verifier`` is found by its place in the file)."""
    t = root / arm / TRIAL
    t.mkdir(parents=True)
    if etype == "-":
        return t  # harbor ended before writing result.json
    res = {
        "exception_info": {"exception_type": etype, "exception_message": msg} if etype else None,
        "agent_setup": {"started_at": "a", "finished_at": "b"},
        "agent_execution": {"started_at": "a", "finished_at": "b"} if agent_ran else None,
        "verifier": {"started_at": "a", "finished_at": verifier_finished} if verifier_finished else None,
        "finished_at": finished_at or None,
    }
    (t / "result.json").write_text(json.dumps(res, indent=4))
    return t


def gateway_failed_trial(tmp_path: Path, arm: str, etype: str | None, ran: bool, msg: str) -> Path:
    """A trial in a tree's layout whose attempt the runner recorded as live at a gateway that died."""
    from runner.results.tree import outages_path

    out = tmp_path / f"out-{arm}"
    stamp = "2026-12-01__08-00-00"
    trial = write_trial(out / "calc-partial" / arm / stamp, arm, etype, ran, msg)
    other = {"task": "calc-partial", "arm": arm, "stamp": "2026-12-01__07-00-00"}  # another attempt
    row = {"host": None, "down_since": 1.0, "restarted_at": 2.0, "by": "runner",
           "live_attempts": [other, {"id": "a1", "task": "calc-partial", "arm": arm, "stamp": stamp}]}  # fmt: skip
    outages_path(out).parent.mkdir(parents=True)
    outages_path(out).write_text(json.dumps(row) + "\n")
    return trial


def spend_cut_trial(tmp_path: Path, arm: str, etype: str | None, ran: bool, msg: str) -> Path:
    """A trial in a tree's layout whose attempt the runner recorded as cut by a spend cap."""
    from runner.results.caps import RUN, Reached, write_cut

    out = tmp_path / f"out-{arm}"
    stamp = "2026-12-01__08-00-00"
    trial = write_trial(out / "calc-partial" / arm / stamp, arm, etype, ran, msg)
    write_cut(out, Reached(RUN, None, 12.5, 10.0),
              [("calc-partial", arm, "2026-12-01__07-00-00"), ("calc-partial", arm, stamp)])  # fmt: skip
    return trial


@pytest.mark.parametrize(
    ("row", "etype", "ran", "msg", "stop"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_row_of_the_voiding_table(tmp_path, row, etype, ran, msg, stop):
    verdicts = {}
    deaths = watch_of("recorded-kill")
    for arm in ("plain", "goal", "ssh-goal", "codex-cli", "heartbeat"):
        ended = _iso(deaths.deaths_at(compose_project(TRIAL))[0] + 5) if row == "container_died" else ""
        if row == "gateway_failed":
            trial = gateway_failed_trial(tmp_path, arm, etype, ran, msg)
        elif row == "spend_cap_stopped":
            trial = spend_cut_trial(tmp_path, arm, etype, ran, msg)
        else:
            # a trial that finished before the stop has its verifier's end in its result
            verified = "2026-12-01T08:00:00.000000Z" if row == "finished" and stop else ""
            trial = write_trial(tmp_path, arm, etype, ran, msg, ended, verified)
        v = classify_trial(trial, stopped_by=stop, deaths=deaths)
        verdicts[arm] = (v.kind, v.rule, v.reason)
    assert len(set(verdicts.values())) == 1, verdicts  # never depends on the arm
    kind, rule, reason = verdicts["plain"]
    assert rule == row
    want = {rules.VOID: "infra", rules.SCORED: "errored"}[
        next(r.verdict for r in rules.VOIDING if r.name == row)
    ]
    assert kind == ("done" if row == "finished" else want)
    if stop and kind == "infra" and row != "spend_cap_stopped":
        assert "stopped by the runner" in reason and reason.endswith(f"({stop})"), reason
    if row == "spend_cap_stopped":
        assert "spend cap of the run" in " ".join(v.evidence) and "$12.50 spent, cap $10.00" in " ".join(
            v.evidence
        )


@pytest.mark.parametrize("layout", ["steps after it", "compact"])
def test_a_verifier_found_anywhere_in_the_result_is_a_finished_verifier(tmp_path, layout):
    """harbor puts ``verifier`` among the file's last keys; a multi-step trial's ``step_results``
    (here 6 KB of them) come after it, and another writer may not indent. Either way a trial the
    runner stopped after its verifier finished is a score, and the tamper rule has its clock."""
    from runner.results.records import verifier_finished

    t = write_trial(tmp_path, "plain", None, True, "", verifier_finished="2026-12-01T08:00:00.000000Z")
    res = json.loads((t / "result.json").read_text())
    if layout == "steps after it":
        res["step_results"] = [
            {"step_name": f"s{i}", "verifier_result": {"rewards": {"reward": 1}}} for i in range(60)
        ]
        text = json.dumps(res, indent=4)
    else:
        text = json.dumps(res)
    assert len(text) > 4096 or layout == "compact"
    (t / "result.json").write_text(text)
    assert verifier_finished(text.encode()) is not None
    v = classify_trial(t, stopped_by="SIGTERM")
    assert (v.kind, v.rule) == ("done", "finished")


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


def watch_of(recorded: str, as_project: str = compose_project(TRIAL)) -> DeathWatch:
    """A watch (never started) fed the engine's recorded events of one container, as if that
    container were the main container of ``as_project``."""
    w = DeathWatch()
    for ev in ENGINE_EVENTS:
        attrs = ev["Actor"]["Attributes"]
        if attrs["com.docker.compose.project"] == recorded:
            w._record(
                {
                    **ev,
                    "Actor": {
                        **ev["Actor"],
                        "Attributes": {**attrs, "com.docker.compose.project": as_project},
                    },
                }
            )
    return w


def _iso(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def test_a_death_counts_only_without_a_stop_request_and_before_the_trial_ended(tmp_path):
    project = compose_project(TRIAL)
    killed, stopped = watch_of("recorded-kill"), watch_of("recorded-stop")
    (died_at,) = killed.deaths_at(project)
    (stopped_at,) = stopped.deaths_at(project)
    assert killed.death_before(project, died_at + 1) is not None
    assert killed.death_before(project, died_at - 1) is None  # after the trial: not under it
    assert killed.death_before("another__project", died_at + 1) is None
    assert (
        stopped.death_before(project, stopped_at + 1) is None
    )  # docker stop / compose down: harbor's teardown
    # the same failure, read with each watch
    t = write_trial(
        tmp_path / "k", "plain", "RewardFileNotFoundError", True, "No reward file", _iso(died_at + 5)
    )
    v = classify_trial(t, deaths=killed)
    assert (v.kind, v.rule) == ("infra", "container_died")
    assert any("without a stop request" in e and "exit code 137" in e for e in v.evidence), v.evidence
    t = write_trial(
        tmp_path / "s", "plain", "RewardFileNotFoundError", True, "No reward file", _iso(stopped_at + 5)
    )
    assert classify_trial(t, deaths=stopped).kind == "errored"
    assert classify_trial(t).kind == "errored"  # nobody watched (health, fleet): harbor's words decide


def test_a_stop_under_the_verifier_is_nobody_elses_teardown(tmp_path):
    """Harbor stops the trial's container only after its verifier finished (``verifier.finished_at``
    is set before the environment stops). A dockerd restart stops every container the same way
    (``kill``, ``die``, ``stop``: the recorded ``docker stop`` events), and one under the verifier
    failed it with ``RewardFileNotFoundError``, scored against the arm (the chaos run of
    2026-12-05). So a stop before the verifier finished voids the trial; after it, it is harbor's
    teardown, and the verifier's own failure is scored. The same from a cluster job's record."""
    from runner.results.deaths import read_deaths, write_deaths

    project = compose_project(TRIAL)
    w = watch_of("recorded-stop")
    (at,) = w.deaths_at(project)
    under = write_trial(tmp_path / "u", "plain", "RewardFileNotFoundError", True, "No reward file",
                        _iso(at + 20), verifier_finished=_iso(at + 2))  # fmt: skip
    v = classify_trial(under, deaths=w)
    assert (v.kind, v.rule) == ("infra", "container_died")
    assert any("while the trial's last phase still ran" in e and "before the verifier finished" in e
               for e in v.evidence), v.evidence  # fmt: skip
    after = write_trial(tmp_path / "a", "plain", "RewardFileNotFoundError", True, "No reward file",
                        _iso(at + 20), verifier_finished=_iso(at - 2))  # fmt: skip
    assert classify_trial(after, deaths=w).kind == "errored"
    stamp = tmp_path / "stamp"
    stamp.mkdir()
    write_deaths(stamp, w.deaths_of({project}))
    rec = read_deaths(stamp)
    assert rec is not None
    assert (
        classify_trial(under, deaths=rec).kind == "infra"
        and classify_trial(after, deaths=rec).kind == "errored"
    )


def test_a_replayed_die_event_is_one_death():
    w = watch_of("recorded-kill")
    for ev in ENGINE_EVENTS:  # a reconnect replays from the last second the watch saw
        if ev["Actor"]["Attributes"]["com.docker.compose.project"] == "recorded-kill":
            w._record({**ev, "Actor": {**ev["Actor"], "Attributes": {**ev["Actor"]["Attributes"],
                       "com.docker.compose.project": compose_project(TRIAL)}}})  # fmt: skip
    assert len(w.deaths_at(compose_project(TRIAL))) == 1


def test_a_cluster_jobs_record_of_its_engine_answers_as_the_watch_did(tmp_path):
    """A cluster job records what its host's engine said (``container-deaths.json``); the runner
    reads the record and voids or scores exactly as with its own watch of the same events."""
    from runner.results.deaths import DEATHS_JSON, read_deaths, write_deaths

    project = compose_project(TRIAL)
    for recorded, kind in (("recorded-kill", "infra"), ("recorded-stop", "errored")):
        watch = watch_of(recorded)
        stamp = tmp_path / recorded
        stamp.mkdir()
        write_deaths(stamp, watch.deaths_of({project, "another__project"}), "unix:///var/run/docker.sock")
        rec = read_deaths(stamp)
        assert rec is not None and rec.engine == "unix:///var/run/docker.sock"
        (at,) = watch.deaths_at(project)
        for end in (at - 1, at + 1):
            assert rec.death_before(project, end) == watch.death_before(project, end)
        t = write_trial(stamp / "t", "plain", "RewardFileNotFoundError", True, "No reward file", _iso(at + 5))
        v = classify_trial(t, deaths=rec)
        assert v.kind == kind, v
        assert (v.rule == "container_died") == (kind == "infra")
    assert read_deaths(tmp_path) is None  # no record: a single-host attempt, or a job that wrote none
    # a malformed or hostile record is no record (never a void, never an exception)
    bad = tmp_path / "bad"
    bad.mkdir()
    for text in ('{"deaths": [{"project": 1}]}', '{"deaths": "x"}', "[]", '{"deaths": [{"project": "p", '
                 '"container": "c", "exit_code": "137", "at": "soon"}]}'):  # fmt: skip
        (bad / DEATHS_JSON).write_text(text)
        assert read_deaths(bad) is None, text
    (bad / DEATHS_JSON).unlink()
    os.mkfifo(bad / DEATHS_JSON)
    assert read_deaths(bad) is None


@given(
    st.text(alphabet=st.characters(blacklist_characters="["), max_size=40),
    st.text(max_size=300),
    st.text(alphabet=st.characters(blacklist_characters="["), max_size=40),
)
@settings(max_examples=300, deadline=None)
def test_the_agents_quoted_words_are_cut_exactly_whatever_they_hold(before, agent, after):
    """A quote's end is its stated length: the agent's own fake markers, newlines and brackets
    inside it never end it early nor eat the harness's words after it."""
    text = before + safetext.quote_agent(agent) + after
    assert safetext.without_agent_quotes(text) == before + after
    assert "\n" not in safetext.quote_agent(agent)


def test_a_quote_of_any_length_keeps_its_marker_in_what_the_rules_read(tmp_path):
    """Found by a review: a 70,000-character driver error (the agent's) ending in the daemon's words
    was cut, in exception.txt's last 64 KiB, before its quote's marker, and voided its attempt."""
    words = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"
    msg = "the driver in the sandbox failed: " + safetext.quote_agent("x" * 70_000 + words)
    assert len(msg) < 3000 and safetext.without_agent_quotes(msg) == "the driver in the sandbox failed: "
    trial = write_trial(tmp_path, "plain", "ArmFailure", True, msg)
    frames = "".join(f'  File "/x/frame{i}.py", line {i}, in f\n    g()\n' for i in range(2000))
    (trial / "exception.txt").write_text(f"Traceback (most recent call last):\n{frames}ArmFailure: {msg}\n")
    assert classify_trial(trial).kind == "errored"
    # a line of exception.txt cut at the start of the 64 KiB read is not read at all
    line2 = "y" * (64 * 1024 - 100 - 1)  # the read starts 100 bytes before it: in the words' line
    (trial / "exception.txt").write_text(
        "[agent text, 9999 chars] " + "x" * 1000 + "] " + words + "\n" + line2 + "\n"
    )
    assert classify_trial(trial).kind == "errored"
