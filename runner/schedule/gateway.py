"""The gateway in a run: which settings it gets from the run's configuration, and what each attempt
of a codex arm gets from it (a token in harbor's environment, a socket mount, ``--ak gateway=local``).

Why here, below both launchers: a run on one host (``runner.schedule.local``) and an attempt's Ray
job on a cluster host (``runner.schedule.fleet.job``) wire an attempt the same way, so an arm can
never reach its model differently on a cluster than on one host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from modes.gateway import CUT_VAR, LOCAL, SCRIPTED_UPSTREAM, TOKEN_VAR
from runner.ops.gateway import attempts
from runner.ops.gateway.process import DEFAULT_BASE_URL, GatewaySettings
from runner.results.caps import Caps, attempt_cut_path
from runner.schedule.config import ArmSpec, RunConfig

SCRIPTED_PREFIX = "scripted/"
#: where every codex arm's credential comes from unless ``--ak api_key_var=NAME`` says otherwise
DEFAULT_KEY_VAR = "OPENAI_API_KEY"


def arm_key_var(cfg: RunConfig) -> str | None:
    """The variable ``--ak api_key_var=NAME`` names (the last one given), if any."""
    found = None
    for item in cfg.agent_kwargs:
        k, sep, v = item.partition("=")
        if sep and k.strip() == "api_key_var" and v.strip():
            found = v.strip()
    return found


def gateway_on(cfg: RunConfig) -> bool:
    """The run's codex arms reach their model through the gateway (every real arm alike)."""
    return bool(cfg.gateway) and any(s.real for s in cfg.arm_specs())


def is_scripted(model: str | None) -> bool:
    """The model names a scenario of the scripted stand-in: ``scripted/NAME``, with or without a
    provider in front (``openai/scripted/NAME``, as harbor's ``-m`` takes it)."""
    return SCRIPTED_PREFIX in (model or "")


def upstream_of(cfg: RunConfig) -> str:
    """``--model-base-url``; else the scripted stand-in for a ``scripted/`` model; else OpenAI's."""
    if cfg.model_base_url:
        return cfg.model_base_url
    if is_scripted(cfg.model):
        return SCRIPTED_UPSTREAM
    return DEFAULT_BASE_URL


def key_var_of(cfg: RunConfig) -> str:
    """The NAME of the real key's variable: ``--model-key-var``, else ``--ak api_key_var``, else
    OPENAI_API_KEY. Only the gateway reads it."""
    return cfg.model_key_var or arm_key_var(cfg) or DEFAULT_KEY_VAR


def settings_for(cfg: RunConfig, host: str | None = None) -> GatewaySettings:
    up = upstream_of(cfg)
    return GatewaySettings(
        upstream=up,
        key_var=key_var_of(cfg),
        tasks_dir=str(cfg.tasks_dir) if up == SCRIPTED_UPSTREAM and cfg.tasks_dir else None,
        host=host,
        tls_listen=cfg.gateway_tls_listen,
        tls_cert=cfg.gateway_tls_cert,
        tls_key=cfg.gateway_tls_key,
    )


def caps_of(cfg: RunConfig) -> Caps:
    """The run's spend caps as its gateways and its runner keep them (``runner.results.caps``),
    priced as the report prices the run (its ``--price`` items, its ``--model``)."""
    return Caps(
        run_usd=cfg.max_spend,
        arm_usd=cfg.max_spend_arm,
        on_cap=cfg.on_cap,
        prices=cfg.prices,
        model=cfg.model,
        attempt_usd=cfg.max_spend_attempt,
    )


@dataclass(frozen=True)
class Wiring:
    """What one attempt of a codex arm gets: its record, token and socket (``attempts.Issued``)."""

    issued: attempts.Issued
    key_var: str
    url: str | None = None  # the remote route: the gateway's TLS URL (no socket, no mount)
    ca: str | None = None  # the CA a remote sandbox is given to trust the gateway's certificate
    cut: str = ""  # the file the gateway writes when the attempt has spent its own cap

    @property
    def attempt_id(self) -> str:
        return self.issued.record.id

    def mounts(self, mounts: str | None) -> str | None:
        """harbor ``--mounts`` JSON with the attempt's socket dir added (the local route)."""
        if self.url:
            return mounts
        return json.dumps([*(json.loads(mounts) if mounts else []), self.issued.mount])

    def env(self, job_env: dict[str, str]) -> dict[str, str]:
        """harbor's environment: the token by name; the real key removed (harbor never needs it); the
        file the gateway writes when the attempt has spent its own cap (the agent's host side ends
        the phase at it: ``agents.sandbox_host``)."""
        env = {k: v for k, v in job_env.items() if k != self.key_var}
        env[TOKEN_VAR] = self.issued.token
        env[CUT_VAR] = self.cut
        return env

    def agent_kwargs(self) -> list[str]:
        return ["--ak", f"gateway={self.url or LOCAL}"] + (
            ["--ak", f"gateway_ca={self.ca}"] if self.url and self.ca else []
        )


def wire_attempt(
    cfg: RunConfig, task: str, arm: ArmSpec, stamp: str, host: str | None = None
) -> Wiring | None:
    """Register one attempt with the gateway (None: this attempt does not use it: a stand-in, or
    a run with ``--no-gateway``). Its wire budget is the run's ``GOAL_TIMEOUT_SEC``, the same for every arm."""
    if not (cfg.gateway and arm.real):
        return None
    remote = cfg.gateway_url
    issued = attempts.issue(
        cfg.out, task, arm.name, stamp, budget_sec=cfg.goal_timeout_sec, host=host, socket=not remote
    )
    cut = str(attempt_cut_path(cfg.out, issued.record.id))
    return Wiring(issued, key_var_of(cfg), remote, cfg.gateway_ca, cut)


def end_attempt(out: Path, task: str, arm: str, stamp: str, reason: str) -> None:
    attempts.end_for_stamp(out, task, arm, stamp, reason)
