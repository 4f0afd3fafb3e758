"""One arm's conversation with ``codex app-server``, wherever it runs: start, budget, drive, wind-down.

Stdlib only: the host runs it over ``docker exec -i`` (transport ``docker-exec``) and the
in-sandbox driver runs the very same code over a local process (transport ``sandbox-driver``), so
the preflight, the model budget and the deadline's wind-down cannot drift apart between the two.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agents.appserver import AppServerClient
from agents.session import ArmFailure, CodexSession, is_deadline
from agents.staging import SIDECAR
from modes.budget import deadline_margin_sec
from modes.receipt import Receipt, utc_now

#: exit codes of ``preflight_script``
MISSING_CODEX, MISSING_SIDECAR = 3, 4
#: writes stdin to ``$1/config.toml`` in one rename
CONFIG_WRITE_SCRIPT = (
    'mkdir -p "$1" && cat > "$1/config.toml.tmp" && mv "$1/config.toml.tmp" "$1/config.toml"'
)

Drive = Callable[[CodexSession, str], Awaitable[None]]


def model_budget(
    goal_timeout_sec: float | None, harbor_sec: float | None, prep_sec: float
) -> tuple[float | None, str]:
    """The model's budget from now: GOAL_TIMEOUT_SEC, clamped when harbor's agent timeout leaves less."""
    budget, source = goal_timeout_sec, "GOAL_TIMEOUT_SEC"
    if harbor_sec is not None:
        limit = max(1.0, harbor_sec - deadline_margin_sec(harbor_sec) - prep_sec)
        if budget is None or limit < budget:
            budget, source = limit, "harbor agent timeout minus margin and preparation"
    return budget, source


def preflight_script(codex_bin: str) -> str:
    """Shell that checks the staged codex and its sidecar, then prints ``codex --version``."""
    import shlex

    bin_dir = shlex.quote(codex_bin.rsplit("/", 1)[0] or "/")
    q = shlex.quote(codex_bin)
    return (
        f"test -x {q} || {{ echo 'missing: {codex_bin}'; exit {MISSING_CODEX}; }}; "
        f"test -f {bin_dir}/{SIDECAR} || {{ echo 'missing: '{bin_dir}/{SIDECAR}; exit {MISSING_SIDECAR}; }}; "
        f"{q} --version"
    )


def preflight_verdict(returncode: int, out: str, codex_version: str) -> str:
    """ArmFailure for anything that would fail silently later; else the version line."""
    if returncode == MISSING_CODEX:
        raise ArmFailure(
            f"codex is not mounted in the trial container ({out}); stage it with "
            "`marathon stage codex` and mount it read-only at /opt/codex (harbor --mounts), or pass "
            "--ak codex_delivery=copy where a mount is impossible"
        )
    if returncode == MISSING_SIDECAR:
        raise ArmFailure(
            f"staged codex is incomplete: {out} (codex spawns {SIDECAR} next to itself; "
            "without it every tool call fails silently). Re-stage the whole vendor tree."
        )
    if returncode != 0:
        raise ArmFailure(f"codex --version failed in the container (exit {returncode}): {out[-300:]}")
    if codex_version not in out:
        raise ArmFailure(f"mounted codex reports {out!r}, expected version {codex_version}")
    return out


class Conversation:
    """A started app-server process, its session, the budget and the deadline's wind-down."""

    def __init__(
        self,
        receipt: Receipt,
        logs_dir: Path,
        workdir: str,
        *,
        zero_token_limit: int = 3,
        on_usage: Callable[[dict], None] | None = None,
    ) -> None:
        self.receipt = receipt
        self.logs_dir = Path(logs_dir)
        self.workdir = workdir
        self.zero_token_limit = zero_token_limit
        self.on_usage = on_usage
        self.client: AppServerClient | None = None
        self.session: CodexSession | None = None
        self.budget_t0: float | None = None
        self._budget_args: tuple[float, float | None, float | None] | None = None

    async def open(self, proc, deadline: float | None = None) -> CodexSession:
        """Client on ``proc`` (app-server), ``initialize``: a ready session, or a loud ArmFailure."""
        stderr = self.logs_dir / "appserver.stderr.log"
        client = self.client = AppServerClient(proc, self.logs_dir / "appserver.stdout.jsonl", stderr)
        await client.start()
        try:
            await client.initialize("marathon", "0.1.0")
        except Exception as exc:
            client.kill()
            tail = stderr.read_text(errors="replace")[-500:] if stderr.exists() else ""
            raise ArmFailure(f"codex app-server did not initialize: {exc}; stderr: {tail}") from exc
        self.session = CodexSession(
            client,
            self.receipt,
            self.workdir,
            deadline=deadline,
            zero_token_limit=self.zero_token_limit,
            on_usage=self.on_usage,
        )
        return self.session

    def start_budget(self, t0: float, goal_timeout_sec: float | None, harbor_sec: float | None) -> None:
        """Start the model's budget now, right before the first model request, for every arm alike.

        Why: the preparation (LoopX profile install, gates, goal setup, body rendering; the codex
        preflight and app-server start) took from the same deadline, so the LoopX arms got less
        model time. The preparation stays bounded by the run's deadline; the budget is
        GOAL_TIMEOUT_SEC from here, clamped only when harbor's agent timeout leaves less (then the
        receipt says so, and the fairness audit sees the unequal ``budget_sec``).
        """
        now = time.monotonic()
        prep = now - t0
        budget, source = model_budget(goal_timeout_sec, harbor_sec, prep)
        r = self.receipt
        r.extra["harbor_agent_timeout_sec"] = harbor_sec
        r.prep_sec = round(prep, 3)
        r.budget_start = utc_now()
        r.extra["budget_start_epoch"] = round(time.time(), 3)  # to the ms: the ledger's clock is the same
        r.budget_sec = round(budget, 3) if budget is not None else None
        r.extra["budget_source"] = source
        self.session.deadline = now + budget if budget is not None else None
        self.budget_t0 = now
        self._budget_args = (t0, goal_timeout_sec, harbor_sec)

    def anchor_budget(self, first_request: float, first_epoch: float) -> None:
        """Start the budget again at the arm's first model request (``first_request``, monotonic;
        ``first_epoch``, the same moment by the wall clock): what the gateway counts the attempt's
        wire budget from (``modes.budget``). Called once, by the in-sandbox relay, when the first request
        of the budget passes it (``agents.relay.Relay.on_first``).

        Why: the budget started just before the arm's first turn, but codex sends its first request
        only after its own start of that turn (seconds on a loaded machine, not the same for every
        arm), so each harness stopped its arm that much model time short of the wire's budget, and
        the five arms were cut at different moments on the wire. Started here, the harness's deadline
        and the gateway's fall together for every arm. A request after the deadline started from
        ``start_budget`` (the deadline already ended the work) moves nothing."""
        s, args = self.session, self._budget_args
        if s is None or args is None or self.budget_t0 is None or first_request <= self.budget_t0:
            return
        if s.deadline is not None and first_request >= s.deadline:
            return
        t0, goal_timeout_sec, harbor_sec = args
        lag = first_request - self.budget_t0
        budget, source = model_budget(goal_timeout_sec, harbor_sec, first_request - t0)
        r = self.receipt
        r.budget_start = utc_now(first_epoch)
        r.extra["budget_start_epoch"] = round(first_epoch, 3)
        r.extra["budget_anchor"] = "first model request"
        r.extra["first_request_after_sec"] = round(lag, 3)
        r.budget_sec = round(budget, 3) if budget is not None else None
        r.extra["budget_source"] = source
        s.deadline = first_request + budget if budget is not None else None
        self.budget_t0 = first_request

    async def drive(self, drive: Drive, instruction: str) -> None:
        """Run the arm's loop; the deadline is normal budget exhaustion (wind down, return)."""
        r = self.receipt
        try:
            await drive(self.session, instruction)
        except Exception as exc:
            if not is_deadline(exc):
                raise
            await self.wind_down()
            return
        if r.stop_reason is None:
            r.stop_reason = "completed"
        await self.client.close()

    async def wind_down(self) -> None:
        """The deadline (or a stop request) ended the model's work: interrupt, close, record when."""
        r = self.receipt
        r.stop_reason = "deadline"
        r.deadline_hit = True
        if self.budget_t0 is not None:  # when, in the budget, the deadline ended the model's work
            r.extra["deadline_after_sec"] = round(time.monotonic() - self.budget_t0, 3)
        if self.session is not None:
            await self.session.wind_down()
        if self.client is not None:
            await self.client.close(grace=3)

    def finish(self) -> None:
        """Synchronous (also under cancellation): end app-server, put its leftovers in the receipt."""
        r = self.receipt
        if self.client is not None:
            self.client.kill()
            r.noise_lines = self.client.noise_lines[:50]
            r.server_requests = self.client.server_requests[:200]

    def record_times(self, t0: float, key: str = "duration_sec") -> None:
        """The run's duration and the budget used, measured now."""
        self.receipt.timings[key] = round(time.monotonic() - t0, 3)
        if self.budget_t0 is not None:
            self.receipt.budget_used_sec = round(time.monotonic() - self.budget_t0, 3)
