"""Figures for the LoopX arms' preparation inside a trial container (what each LoopX trial pays).

Starts one ``--network none`` container FROM marathon-base:bookworm with the staged parts mounted,
then times each step of CodexLoopxAgent.prepare: profile install, reading the required skills,
gates 1 and 2, goal bootstrap, and a body render per mode. Prints one line per step.

    uv run python benchmarks/bench_loopx_profile.py
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from agents.loopx_body import render_body
from agents.loopx_gates import gate_doctor, gate_skills, required_skill_ids
from agents.loopx_profile import install_profile, setup_goal
from agents.loopx_staging import CONTAINER_PARTS_ROOT, stage_loopx
from modes.profiles import ARMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from container_exec import docker_exec  # noqa: E402  (a test helper: a container of our own)


async def bench(cid: str, parts: dict) -> list[tuple[str, float, str]]:
    run = docker_exec(cid)
    rows = []

    async def step(name, coro):
        t0 = time.perf_counter()
        value = await coro
        rows.append((name, time.perf_counter() - t0))
        return value

    profile = await step("install profile (venv, pip, loopx, skills)", install_profile(run, parts))
    required = await step("read required skill ids", required_skill_ids(run, profile))
    await step("gate 1: skills", gate_skills(run, profile, required))
    await step("gate 2: doctor (codex-app-ssh)", gate_doctor(run, profile, "codex-app-ssh"))
    goal = await step("bootstrap + configure-goal", setup_goal(run, profile, "/app", "g", "a", "Finish."))
    for arm in ("ssh-goal", "codex-cli", "heartbeat"):
        body = await step(f"body {arm}", render_body(run, profile, ARMS[arm], goal, turn_instance_id="t-1"))
        rows[-1] = (f"body {arm} ({body.chars} chars)", rows[-1][1])
    return rows


def main() -> int:
    staged = stage_loopx()
    du = subprocess.run(["du", "-sm", str(staged.root)], capture_output=True, text=True).stdout.split()[0]
    print(f"staged parts: {du} MB at {staged.root}")
    cid = subprocess.run(
        ["docker", "run", "-d", "--network", "none", "--label", "org.marathon.bench=loopx-profile",
         "-v", f"{staged.root}:{CONTAINER_PARTS_ROOT}:ro", "-w", "/app", "marathon-base:bookworm",
         "sleep", "infinity"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        subprocess.run(["docker", "exec", cid, "mkdir", "-p", "/app"], check=True)
        rows = asyncio.run(bench(cid, staged.container_paths()))
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    for name, sec in rows:
        print(f"{sec:7.2f} s  {name}")
    print(f"{sum(s for _, s in rows):7.2f} s  total")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
