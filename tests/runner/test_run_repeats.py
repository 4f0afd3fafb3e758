"""``marathon run --repeats 2``: two arms on two tasks of the mini-benchmark, two repeats each, the
runner killed with -9 while a repeat-2 job runs, a stale claim of a repeat not started yet planted,
and ``marathon health --fix``: every repeat is done exactly once (none lost, none run twice, the
running ones adopted, the restarted runner on the same configuration), and the report's means and cluster-bootstrap intervals equal a reference
computed here from the trial files (average within a task, resample tasks).

Arms: harbor's oracle and a test agent that works until the test opens a gate (a file), so the state
the runner is killed in is the same on every run: three gated repeats running, two repeats not
started. Real harbor, real Docker. This is also the runner's kill -9 test (--detach's own session
and log, health's findings, --fix's restart and adoption): with one repeat it is the same scenario."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import psutil
import pytest
from runner_agents import GATE_ENV
from runner_support import AGENTS, DEMO_TASKS, dead_holder, done_jobs, events, run_marathon, wait_for

from runner.results import stats
from runner.results.tree import ATTEMPT_IMAGE, claim_path, iter_trial_dirs, repeat_of
from runner.schedule import claims

pytestmark = [pytest.mark.docker]
TASKS = ["calc-partial", "words-passrate"]
ARMS = ["oracle", "gated"]
K = 2
UNITS = {(t, a, r) for t in TASKS for a in ARMS for r in range(1, K + 1)}


def _unit(e: dict) -> tuple[str, str, int]:
    return (e["task"], e["arm"], repeat_of(e["stamp"]))


def partial_of(job: Path) -> float:
    """The trial's partial score as the verifier wrote it: ``partial_score``, else ``pass_rate``."""
    (trial,) = iter_trial_dirs(job)
    m = json.loads((trial / "verifier" / "metrics.json").read_text())
    return float(m["partial_score"] if "partial_score" in m else m["pass_rate"])


def reference_ci(task_clusters: list[list[float]]) -> tuple[float, float]:
    """Average within each task, then resample tasks with replacement (the fixed seed, row by row)."""
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    means = [sum(c) / len(c) for c in task_clusters]
    n = len(means)
    drawn = [sum(means[i] for i in rng.integers(0, n, n)) / n for _ in range(stats.BOOTSTRAP_RESAMPLES)]
    lo, hi = np.quantile(drawn, [0.025, 0.975])
    return float(lo), float(hi)


def test_repeats_killed_and_fixed_mid_run_are_each_done_exactly_once(docker_engine, out_tree, tmp_path):
    out = out_tree
    gate = tmp_path / "gate"  # the gated arm's trials end once it exists
    try:
        _run(out, gate)
    finally:
        gate.touch()  # nothing of ours waits on it after the test, whatever happened


def _run(out: Path, gate: Path) -> None:
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--tasks", ",".join(TASKS),
        "--arms", f"oracle,gated={AGENTS}:GatedAgent", "--repeats", str(K), "--agent-timeout-mult", "8",
        "--concurrency", "3", "--max-passes", "2", "--detach", timeout=120, **{GATE_ENV: str(gate)},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(r.stdout.split("PID ")[1].split()[0])
    # started with --detach: its own session, stdin /dev/null, output in OUT/.runner/runner.log
    assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own: a hang-up of ours cannot reach it
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(out.resolve() / ".runner" / "runner.log")

    def state():
        fin = {_unit(e) for e in events(out, "job_finish")}
        started = {_unit(e) for e in events(out, "job_start")}
        return fin, started - fin, UNITS - started

    # Queued repeat by repeat, three at a time: oracle's repeats end, the gated arm's wait for the
    # gate. The run comes to rest with the three first gated units running (repeat 2 among them) and
    # the last two units of repeat 2 not started: nothing moves until the gate opens.
    rest = {("calc-partial", "gated", 1), ("words-passrate", "gated", 1), ("calc-partial", "gated", 2)}
    wait_for(lambda: state()[1] == rest, 900, f"the run to rest with {sorted(rest)} running")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", 30, "the kill")
    fin_before, running, not_started = state()
    done_before = {_unit(e) for e in events(out, "job_finish") if e["status"] == "done"}
    assert running == rest and not_started == {
        ("words-passrate", "oracle", 2),
        ("words-passrate", "gated", 2),
    }
    running_before = {_unit(e): e["pid"] for e in events(out, "job_start") if _unit(e) in running}
    # a dead runner's claim on a repeat 2 not started (its holder a real process that has exited)
    stale = ("words-passrate", "gated", 2)
    assert claims.try_claim(out, stale[0], stale[1], dead_holder(), repeat=stale[2]).acquired
    assert claim_path(out, *stale).name == "words-passrate__gated@r2.claim"

    health = run_marathon("health", str(out), "--json", **{GATE_ENV: str(gate)})
    assert health.returncode == 1
    found = json.loads(health.stdout)
    kinds = [f["kind"] for f in found["findings"]]
    assert {"runner_dead", "stale_claim"} <= set(kinds) and kinds.count("orphan_job") == len(rest)
    assert found["repeats"] == K and (found["pairs_done"], found["pairs_total"]) == (
        len(done_before),
        len(UNITS),
    )

    fixed = run_marathon("health", str(out), "--fix", **{GATE_ENV: str(gate)})
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "restarted the runner" in fixed.stdout
    assert "removed stale claim words-passrate/gated@r2" in fixed.stdout
    wait_for(
        lambda: len(events(out, "adopt")) >= len(rest), 300, "the restarted runner to adopt the gated jobs"
    )
    gate.touch()
    wait_for(lambda: len(events(out, "runner_exit")) >= 1, 900, "the restarted runner to finish", step=2)

    starts = events(out, "runner_start")
    assert len(starts) == 2 and starts[1]["resumed"] is True and starts[1]["repeats"] == K
    assert starts[0]["config"] == starts[1]["config"]
    second = starts[1]["run_id"]
    adopted = {_unit(e): e["pid"] for e in events(out, "adopt") if e["run_id"] == second}
    assert adopted == running_before  # the still-running jobs, repeat 2 among them, were adopted
    restarted = {_unit(e) for e in events(out, "job_start") if e["run_id"] == second}
    assert not restarted & (fin_before | set(running_before))
    done = done_jobs(out, by_repeat=True)
    assert set(done) == UNITS and all(len(j) == 1 for j in done.values()), done
    assert events(out, "runner_exit")[-1]["done"] == events(out, "runner_exit")[-1]["total"] == len(UNITS)
    assert not claim_path(out, *stale).exists() and not list((out / ".claims").glob("*.claim"))
    # every repeat of a task ran the one image built for it (recorded in each attempt's stamp dir)
    for t in TASKS:
        ids = {
            json.loads((j.parent / ATTEMPT_IMAGE).read_text())["image_id"]
            for u, js in done.items()
            if u[0] == t
            for j in js
        }
        assert len(ids) == 1 and all(i.startswith("sha256:") for i in ids), (t, ids)
    # (its exit event comes before its last clean-up: the lock is released at the very end)
    wait_for(lambda: not (out / ".runner" / "lock").exists(), 60, "the runner to release its lock")

    # the report: each cell the mean of its two repeats, intervals by the cluster bootstrap
    rep = run_marathon("report", str(out), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    d = json.loads(rep.stdout)
    assert d["repeats"] == K
    values = {u: partial_of(jobs[0]) for u, jobs in done.items()}
    clusters = {a: [[values[(t, a, r)] for r in range(1, K + 1)] for t in TASKS] for a in ARMS}
    for a in ARMS:
        s = d["arm_summary"][a]
        assert (s["n"], s["done"], s["pass_k"], s["pass_k_n"]) == (len(TASKS), len(TASKS) * K, K, len(TASKS))
        means = [sum(c) / len(c) for c in clusters[a]]
        assert s["partial"] == pytest.approx(sum(means) / len(means), rel=1e-12)  # as computed, not rounded
        assert s["partial_ci"] == pytest.approx(reference_ci(clusters[a]), abs=1e-12)
        for t, c in zip(TASKS, clusters[a], strict=True):
            cell = d["cells"][t][a]
            assert (cell["repeats"], cell["repeats_done"]) == (K, K)
            assert [x["partial"] for x in cell["by_repeat"]] == c
    (pair,) = d["paired"]  # a - b, the arms in the report's order (stand-ins by name)
    assert (pair["a"], pair["b"], pair["n"]) == ("gated", "oracle", len(TASKS))
    diffs = [[sum(x) / K - sum(y) / K] for x, y in zip(clusters["gated"], clusters["oracle"], strict=True)]
    assert pair["partial_diff_ci"] == pytest.approx(reference_ci(diffs), abs=1e-12)
    again = run_marathon("health", str(out), timeout=300)
    assert again.returncode == 0, again.stdout
