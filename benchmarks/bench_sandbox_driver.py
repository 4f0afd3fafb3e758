"""Per-trial overhead of the in-sandbox driver vs ``docker exec -i``, and the host's CPU while watching.

    uv run python benchmarks/bench_sandbox_driver.py [--n 2]

Runs the plain arm on calc-partial with the scripted model, ``--n`` times per transport, on local
Docker with the read-only mounts, and reads the receipts: the preparation until the first turn
(upload and start for the driver), the whole agent phase, and harbor's agent-execution time. Then
one ``scripted/never-finish`` trial with a 180 s budget (``--watch-budget``) through the driver,
sampling the CPU time of the host-side process tree (harbor and its ``docker compose exec``
children) at each poll that brings the driver's ``drive`` status: that is the watch loop's cost.
Targets: the driver adds at most 3 s per trial, and at most 1 % of one CPU on the host while
watching.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.staging import CONTAINER_CODEX_ROOT, stage_codex  # noqa: E402

CALC = REPO / "runner" / "demo" / "tasks" / "calc-partial"
AGENT = "agents.codex_plain_appserver:CodexPlainAppServer"
KEY_VAR = "MARATHON_BENCH_MODEL_KEY"


def _harbor() -> str:
    cand = Path(sys.executable).parent / "harbor"
    return str(cand) if cand.exists() else "harbor"


def _cmd(jobs: Path, transport: str, model: str, ae: dict[str, str]) -> list[str]:
    mounts = [
        {"type": "bind", "source": str(stage_codex().root), "target": CONTAINER_CODEX_ROOT, "read_only": True}
    ]
    cmd = [_harbor(), "run", "-p", str(CALC), "-a", AGENT, "-m", f"openai/{model}", "-o", str(jobs),
           "--job-name", "job", "-n", "1", "-y", "--mounts", json.dumps(mounts),
           "--ak", f"api_key_var={KEY_VAR}", "--ak", f"transport={transport}"]  # fmt: skip
    for k, v in ae.items():
        cmd += ["--ae", f"{k}={v}"]
    return cmd


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True",
                **{KEY_VAR: "sk-bench-" + secrets.token_hex(8)})  # fmt: skip


def _secs(a: str, b: str) -> float:
    f = "%Y-%m-%dT%H:%M:%SZ"
    return (datetime.strptime(b, f) - datetime.strptime(a, f)).total_seconds()


def one_trial(base: Path, transport: str, i: int) -> dict:
    jobs = base / f"{transport}-{i}"
    subprocess.run(_cmd(jobs, transport, "scripted/solve", {}), cwd=REPO, env=_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=1200)  # fmt: skip
    (trial,) = [p for p in (jobs / "job").iterdir() if p.is_dir()]
    rec = json.loads((trial / "agent" / "goal_receipt.json").read_text())
    res = json.loads((trial / "result.json").read_text())
    ae = res["agent_execution"]
    return {
        "reward": res["verifier_result"]["rewards"]["reward"],
        "to_first_turn_sec": _secs(rec["timings"]["started"], rec["timings"]["first_turn"]),
        "agent_phase_sec": rec["timings"]["duration_sec"],
        "harbor_agent_sec": (datetime.fromisoformat(ae["finished_at"].replace("Z", "+00:00"))
                             - datetime.fromisoformat(ae["started_at"].replace("Z", "+00:00"))).total_seconds(),
    }  # fmt: skip


def _tree_cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def watch_cpu(base: Path, budget_sec: int) -> dict:
    """CPU of harbor's process tree between the first and the last status mirror that says
    ``drive`` (a new mirror is written when a poll brings a new status): the steady watch, without
    the upload and start before it or the deadline's stop file and wind-down after it."""
    jobs = base / "watch"
    proc = subprocess.Popen(_cmd(jobs, "sandbox-driver", "scripted/never-finish", {"GOAL_TIMEOUT_SEC": str(budget_sec)}),
                            cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ps = psutil.Process(proc.pid)
    samples: list[tuple[float, float]] = []
    last_seq = None
    while proc.poll() is None:
        mirrors = list(jobs.glob("job/*/agent/driver-status.json"))
        status: dict = {}
        if mirrors:
            try:
                status = json.loads(mirrors[0].read_text())
            except ValueError:
                pass
        if status.get("phase") == "drive" and status.get("seq") != last_seq:
            last_seq = status.get("seq")
            samples.append((time.monotonic(), _tree_cpu(ps)))
        time.sleep(0.2)
    if len(samples) < 2:
        return {"error": "fewer than two polls were seen in the drive phase"}
    wall, cpu = samples[-1][0] - samples[0][0], samples[-1][1] - samples[0][1]
    return {
        "polls": len(samples) - 1,
        "watch_wall_sec": round(wall, 1),
        "host_cpu_sec": round(cpu, 2),
        "host_cpu_pct": round(100 * cpu / wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--watch-budget", type=int, default=180, help="GOAL_TIMEOUT_SEC of the watch trial")
    args = ap.parse_args()
    out: dict = {"load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as d:
        base = Path(d)
        for transport in ("docker-exec", "sandbox-driver"):
            rows = [one_trial(base, transport, i) for i in range(args.n)]
            out[transport] = {k: round(statistics.mean(r[k] for r in rows), 2) for k in rows[0]}
        out["overhead_sec"] = {
            k: round(out["sandbox-driver"][k] - out["docker-exec"][k], 2)
            for k in ("to_first_turn_sec", "agent_phase_sec", "harbor_agent_sec")
        }
        out["watch"] = watch_cpu(base, args.watch_budget)
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
