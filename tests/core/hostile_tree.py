"""A hand-made output tree with what a hostile agent can plant in its trial dirs (no Docker needed).

The job and trial files have the shapes harbor 0.25.0 writes (indent=4 TrialResult with its
``verifier`` timing last) and are written in harbor's order: verifier files first, then the trial
``result.json``. Each pair ``<case> x plain`` plants one thing; ``EXPECT`` says what its cell must be.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

ARM = "plain"
STAMP = "20261201T080000Z"
METRICS = {"passed": 1, "failed": 4, "total": 5, "partial_score": 0.2}
BIG_BYTES = 300 * 1024 * 1024

#: case -> (cell status, a phrase of the reason shown)
EXPECT = {
    "normal": ("done", ""),
    "fifo-metrics": ("unreadable", "not a regular file (a FIFO)"),
    "loop-metrics": ("unreadable", "symlink loop"),
    "out-metrics": ("unreadable", "symlink out of the trial dir"),
    "out-verifier-dir": ("unreadable", "symlink out of the trial dir"),
    "big-metrics": ("unreadable", "too large"),
    "inside-link": ("done", ""),
    "fifo-receipt": ("unreadable", "not a regular file (a FIFO)"),
    "out-receipt": ("unreadable", "symlink out of the trial dir"),
    "fifo-result": ("unreadable", "not a regular file (a FIFO)"),
    "tampered-metrics": ("tampered", "after the verifier finished"),
}


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job_result(trial: str, finished: bool = True) -> dict:
    return {
        "id": "06c54fac-d736-48e6-be33-5049480b3aeb",
        "started_at": "2026-12-01T08:00:00.000000",
        "finished_at": "2026-12-01T08:05:00.000000" if finished else None,
        "n_total_trials": 1,
        "stats": {
            "n_completed_trials": 1,
            "n_errored_trials": 0,
            "n_running_trials": 0,
            "n_pending_trials": 0,
            "evals": {"plain__demo": {"reward_stats": {"reward": {"0.0": [trial]}}, "exception_stats": {}}},
        },
    }


def trial_result(task: str, trial: str, verifier_finished: datetime) -> dict:
    return {
        "task_name": f"marathon-demo/{task}",
        "trial_name": trial,
        "agent_info": {"name": ARM},
        "agent_result": {"n_input_tokens": 10, "n_output_tokens": 2, "cost_usd": 0.01},
        "verifier_result": {"rewards": {"reward": 0.0}},
        "exception_info": None,
        "started_at": "2026-12-01T08:00:01.000000Z",
        "finished_at": _iso(verifier_finished),
        "verifier": {"started_at": "2026-12-01T08:04:00.000000Z", "finished_at": _iso(verifier_finished)},
    }


def make(out: Path, outside: Path, cases: list[str] | None = None) -> dict[str, Path]:
    """Write the tree under ``out`` (``outside``: a dir beside it for links that leave the tree)."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "metrics.json").write_text(json.dumps({"partial_score": 1.0}))
    (outside / "secret.txt").write_text("OUTSIDE-SECRET-7f3a\n")
    trials = {}
    for case in cases or list(EXPECT):
        task = case
        trial_name = f"{task}__AbC1234"
        job = out / task / ARM / STAMP / ARM
        tdir = job / trial_name
        (tdir / "verifier").mkdir(parents=True)
        (tdir / "agent").mkdir()
        metrics = tdir / "verifier" / "metrics.json"
        receipt = tdir / "agent" / "goal_receipt.json"
        metrics.write_text(json.dumps(METRICS))
        receipt.write_text(json.dumps({"continuations": 1, "unblocks": 0, "errors": []}))
        if case == "fifo-metrics":
            metrics.unlink()
            os.mkfifo(metrics)
        elif case == "loop-metrics":
            metrics.unlink()
            os.symlink("loop-b", tdir / "verifier" / "loop-a")
            os.symlink("loop-a", tdir / "verifier" / "loop-b")
            os.symlink("loop-a", metrics)
        elif case == "out-metrics":
            metrics.unlink()
            os.symlink(outside / "metrics.json", metrics)
        elif case == "out-verifier-dir":
            metrics.unlink()
            (tdir / "verifier").rmdir()
            os.symlink(outside, tdir / "verifier")
        elif case == "big-metrics":
            with open(metrics, "wb") as fh:
                fh.write(b'{"partial_score": 1.0, "pad": "')
                block = b"x" * (1 << 20)
                for _ in range(BIG_BYTES >> 20):
                    fh.write(block)
                fh.write(b'"}')
        elif case == "inside-link":
            metrics.rename(tdir / "verifier" / "real-metrics.json")
            os.symlink("../verifier/real-metrics.json", metrics)
        elif case == "fifo-receipt":
            receipt.unlink()
            os.mkfifo(receipt)
        elif case == "out-receipt":
            receipt.unlink()
            os.symlink(outside / "secret.txt", receipt)
        # the agent's planted extras beside every case: a leak link and a FIFO trajectory
        os.symlink(outside / "secret.txt", tdir / "agent" / "leak")
        os.mkfifo(tdir / "agent" / "trajectory.json")
        finished = datetime.now(UTC)
        res = tdir / "result.json"
        if case == "fifo-result":
            os.mkfifo(res)
        else:
            res.write_text(json.dumps(trial_result(task, trial_name, finished), indent=4))
        (job / "result.json").write_text(json.dumps(job_result(trial_name), indent=4))
        if case == "tampered-metrics":
            # rewritten by a process the agent left running, after the verifier finished
            metrics.write_text(json.dumps({"partial_score": 1.0, "passed": 5, "total": 5}))
            later = finished.timestamp() + 30
            os.utime(metrics, (later, later))
        trials[case] = tdir
    return trials
