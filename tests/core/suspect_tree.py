"""A tree where every arm fails one task alike, and near misses that must not be called alike.

Built as tests/core/handmade_tree.py builds its tree: real harbor attempts recorded once
(tests/core/recorded: a partial trial with a verifier's test output, and a crashed one) copied and
edited, so no Docker is needed. Three arms (plain, goal, heartbeat); the tasks:

- ``ok-0`` .. ``ok-4``: ordinary scores, every arm above 0 somewhere;
- ``env-broken``: every arm's verifier failed to build: the one suspect task;
- ``zero-mixed``: every arm scores 0, but one with a build failure, the others with no test passed;
- ``zero-tests-differ``: every arm scores 0 with failing tests named, not the same ones;
- ``one-solves``: two arms fail to build, the third solves it;
- ``crash-differs``: every arm errored, with different exceptions;
- ``zero-unnamed``: every arm scores 0 with some tests passing but none named.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.handmade_tree import RECORDED, STAMP, _copy_attempt, _edit

from runner.results import tree

ARMS = ("plain", "goal", "heartbeat")
OK_PARTIALS = {
    "ok-0": (0.2, 0.5, 1.0),
    "ok-1": (0.4, 0.4, 0.9),
    "ok-2": (0.0, 0.6, 0.7),
    "ok-3": (0.1, 0.3, 1.0),
    "ok-4": (0.5, 0.0, 0.8),
}
SUSPECT = "env-broken"


def trial_dir(out: Path, task: str, arm: str) -> Path:
    job = out / task / arm / STAMP / arm
    (trial,) = tree.list_dirs(job)
    return job / trial


def done(
    out: Path,
    task: str,
    arm: str,
    metrics: dict,
    reward: float = 0.0,
    stdout: str | None = None,
    keep_stdout: bool = False,
) -> Path:
    """A done attempt with these verifier files (written before result.json, as harbor does)."""
    job = _copy_attempt(RECORDED, out, ("calc-partial", "partial"), task, arm, STAMP)
    (trial,) = tree.list_dirs(job)
    verifier = job / trial / "verifier"
    (verifier / "metrics.json").write_text(json.dumps(metrics))
    if stdout is not None:
        (verifier / "test-stdout.txt").write_text(stdout)
    elif not keep_stdout:
        (verifier / "test-stdout.txt").unlink()
    _edit(job / trial / "result.json", lambda d: d["verifier_result"]["rewards"].update(reward=reward))

    def job_res(d):
        (ev,) = d["stats"]["evals"].values()
        ev["reward_stats"]["reward"] = {str(reward): [trial]}

    _edit(job / "result.json", job_res)
    return job / trial


def errored(
    out: Path, task: str, arm: str, exc_type: str = "RuntimeError", message: str | None = None
) -> Path:
    """An errored attempt (the recorded crash), its exception edited when asked."""
    job = _copy_attempt(RECORDED, out, ("calc-partial", "crash"), task, arm, STAMP)
    (trial,) = tree.list_dirs(job)

    def exc(d):
        d["exception_info"]["exception_type"] = exc_type
        if message is not None:
            d["exception_info"]["exception_message"] = message

    _edit(job / trial / "result.json", exc)

    def job_exc(d):
        (ev,) = d["stats"]["evals"].values()
        stats = ev.get("exception_stats") or {}
        ev["exception_stats"] = {exc_type: [n for names in stats.values() for n in names] or [trial]}

    _edit(job / "result.json", job_exc)
    return job / trial


def stdout_failing(*failing: str, passing: tuple[str, ...] = ("add", "sub")) -> str:
    return "\n".join([f"{t}: PASS" for t in passing] + [f"{t}: FAIL" for t in failing]) + "\n"


BUILD = {"phase": "build_failed"}
NO_TEST = {"passed": 0, "failed": 5, "total": 5, "partial_score": 0.0}
SOME_TESTS = {"passed": 2, "failed": 3, "total": 5, "partial_score": 0.0}


def build(out: Path) -> Path:
    out.mkdir(parents=True)
    for task, partials in OK_PARTIALS.items():
        for arm, p in zip(ARMS, partials, strict=True):
            done(out, task, arm, {"partial_score": p, "pass_rate": p}, reward=1.0 if p == 1.0 else 0.0)
    for arm in ARMS:
        done(out, SUSPECT, arm, BUILD)
    done(out, "zero-mixed", "plain", BUILD)
    done(out, "zero-mixed", "goal", NO_TEST)
    done(out, "zero-mixed", "heartbeat", NO_TEST)
    done(out, "zero-tests-differ", "plain", SOME_TESTS, stdout=stdout_failing("mul", "div", "div_zero"))
    done(out, "zero-tests-differ", "goal", SOME_TESTS, stdout=stdout_failing("mul", "div", "div_zero"))
    done(out, "zero-tests-differ", "heartbeat", SOME_TESTS, stdout=stdout_failing("mul", "div", "pow"))
    done(out, "one-solves", "plain", BUILD)
    done(out, "one-solves", "goal", BUILD)
    done(out, "one-solves", "heartbeat", {"partial_score": 1.0, "pass_rate": 1.0}, reward=1.0)
    errored(out, "crash-differs", "plain", message="boom: test agent crashed on purpose")
    errored(out, "crash-differs", "goal", message="boom: test agent crashed on purpose")
    errored(out, "crash-differs", "heartbeat", exc_type="AgentTimeoutError", message="timed out after 600 s")
    for arm in ARMS:
        done(out, "zero-unnamed", arm, SOME_TESTS)
    return out
