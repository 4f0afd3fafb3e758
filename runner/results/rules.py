"""The scoring and completion rules: each one function, imported by everything that needs it.

The runner (resume, skip), status, report, health and the console must never disagree about what
"done" or "partial score" means; in the field two copies of the done rule drifted apart. So the rules
live here and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from modes.naming import ENVIRONMENT_LOST
from modes.values import COUNT, SCORE, Bad, number

#: metrics.json phases that mark a verifier still in progress (a rerun): not a score.
IN_PROGRESS_PHASES = frozenset({"initialized", "starting"})
BUILD_FAILED_PHASE = "build_failed"


def done_of_counts(n_completed: int, n_errored: int) -> bool:
    """The done rule on a job's counts: it completed a trial and none errored."""
    return n_completed >= 1 and n_errored == 0


def job_counts(stats: Mapping[str, Any] | None) -> tuple[int, int] | Bad:
    """``(completed, errored)`` trials of harbor's job ``stats`` (legacy aliases accepted), or the
    count that makes no sense (``modes.values``: a string, a float, ``10**400``)."""
    if not isinstance(stats, Mapping):
        return (0, 0)
    got = []
    for key, alias in (("n_completed_trials", "n_trials"), ("n_errored_trials", "n_errors")):
        k = key if stats.get(key) is not None else alias
        v = number(stats.get(k), COUNT, f"stats.{k}")
        if isinstance(v, Bad):
            return v
        got.append(int(v or 0))
    return got[0], got[1]


def is_done(stats: Mapping[str, Any] | None) -> bool:
    """A job (one task x arm attempt) is done when it completed a trial and none errored.

    ``stats`` is the ``stats`` object of harbor's job ``result.json`` (legacy aliases accepted).
    ``n_errored_trials > 0`` is never done: most likely infrastructure, so it must be rerun. Counts
    that make no sense are never done.
    """
    counts = job_counts(stats)
    return not isinstance(counts, Bad) and done_of_counts(*counts)


def metrics_is_score(metrics: Mapping[str, Any] | None) -> bool:
    """False for a metrics file that is not a score yet (``phase: initialized``: a rerun in progress)."""
    if not isinstance(metrics, Mapping):
        return False
    phase = metrics.get("phase")
    # a non-string phase (a list, a dict) is no known phase; `in` on a frozenset would raise for it
    return not (isinstance(phase, str) and phase in IN_PROGRESS_PHASES)


def build_failed(metrics: Mapping[str, Any] | None) -> bool:
    """The verifier could not build the agent's code: a scored 0, never an infrastructure error."""
    return isinstance(metrics, Mapping) and metrics.get("phase") == BUILD_FAILED_PHASE


#: A score (reward, partial, pass rate) is a number in this range (``modes.values.SCORE``, [0, 1]:
#: harbor's and the task verifiers' convention); anything else makes the cell unreadable.
SCORE_RANGE = SCORE


def partial_score(metrics: Mapping[str, Any] | None) -> float | None | Bad:
    """The continuous score: ``partial_score``, else ``pass_rate``; build_failed is 0; None if no score.

    A ``phase: initialized`` file (a rerun in progress) is not a score and gives None, so it can never
    fabricate a 0. A value outside ``SCORE_RANGE``, not finite or not a number is ``Bad``.
    """
    if not metrics_is_score(metrics):
        return None
    assert metrics is not None
    if build_failed(metrics):
        return 0.0
    for key in ("partial_score", "pass_rate"):
        v = number(metrics.get(key), SCORE_RANGE, key)
        if v is not None:
            return v
    return None


def _rate(passed: Any, total: Any, pk: str, tk: str) -> float | None | Bad:
    """``passed / total`` of two count fields (None when either is absent or total is 0)."""
    p, t = number(passed, COUNT, pk), number(total, COUNT, tk)
    if isinstance(p, Bad):
        return p
    if isinstance(t, Bad):
        return t
    if p is None or t is None:
        return None
    if p > t:  # (of a stated total of 0 too: a probe's 5 of 0 read as a pass rate of 1.0)
        return Bad(pk, f"{p} passed of {t} ({tk})")
    return p / t if t else None


def test_pass_rate(metrics: Mapping[str, Any] | None) -> float | None | Bad:
    """The fraction of tests that passed, beside the partial score (they diverge on staged tasks).

    From, in order: ``passed``/``total`` (or ``passed + failed``), the per-gate ``pytest`` block summed,
    ``total_passed``/``total_tests``, ``new_passed``/``new_total``, ``pass_rate``, ``gates_passed``/
    ``gates_total``. build_failed counts as 0. A count that is not a whole number in range, more
    passed than total, or a rate outside ``SCORE_RANGE`` is ``Bad``.
    """
    if not metrics_is_score(metrics):
        return None
    assert metrics is not None
    if build_failed(metrics):
        return 0.0
    passed, failed, total = (number(metrics.get(k), COUNT, k) for k in ("passed", "failed", "total"))
    for v in (passed, failed, total):
        if isinstance(v, Bad):
            return v
    if passed is not None and total is not None and (total or passed):
        return _rate(passed, total, "passed", "total")
    if passed is not None and failed is not None and passed + failed > 0:
        return passed / (passed + failed)
    block = metrics.get("pytest")
    if isinstance(block, Mapping):
        p = t = 0
        for name, g in block.items():
            if not isinstance(g, Mapping):
                continue
            keys = [f"pytest.{str(name)[:40]}.{k}" for k in ("passed", "failed", "total")]
            gp, gf, gt = (
                number(g.get(k), COUNT, f) for k, f in zip(("passed", "failed", "total"), keys, strict=True)
            )
            for v in (gp, gf, gt):
                if isinstance(v, Bad):
                    return v
            if gp is None:
                continue
            p += gp
            t += gt if gt is not None else gp + (gf or 0)
        if t > 0:
            return _rate(p, t, "pytest.passed", "pytest.total")
    for pk, tk in (("total_passed", "total_tests"), ("new_passed", "new_total")):
        r = _rate(metrics.get(pk), metrics.get(tk), pk, tk)
        if r is not None:
            return r
    v = number(metrics.get("pass_rate"), SCORE_RANGE, "pass_rate")
    if v is not None:
        return v
    return _rate(metrics.get("gates_passed"), metrics.get("gates_total"), "gates_passed", "gates_total")


#: the fields a verifier states its test counts in (``test_pass_rate`` reads them in its order)
TEST_COUNT_FIELDS = ("passed", "failed", "total", "pytest", "total_passed", "total_tests", "new_passed",
                     "new_total", "pass_rate", "gates_passed", "gates_total")  # fmt: skip


def counts_stated(metrics: Mapping[str, Any]) -> bool:
    """Did the verifier state its test counts, whatever they are? ``0 of 0`` (no test collected) has
    no pass rate, yet is the verifier's honest word: not a hole in the file (``cells._holes``), which
    a review found the extended hole rule making of it."""
    return any(metrics.get(k) is not None for k in TEST_COUNT_FIELDS)


#: the measures a build failure counts as 0 in means (the verifier could not build the agent's code)
ZERO_WHEN_BUILD_FAILED = ("partial", "pass_rate")
#: the measures a flagged cell (a hole in what the agent could write: ``hole_counts_against``) counts
#: as 0 in means: the arm's failure, never a cell that drops out
ZERO_WHEN_FLAGGED = ("reward", "partial", "pass_rate")


def scored_measure(
    value: float | None, build_failed: bool, measure: str, flagged: bool = False
) -> float | None:
    """A cell's ``measure`` as means and plots count it: a build failure is 0, never dropped; a
    flagged cell (the hole rule) is 0 in every score, whatever a forged file said."""
    if flagged and measure in ZERO_WHEN_FLAGGED:
        return 0.0
    if value is None and build_failed and measure in ZERO_WHEN_BUILD_FAILED:
        return 0.0
    return value


# ------------------------------------------------------------------------------------ holes
#
# The hole rule. An agent that can make its failures unreadable must never gain by it: on the
# field's published tree, three of plain's lowest cells replaced by a symlink out of the tree moved
# its mean partial from 0.71 to 0.82, because every mean quietly used the rest. So a cell that is
# unreadable or tampered through anything the agent can write (the trial's agent/, verifier/ and
# artifacts/ dirs, and what harbor copied from them into result.json: the reward, the agent's
# tokens and cost) counts against its arm: scored as a failure and flagged. Means show the flagged
# count beside n, paired comparisons say how many flagged cells each side has, and
# ``--exclude-flagged`` prints the other reading, labelled. What the harness itself failed to
# write (harbor's result.json files, the runner's dirs) is infrastructure: not a score, not the
# arm's; the bias alarm counts it with the errored and voided attempts.

AGENT_SIDE = "agent"
HARNESS_SIDE = "harness"
#: the trial's dirs the agent's container mounts (harbor's /logs/agent, /logs/verifier, /logs/artifacts)
AGENT_WRITABLE_DIRS = ("agent/", "verifier/", "artifacts/")
#: fields of harbor's trial result.json whose values come from the agent-writable dirs or the agent
AGENT_DERIVED_FIELDS = ("verifier_result.", "agent_result.")


def hole_side(rel: str, field: str = "") -> str:
    """Who could have made a file of a trial (``rel``, relative to the trial dir) unreadable or a
    value of it (``field``) nonsense: the agent (``AGENT_SIDE``) or only the harness."""
    if rel.startswith(AGENT_WRITABLE_DIRS) or rel.rstrip("/") + "/" in AGENT_WRITABLE_DIRS:
        return AGENT_SIDE
    if field.startswith(AGENT_DERIVED_FIELDS):
        return AGENT_SIDE
    return HARNESS_SIDE


def counts_in_means(done: bool, flagged: bool, exclude_flagged: bool = False) -> bool:
    """Does a cell count in an arm's means (and paired comparisons)? Done cells do; flagged cells
    do too, as failures, unless the other reading (``--exclude-flagged``) is asked for."""
    return done or (flagged and not exclude_flagged)


def reward_of_stats(reward_stats: Mapping[str, Any]) -> float | None:
    """harbor's reward of a finished one-trial job from its job stats (``evals.*.reward_stats``:
    ``{"reward": {"<value>": [trial names]}}``), the number ``reward_of`` reads from the trial;
    None when there is none or it is not a score (the caller then reads the trial itself)."""
    by_value = reward_stats.get("reward")
    if not isinstance(by_value, Mapping) or len(by_value) != 1:
        return None
    (value,) = by_value
    try:
        got = number(float(value), SCORE_RANGE, "reward")
    except (TypeError, ValueError, OverflowError):
        return None
    return None if isinstance(got, Bad) else got


#: where harbor's result.json keeps the reward (the name a bad value is reported by)
REWARD_FIELD = "verifier_result.rewards.reward"


def reward_of(verifier_result: Mapping[str, Any] | None) -> float | None | Bad:
    """harbor's reward of a trial: ``verifier_result.rewards.reward`` (None when not verified),
    ``Bad`` when it is not a score (harbor copies it from the verifier's reward.txt)."""
    if not isinstance(verifier_result, Mapping):
        return None
    rewards = verifier_result.get("rewards")
    if not isinstance(rewards, Mapping):
        return None
    return number(rewards.get("reward"), SCORE_RANGE, REWARD_FIELD)


# ----------------------------------------------------------------------------------- voiding
#
# Why one table: a failure that hits one arm more than another reverses a comparison (runbook
# pitfall 1), and so does a rule that voids one arm's own failures as "infrastructure". Whether
# an attempt is voided (moved aside and run again: not a result of the arm) or scored (a result
# of the arm, kept) must depend only on what happened, never on which arm it was; and it must
# not be decided by words the agent could have printed. So: before the agent ran, every failure
# is the harness's; after it started, only harbor's own failure causes, the engine going away,
# the container vanishing from outside and the address pool voids; the agent's own failed
# commands (including a failed ``docker exec`` and any "Error response from daemon" in its
# output) are scored.

VOID = "void"
SCORED = "scored"

#: harbor 0.25.0 models/trial/error_policy.py causes that are the sandbox's or harbor's, not the agent's
HARBOR_INFRA_CAUSES = frozenset({"sandbox_failed", "harbor_failed", "cancelled"})
POOL_WORDS = (
    "all predefined address pools have been fully subnetted",
    "could not find an available, non-overlapping ipv4 address pool",
)
#: what docker, compose and harbor ("Docker daemon is not running. Please start Docker") say when
#: the engine does not answer
ENGINE_WORDS = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "docker daemon is not running",
)
#: the daemon's own words about a container that is gone (by id) or a compose service not running
_CONTAINER_GONE = re.compile(
    r'no such container|container [0-9a-f]{12,64} is not running|service "[^"]+" is not running'
)


@dataclass(frozen=True)
class TrialFacts:
    """What a finished (or abandoned) trial's files say, as far as voiding needs them.

    ``text`` is the exception message and the tail of exception.txt, lower-cased; ``cause`` is
    harbor's own failure cause for the exception type ("" when unknown); ``stopped_by`` is the
    runner's stop reason when the runner itself stopped the job (a signal or --stop).
    """

    has_result: bool = True
    exception_type: str = ""
    text: str = ""
    agent_started: bool = True
    cause: str = ""
    stopped_by: str | None = None
    #: the engine's own account of the trial's main container dying without a stop request before
    #: the trial ended ("" if it did not, or nobody watched): runner.results.deaths
    container_died: str = ""
    #: the runner's own record of the model gateway dying while the attempt was live at it (""
    #: if it did not): runner.results.ledger.outage_of
    gateway_failed: str = ""
    #: the runner's record of an operator's spend cap stopping the attempt (``--on-cap stop``; ""
    #: if none did): runner.results.caps.cut_of
    spend_cut: str = ""
    #: the trial's verifier finished (``verifier.finished_at`` in its result.json); read only for a
    #: trial the runner stopped, where a clean result without it is a stopped agent, not a score
    verified: bool = True


@dataclass(frozen=True)
class VoidRule:
    name: str
    verdict: str  # VOID or SCORED
    what: str  # the row in the reader's words (shown as the reason)
    applies: Callable[[TrialFacts], bool]


#: The voiding table, first matching row wins. Every row has a test (tests/runner/test_voiding.py).
VOIDING: tuple[VoidRule, ...] = (
    VoidRule("spend_cap_stopped", VOID, "stopped at the operator's spend cap (--on-cap stop): nothing of it is scored",
             lambda f: bool(f.spend_cut)),
    VoidRule("no_result", VOID, "harbor ended before the trial finished (no result.json)",
             lambda f: not f.has_result),
    VoidRule("gateway_failed", VOID, "the model gateway failed while the attempt was live at it (calls refused or cut)",
             lambda f: bool(f.gateway_failed)),
    VoidRule("stopped_unverified", VOID, "stopped by the runner before its verifier finished",
             lambda f: f.stopped_by is not None and not f.exception_type and not f.verified),
    VoidRule("finished", SCORED, "finished without exception", lambda f: not f.exception_type),
    VoidRule("stopped_by_runner", VOID, "stopped by the runner", lambda f: f.stopped_by is not None),
    VoidRule("harbor_cause", VOID, "harbor classifies the exception as the sandbox's or its own",
             lambda f: f.cause in HARBOR_INFRA_CAUSES),
    VoidRule("before_agent", VOID, "failed before the agent ran (environment start or agent setup)",
             lambda f: not f.agent_started),
    VoidRule("pool_exhausted", VOID, "Docker address pool exhausted",
             lambda f: any(w in f.text for w in POOL_WORDS)),
    VoidRule("engine_gone", VOID, "the Docker engine went away",
             lambda f: any(w in f.text for w in ENGINE_WORDS)),
    VoidRule("environment_lost", VOID, "the trial's container or engine went away under the agent",
             lambda f: ENVIRONMENT_LOST in f.text),
    VoidRule("container_gone", VOID, "the container was removed or stopped from outside",
             lambda f: _CONTAINER_GONE.search(f.text) is not None),
    VoidRule("container_died", VOID, "the engine saw the trial's container die under it (killed, OOM)",
             lambda f: bool(f.container_died)),
    VoidRule("agent_failure", SCORED, "the agent's own failure (its commands, timeout, model errors)",
             lambda f: True),
)  # fmt: skip


def engine_outage(text: str) -> bool:
    """Does a failure's text say the Docker engine did not answer, or went away under the trial?

    Such a failure is voided (a row of ``VOIDING``) and it is the network gate's business, not the
    circuit breaker's: while the engine does not answer the gate starts nothing (``gate_error``) and
    waits for it, so an engine restart never becomes a wall that pauses the run.
    """
    low = text.lower()
    return ENVIRONMENT_LOST in low or any(w in low for w in ENGINE_WORDS)


def voiding_rule(facts: TrialFacts) -> VoidRule:
    """The row of ``VOIDING`` that decides this trial: void (infrastructure) or scored (the arm's)."""
    return next(r for r in VOIDING if r.applies(facts))
