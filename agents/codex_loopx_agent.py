"""The three LoopX arms (ssh-goal, codex-cli, heartbeat): one class, the differences are Mode data.

Same codex, transport, config, user, workdir, credentials and deadline as the codex arms (it is a
``CodexAppServerAgent``); what it adds is the LoopX harness:

- ``prepare``: the LoopX profile from staged offline parts (agents.loopx_profile), gates 1 and 2
  (agents.loopx_gates), the LoopX goal bootstrapped in the workdir, the body rendered by LoopX for
  the mode (agents.loopx_body). codex runs with the profile's CODEX_HOME and environment.
- ``drive``: gate 3 (app-server ``skills/list`` before ``thread/start``), then by ``Mode.body_role``:
  ``goal_objective`` (ssh-goal, codex-cli): the body is the native goal's objective, the instruction
  the first turn, and codex owns continuation; ``turn_input`` (heartbeat): the driver owns
  continuation, each tick a fresh turn whose input is the body rendered with a new turn instance id
  (``LOOPX_TURN``) and the instruction, paced by LoopX's generic_cli ``scheduler_hint``.
- self-lock: the goal bodies tell the agent to block the goal after three identical blocked turns;
  only a user resumes it. With ``ungated`` (default, for benchmark runs) the harness plays that user
  and resumes it; without it a blocked goal ends the run as blocked. Either way every time the goal
  left ``blocked`` is counted (``receipt.unblocks``) and listed (``unblock_events``, with who moved
  it: ``user`` = the harness, or the turn whose ``update_goal`` did) from the goal's status
  transitions (agents.session), so a block that is over before the harness looks still counts.
- evidence: the LoopX project registry and goal state (``.loopx/``, with ACTIVE_GOAL_STATE.md) and
  the runtime root (SQLite todo authority) are copied into ``agent/loopx/``; the body into
  ``agent/loopx-body.txt``; all LoopX facts into ``receipt.extra["loopx"]``.

Agent kwargs (``--ak``) beyond the codex arms': ``mode`` (ssh-goal | codex-cli | heartbeat; or env
``WEN_MODE`` for compatibility), ``ungated`` (bool, default true), ``max_unblocks`` (default 10),
``goal_id``, ``agent_id``, ``loopx_version``, ``node_version``, ``heartbeat_max_ticks`` (default 30),
``heartbeat_max_wait_sec`` (cap on a LoopX-recommended wait, default 180), ``heartbeat_idle_ticks``
(consecutive ticks with no work besides LoopX calls that end the run, default 1).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from agents.base_codex import CodexAppServerAgent
from agents.drive import Harness, LoopxHarness, tick_instance
from agents.loopx_body import GoalBody, placeholder_tokens, render_body
from agents.loopx_gates import GateFailure, gate_doctor, gate_skills, required_skill_ids
from agents.loopx_profile import (
    DEFAULT_PROFILE_ROOT,
    GoalSetup,
    InstalledProfile,
    ProfileError,
    install_profile,
    profile_paths,
    setup_goal,
)
from agents.loopx_staging import (
    CONTAINER_PARTS_ROOT,
    DEFAULT_LOOPX_VERSION,
    DEFAULT_NODE_VERSION,
    StagingError,
    load_staged,
)
from agents.session import ArmFailure
from agents.transport import Transport
from modes.profiles import ARMS

log = logging.getLogger(__name__)

MODE_ENV = "WEN_MODE"
LOOPX_ARMS = tuple(a for a, m in ARMS.items() if m.loopx)


def resolve_arm(mode: str | None, extra_env: dict | None) -> str:
    """The arm from the ``mode`` kwarg, else ``WEN_MODE`` (agent env, then host env)."""
    arm = mode or (extra_env or {}).get(MODE_ENV) or os.environ.get(MODE_ENV)
    if arm not in LOOPX_ARMS:
        raise ValueError(
            f"CodexLoopxAgent needs mode= one of {', '.join(LOOPX_ARMS)} (--ak mode=... or {MODE_ENV}); got {arm!r}"
        )
    return arm


def _objective(instruction: str) -> str:
    """LoopX's goal objective: the instruction's first paragraph (the whole text goes into the turn)."""
    first = instruction.strip().split("\n\n", 1)[0].strip()
    return (first[:400] + "...") if len(first) > 400 else (first or "Finish the task.")


class CodexLoopxAgent(CodexAppServerAgent):
    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        *,
        mode: str | None = None,
        ungated: bool = True,
        max_unblocks: int = 10,
        goal_id: str = "marathon-goal",
        agent_id: str = "marathon-agent",
        loopx_version: str = DEFAULT_LOOPX_VERSION,
        node_version: str = DEFAULT_NODE_VERSION,
        heartbeat_max_ticks: int = 30,
        heartbeat_max_wait_sec: float = 180,
        heartbeat_idle_ticks: int = 1,
        **kwargs: Any,
    ) -> None:
        self.ARM = resolve_arm(mode, kwargs.get("extra_env"))
        super().__init__(logs_dir, model_name, **kwargs)
        self.ungated = ungated if isinstance(ungated, bool) else str(ungated).lower() in ("1", "true", "yes")
        self.max_unblocks = int(max_unblocks)
        self.goal_id = goal_id
        self.agent_id = agent_id
        self.loopx_version = str(loopx_version)
        self.node_version = str(node_version)
        self.heartbeat_max_ticks = int(heartbeat_max_ticks)
        self.heartbeat_max_wait_sec = float(heartbeat_max_wait_sec)
        self.heartbeat_idle_ticks = int(heartbeat_idle_ticks)
        self.paths = profile_paths(DEFAULT_PROFILE_ROOT)
        self.profile: InstalledProfile | None = None
        self.goal: GoalSetup | None = None
        self.body: GoalBody | None = None
        self.required: tuple[str, ...] = ()
        self.instruction = ""  # the task's instruction: the goal's objective is made from it
        self._transport: Transport | None = None
        self._harness: LoopxHarness | None = None
        self.loopx: dict[str, Any] = {"ungated": self.ungated, "gates": [], "unblock_events": [], "ticks": []}

    @staticmethod
    def name() -> str:
        return "codex-loopx"

    async def run(self, instruction, environment, context) -> None:
        self.instruction = instruction
        await super().run(instruction, environment, context)

    # --- prepare: profile, gates 1-2, goal, body (before codex starts) -------------------------------

    async def _parts(self, transport: Transport) -> tuple[dict[str, str], str]:
        """Staged parts in the container: the read-only mount, else copied in (and said so)."""
        probe = await transport.container_exec()(f"test -f {CONTAINER_PARTS_ROOT}/staged.json", None, "0", 60)
        try:
            staged = load_staged(self.loopx_version, self.node_version)
        except StagingError as exc:
            if probe.return_code == 0:
                raise ArmFailure(f"LoopX parts are mounted but not staged on this host: {exc}") from exc
            raise ArmFailure(str(exc)) from exc
        if probe.return_code == 0:
            return staged.container_paths(), "mounted"
        try:
            copied = await transport.deliver(staged.root, CONTAINER_PARTS_ROOT)
        except Exception as exc:  # noqa: BLE001 - the message names what could not be delivered
            raise ArmFailure(f"copying LoopX parts into the container failed: {exc}") from exc
        self.loopx["parts_bytes_copied"] = copied
        self.receipt.warnings.append(
            f"LoopX parts were copied into the container (no read-only mount at {CONTAINER_PARTS_ROOT}, "
            f"{copied} bytes)"
        )
        return staged.container_paths(), "copied"

    def record_gate(self, result) -> None:
        """Record a LoopX gate's verdict in the receipt, then require it (raises when it failed)."""
        self.loopx["gates"].append(result.as_dict())
        self.receipt.extra["loopx"] = self.loopx
        result.require()

    async def prepare(self, transport: Transport) -> None:
        self._transport = transport
        self.receipt.extra["loopx"] = self.loopx
        run = transport.container_exec()
        try:
            parts, delivery = await self._parts(transport)
            self.loopx["parts"] = {"delivery": delivery, **parts}
            self.profile = await install_profile(run, parts, self.paths, owner=transport.user)
            self.codex_home = self.paths.codex_home
            self.loopx["profile"] = {
                "root": self.paths.root,
                "codex_home": self.paths.codex_home,
                "cli_bin": self.paths.cli_bin,
                "python": self.profile.python_version,
                "node": self.profile.node_version,
                "loopx": self.profile.loopx_version,
                "install_seconds": self.profile.install_seconds,
                "env": self.profile.env,
            }
            self.required = await required_skill_ids(run, self.profile)
            self.loopx["required_skills"] = list(self.required)
            self.record_gate(await gate_skills(run, self.profile, self.required))
            self.record_gate(await gate_doctor(run, self.profile, str(self.mode.doctor_agent_type)))
            log.info(
                "LoopX profile ready (%d skills + CLI + doctor ok; %s, node %s, %.1fs install)",
                len(self.required),
                self.profile.loopx_version,
                self.profile.node_version,
                self.profile.install_seconds,
            )
            self.goal = await setup_goal(
                run,
                self.profile,
                transport.workdir,
                self.goal_id,
                self.agent_id,
                _objective(self.instruction),
                user=transport.user,
            )
            self.loopx["goal"] = {
                "goal_id": self.goal.goal_id,
                "agent_id": self.goal.agent_id,
                "registry": self.goal.registry,
                "state_file": self.goal.state_file,
                "runtime_root": self.paths.runtime_root,
            }
            self._harness = LoopxHarness(
                self.receipt,
                mode=self.mode,
                profile=self.profile,
                goal=self.goal,
                body=None,
                required=self.required,
                loopx=self.loopx,
                logs_dir=self.logs_dir,
                run=run,
                user=transport.user,
                ungated=self.ungated,
                max_unblocks=self.max_unblocks,
                heartbeat_max_ticks=self.heartbeat_max_ticks,
                heartbeat_max_wait_sec=self.heartbeat_max_wait_sec,
                heartbeat_idle_ticks=self.heartbeat_idle_ticks,
                placeholders=placeholder_tokens(),
            )
            if self.mode.body_role == "goal_objective":
                self.body = await render_body(run, self.profile, self.mode, self.goal, user=transport.user)
                self._harness.body = self.body
                self._harness.record_body(self.body)
            else:  # heartbeat: its first tick's body, here before the budget starts (the drive uses it)
                self.body = await render_body(
                    run,
                    self.profile,
                    self.mode,
                    self.goal,
                    turn_instance_id=tick_instance(1),
                    user=transport.user,
                    placeholders=self._harness.placeholders,
                )
                self._harness.body = self.body
        except GateFailure as exc:
            self.loopx["failed_gate"] = exc.result.gate
            raise ArmFailure(str(exc)) from exc
        except ProfileError as exc:
            self.loopx["failed_step"] = str(exc)
            raise ArmFailure(f"LoopX profile: {exc}") from exc
        self.receipt.mark("loopx_ready")

    def appserver_env(self) -> dict[str, str]:
        env = dict(self.profile.env) if self.profile else {}
        env["CODEX_HOME"] = self.codex_home
        return env

    # --- drive ---------------------------------------------------------------------------------------

    def harness(self) -> Harness:
        if self._harness is None:
            raise ArmFailure("the LoopX arm was not prepared")
        return self._harness

    # --- evidence ------------------------------------------------------------------------------------

    def save_evidence(self, transport, receipt) -> None:
        if self.goal is not None:
            dest = self.logs_dir / "loopx"
            for src, sub in (
                (f"{self.goal.project.rstrip('/')}/.loopx", "project"),
                (self.paths.runtime_root, ""),
            ):
                try:
                    if transport.copy_out(src, dest / sub if sub else dest, self.logs_dir):
                        receipt.evidence.append(f"loopx/{sub + '/' if sub else ''}{os.path.basename(src)}")
                except Exception as exc:  # noqa: BLE001 - evidence is best effort
                    receipt.warnings.append(f"evidence copy of {src} failed: {exc}")
        super().save_evidence(transport, receipt)  # reconciles the goal store too
        session = getattr(self, "session", None)
        if session is not None and self._harness is not None:
            self._harness.finish(session)
        receipt.extra["loopx"] = json.loads(json.dumps(self.loopx, default=str))

    def sandbox_evidence(self) -> list[tuple[str, str]]:
        """(path in the sandbox, dir under /logs/agent) the in-sandbox driver copies at the end."""
        if self.goal is None:
            return []
        return [
            (f"{self.goal.project.rstrip('/')}/.loopx", "loopx/project"),
            (self.paths.runtime_root, "loopx"),
        ]
