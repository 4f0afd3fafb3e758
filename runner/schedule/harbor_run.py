"""The ``harbor run`` of one attempt: its command line, its environment, the mounts and the build
overlay it needs.

Why here, below both launchers: the same command runs as this host's child (the local launcher,
``runner.schedule.local``) and inside an attempt's Ray job on a cluster's Docker host
(``runner.schedule.fleet.job``); built once, an arm can never get a different harbor command on
a cluster than on one host.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from modes.profiles import mode_for
from runner.errors import UserError
from runner.results.tree import runner_dir
from runner.schedule.config import ArmSpec, RunConfig, agent_timeout_mult, project_pythonpath

BUILD_OVERLAY = "compose-build-network-host.yaml"
#: compose overlay: build ``main`` on the host network. BuildKit's cache key includes the network
#: mode (proxy build args are exempt), so prebuild and harbor's own build must both use it.
BUILD_OVERLAY_TEXT = "services:\n  main:\n    build:\n      network: host\n"
#: the role of a harbor process in the tree's process registry (``runner.ops.procs.Registry``)
ROLE_HARBOR = "harbor"


def harbor_bin() -> str:
    """The ``harbor`` of this interpreter's environment (the pinned 0.25.0), else PATH's."""
    cand = Path(sys.executable).with_name("harbor")
    if cand.exists():
        return str(cand)
    found = shutil.which("harbor")
    if not found:
        raise UserError("harbor is not installed in this environment (uv sync)")
    return found


def builds_from_dockerfile(task_dir: Path) -> bool:
    """harbor builds this task's image with compose's build file (no prebuilt ``docker_image``)."""
    import tomllib

    if not (task_dir / "environment" / "Dockerfile").is_file():
        return False
    try:
        cfg = tomllib.loads((task_dir / "task.toml").read_text())
    except (OSError, ValueError):
        return True
    return not (cfg.get("environment") or {}).get("docker_image")


def build_overlay(out: Path) -> Path:
    """The compose overlay that makes harbor build with the host network, exactly as prebuild does
    (the network mode is part of BuildKit's cache key; proxy build args are not)."""
    path = runner_dir(out) / BUILD_OVERLAY
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(BUILD_OVERLAY_TEXT)
    return path


def arm_mounts(cfg: RunConfig, arm: ArmSpec) -> str | None:
    """harbor ``--mounts`` JSON for an arm: ``--mounts`` when given, else what a real arm needs
    staged (codex; plus the LoopX parts for LoopX arms: ``agents.loopx_staging.mounts_for_arm``)."""
    if cfg.mounts:
        return cfg.mounts
    if not arm.real:
        return None
    from agents.loopx_staging import mounts_for_arm
    from agents.staging import StagingError

    try:
        mounts = mounts_for_arm(arm.name)
    except StagingError as exc:
        raise UserError(f"arm {arm.name}: {exc}") from None
    return json.dumps(mounts) if mounts else None


#: harbor 0.25.0's flag (hidden in its help) that passes ``-m`` to the agent unparsed
SKIP_MODEL_PARSING = "--skip-model-parsing-and-provider-mapping"


def harbor_argv(
    cfg: RunConfig,
    task: str,
    arm: ArmSpec,
    stamp_dir: Path,
    mounts: str | None = None,
    *,
    task_dir: Path | None = None,
) -> list[str]:
    """The ``harbor run`` command of one (task, arm) job. No secret is ever in it: --ae values are
    ``${VAR}`` references that harbor resolves from its environment. ``task_dir``: the run-local
    copy that names the task's image built once (``runner.schedule.task_images``), else the
    user's task as it is."""
    assert cfg.tasks_dir is not None
    path = task_dir or cfg.tasks_dir / task
    argv = [
        harbor_bin(), "run",
        "-p", str(path),
        "-a", arm.agent,
        "-o", str(stamp_dir),
        "--job-name", arm.name,
        "-n", "1",
        "-y",
        "-e", cfg.env,
        "--agent-timeout-multiplier", str(agent_timeout_mult(cfg, task, arm)),
        "--verifier-timeout-multiplier", str(cfg.verifier_mult),
    ]  # fmt: skip
    if cfg.env == "docker":
        argv += ["--ek", "auto_mounting=true"]
        if cfg.build_network == "host" and builds_from_dockerfile(path):
            argv += ["--extra-docker-compose", str(build_overlay(cfg.out))]
    if cfg.model:
        argv += ["-m", cfg.model]
    if mounts:
        argv += ["--mounts", mounts]
    for item in cfg.agent_env + cfg.agent_env_literal:
        argv += ["--ae", item]
    if not arm.builtin:
        # the arms take -m as given (agents.base_codex): harbor's preflight would import LiteLLM to
        # parse it, 3-6 s of CPU per attempt (agents/litellm_map.py says why that matters)
        argv += [SKIP_MODEL_PARSING]
        argv += ["--ak", f"goal_timeout_sec={cfg.goal_timeout_sec}"]
        mode = mode_for(arm.name) if arm.real else None
        if mode is not None and mode.loopx:
            argv += ["--ak", f"mode={arm.name}"]
    for item in cfg.agent_kwargs:
        argv += ["--ak", item]
    return argv


def job_env() -> dict[str, str]:
    """The environment of a ``harbor run``: this process's own (secrets by name resolve from it),
    no cost-map fetch, no telemetry, the agents importable."""
    env = dict(os.environ)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no start-up fetch of the cost map
    env.setdefault("HARBOR_TELEMETRY", "0")  # harbor 0.25.0 posts to PostHog at exit otherwise
    env["PYTHONPATH"] = project_pythonpath(env)
    return env
