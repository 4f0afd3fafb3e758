"""A ``ContainerExec`` over ``docker exec`` on a container the test (or benchmark) started itself.

The arms reach their container through the transport harbor gives them (agents.sandbox_host,
agents.transport); this one is only for tests and ``benchmarks/bench_loopx_profile.py``, which run
the LoopX preparation against a container of their own.
"""

from __future__ import annotations

import asyncio
import subprocess

from agents.loopx_profile import ContainerExec, ExecResult


def docker_exec(container_id: str, workdir: str | None = None) -> ContainerExec:
    """A ContainerExec over ``docker exec`` on a container we started (verify-envs, tests)."""

    async def run(command, env=None, user=None, timeout_sec=None) -> ExecResult:
        argv = ["docker", "exec"]
        if workdir:
            argv += ["-w", workdir]
        if user:
            argv += ["-u", user]
        for k, v in (env or {}).items():
            argv += ["-e", f"{k}={v}"]
        argv += [container_id, "bash", "-c", command]

        def call() -> ExecResult:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_sec)
            return ExecResult(p.returncode, p.stdout, p.stderr)

        return await asyncio.to_thread(call)

    return run
