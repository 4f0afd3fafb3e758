"""The LoopX goal body for a mode, rendered by LoopX itself (``heartbeat-prompt --thin``).

Why rendered and not written here: the body *is* the harness under test; the modes differ only in what
LoopX renders for their runtime profile (ssh-goal and codex-cli bodies differ in the guard line alone).
The call binds the profile's CLI, registry and runtime root explicitly, so LoopX 2.1.1 emits no
registry placeholder; we still replace any of LoopX's own placeholder tokens with the real registry
path and check that none is left, because an agent following a placeholder talks to a registry that
does not exist. Length and sha256 go into the log and the receipt.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass

from agents.loopx_profile import (
    ContainerExec,
    GoalSetup,
    InstalledProfile,
    ProfileError,
    loopx_argv,
    run_loopx_json,
)
from modes.profiles import Mode

log = logging.getLogger(__name__)

#: codex caps a goal objective at 4,000 characters.
CODEX_OBJECTIVE_MAX_CHARS = 4000
CAPABILITIES = ("shell", "filesystem_write")


def placeholder_tokens() -> tuple[str, ...]:
    """LoopX's own default-registry placeholders (current and legacy), from the installed package."""
    from loopx.capabilities.benchmark_toolkit.native_codex_profile import _DEFAULT_GLOBAL_REGISTRY_TOKENS

    return tuple(_DEFAULT_GLOBAL_REGISTRY_TOKENS)


class BodyError(ProfileError):
    """The body could not be rendered, or it still carries a placeholder."""


@dataclass(frozen=True)
class GoalBody:
    arm: str
    runtime_profile: str
    text: str
    chars: int
    sha256: str
    guard_command: str
    turn_instance_id: str | None
    placeholders_replaced: tuple[str, ...]
    interface_budget: dict

    def receipt(self) -> dict:
        """Receipt fields (the text itself is saved as a file next to the receipt)."""
        d = asdict(self)
        d.pop("text")
        d["placeholders_replaced"] = list(self.placeholders_replaced)
        return d


def bind_registry(
    text: str, registry: str, tokens: tuple[str, ...] | None = None
) -> tuple[str, tuple[str, ...]]:
    """Replace every LoopX registry placeholder with ``registry``; BodyError if any is left.

    ``tokens``: the placeholders when the loopx package is not importable here (inside the
    sandbox the host passes the ones it read from its own loopx).
    """
    tokens = placeholder_tokens() if tokens is None else tokens
    replaced = tuple(t for t in tokens if t in text)
    for token in replaced:
        text = text.replace(token, registry)
    left = [t for t in tokens if t in text]
    if left:
        raise BodyError(f"goal body still carries the registry placeholder {left[0]!r}")
    return text, replaced


def heartbeat_prompt_args(
    mode: Mode, goal: GoalSetup, cli_bin: str, turn_instance_id: str | None
) -> list[str]:
    args = ["heartbeat-prompt", "--thin", "--goal-id", goal.goal_id, "--agent-id", goal.agent_id]
    for cap in CAPABILITIES:
        args += ["--available-capability", cap]
    args += ["--runtime-profile", str(mode.runtime_profile), "--cli-bin", cli_bin]
    if mode.needs_turn_instance:
        if not turn_instance_id:
            raise BodyError(f"{mode.arm}: runtime profile {mode.runtime_profile} needs a turn instance id")
        args += ["--turn-instance-id", turn_instance_id]
    return args


async def render_body(
    run: ContainerExec,
    profile: InstalledProfile,
    mode: Mode,
    goal: GoalSetup,
    turn_instance_id: str | None = None,
    user: str | None = None,
    placeholders: tuple[str, ...] | None = None,
) -> GoalBody:
    """Render the mode's body in the container with the profile's CLI; checked and bound."""
    if not mode.loopx or not mode.runtime_profile:
        raise BodyError(f"{mode.arm} is not a LoopX arm")
    args = heartbeat_prompt_args(mode, goal, profile.paths.cli_bin, turn_instance_id)
    payload = await run_loopx_json(
        run,
        profile,
        loopx_argv(profile.paths, goal.registry, *args),
        f"loopx heartbeat-prompt ({mode.runtime_profile})",
        user=user,
        cwd=goal.project,
    )
    if payload.get("ok") is not True:
        raise BodyError(f"heartbeat-prompt for {mode.runtime_profile} not ok")
    budget = payload.get("interface_budget") or {}
    if budget.get("within_budget") is not True:
        # LoopX's own goal-prompt renderer refuses an over-budget body for the native goal; a
        # heartbeat body is turn input (no objective cap), so there it is recorded, not fatal.
        if mode.body_role == "goal_objective":
            raise BodyError(
                f"heartbeat-prompt for {mode.runtime_profile}: interface budget exceeded {budget}"
            )
        log.warning("LoopX body for %s is over LoopX's interface budget: %s", mode.runtime_profile, budget)
    text = payload.get("task_body")
    if not isinstance(text, str) or not text.strip():
        raise BodyError(f"heartbeat-prompt for {mode.runtime_profile} returned no task_body")
    if profile.paths.cli_bin not in text:
        raise BodyError("goal body does not name the profile's loopx CLI (would run another loopx)")
    text, replaced = bind_registry(text, goal.registry, placeholders)
    guard = next((line.strip("`") for line in text.splitlines() if "quota should-run" in line), "")
    if not guard:
        raise BodyError(f"goal body for {mode.runtime_profile} has no quota guard command")
    if mode.uses_goal and len(text) > CODEX_OBJECTIVE_MAX_CHARS:
        raise BodyError(
            f"goal body is {len(text)} chars; codex caps a goal objective at {CODEX_OBJECTIVE_MAX_CHARS}"
        )
    body = GoalBody(
        arm=mode.arm,
        runtime_profile=str(mode.runtime_profile),
        text=text,
        chars=len(text),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        guard_command=guard,
        turn_instance_id=turn_instance_id,
        placeholders_replaced=replaced,
        interface_budget=dict(budget),
    )
    log.info(
        "LoopX goal body rendered (%d chars, sha256=%s, arm=%s, profile=%s, goal_id=%s)",
        body.chars,
        body.sha256[:16],
        mode.arm,
        mode.runtime_profile,
        goal.goal_id,
    )
    return body
