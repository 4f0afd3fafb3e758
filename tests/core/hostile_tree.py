"""A hand-made output tree with what a hostile agent can plant in its trial dirs (no Docker needed).

The job and trial files have the shapes harbor 0.25.0 writes (indent=4 TrialResult with its
``verifier`` timing last) and are written in harbor's order: verifier files first, then the trial
``result.json``. Each pair ``<case> x plain`` plants one thing; ``EXPECT`` says what its cell must be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


#: Runs the CLI and, at its exit, prints its own peak RSS: ``VmHWM`` of the process after its exec.
#: The rusage of a child (``wait4``, ``RUSAGE_CHILDREN``) cannot say it: Linux counts in a child's
#: ``ru_maxrss`` the memory it had before its exec, i.e. a copy of the pytest worker that forked it
#: (417 MB in a fresh clone's 4-worker fast tier, against the 25 MB this status takes).
PEAK_MARK = "__marathon_test_vmhwm_kb__"
_PEAK_PROBE = f"""
import atexit, runpy, sys
def _peak():
    with open("/proc/self/status") as fh:
        kb = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    sys.stderr.write("\\n{PEAK_MARK} " + kb + "\\n")
    sys.stderr.flush()
atexit.register(_peak)
sys.argv = ["marathon", *sys.argv[1:]]
runpy.run_module("marathon.cli", run_name="__main__", alter_sys=True)
"""


def run_marathon(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, int]:
    """Run the CLI in a child; return it (its stderr without the probe's line) and its peak RSS in KB."""
    p = subprocess.run(
        [sys.executable, "-c", _PEAK_PROBE, *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    kept, peak = [], -1
    for line in p.stderr.splitlines(keepends=True):
        if line.startswith(PEAK_MARK):
            peak = int(line.split()[1])
        else:
            kept.append(line)
    p.stderr = "".join(kept).removesuffix("\n") if peak >= 0 else p.stderr
    return p, peak


#: bytes no output may hold: C0 controls but newline, DEL, and the C1, bidi and zero-width
#: characters (as UTF-8)
_BAD = [bytes([b]) for b in range(32) if b != 10] + [b"\x7f"]
_BAD += [
    chr(c).encode() for c in [*range(0x80, 0xA0), 0x202E, 0x202D, 0x2066, 0x2067, 0x2068, 0x200B, 0xFEFF]
]


def no_control_bytes(data: bytes | str, what: str) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    found = [b for b in _BAD if b in raw]
    assert not found, f"{what}: holds {found[:5]}"


def strict_json(text: str):
    """Parse as RFC 8259 does: NaN, Infinity and -Infinity are not JSON."""

    def refuse(c: str):
        raise ValueError(f"not JSON: {c}")

    return json.loads(text, parse_constant=refuse)
