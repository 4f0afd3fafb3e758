"""The host side of the ``sandbox-driver`` transport: upload, start, watch, stop, download (the
carrier ``SandboxDriverRun`` of the envelope every arm shares, agents.envelope).

Only harbor's generic environment API is used (``exec`` without stdin, ``upload_file``,
``upload_dir``, ``download_dir``), so every harbor environment can run the arms, not only a local
Docker engine. The conversation itself runs inside the sandbox (agents.sandbox_driver); here:

- the arm is prepared as on the docker-exec route (LoopX profile, gates 1-2, goal, body: short
  execs), codex reaches the sandbox by the read-only mount when present, else by ``upload_dir``
  (receipt: ``codex_delivery`` and the bytes copied);
- credentials go into a 0600 file owned by the task user (``upload_file``), never into an exec's
  environment (harbor's docker exec puts those on the command line); the driver reads and deletes
  it before codex starts;
- one short exec as the task user starts the driver detached (``setsid``, output to files); the
  host then polls ``status.json`` with short execs. A failed poll (connection error) is retried and
  never touches the driver; a status not rewritten for ``SILENT_SEC`` is a loud ArmFailure naming
  the driver's last phase;
- at the deadline: the ``stop`` file, then SIGTERM, then SIGKILL to the driver's process group,
  each to the pid the driver reported with its start time re-checked (a reused pid is never hit);
- at the attempt's own spend cap (``marathon run --max-spend-attempt``): the same, as soon as the
  gateway's cut record appears on the host (the file ``modes.gateway.CUT_VAR`` names, polled every
  ``CUT_POLL_SEC`` beside the status polls); the receipt says ``spend_cap_attempt`` and the figures;
- at the end the evidence under /logs/agent is downloaded (regular files only, through
  modes.safeio) and the driver's receipt merged into ``agent/goal_receipt.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets as pysecrets
import shlex
import shutil
import tempfile
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from agents import leftovers
from agents.envelope import Arm, RunContext
from agents.sandbox_driver import CONFIG_NAME, MIN_PYTHON, RECEIPT_NAME, STATUS_NAME, STOP_NAME
from agents.scripted_model import SCRIPTED_LOG
from agents.session import ArmFailure
from agents.staging import CONTAINER_CODEX_ROOT, StagingError, load_staged
from agents.transport import (
    EnvironmentLost,
    container_lost,
    find_main_container,
    image_of_container,
    is_local_docker,
    tree_bytes,
)
from modes import safeio, safetext
from modes.budget import deadline_margin_sec
from modes.config_digest import config_digests
from modes.gateway import (
    CUT_VAR,
    LOCAL,
    RELAY_HOST,
    RELAY_PORT,
    SANDBOX_CA,
    SANDBOX_SOCKET,
    SPEND_CAP_ATTEMPT,
    tls_address,
)
from modes.naming import compose_project
from modes.receipt import Receipt
from modes.values import SECONDS_CAP

REPO = Path(__file__).resolve().parents[1]
#: The stdlib-only modules the driver needs, uploaded as a package tree (harbor is not installed there).
BUNDLE = (
    "agents/__init__.py",
    "agents/appserver.py",
    "agents/conversation.py",
    "agents/drive.py",
    "agents/loopx_body.py",
    "agents/loopx_gates.py",
    "agents/loopx_profile.py",
    "agents/relay.py",
    "agents/sandbox_driver.py",
    "agents/session.py",
    "agents/staging.py",
    "modes/__init__.py",
    "modes/budget.py",
    "modes/gateway.py",
    "modes/profiles.py",
    "modes/receipt.py",
    "modes/safeio.py",
    "modes/trial_files.py",
    "modes/values.py",
)
SANDBOX_BUNDLE = "/opt/marathon-driver"
SANDBOX_LOGS = "/logs/agent"
CTRL = f"{SANDBOX_LOGS}/driver"
#: every exec of this transport carries this first line (a test environment injects faults into them)
EXEC_MARK = "# marathon-driver"
#: printed after the status: proof the sandbox ran the poll (a dead one answers nothing)
ANSWER_MARK = "__marathon_status_end__"
POLL_SEC = 2.0
#: a status poll waits in the sandbox this long for the driver to be done (or until the host's next
#: deadline), so the host runs one exec per this many seconds instead of one per POLL_SEC: each
#: exec costs the host about 0.1 CPU-s (``docker compose exec`` and its compose plugin, both Go
#: programs): 5 % of a core at one per 2 s, 1 % at one per 10 s, 0.3 % at one per 30 s
#: (benchmarks/bench_sandbox_driver.py). Half of SILENT_SEC, so a stalled driver is still seen in time.
LONG_POLL_SEC = 30.0
SILENT_SEC = 60.0
#: after the driver's own budget ends: time for its wind-down before the host's stop file
WIND_DOWN_GRACE_SEC = 20.0
TERM_AFTER_SEC = 5.0
KILL_AFTER_SEC = 5.0
#: the driver's budget ends this much earlier than on the docker-exec route: its wind-down, the
#: host's last poll and the evidence download must all fit before harbor's agent timeout
EXTRA_MARGIN_SEC = 25.0
#: the host's own stop (stop file) comes this long before harbor's timeout minus the usual margin
HARD_STOP_BEFORE_SEC = 30.0
#: how often the host looks for the gateway's cut record of this attempt (a stat of a host file)
CUT_POLL_SEC = 1.0
#: host-side mirror of the driver's last status (live progress for a reader of the trial dir)
STATUS_MIRROR = "driver-status.json"
EXEC_TIMEOUT_SEC = 30
EXEC_RETRIES = 4


class SandboxTransport:
    """Short execs, uploads and downloads on a harbor environment; the ``Transport`` parts the
    LoopX preparation needs (``container_exec``, ``deliver``, ``workdir``, ``user``)."""

    def __init__(self, environment, workdir: str, user: str | None, container_id: str | None = None) -> None:
        self.environment = environment
        self.workdir = workdir
        self.user = user
        #: the main container on harbor's local Docker environment: asked by ``lost`` (None elsewhere)
        self.container_id = container_id
        self.lost_execs = 0
        self.execs = 0
        self.delivery: dict[str, Any] = {}

    async def exec(
        self,
        command: str,
        *,
        user: str | None = None,
        timeout: int = EXEC_TIMEOUT_SEC,
        retries: int = EXEC_RETRIES,
    ):
        """One exec without the agent's ``--ae`` overlay (it may hold a credential, and harbor's
        docker exec would put it on a command line). A lost exec (the call raised: connection
        reset, SDK timeout) is retried ``retries`` times; every command sent here is idempotent."""
        env = self.environment
        overlays = getattr(env, "_exec_env_overlays", None)
        for attempt in range(retries + 1):
            token = overlays.set(()) if overlays is not None else None
            try:
                self.execs += 1
                return await env.exec(f"{EXEC_MARK}\n{command}", user=user or self.user, timeout_sec=timeout)
            except Exception:
                self.lost_execs += 1
                if attempt == retries:
                    raise
            finally:
                if token is not None:
                    overlays.reset(token)
            await asyncio.sleep(1.0 + attempt)
        raise AssertionError("unreachable")

    def container_exec(self):
        """A ``ContainerExec`` for the LoopX preparation (its env values are not secrets)."""
        from agents.loopx_profile import ExecResult

        async def run(command, env=None, user=None, timeout_sec=None):
            prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (env or {}).items())
            r = await self.exec(prefix + command, user=user, timeout=int(timeout_sec or 300))
            return ExecResult(int(r.return_code), r.stdout or "", r.stderr or "")

        return run

    async def deliver(self, host_dir: Path, container_dir: str) -> int:
        q = shlex.quote(container_dir)
        await self.exec(f"mkdir -p {q}", user="root")
        await self.environment.upload_dir(host_dir, container_dir)
        await self.exec(f"chmod -R a+rX {q}", user="root", timeout=300)
        return tree_bytes(host_dir)

    async def lost(self, settle_sec: float = 10.0) -> str | None:
        """Why the sandbox is gone, asked after a step failed: the engine's own state of the main
        container on harbor's local Docker environment (``agents.transport.container_lost``). On
        other environments None: there the status watch's silence rule (``Watch.run``) says it."""
        if self.container_id is None:
            return None
        return await asyncio.to_thread(container_lost, self.container_id, settle_sec)

    def describe(self) -> dict:
        return {
            "kind": "sandbox-driver",
            "environment": type(self.environment).__name__,
            "workdir": self.workdir,
            "user": self.user,
            "execs": self.execs,
            "lost_execs": self.lost_execs,
            **self.delivery,
        }


async def connect(environment, trial_name: str) -> SandboxTransport:
    """The task user's workdir, asked from the sandbox (never assumed to be /app); on harbor's
    local Docker environment also the main container, so a failure can ask whether it still runs."""
    user = getattr(environment, "default_user", None)
    user = str(user) if user not in (None, "") else None
    cfg = getattr(environment, "task_env_config", None)
    workdir = getattr(cfg, "workdir", None)
    cid = None
    if is_local_docker(environment):
        cid = await asyncio.to_thread(find_main_container, compose_project(trial_name))
    t = SandboxTransport(environment, workdir or "/", user, cid)
    if not workdir:
        r = await t.exec("pwd")
        t.workdir = (r.stdout or "").strip().splitlines()[-1] if r.return_code == 0 and r.stdout else "/"
    return t


def bundle_dir(dest: Path) -> Path:
    """The driver's package tree (stdlib-only modules) in ``dest``."""
    for rel in BUNDLE:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, target)
    return dest


async def ensure_codex(agent, t: SandboxTransport) -> None:
    """codex in the sandbox: the read-only mount when present, else uploaded (and said so)."""
    probe = await t.exec(f"test -x {shlex.quote(agent.codex_bin)}", user="root")
    if probe.return_code == 0:
        t.delivery["codex_delivery"] = "mounted"
        agent.receipt.extra["codex_delivery"] = "mount"
        return
    try:
        staged = load_staged(agent.codex_version)
    except StagingError as exc:
        raise ArmFailure(str(exc)) from exc
    t0 = time.monotonic()
    copied = await t.deliver(staged.root, CONTAINER_CODEX_ROOT)
    t.delivery.update(codex_delivery="uploaded", codex_bytes_copied=copied)
    agent.receipt.extra["codex_delivery"] = "copy"
    note = (
        f"codex {staged.version} was copied into the container by upload_dir ({CONTAINER_CODEX_ROOT}, "
        f"{copied} bytes, {time.monotonic() - t0:.1f} s) instead of mounted read-only"
    )
    agent.receipt.warnings.append(note)


async def upload_credentials(t: SandboxTransport, secret: dict[str, str]) -> str:
    """A 0600 file owned by the task user, through ``upload_file``; its path in the sandbox."""
    path = f"/tmp/marathon-cred-{pysecrets.token_hex(8)}.json"
    with tempfile.TemporaryDirectory(prefix="marathon-cred-") as d:
        local = Path(d) / "cred.json"
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(secret, fh)
        await t.environment.upload_file(local, path)
    owner = shlex.quote(t.user) if t.user else "0"
    r = await t.exec(f"chown {owner} {path} && chmod 600 {path}", user="root")
    if r.return_code != 0:
        await t.exec(f"rm -f {path}", user="root")
        raise ArmFailure(f"could not hand the credentials file to the task user: {(r.stderr or '')[-200:]}")
    return path


#: a PEM certificate block: all of the CA file that goes into a sandbox
_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")


def gateway_ca_certificates(ca: Path) -> bytes:
    """What of the gateway's CA file goes into a sandbox: its certificate blocks only, never
    anything else the file holds (a private key kept in the same file, which the preflight
    refuses, must not reach an agent even when the preflight was not run)."""
    try:
        blocks = _PEM_CERT.findall(ca.read_bytes())
    except OSError:
        raise ArmFailure(
            f"gateway_ca {ca}: no such file on the host (the CA of the gateway's certificate)"
        ) from None
    if not blocks:
        raise ArmFailure(f"gateway_ca {ca}: no PEM certificate in it (the CA of the gateway's certificate)")
    return b"\n".join(blocks) + b"\n"


async def upload_gateway_ca(t: SandboxTransport, ca: Path) -> None:
    """The CA of the gateway's TLS certificate, where the relay's TLS client reads it (the remote
    route): ``gateway_ca_certificates`` of the operator's file."""
    data = gateway_ca_certificates(ca)
    fd, local = tempfile.mkstemp(prefix="marathon-gateway-ca-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        await t.environment.upload_file(Path(local), SANDBOX_CA)
    finally:
        os.unlink(local)
    r = await t.exec(f"chmod 644 {SANDBOX_CA}", user="root")
    if r.return_code != 0:
        raise ArmFailure(f"could not place the gateway's CA in the sandbox: {(r.stderr or '')[-200:]}")


def start_command() -> str:
    """Checks python3, then starts the driver once (a retried start finds ``started`` and stops)."""
    need = ".".join(map(str, MIN_PYTHON))
    return (
        "command -v python3 >/dev/null 2>&1 || "
        f"{{ echo 'missing: python3 (the marathon driver needs python3 >= {need} in the image)'; exit 5; }}; "
        f"python3 -c 'import sys; sys.exit(0 if sys.version_info >= {MIN_PYTHON} else 1)' || "
        f'{{ echo "missing: python3 >= {need} (the image has $(python3 -V 2>&1))"; exit 6; }}; '
        f"mkdir {CTRL}/started 2>/dev/null || exit 0; "
        f"cd {SANDBOX_BUNDLE} && setsid python3 -s -m agents.sandbox_driver {CTRL} "
        f"</dev/null >{CTRL}/driver.log 2>&1 & echo started"
    )


async def start_driver(t: SandboxTransport) -> None:
    """One start (retried execs find ``started`` and do nothing), or a loud failure naming what is missing."""
    try:
        r = await t.exec(start_command())
    except Exception as exc:  # noqa: BLE001 - every retry was lost
        raise ArmFailure(f"the driver could not be started: {EXEC_RETRIES + 1} execs lost ({exc})") from exc
    if r.return_code != 0:
        raise ArmFailure(f"the sandbox cannot run the driver: {(r.stdout or '').strip()[-300:]}")


def clean_status(status: dict) -> dict:
    """The driver's status as the host may use it: the driver runs where the agent is root, so
    every field is the agent's to write. A number that is not one of its kind is dropped (a
    ``budget_left_sec`` of "trial environment lost" raised a ValueError whose message voided the
    attempt, a probe's find); the phase is kept as text, quoted wherever a message shows it."""
    out = dict(status)
    left = out.get("budget_left_sec")
    if left is not None and not (
        isinstance(left, (int, float)) and not isinstance(left, bool) and 0 <= left <= SECONDS_CAP
    ):
        out.pop("budget_left_sec")
    for key in ("pid", "start_ticks"):
        v = out.get(key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**63):
            out.pop(key)
    if not isinstance(out.get("phase", ""), str):
        out.pop("phase")
    return out


def _phase(status: dict) -> str:
    """The driver's last phase, for a harness message: the agent's words, quoted."""
    return safetext.quote_agent(str(status.get("phase", "not started"))[:80])


def _signal_command(status: dict, sig: str) -> str:
    pid, ticks = int(status["pid"]), shlex.quote(str(status["start_ticks"]))
    return (
        f'[ "$(python3 -c \'import sys;print(open("/proc/{pid}/stat").read().rsplit(")",1)[1].split()[19])\' '
        f'2>/dev/null)" = {ticks} ] && kill -{sig} -- -{pid}'
    )


def status_command(path: str, wait_steps: int = 0) -> str:
    """Print the status file and ``ANSWER_MARK``; first wait up to ``wait_steps`` seconds (1 s steps)
    until the file says done. Only ``sh`` and ``cat``: whatever image the task brings has those."""
    wait = (
        f'i=0; while [ $i -lt {wait_steps} ]; do case "$(cat {shlex.quote(path)} 2>/dev/null)" in '
        f"*'\"done\": true'*) break;; esac; sleep 1; i=$((i+1)); done; "
        if wait_steps > 0
        else ""
    )
    return f"{wait}cat {shlex.quote(path)} 2>/dev/null; echo; echo {ANSWER_MARK}"


class Watch:
    """The host's view of one driver: status polls, silence, and the deadline's escalation."""

    def __init__(
        self,
        t: SandboxTransport,
        hard_deadline: float | None,
        on_status,
        mirror: Path,
        cut_file: Path | None = None,
    ) -> None:
        self.t = t
        #: the gateway's record that this attempt has spent its own cap (host-side), and what it said
        self.cut_file = cut_file
        self.cut: dict | None = None
        self.mirror = mirror
        self.hard_deadline = hard_deadline
        self.on_status = on_status
        self.status: dict = {}
        self.last_seq = None
        self.last_change = time.monotonic()
        self.budget_end: float | None = None
        self.stop_at: float | None = None
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.events: list[str] = []
        self.last_answer = time.monotonic()
        #: the last poll brought no status (a lost exec, a sandbox that is gone, a driver not started)
        self.no_status = False

    def wait_sec(self, now: float) -> float:
        """How long the next poll may wait in the sandbox: LONG_POLL_SEC, less once a deadline is
        near, and 0 while the stop escalates (its steps are seconds apart) or after a poll that
        brought no status (two long polls lost in a row must not add up to SILENT_SEC of a driver that runs)."""
        if self.stop_at is not None or self.no_status:
            return 0.0
        ends = [d for d in (self.hard_deadline, self.budget_end) if d is not None]
        return max(0.0, min([LONG_POLL_SEC, *(e - now for e in ends)]))

    async def poll(self, wait_sec: float = 0.0) -> dict | None:
        """The driver's status; with ``wait_sec`` the sandbox first waits for it to say done."""
        steps = int(wait_sec)
        try:
            r = await self.t.exec(status_command(f"{CTRL}/{STATUS_NAME}", steps), timeout=20 + steps)
        except Exception:  # noqa: BLE001 - a lost exec is retried at the next poll, never fatal
            self.t.lost_execs += 1
            return None
        out = r.stdout or ""
        if ANSWER_MARK not in out:  # the sandbox did not run the command (gone, or a lost reply)
            return None
        self.last_answer = time.monotonic()
        try:
            status = json.loads(out.split(ANSWER_MARK)[0].strip() or "null")
        except (ValueError, RecursionError):
            return None
        return clean_status(status) if isinstance(status, dict) else None

    async def send(self, command: str, what: str) -> None:
        try:
            await self.t.exec(command)
            self.events.append(f"{what} at {time.strftime('%H:%M:%S')}")
        except Exception:  # noqa: BLE001 - every retry lost; the escalation goes on
            self.events.append(f"{what} lost at {time.strftime('%H:%M:%S')}")

    def due_deadline(self, now: float) -> bool:
        ends = [d for d in (self.hard_deadline, self.budget_end) if d is not None]
        return bool(ends) and now >= min(ends)

    async def run(self) -> dict:
        cutter = asyncio.create_task(self.watch_cut()) if self.cut_file is not None else None
        try:
            return await self._run()
        finally:
            if cutter is not None:
                cutter.cancel()
                await asyncio.gather(cutter, return_exceptions=True)

    async def watch_cut(self) -> None:
        """The attempt's own spend cap: when its gateway writes the cut record, the stop file goes
        now, beside a status poll that may be waiting in the sandbox (the deadline's escalation then
        goes on from here: SIGTERM, SIGKILL)."""
        assert self.cut_file is not None
        while self.stop_at is None:
            if self.cut_file.is_file():
                self.cut = read_cut(self.cut_file)
                if self.stop_at is None:
                    self.stop_at = time.monotonic()
                    await self.send(f"touch {CTRL}/{STOP_NAME}", "stop file (spend cap of the attempt)")
                return
            await asyncio.sleep(CUT_POLL_SEC)

    def cut_ended(self, failure: str | None) -> bool:
        """The attempt's spend cap ended the phase: the gateway's cut record exists (it is written
        while the call that passed the cap streams, so before codex can meet the refusal of the next
        one), and the driver ended on its own (a harness that gave up on the refusals before the next
        look for the record), or this watch stopped it at the record, or its failure is the refusal
        (codex ends its turn on the 402). Another failure stays a failure."""
        if self.cut_file is None or not self.cut_file.is_file():
            return False
        if self.cut is None and failure is not None and SPEND_CAP_ATTEMPT not in failure:
            return False
        if self.cut is None:
            self.cut = read_cut(self.cut_file)
        return True

    async def _run(self) -> dict:
        while True:
            asked = time.monotonic()
            status = await self.poll(self.wait_sec(asked))
            now = time.monotonic()
            self.no_status = status is None
            if status is not None:
                if status.get("seq") != self.last_seq:
                    self.last_seq, self.last_change = status.get("seq"), now
                    self.status = status
                    self.on_status(status)
                    safeio.write_atomic(self.mirror, json.dumps(status) + "\n")
                    left = status.get("budget_left_sec")
                    if left is not None:
                        self.budget_end = now + float(left) + WIND_DOWN_GRACE_SEC
                if status.get("done"):
                    return status
            elif now - self.last_answer > POLL_SEC and (gone := await self.t.lost(settle_sec=0)) is not None:
                # an unanswered poll: a container that is not running ends the watch now, not in a minute
                raise EnvironmentLost(f"{gone} (driver's last phase: {_phase(self.status)})")
            if now - self.last_answer > SILENT_SEC:
                raise EnvironmentLost(
                    f"the sandbox answered no status poll for {SILENT_SEC:.0f} s "
                    f"({self.t.lost_execs} execs lost; driver's last phase: {_phase(self.status)})"
                )
            if now - self.last_change > SILENT_SEC and self.stop_at is None:
                raise ArmFailure(
                    f"the in-sandbox driver has not updated its status for {SILENT_SEC:.0f} s "
                    f"(last phase: {_phase(self.status)})"
                )
            await self.escalate(now)
            # a long poll has waited already; a short one (or one that failed fast) waits here
            await asyncio.sleep(max(0.0, POLL_SEC - (time.monotonic() - asked)))

    async def escalate(self, now: float) -> None:
        if self.stop_at is None and self.due_deadline(now):
            self.stop_at = now
            await self.send(f"touch {CTRL}/{STOP_NAME}", "stop file")
        elif self.stop_at is not None and self.term_at is None and now - self.stop_at > TERM_AFTER_SEC:
            self.term_at = now
            if self.status.get("pid"):
                await self.send(_signal_command(self.status, "TERM"), "SIGTERM")
        elif self.term_at is not None and self.kill_at is None and now - self.term_at > KILL_AFTER_SEC:
            self.kill_at = now
            if self.status.get("pid"):
                await self.send(_signal_command(self.status, "KILL"), "SIGKILL")
        elif self.kill_at is not None and now - self.kill_at > KILL_AFTER_SEC:
            raise ArmFailure(
                f"the in-sandbox driver did not end after SIGKILL (last phase: {_phase(self.status)})"
            )

    async def stop_now(self) -> None:
        """Cancellation: the stop file, the driver's wind-down (bounded), then SIGTERM."""
        await self.send(f"touch {CTRL}/{STOP_NAME}", "stop file (cancelled)")
        t_end = time.monotonic() + 15
        while time.monotonic() < t_end:
            status = await self.poll()
            if status is not None and status.get("done"):
                return
            await asyncio.sleep(1)
        if self.status.get("pid"):
            await self.send(_signal_command(self.status, "TERM"), "SIGTERM (cancelled)")


def import_evidence(src: Path, logs_dir: Path) -> list[str]:
    """Regular files of the downloaded /logs/agent into the trial's agent dir (hostile input:
    links and special files are skipped, every dir on the way made a real dir inside it and
    written through its descriptor, ``safeio.open_dir_in``, so a process the agent left beside a
    shared agent dir cannot swap one for a symlink under the write; a file the host already wrote
    there, its status mirror among them, is never replaced)."""
    copied: list[str] = []
    os.makedirs(logs_dir, exist_ok=True)
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        rel = os.path.relpath(root, src)
        keep = [
            name
            for name in files
            if not os.path.islink(os.path.join(root, name))
            and os.path.isfile(os.path.join(root, name))
            and not (rel == "." and name in ("goal_receipt.json", "trajectory.json"))
        ]  # (the arm writes those two on the host; the agent's own are not taken)
        if not keep:
            continue
        dir_fd = safeio.open_dir_in(logs_dir, rel)
        try:
            for name in keep:
                if safeio.exists_in(dir_fd, name):
                    continue  # the host's own (only the host writes this dir in a remote sandbox)
                with open(os.path.join(root, name), "rb") as fh:
                    safeio.write_in(dir_fd, name, fh)
                copied.append(os.path.join(rel, name) if rel != "." else name)
        finally:
            os.close(dir_fd)
    return copied


async def download_evidence(t: SandboxTransport, logs_dir: Path, receipt: Receipt) -> None:
    with tempfile.TemporaryDirectory(prefix="marathon-evidence-") as d:
        try:
            await t.exec(f"chmod -R a+rX {SANDBOX_LOGS} 2>/dev/null; true", user="root", timeout=120)
            await t.environment.download_dir(SANDBOX_LOGS, Path(d))
            import_evidence(Path(d), logs_dir)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort, never masks the result
            receipt.warnings.append(f"evidence download failed: {type(exc).__name__}: {exc}")


#: what the host itself recorded of an attempt (the arm, its model, and the binary and image digests
#: the fairness audit compares: ``record_audit_facts``): the driver's receipt, written where the agent
#: is root, never overrides them (a probe forged every one, ``image_id`` among the extras)
HOST_FACTS = ("arm", "model", "codex_sha256", "image_digest")
HOST_EXTRAS = ("image_id",)


def merge_receipt(host: Receipt, driver: dict) -> Receipt:
    """The driver's receipt, with the host's facts (``HOST_FACTS``, ``HOST_EXTRAS``: where the host
    has one), transport, timings, warnings, errors and extras merged in."""
    known = {f.name for f in fields(Receipt)}
    data = {k: v for k, v in driver.items() if k in known}
    merged = Receipt(**data)
    for name in HOST_FACTS:
        mine = getattr(host, name)
        if mine not in (None, {}, [], ""):
            setattr(merged, name, mine)
    merged.transport = host.transport
    merged.timings = {**host.timings, **merged.timings}
    merged.warnings = [*host.warnings, *[w for w in merged.warnings if w not in host.warnings]]
    merged.errors = [*host.errors, *[e for e in merged.errors if e not in host.errors]]
    merged.extra = {**host.extra, **merged.extra}
    merged.extra.update({k: host.extra[k] for k in HOST_EXTRAS if k in host.extra})
    if merged.stop_reason is not None:  # the agent's word, kept as text harbor can write
        merged.stop_reason = safetext.clean(str(merged.stop_reason), 64)
    return merged


def record_audit_facts(agent, environment, t: SandboxTransport) -> None:
    """What the fairness audit compares, recorded as the docker-exec path records it: the staged
    codex binary's sha256 and, on harbor's local Docker environment, the image's content digest
    (other environments expose no image: the receipt says so and the audit compares what is there)."""
    agent.record_codex_sha256()
    image = None
    if t.container_id is not None:
        try:
            image = image_of_container(t.container_id)
        except Exception:  # noqa: BLE001 - a fact not recorded is a warning, never a failed trial
            image = None
    if image is None:
        agent.receipt.warnings.append(
            f"image digest not recorded: {type(environment).__name__} exposes no image"
        )
        return
    agent.receipt.image_digest = image["content_sha256"]
    agent.receipt.extra["image_id"] = image["id"]


def driver_config(agent, t: SandboxTransport, instruction: str, cred_path: str, prep_sec: float) -> dict:
    receipt = agent.receipt
    harbor_sec = agent.harbor_sec()
    config_toml = agent.config_toml(t.workdir)
    receipt.config_toml = config_digests(config_toml)  # before the receipt travels to the driver
    return {
        "arm": agent.ARM,
        "workdir": t.workdir,
        "user": t.user,
        "codex_bin": agent.codex_bin,
        "codex_version": agent.codex_version,
        "codex_home": agent.codex_home,
        "config_toml": config_toml,
        "appserver_env": agent.appserver_env(),
        "credentials_file": cred_path,
        "instruction": instruction,
        "harness": agent.harness().state(),
        "receipt": asdict(receipt),
        "goal_timeout_sec": agent.goal_timeout_sec,
        "harbor_sec": harbor_sec - EXTRA_MARGIN_SEC if harbor_sec is not None else None,
        "run_deadline_in_sec": (receipt.goal_timeout_sec - prep_sec) if receipt.goal_timeout_sec else None,
        "prep_before_sec": prep_sec,
        "zero_token_limit": agent.zero_token_limit,
        "logs_dir": SANDBOX_LOGS,
        "scripted_log": SCRIPTED_LOG,
        "extra_evidence": agent.sandbox_evidence(),
        "relay": relay_config(getattr(agent, "gateway", None), getattr(agent, "gateway_ca", None)),
    }


def relay_config(gateway: str | None, gateway_ca: str | None) -> dict | None:
    """The in-sandbox relay's route to the model gateway (``agents.relay``): the mounted socket
    (``local``), or the gateway's TLS address trusting the uploaded CA (an https:// URL); None
    without a gateway."""
    if gateway == LOCAL:
        return {"host": RELAY_HOST, "port": RELAY_PORT, "socket": SANDBOX_SOCKET}
    if gateway:
        host, port = tls_address(gateway)
        return {"host": RELAY_HOST, "port": RELAY_PORT,
                "tls": {"host": host, "port": port, "ca": SANDBOX_CA if gateway_ca else None}}  # fmt: skip
    return None


async def upload_bundle(t: SandboxTransport) -> None:
    """The driver package (read-only for the task user) and its control dir (owned by it)."""
    owner = shlex.quote(t.user) if t.user else "0"
    r = await t.exec(
        f"mkdir -p {SANDBOX_BUNDLE} {CTRL} && rm -rf {CTRL}/started {CTRL}/{STOP_NAME} && "
        f"chown {owner} {SANDBOX_LOGS} {CTRL}",
        user="root",
    )
    if r.return_code != 0:
        raise ArmFailure(f"cannot prepare {CTRL} in the sandbox: {(r.stderr or r.stdout or '')[-300:]}")
    with tempfile.TemporaryDirectory(prefix="marathon-driver-") as d:
        await t.environment.upload_dir(bundle_dir(Path(d) / "bundle"), SANDBOX_BUNDLE)
    await t.exec(f"chmod -R a+rX {SANDBOX_BUNDLE}", user="root")


async def upload_config(t: SandboxTransport, config: dict) -> None:
    """The driver's config (no secret), readable by the task user only."""
    owner = shlex.quote(t.user) if t.user else "0"
    with tempfile.TemporaryDirectory(prefix="marathon-driver-") as d:
        cfg = Path(d) / CONFIG_NAME
        cfg.write_text(json.dumps(config))
        await t.environment.upload_file(cfg, f"{CTRL}/{CONFIG_NAME}")
    await t.exec(f"chown {owner} {CTRL}/{CONFIG_NAME} && chmod 600 {CTRL}/{CONFIG_NAME}", user="root")


def keep_scripted_log_command() -> str:
    """What the driver would have copied, when it never started (a failed preparation)."""
    dest = f"{SANDBOX_LOGS}/scripted-model"
    return f"[ -f {SCRIPTED_LOG} ] && mkdir -p {dest} && cp {SCRIPTED_LOG} {dest}/; true"


async def settle(coro, timeout: float):
    """Run a bounded step to its end even while harbor cancels this task again and again (its
    SIGTERM handling does): the step runs as its own task, each cancellation only ends one wait."""
    task = asyncio.ensure_future(asyncio.wait_for(coro, timeout))
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
        except Exception:  # noqa: BLE001 - the caller reads the task's outcome below
            break
    return task.result()


class SandboxDriverRun:
    """An ``agents.envelope.Carrier``: the conversation runs inside the sandbox (see the module
    docstring); the host uploads, starts, watches, stops and downloads."""

    def __init__(self, arm: Arm) -> None:
        self.arm = arm
        self.t: SandboxTransport | None = None
        self.watch: Watch | None = None
        self.cred: str | None = None
        self.before: frozenset[str] | None = None

    async def run(self, run: RunContext) -> ArmFailure | None:
        arm, receipt = self.arm, run.receipt
        hard = None
        harbor_sec = arm.harbor_sec()
        if harbor_sec is not None:
            hard = run.t0 + harbor_sec - deadline_margin_sec(harbor_sec) - HARD_STOP_BEFORE_SEC
        t = self.t = await connect(run.environment, arm.trial_name())
        receipt.transport = t.describe()
        self.before = await leftovers.snapshot(t.container_exec())
        await arm.prepare(t)
        secret = arm.credential()
        await ensure_codex(arm, t)
        if getattr(arm, "gateway_ca", None):
            await upload_gateway_ca(t, Path(arm.gateway_ca))
        record_audit_facts(arm, run.environment, t)
        self.cred = await upload_credentials(t, secret)
        del secret
        await upload_bundle(t)
        # the preparation so far counts against the budget (the driver adds its own from here)
        await upload_config(t, driver_config(arm, t, run.instruction, self.cred, time.monotonic() - run.t0))
        receipt.mark("driver_uploaded")
        await start_driver(t)
        receipt.mark("driver_started")

        def on_status(status: dict) -> None:
            if status.get("token_usage"):
                arm.usage_to_context(status["token_usage"], run.harbor)

        cut = os.environ.get(CUT_VAR)
        self.watch = Watch(t, hard, on_status, arm.logs_dir / STATUS_MIRROR, Path(cut) if cut else None)
        final = await self.watch.run()
        failure = final.get("failure")
        message = (failure.get("message") or "the driver failed") if failure else None
        if self.watch.cut_ended(message) or message is None:
            return None  # done, or ended by the attempt's spend cap: scored like a deadline
        # (the driver runs where the agent is root: its words are the agent's, never a voiding reason)
        return ArmFailure(f"the driver in the sandbox failed: {safetext.quote_agent(message)}")

    async def cancelled(self, run: RunContext) -> None:
        """The stop file, the driver's wind-down, then SIGTERM: bounded, and settled even while
        harbor cancels again."""
        if self.watch is not None:
            try:
                await settle(self.watch.stop_now(), 30)
            except Exception:  # noqa: BLE001 - best effort under cancellation
                pass

    async def failed(self, run: RunContext, exc: BaseException) -> str | None:
        """A lost sandbox says so; otherwise a driver still running is killed (its pid re-checked)."""
        watch = self.watch
        lost = await self.t.lost() if self.t is not None and not isinstance(exc, EnvironmentLost) else None
        if lost is None and watch is not None and watch.status.get("pid") and not watch.status.get("done"):
            await watch.send(_signal_command(watch.status, "KILL"), "SIGKILL (host failure)")
        return lost

    async def collect(self, run: RunContext) -> None:
        """Every step bounded and settled (a second cancellation must not cost the evidence); the
        driver's receipt merged into the run's last, whatever happened before."""
        t = self.t
        if t is None:
            return
        left: dict | None = None
        try:
            if self.cred is not None:
                try:
                    await settle(t.exec(f"rm -f {self.cred}", user="root"), 30)
                except Exception:  # noqa: BLE001 - the driver deleted it already
                    pass
            if self.watch is None:  # the driver never ran: keep the scripted model's log
                try:
                    await settle(t.exec(keep_scripted_log_command(), user="root"), 60)
                except Exception:  # noqa: BLE001 - evidence is best effort
                    pass
            try:
                await settle(download_evidence(t, self.arm.logs_dir, run.receipt), 300)
            except Exception as exc:  # noqa: BLE001
                run.receipt.warnings.append(f"evidence download: {type(exc).__name__}: {exc}")
            # last: the driver's evidence is down (a driver still winding down under a cancellation
            # writes its receipt until here); nothing it left may outlive the phase
            left = leftovers.UNLISTED
            if self.before is not None:
                try:
                    left = await settle(leftovers.end_leftovers(t.container_exec(), self.before), 90)
                except Exception as exc:  # noqa: BLE001 - recorded, never silent
                    left = {**leftovers.UNLISTED, "incomplete": f"{type(exc).__name__}: {exc}"}
            await _drop_host_names(run.environment, t, self.arm.logs_dir, run.receipt)
        finally:
            run.receipt = _merge_driver_receipt(self.arm.logs_dir, run.receipt, t, self.watch)
            if left is not None:
                leftovers.record(run.receipt, left)


#: the agent dir's files the host writes (the arm's receipt and trajectory after this phase, its
#: status mirror and config before): never the sandbox's copies
HOST_NAMES = ("goal_receipt.json", "trajectory.json", STATUS_MIRROR, "codex-config.toml")


async def _drop_host_names(environment, t: SandboxTransport, logs_dir: Path, receipt: Receipt) -> None:
    """Remove the host's names from the sandbox's ``/logs/agent`` once the agent's processes are
    gone: harbor downloads that dir into the trial's agent dir after the arm, by path, for an
    environment that does not mount it, and a ``goal_receipt.json`` the agent wrote there would have
    replaced the arm's own (a review). Nothing to do where the dir is the host's own (mounted)."""
    from pathlib import PurePosixPath

    marker = Path(logs_dir) / f".marathon-host-{pysecrets.token_hex(8)}"
    try:
        if environment.is_path_mounted(PurePosixPath(SANDBOX_LOGS), Path(logs_dir)):
            return
        # shared all the same (a bind mount harbor was not told of): the host's own files, kept
        safeio.write_atomic(marker, b"")
        names = " ".join(shlex.quote(f"{SANDBOX_LOGS}/{n}") for n in HOST_NAMES)
        seen = shlex.quote(f"{SANDBOX_LOGS}/{marker.name}")
        await settle(t.exec(f"test -e {seen} || rm -rf -- {names}", user="root", timeout=60), 90)
    except Exception as exc:  # noqa: BLE001 - recorded: the receipt may then be the sandbox's
        receipt.warnings.append(
            f"could not remove the host's names from {SANDBOX_LOGS}: {type(exc).__name__}"
        )
    finally:
        marker.unlink(missing_ok=True)


def _merge_driver_receipt(
    logs_dir: Path, receipt: Receipt, t: SandboxTransport, watch: Watch | None
) -> Receipt:
    receipt.transport = {**t.describe(), "host_actions": watch.events if watch else []}
    path = logs_dir / "driver" / RECEIPT_NAME
    raw = safeio.read_capped(path, logs_dir) if path.exists() else None
    if raw is None or isinstance(raw, safeio.Refused):
        receipt.warnings.append("the driver left no receipt")
        return receipt
    try:
        data = json.loads(raw)
        merged = merge_receipt(receipt, data["receipt"])
    except (ValueError, KeyError, TypeError) as exc:
        receipt.warnings.append(f"the driver's receipt is unreadable: {exc}")
        return receipt
    merged.stop_reason = merged_stop_reason(receipt.stop_reason, merged.stop_reason)
    if watch is not None and watch.cut is not None and receipt.stop_reason not in ("cancelled", "error"):
        # the host stopped the driver at the attempt's spend cap: its wind-down was not a deadline
        merged.extra["spend_cap"] = {**watch.cut, "driver_stop_reason": merged.stop_reason}
        merged.stop_reason, merged.deadline_hit = SPEND_CAP_ATTEMPT, False
    return merged


def read_cut(path: Path) -> dict:
    """The gateway's cut record (host-side, written by the gateway only): the figures the receipt
    keeps; a record that cannot be read still cuts (the file's existence is the gateway's word)."""
    raw = safeio.read_own(path)
    try:
        d = json.loads(raw) if not isinstance(raw, safeio.Refused) else {}
    except ValueError:
        d = {}
    d = d if isinstance(d, dict) else {}
    return {
        "scope": "attempt",
        "spent_usd": d.get("spent_usd") if isinstance(d.get("spent_usd"), (int, float)) else None,
        "cap_usd": d.get("cap_usd") if isinstance(d.get("cap_usd"), (int, float)) else None,
        "text": d.get("text") if isinstance(d.get("text"), str) else "spend cap of the attempt reached",
    }


def merged_stop_reason(host: str | None, driver: str | None) -> str | None:
    """Why the attempt stopped, from the host's side and the driver's receipt. harbor's cancellation
    (the host's ``cancelled``) wins: the host then stopped the driver, and an error the driver met on
    the way down (its app-server gone under it) is the cancellation's consequence, kept in its errors.
    A host-side error wins over a driver that ended well; otherwise the driver knows best."""
    if host == "cancelled":
        return "cancelled"
    if host == "error":
        return "error"
    return driver
