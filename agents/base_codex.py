"""The harbor agent base for every codex arm: one transport, one config, one evidence path.

Subclasses set ``ARM`` (a key of ``modes.profiles.ARMS``), ``name()``, and implement
``drive(session, instruction)``; everything else is shared so that only the harness differs
between arms:

- preflight before any turn: the staged codex is mounted (``/opt/codex``), ``codex-code-mode-host``
  sits next to ``bin/codex``, ``codex --version`` matches, the credential variable is set;
- config.toml written in one piece (agents.codex_config) into ``CODEX_HOME`` inside the container;
- ``codex app-server --strict-config`` in the container's workdir, as the task's user, with the
  credential passed by name. Two transports (``--ak transport=``): ``sandbox-driver`` (default, every
  harbor environment: the conversation runs inside the sandbox, agents.sandbox_host /
  agents.sandbox_driver) and ``docker-exec`` (the host speaks to app-server through
  ``docker exec -i``, agents.transport; local Docker only, for debugging). Both run the same
  conversation code (agents.conversation, agents.drive);
- the deadline (``GOAL_TIMEOUT_SEC``, env or kwarg ``goal_timeout_sec``) ends the agent phase
  shortly before harbor's own timeout; it is recognised by message and ``run()`` returns normally,
  so the verifier scores the partial work and the trial is not errored;
- evidence in a ``finally`` that also runs under cancellation (synchronous copies): session
  rollouts, the goals sqlite, raw app-server stdout/stderr, the scripted model's request log when
  present, ``agent/goal_receipt.json``, ``agent/trajectory.json`` (ATIF via harbor's codex
  converter); token counts go into harbor's AgentContext as they arrive.

Agent kwargs (``--ak``): ``provider_base_url`` (default: the scripted model on the container's own
127.0.0.1), ``api_key_var`` (name of the credential variable, default ``OPENAI_API_KEY``; its value
comes from the host environment or ``--ae``), ``model`` (default: ``-m`` without an ``openai/``
prefix), ``goal_timeout_sec``, ``codex_version``, ``codex_bin``, ``request_max_retries``,
``stream_max_retries``, ``zero_token_limit``, ``model_catalog_json``, ``codex_delivery``
(``mount``, the default: harbor ``--mounts`` the staged tree; ``copy``: copy it in, noted in the receipt;
the sandbox driver uploads it whenever no mount brought it), ``transport`` (``sandbox-driver`` | ``docker-exec``),
``setup_fault_once`` (``<task>/<arm>@<marker>``: that pair's first setup fails; agents.setup_fault),
``gateway`` (``local``: the model gateway through the relay the in-sandbox driver starts on the
sandbox's loopback, to the attempt's socket the runner mounted; ``https://HOST:PORT/v1``: a remote
sandbox's route to the gateway's TLS listener, through the same relay, which is the TLS client there
and trusts ``gateway_ca``. Either way codex's base URL is the relay's and its key is the attempt's
token from ``modes.gateway.TOKEN_VAR``, never the real key: docs/gateway.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

from agents import litellm_map, setup_fault
from agents.appserver import AppServerClient
from agents.codex_config import PROVIDER_ID, ProviderSettings, build_config, render
from agents.conversation import (
    CONFIG_WRITE_SCRIPT,
    Conversation,
    preflight_script,
    preflight_verdict,
)
from agents.drive import Harness
from agents.scripted_model import SCRIPTED_BASE_URL, SCRIPTED_LOG
from agents.session import DEADLINE_MESSAGE, ArmFailure, CodexSession, is_deadline
from agents.staging import (
    CONTAINER_CODEX_BIN,
    CONTAINER_CODEX_ROOT,
    DEFAULT_CODEX_VERSION,
    StagingError,
    codex_dir,
    file_sha256,
    load_staged,
)
from agents.transport import Transport, UnsupportedEnvironment
from modes import safeio, safetext
from modes.budget import deadline_margin_sec
from modes.config_digest import config_digests
from modes.gateway import LOCAL, RELAY_BASE_URL, TOKEN_VAR, tls_address
from modes.profiles import mode_for
from modes.receipt import Receipt, utc_now
from modes.trial_files import TrialFiles
from modes.values import COUNT_CAP

CODEX_HOME = "/var/tmp/marathon-codex"
DEFAULT_KEY_VAR = "OPENAI_API_KEY"
TIMEOUT_ENV = "GOAL_TIMEOUT_SEC"
#: ``--ak transport=``: the in-sandbox driver (default, any harbor environment) or ``docker exec -i``
SANDBOX_DRIVER = "sandbox-driver"
DOCKER_EXEC = "docker-exec"
TRANSPORTS = (SANDBOX_DRIVER, DOCKER_EXEC)

__all__ = [
    "CodexAppServerAgent",
    "ArmFailure",
    "DEADLINE_MESSAGE",
    "is_deadline",
    "CodexSession",
    "deadline_margin_sec",
]


def _count(v: object) -> int:
    """A token count as harbor keeps it: a whole number in range, else 0 (the counts come from the
    sandbox, where the agent is root: ``int("trial environment lost")`` raised a ValueError whose
    message voided the attempt, a probe's find; the gateway's ledger is the count that is trusted)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= COUNT_CAP else 0


def _trial_config(trial_dir: Path):
    """harbor's TrialConfig of this trial (its config.json), or None when unreadable."""
    try:
        from harbor.models.trial.config import TrialConfig

        return TrialConfig.model_validate_json((trial_dir / "config.json").read_text())
    except Exception:  # noqa: BLE001 - unknown layout: the callers fall back
        return None


def harbor_agent_timeout_sec(trial_dir: Path) -> float | None:
    """harbor's effective agent timeout for this trial, computed as harbor 0.25.0 does
    (``trial.py:_compute_agent_timeout_sec``) from the trial's config.json and task.toml."""
    cfg = _trial_config(trial_dir)
    if cfg is None:
        return None
    try:
        from harbor.models.task.config import TaskConfig

        task = TaskConfig.model_validate_toml((cfg.task.get_local_path() / "task.toml").read_text())
        base = cfg.agent.override_timeout_sec or task.agent.timeout_sec
        if base is None:
            return None
        mult = (
            cfg.agent_timeout_multiplier
            if cfg.agent_timeout_multiplier is not None
            else cfg.timeout_multiplier
        )
        return min(base, cfg.agent.max_timeout_sec or float("inf")) * mult
    except Exception:  # noqa: BLE001 - unknown layout: fall back to GOAL_TIMEOUT_SEC alone
        return None


def mounted_source(trial_dir: Path, target: str) -> Path | None:
    """The host directory harbor bind-mounted at ``target`` for this trial (its ``--mounts``)."""
    cfg = _trial_config(trial_dir)
    mounts = (cfg.environment.mounts or []) if cfg is not None else []
    for m in mounts:
        if str(m.get("target", "")).rstrip("/") == target.rstrip("/") and m.get("source"):
            return Path(str(m["source"]))
    return None


class CodexAppServerAgent(BaseAgent):
    ARM: ClassVar[str] = ""

    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        *,
        provider_base_url: str = SCRIPTED_BASE_URL,
        api_key_var: str = DEFAULT_KEY_VAR,
        model: str | None = None,
        goal_timeout_sec: float | None = None,
        codex_version: str = DEFAULT_CODEX_VERSION,
        codex_bin: str = CONTAINER_CODEX_BIN,
        request_max_retries: int = 2,
        stream_max_retries: int = 2,
        zero_token_limit: int = 3,
        model_catalog_json: str | None = None,
        codex_delivery: str = "mount",
        setup_fault_once: str | None = None,
        transport: str = SANDBOX_DRIVER,
        gateway: str | None = None,
        gateway_ca: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(logs_dir, model_name, **kwargs)
        if gateway == LOCAL:
            provider_base_url, api_key_var = RELAY_BASE_URL, TOKEN_VAR
        elif gateway and gateway.startswith("https://"):
            tls_address(gateway)  # a URL the relay cannot reach fails here, for every arm
            provider_base_url, api_key_var = RELAY_BASE_URL, TOKEN_VAR
        elif gateway:
            raise ValueError(f"gateway must be {LOCAL!r} or the gateway's https:// URL, not {gateway!r}")
        self.gateway = gateway
        #: the CA of the gateway's TLS certificate, on the host (the remote route; uploaded)
        self.gateway_ca = gateway_ca
        if setup_fault_once:
            setup_fault.parse(setup_fault_once)  # a malformed spec fails at construction, for every arm
        self.setup_fault_once = setup_fault_once
        self.provider_base_url = provider_base_url
        self.api_key_var = api_key_var
        self.codex_model = model or self._model_from_name(model_name)
        self.codex_version = str(codex_version)
        self.codex_bin = codex_bin
        self.request_max_retries = int(request_max_retries)
        self.stream_max_retries = int(stream_max_retries)
        self.zero_token_limit = int(zero_token_limit)
        self.model_catalog_json = model_catalog_json
        if codex_delivery not in ("mount", "copy"):
            raise ValueError(f"codex_delivery must be 'mount' or 'copy', not {codex_delivery!r}")
        self.codex_delivery = codex_delivery
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
        self.transport_kind = transport
        self.conversation: Conversation | None = None
        self.goal_timeout_sec = self._resolve_timeout(goal_timeout_sec)
        self.mode = mode_for(self.ARM)
        self.receipt: Receipt | None = None
        self.codex_home = CODEX_HOME  # the LoopX arms use their profile's codex-home

    # --- harbor API ----------------------------------------------------------------------------------

    def version(self) -> str | None:
        return self.codex_version

    async def setup(self, environment: BaseEnvironment) -> None:
        """Nothing to install: codex comes from the read-only staged mount, checked in run(). The
        demo's one voided attempt fails here (``setup_fault_once``, agents.setup_fault)."""
        setup_fault.maybe_fail(self.setup_fault_once, self.ARM, self.trial_name())

    def harness(self) -> Harness:
        """The arm's loop (agents.drive): the same object runs here or inside the sandbox."""
        raise NotImplementedError

    async def drive(self, session: CodexSession, instruction: str) -> None:
        await self.harness().drive(session, instruction)

    async def prepare(self, transport: Transport) -> None:
        """Hook before the preflight (LoopX arms install their profile here); no-op by default."""

    def appserver_env(self) -> dict[str, str]:
        """Non-secret environment of ``codex app-server`` (LoopX arms add their profile env)."""
        return {"CODEX_HOME": self.codex_home}

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        """One run in the envelope every arm shares (agents.envelope), carried by the transport chosen."""
        from agents.envelope import run_arm

        if self.transport_kind == SANDBOX_DRIVER:
            from agents.sandbox_host import SandboxDriverRun

            carrier = SandboxDriverRun(self)
        else:
            from agents.docker_exec_run import DockerExecRun

            carrier = DockerExecRun(self)
        await run_arm(self, carrier, instruction, environment, context)

    def begin_receipt(self) -> Receipt:
        """A new receipt with the run's deadline (GOAL_TIMEOUT_SEC, clamped) and ``started``."""
        deadline_sec, source = self._effective_deadline_sec()
        receipt = self.new_receipt()
        receipt.goal_timeout_sec = deadline_sec
        receipt.extra["deadline_source"] = source
        receipt.mark("started")
        return receipt

    def finish_receipt(self, receipt: Receipt, t0: float) -> None:
        receipt.mark("finished")
        if self.conversation is not None:
            self.conversation.record_times(t0)
        else:
            receipt.timings["duration_sec"] = round(time.monotonic() - t0, 3)
        receipt.write(self.logs_dir)

    def harbor_sec(self) -> float | None:
        return harbor_agent_timeout_sec(Path(self.logs_dir).resolve().parent)

    async def open_session(
        self, transport: Transport, *, deadline: float | None = None, context: AgentContext | None = None
    ) -> CodexSession:
        """Preflight, config.toml, ``codex app-server --strict-config``, initialize: a ready session.

        Needs ``self.receipt`` (run() creates it; a direct caller sets ``self.receipt = self.new_receipt()``).
        """
        secret = self.codex_preflight(transport)
        self.receipt.mark("preflight_done")
        on_usage = (lambda total: self.usage_to_context(total, context)) if context is not None else None
        await self.start_appserver(transport, secret, on_usage=on_usage, deadline=deadline)
        self.session = self.conversation.session
        return self.session

    # --- pieces ----------------------------------------------------------------------------------------

    @staticmethod
    def _parse_model_name_for_connection(
        model_name: str, *, skip_model_parsing: bool = False
    ) -> tuple[str | None, str]:
        """The provider and model of ``-m`` as LiteLLM would split them, from LiteLLM's model map read
        as data (agents.litellm_map): harbor's own parser imports LiteLLM, 3-6 s of CPU in every
        harbor process that runs an arm, for a provider the arms never use (codex gets the model and
        the provider's URL from its own config). The runner starts the arms with
        ``--skip-model-parsing-and-provider-mapping`` (harbor's preflight parses with LiteLLM
        otherwise); this is what the agent's model info records then."""
        return litellm_map.split_model_name(model_name)

    @staticmethod
    def _model_from_name(model_name: str | None) -> str:
        if not model_name:
            return "scripted/solve"
        return model_name.removeprefix("openai/")

    def _resolve_timeout(self, value: float | None) -> float | None:
        raw = value if value is not None else self._extra_env.get(TIMEOUT_ENV) or os.environ.get(TIMEOUT_ENV)
        if raw in (None, "", "0"):
            return None
        return float(raw)

    def _effective_deadline_sec(self) -> tuple[float | None, str]:
        """Our deadline: GOAL_TIMEOUT_SEC, clamped to end shortly before harbor's own agent timeout.

        Without GOAL_TIMEOUT_SEC the deadline is harbor's timeout minus the margin, so harbor's
        timeout (an errored trial) is never what ends a codex arm.
        """
        harbor_sec = harbor_agent_timeout_sec(Path(self.logs_dir).resolve().parent)
        limit = None if harbor_sec is None else max(1.0, harbor_sec - deadline_margin_sec(harbor_sec))
        if self.goal_timeout_sec is None:
            return limit, "harbor agent timeout minus margin" if limit else "none"
        if limit is not None and limit < self.goal_timeout_sec:
            return limit, "GOAL_TIMEOUT_SEC clamped below harbor agent timeout"
        return self.goal_timeout_sec, "GOAL_TIMEOUT_SEC"

    def trial_name(self) -> str:
        return Path(self.logs_dir).resolve().parent.name  # logs_dir = <trial>/agent

    def new_receipt(self) -> Receipt:
        return Receipt(
            arm=self.ARM,
            mode=self.mode.as_dict() if self.mode else None,
            disclosures=list(self.mode.disclosures) if self.mode else [],
            masked=[m.as_dict() for m in self.mode.masked] if self.mode else [],
            agent=self.name(),
            codex_version=self.codex_version,
            model=self.codex_model,
            provider={
                "id": PROVIDER_ID,
                "base_url": self.provider_base_url,
                "api_key_var": self.api_key_var,
                "wire_api": "responses",
                "gateway": self.gateway,
            },
            goal_timeout_sec=self.goal_timeout_sec,
        )

    def credential(self) -> dict[str, str]:
        value = self._extra_env.get(self.api_key_var) or os.environ.get(self.api_key_var)
        if not value:
            raise ArmFailure(
                f"credential variable {self.api_key_var} is not set in the harness environment; set it "
                "(the arms forward it into the container by name) before any turn is spent"
            )
        return {self.api_key_var: value}

    def codex_preflight(self, transport: Transport) -> dict[str, str]:
        """Everything that would otherwise fail silently later, checked before the first turn."""
        secret = self.credential()
        self.receipt.extra["codex_delivery"] = self.codex_delivery
        if self.codex_delivery == "copy":
            self._copy_codex_in(transport)
        res = transport.run(["sh", "-c", preflight_script(self.codex_bin)], timeout=60)
        out = (res.stdout + res.stderr).decode(errors="replace").strip()
        out = preflight_verdict(res.returncode, out, self.codex_version)
        self.receipt.extra["codex_version_in_container"] = out
        self.record_codex_sha256()
        config = self.config_toml(transport.workdir)
        self.receipt.config_toml = config_digests(config)
        write = transport.run(["sh", "-c", CONFIG_WRITE_SCRIPT, "sh", self.codex_home], stdin=config.encode())
        if write.returncode != 0:
            raise ArmFailure(f"writing {self.codex_home}/config.toml failed: {write.stderr.decode()[-300:]}")
        return secret

    def record_codex_sha256(self) -> None:
        """sha256 of the staged codex binary this trial ran: under the host directory harbor mounted
        at /opt/codex (or the staged tree copied in), hashed once per file version (staging.file_sha256)."""
        rel = Path(CONTAINER_CODEX_BIN).relative_to(CONTAINER_CODEX_ROOT)
        if self.receipt.extra.get("codex_delivery", self.codex_delivery) == "copy":
            root, via = codex_dir(self.codex_version), "the staged tree copied in"
        else:
            root = mounted_source(Path(self.logs_dir).resolve().parent, CONTAINER_CODEX_ROOT)
            via = f"the --mounts source of {CONTAINER_CODEX_ROOT}"
        if root is None or not (root / rel).is_file():
            self.receipt.warnings.append(f"codex sha256 not recorded: no host file for {via}")
            return
        self.receipt.codex_sha256 = file_sha256(root / rel)
        self.receipt.extra["codex_sha256_of"] = str(root / rel)

    def _copy_codex_in(self, transport: Transport) -> None:
        """Where a read-only mount is impossible: copy the host's staged tree in, and say so."""
        try:
            staged = load_staged(self.codex_version)
        except StagingError as exc:
            raise ArmFailure(str(exc)) from exc
        t0 = time.monotonic()
        transport.copy_in(staged.root, CONTAINER_CODEX_ROOT)
        note = (
            f"codex {staged.version} was copied into the container ({CONTAINER_CODEX_ROOT}, "
            f"{time.monotonic() - t0:.1f} s) instead of mounted read-only"
        )
        self.receipt.warnings.append(note)
        self.logger.warning(note)

    def _provider_settings(self) -> ProviderSettings:
        return ProviderSettings(
            base_url=self.provider_base_url,
            api_key_var=self.api_key_var,
            model=self.codex_model,
            request_max_retries=self.request_max_retries,
            stream_max_retries=self.stream_max_retries,
            model_catalog_json=self.model_catalog_json,
        )

    def config_toml(self, workdir: str) -> str:
        """codex's config.toml for this arm (no secret: ``env_key`` is a name); also saved as evidence."""
        config = render(build_config(self._provider_settings(), workdir))
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        safeio.write_atomic(self.logs_dir / "codex-config.toml", config)
        return config

    async def start_appserver(
        self, transport: Transport, secret: dict[str, str], *, on_usage=None, deadline: float | None = None
    ) -> AppServerClient:
        proc = await transport.spawn(
            [self.codex_bin, "app-server", "--strict-config"], self.appserver_env(), secret
        )
        self.conversation = Conversation(
            self.receipt,
            self.logs_dir,
            transport.workdir,
            zero_token_limit=self.zero_token_limit,
            on_usage=on_usage,
        )
        await self.conversation.open(proc, deadline)
        return self.conversation.client

    def usage_to_context(self, total: dict, context: AgentContext) -> None:
        """Keep harbor's context current, so a timeout or cancellation keeps the counts.

        app-server's ``thread/tokenUsage/updated`` is the one spend source (the Mode says so); we
        also fill ``model_usage`` so harbor does not backfill it from the rollout converter, whose
        count differed from app-server's in our runs.
        """
        from harbor.models.agent.context import ModelUsage

        context.n_input_tokens = _count(total.get("inputTokens"))
        context.n_cache_tokens = _count(total.get("cachedInputTokens"))
        context.n_output_tokens = _count(total.get("outputTokens"))
        context.model_usage = {
            self.codex_model: ModelUsage(
                n_input_tokens=context.n_input_tokens,
                n_cache_tokens=context.n_cache_tokens,
                n_output_tokens=context.n_output_tokens,
                cost_usd=context.cost_usd,
            )
        }

    def save_evidence(self, transport: Transport, receipt: Receipt) -> None:
        """The docker-exec route's evidence out of the container: synchronous copies (safe under
        cancellation). What every route does on the host with it is ``finish_evidence``."""
        copies = {
            f"{self.codex_home}/sessions": self.logs_dir,
            SCRIPTED_LOG: self.logs_dir / "scripted-model",
        }
        for src, dest in copies.items():
            try:
                if transport.copy_out(src, dest, self.logs_dir):
                    receipt.evidence.append(str((dest / os.path.basename(src)).relative_to(self.logs_dir)))
            except Exception as exc:  # noqa: BLE001 - evidence is best effort, never masks the result
                receipt.warnings.append(f"evidence copy of {src} failed: {exc}")
        try:
            res = transport.run(["sh", "-c", 'cd "$1" 2>/dev/null && ls', "sh", self.codex_home], user="0")
            state = [n for n in res.stdout.decode().split() if ".sqlite" in n]
            for name in state:
                if name.startswith(("goals_", "state_")) and transport.copy_out(
                    f"{self.codex_home}/{name}", self.logs_dir / "codex-state", self.logs_dir
                ):
                    receipt.evidence.append(f"codex-state/{name}")
        except Exception as exc:  # noqa: BLE001
            receipt.warnings.append(f"evidence copy of codex state failed: {exc}")
        session = getattr(self, "session", None)
        for store in sorted((self.logs_dir / "codex-state").glob("goals_*.sqlite")):
            if session is not None:
                session.reconcile_goal_store(store)
        for name in ("appserver.stdout.jsonl", "appserver.stderr.log"):
            if (self.logs_dir / name).exists():
                receipt.evidence.append(name)

    def finish_evidence(self, receipt: Receipt, context: AgentContext) -> ArmFailure | None:
        """Host-side, on the evidence in the trial's agent dir (either transport; agents.envelope):
        the rollout scan and the ATIF trajectory; returns a failure the rollouts reveal, if any."""
        if (self.logs_dir / "codex-config.toml").exists() and "codex-config.toml" not in receipt.evidence:
            receipt.evidence.append("codex-config.toml")
        failure = self._scan_rollouts(receipt)
        self._write_trajectory(receipt, context)
        return failure

    def sandbox_evidence(self) -> list[tuple[str, str]]:
        """(path in the sandbox, dir under /logs/agent) the in-sandbox driver copies besides codex's."""
        return []

    def _scan_rollouts(self, receipt: Receipt) -> ArmFailure | None:
        """Tool outputs the model saw: 'unsupported call' or a failed code-mode spawn is a loud failure."""
        for path in sorted((self.logs_dir / "sessions").rglob("rollout-*.jsonl")):
            fd = safeio.open_tree_file(path, self.logs_dir, safeio.STREAM)
            if isinstance(fd, safeio.Refused):
                receipt.warnings.append(f"{path.name} not scanned: {fd.reason}")
                continue
            with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
                failure = self._scan_rollout(path, fh, receipt)
            if failure is not None:
                return failure
        return None

    @staticmethod
    def _scan_rollout(path: Path, fh, receipt: Receipt) -> ArmFailure | None:
        """One rollout, line by line (never read whole: the agent controls its size)."""
        for line in fh:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            payload = ev.get("payload") or {}
            if payload.get("type") not in ("function_call_output", "custom_tool_call_output"):
                continue
            out = json.dumps(payload.get("output")).lower()
            if "unsupported call" in out or "failed to spawn code-mode host" in out:
                msg = f"tool output in {safetext.quote_agent(f'{path.name}: {out[:200]}')}"  # (the agent's words)
                receipt.errors.append(msg)
                if receipt.stop_reason not in ("error", "cancelled"):
                    receipt.stop_reason = "error"
                    return ArmFailure(msg)
        return None

    def _set_aside_foreign_trajectory(self, receipt: Receipt) -> None:
        """A trajectory.json the arm did not write is the agent's: harbor reads that name whole after
        the run (a FIFO would block it, a symlink show it a host file), so it is moved aside, kept."""
        path = self.logs_dir / "trajectory.json"
        if os.path.lexists(path):
            try:
                safeio.move_aside(str(path))
                receipt.warnings.append("trajectory.json not written by the arm: moved aside")
            except OSError as exc:
                receipt.warnings.append(f"trajectory.json not written by the arm, not moved: {exc}")

    def _write_trajectory(self, receipt: Receipt, context: AgentContext) -> None:
        """ATIF trajectory.json through harbor's own codex rollout converter."""
        try:
            from harbor.utils.trajectory_utils import format_trajectory_json

            for name in safeio.set_aside_special(self.logs_dir / "sessions"):
                receipt.warnings.append(f"sessions/{name}: not a regular file, moved aside")
            conv = litellm_map.converter(self.logs_dir, self.model_name or self.codex_model)
            traj = conv.convert_trajectory(self.logs_dir)
            if traj is None:
                self._set_aside_foreign_trajectory(receipt)
                return
            safeio.write_atomic(
                self.logs_dir / "trajectory.json", format_trajectory_json(traj.to_json_dict())
            )
            receipt.evidence.append("trajectory.json")
            if traj.final_metrics and traj.final_metrics.total_cost_usd is not None:
                context.cost_usd = traj.final_metrics.total_cost_usd
        except Exception as exc:  # noqa: BLE001 - a converter bug must not hide the run's own result
            receipt.warnings.append(f"trajectory conversion failed: {type(exc).__name__}: {exc}")
            self._set_aside_foreign_trajectory(receipt)
        if context.cost_usd is None:  # the scripted stand-in costs nothing, wherever it is reached
            scripted = self.provider_base_url == SCRIPTED_BASE_URL or self.codex_model.startswith("scripted/")
            context.cost_usd = 0.0 if scripted else None
        for usage in (context.model_usage or {}).values():
            usage.cost_usd = context.cost_usd
        context.metadata = {
            **(context.metadata or {}),
            "arm": self.ARM,
            "receipt": TrialFiles.RECEIPT,
            "stop_reason": receipt.stop_reason,
            "finished_at": utc_now(),
        }


__all__ += ["UnsupportedEnvironment"]
