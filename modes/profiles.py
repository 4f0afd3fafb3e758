"""The five arms as data: what differs between them, and nothing else.

Every arm drives the same codex binary over the same transport (app-server driven from inside the
sandbox by agents.sandbox_driver, or through ``docker exec -i`` when asked) with the same config, user, workdir, credentials and budgets. What differs is
written here: the agent class, who owns continuation, the LoopX runtime profile, whether each turn
needs a fresh turn instance. Deviations from the published design are ``disclosures``: they are
copied into every receipt and every report automatically (the field's harness left this to hand).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Masked:
    """A difference between arms that is the harness itself, declared so the audit does not flag it.

    ``config_keys`` are dotted ``config.toml`` keys this difference may set differently; the
    fairness audit removes them (for every arm alike) before it compares config hashes. A difference
    with no key (the goal objective, the LoopX profile's environment) is disclosed, not hashed.
    """

    what: str
    why: str
    config_keys: tuple[str, ...] = ()
    #: request parameters (``runner.results.ledger.PARAMS`` names) this difference may make the arm
    #: send the model differently; the wire fairness audit does not compare them
    wire_params: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {
            "what": self.what,
            "why": self.why,
            "config_keys": list(self.config_keys),
            "wire_params": list(self.wire_params),
        }


#: codex's native-goal feature flag: on for the goal arms, an arm without a goal may switch it off
#: (LoopX's own Harbor runtime writes ``[features] goals = <bool>`` per mode).
GOAL_FLAG = "features.goals"
_NO_GOAL = Masked(
    "no native goal",
    "the arm never calls thread/goal/set; codex's goal feature flag may be off for it",
    (GOAL_FLAG,),
)
_GOAL = Masked(
    "the native goal",
    "thread/goal/set with the arm's objective; codex's goal feature flag is on for it",
    (GOAL_FLAG,),
)
_LOOPX_PROFILE = Masked(
    "the LoopX profile",
    "codex runs with the profile's CODEX_HOME (LoopX's workflow skills in it) and the profile's "
    "environment (Node and the profile bin first on PATH, HOME, BASH_ENV, LOOPX_PYTHON)",
)
_LOOPX_BODY = Masked(
    "the LoopX goal body",
    "the body LoopX renders for the arm's runtime profile is the goal's objective (ssh-goal, "
    "codex-cli) or each tick's turn input (heartbeat)",
)


@dataclass(frozen=True)
class Mode:
    """One arm's harness, as data. Frozen: a run cannot change an arm behind the report's back."""

    arm: str
    agent_import_path: str
    description: str
    # Who starts the next turn when one ends: "none" (single turn), "codex" (native goal
    # continuations), or "driver" (our harness starts a fresh turn each tick).
    continuation_owner: str
    uses_goal: bool
    loopx: bool = False
    runtime_profile: str | None = None  # LoopX --runtime-profile
    # How LoopX's body expands the profile: the guard's extra flags.
    profile_expansion: tuple[str, ...] = ()
    doctor_agent_type: str | None = None  # loopx doctor --agent-type
    needs_turn_instance: bool = False  # a new LOOPX_TURN per turn (heartbeat)
    # Where the LoopX body goes: "goal_objective" (thread/goal/set; the task instruction is the turn
    # input) or "turn_input" (each driver tick's turn carries the body, then the instruction).
    body_role: str | None = None
    # The body tells the agent to block the goal after three identical blocked turns (only a user
    # resumes it); the harness then plays the operator when ``ungated`` (see CodexLoopxAgent).
    self_lock: bool = False
    # What paces the driver's ticks when the driver owns continuation.
    pacing: str | None = None
    spend_source: str = "app-server thread/tokenUsage/updated"
    goal_objective: str | None = None  # fixed objective for the native goal arm
    notes: str = ""
    # Disclosed deviations from the design it stands for; empty when it is as designed.
    disclosures: tuple[str, ...] = field(default_factory=tuple)
    # The original design's name for what was substituted, when there is one.
    substitution: str | None = None
    # Differences from the other arms that are this arm's harness by design (the audit masks them).
    masked: tuple[Masked, ...] = ()

    def as_dict(self) -> dict:
        """Plain data for receipts and reports."""
        from dataclasses import asdict

        d = asdict(self)
        d["profile_expansion"] = list(self.profile_expansion)
        d["disclosures"] = list(self.disclosures)
        d["masked"] = [m.as_dict() for m in self.masked]
        return d


PLAIN = Mode(
    arm="plain",
    agent_import_path="agents.codex_plain_appserver:CodexPlainAppServer",
    description="bare codex over app-server: one turn with the task instruction, no goal, no LoopX",
    continuation_owner="none",
    uses_goal=False,
    substitution="codex exec",
    masked=(_NO_GOAL,),
    disclosures=(
        "plain drives codex through app-server (one turn/start), not the paper's `codex exec`: the field "
        "saw `codex exec` alone hit HTTP 400 (metadata passthrough) and SSE failures the other arms did "
        "not, so all five arms share one transport.",
    ),
)

GOAL = Mode(
    arm="goal",
    agent_import_path="agents.codex_goal_agent:CodexGoalAgent",
    description="codex native goal over app-server (thread/goal/set), codex owns continuation, no LoopX",
    continuation_owner="codex",
    uses_goal=True,
    goal_objective="Finish the task.",
    masked=(_GOAL,),
)

SSH_GOAL = Mode(
    arm="ssh-goal",
    agent_import_path="agents.codex_loopx_agent:CodexLoopxAgent",
    description="LoopX mode 2: Codex App over SSH; LoopX goal body as the native goal's objective",
    continuation_owner="codex",
    uses_goal=True,
    loopx=True,
    runtime_profile="codex_app_ssh_goal",
    profile_expansion=("--begin-turn",),
    doctor_agent_type="codex-app-ssh",
    body_role="goal_objective",
    self_lock=True,
    masked=(_GOAL, _LOOPX_PROFILE, _LOOPX_BODY),
    notes="body rendered by `loopx heartbeat-prompt --thin --runtime-profile codex_app_ssh_goal`; its quota "
    "guard carries --begin-turn (a `quota should-run` flag LoopX adds for this profile)",
)

CODEX_CLI = Mode(
    arm="codex-cli",
    agent_import_path="agents.codex_loopx_agent:CodexLoopxAgent",
    description="LoopX mode 3: Codex CLI with a visible /goal; LoopX goal body as the native goal's objective",
    continuation_owner="codex",
    uses_goal=True,
    loopx=True,
    runtime_profile="codex_cli",
    doctor_agent_type="codex-cli",
    body_role="goal_objective",
    self_lock=True,
    masked=(_GOAL, _LOOPX_PROFILE, _LOOPX_BODY),
    notes="body identical to ssh-goal except the guard line (`--runtime-profile codex_cli`, no --begin-turn)",
)

HEARTBEAT = Mode(
    arm="heartbeat",
    agent_import_path="agents.codex_loopx_agent:CodexLoopxAgent",
    description="LoopX mode 1: heartbeat automation; the driver starts a fresh turn per tick",
    continuation_owner="driver",
    uses_goal=False,
    loopx=True,
    runtime_profile="generic_cli",
    profile_expansion=("--turn-instance-id",),
    doctor_agent_type="codex-cli",
    needs_turn_instance=True,
    body_role="turn_input",
    pacing="LoopX generic_cli scheduler_hint (quota should-run --dry-run --include-detail scheduler)",
    notes="every tick: a fresh turn on the same thread whose input is the body rendered with a new turn "
    "instance id (LOOPX_TURN), then the task instruction",
    substitution="codex_app",
    masked=(_NO_GOAL, _LOOPX_PROFILE, _LOOPX_BODY),
    disclosures=(
        "heartbeat runs on LoopX's `generic_cli` surface instead of `codex_app`: `codex_app` expects the "
        "real Codex App to apply automation_update and ACK a stateful backoff, and hangs without it; "
        "`generic_cli` is upstream's surface for self-built timers.",
    ),
)

#: The arms in their canonical order (the default of --arms).
ARMS: dict[str, Mode] = {m.arm: m for m in (PLAIN, GOAL, SSH_GOAL, CODEX_CLI, HEARTBEAT)}
DEFAULT_ARMS: tuple[str, ...] = tuple(ARMS)


def mode_for(arm: str) -> Mode | None:
    """The Mode of a known arm; None for a stand-in (oracle, nop, test agents)."""
    return ARMS.get(arm)


def disclosures(arms: list[str] | tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """Disclosed deviations per arm, for receipts and reports (only arms that have any)."""
    names = list(arms) if arms is not None else list(ARMS)
    return {a: list(ARMS[a].disclosures) for a in names if a in ARMS and ARMS[a].disclosures}


def masked(arms: list[str] | tuple[str, ...] | None = None) -> dict[str, list[dict]]:
    """Each arm's declared masked differences, for receipts and reports (only arms that have any)."""
    names = list(arms) if arms is not None else list(ARMS)
    return {a: [m.as_dict() for m in ARMS[a].masked] for a in names if a in ARMS and ARMS[a].masked}


def masked_wire_params() -> tuple[str, ...]:
    """The request parameters any arm declares masked: the wire audit compares the others."""
    return tuple(sorted({p for m in ARMS.values() for d in m.masked for p in d.wire_params}))


def masked_config_keys() -> tuple[str, ...]:
    """The config.toml keys any arm declares masked: removed for every arm alike before hashing,
    so two arms' normalised hashes compare what neither declared."""
    return tuple(sorted({k for m in ARMS.values() for d in m.masked for k in d.config_keys}))
