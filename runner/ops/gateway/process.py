"""The gateway as a process of the run: started detached, registered, watched, restarted, stopped.

Why registered: ``marathon kill``, ``cleanup``, ``health`` and ``health --fix`` know a run's processes
only from the PID registry (never by a command-line pattern), so the gateway registers there as
``gateway`` (with its Ray node on a cluster host). It runs in a session of its own, never a child
of the runner: a runner killed and restarted finds it serving and keeps it; attempts that outlive
their runner keep their model.

Files (``<out>/.runner/gateway/``; a cluster host's carry its node: ``state.<node>.json``):

- ``state.json``: pid and identity, instance, upstream, key variable NAME, heartbeat (``at``, every
  2 s), what it serves; never the key;
- ``gateway.log``: its output (no key, no token);
- ``stopping/<boot>-<pid>-<ticks>``: a gateway asked to stop (``stop``, ``marathon kill``), marked
  before the signal: one that the kill's grace ends with SIGKILL writes no stop line of its own, and
  must not be taken for a crashed one and restarted;
- ``outages.jsonl``: each time a dead gateway was found and restarted (by the runner or
  ``health --fix``): since when it was silent (its last heartbeat), when it was noticed and
  restarted. An attempt whose model time overlaps an outage is voided (``runner.results.rules``,
  row ``gateway_failed``), whatever it scored: its calls may have failed or been cut.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from modes import safeio, safetext
from modes.gateway import SCRIPTED_UPSTREAM
from runner.errors import UserError
from runner.ops.gateway import attempts as att
from runner.ops.procs import Registry, alive, boot_id, identity_from, identity_of, terminate
from runner.results.tree import gateway_dir, outages_path
from runner.secrets import without_secrets

ROLE_GATEWAY = "gateway"
LOG_FILE = "gateway.log"
#: how long a start waits for the gateway to serve (it imports aiohttp, binds, reads the ledger)
START_WAIT_SEC = 30.0
#: the default provider of a real run (what codex itself would call)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
REPO = Path(__file__).resolve().parents[3]
SCRIPTED_SERVER = REPO / "agents" / "scripted_model" / "host.py"


def state_path(out: Path, host: str | None = None) -> Path:
    return gateway_dir(out) / ("state.json" if not host else f"state.{host}.json")


@dataclass(frozen=True)
class GatewayState:
    out: str
    pid: int
    start_ticks: int
    boot_id: str
    instance: str
    host: str | None
    upstream: str
    key_var: str
    started: float
    at: float  # heartbeat
    tcp_port: int | None = None
    served: int = 0
    attempts: int = 0

    @property
    def ident(self):
        return identity_from(asdict(self))

    def describe(self) -> str:
        return f"PID {self.pid}, upstream {self.upstream}, key ${self.key_var}"


def write_state(gw: Any) -> None:
    """The gateway's own heartbeat (``gw``: a ``server.Gateway``)."""
    me = identity_of(os.getpid())
    assert me is not None
    st = GatewayState(
        str(gw.out), me.pid, me.start_ticks, boot_id(), gw.instance, gw.host, gw.upstream_label, gw.key_var,
        gw.started_at, time.time(), gw.tcp_port, gw.served, sum(1 for a in gw.live.values() if a.site is not None),
    )  # fmt: skip
    safeio.write_atomic(state_path(gw.out, gw.host), safetext.dumps(asdict(st)) + "\n")


def read_state(out: Path, host: str | None = None) -> GatewayState | None:
    d = safeio.load_own_json(state_path(out, host))
    if not isinstance(d, dict):  # missing, refused (a symlink, a FIFO, too large), not an object
        return None
    try:
        return GatewayState(**d)
    except TypeError:
        return None


def running(out: Path, host: str | None = None) -> GatewayState | None:
    """The tree's live gateway on this host (its state's identity runs and is registered), or None."""
    out = Path(out).resolve()
    st = read_state(out, host)
    if st is None or not alive(st.ident):
        return None
    for e in Registry(out).entries():
        if e.role == ROLE_GATEWAY and e.node == host and e.ident == st.ident:
            return st
    return None


def status_line(out: Path, host: str | None = None) -> str | None:
    """For ``health`` and ``status``: the gateway that serves, or None."""
    st = running(out, host)
    if st is None:
        return None
    return f"serving (PID {st.pid}, upstream {st.upstream}, {st.attempts} attempt socket(s), {st.served} call(s))"


# ------------------------------------------------------------------------------ starting


@dataclass(frozen=True)
class GatewaySettings:
    """What a gateway of a run is started with (from the run's configuration; no secret: the key's
    variable NAME only)."""

    upstream: str = DEFAULT_BASE_URL
    key_var: str = "OPENAI_API_KEY"
    tasks_dir: str | None = None  # the scripted upstream's plans (``SCRIPTED_UPSTREAM`` only)
    host: str | None = None
    tls_listen: str | None = None  # HOST:PORT of the TLS listener for remote sandboxes
    tls_cert: str | None = None
    tls_key: str | None = None


def gateway_argv(out: Path, s: GatewaySettings) -> list[str]:
    argv = [sys.executable, "-m", "marathon.cli", "gateway", str(Path(out).resolve()),
            "--model-base-url", s.upstream, "--key-var", s.key_var, "--serve-detached"]  # fmt: skip
    if s.tasks_dir:
        argv += ["--scripted-tasks", s.tasks_dir]
    if s.host:
        argv += ["--node", s.host]
    if s.tls_listen:
        argv += ["--tls-listen", s.tls_listen, "--tls-cert", s.tls_cert or "", "--tls-key", s.tls_key or ""]
    return argv


def _project_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    paths = [str(REPO), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return dict(os.environ) | {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))} | (extra or {})


#: the model key a runner took out of its own environment (``hold_key``): only the gateway's launch
#: gets it back, so nothing else the runner starts (harbor, image builds, docker) inherits it
_HELD: dict[str, str] = {}


def hold_key(key_var: str) -> None:
    """Move the key out of this process's environment into ``_HELD`` (the runner, once at start):
    its children inherit the environment, and the gateway is the only one that needs the key."""
    v = os.environ.pop(key_var, None)
    if v:
        _HELD[key_var] = v


def held() -> dict[str, str]:
    """The key(s) ``hold_key`` took out of this environment, by name (for a check that the key is
    there, never for a child's environment)."""
    return dict(_HELD)


def start_detached(out: Path, s: GatewaySettings, *, wait_sec: float = START_WAIT_SEC) -> GatewayState:
    """Start the tree's gateway in a session of its own (a short-lived launcher starts it and exits,
    as for the runner and the viewer) and wait until it serves. The key stays in the environment it
    inherits from this process: checked here by name, so a missing key is one line now (a declared
    placeholder, ``runner.secrets.DECLARED_NON_SECRETS``, is the gateway's own when unset: the demo)."""
    from runner.secrets import DECLARED_NON_SECRETS

    out = Path(out).resolve()
    held = {s.key_var: _HELD[s.key_var]} if s.key_var in _HELD else {}
    if (
        not (os.environ.get(s.key_var) or held) and s.key_var not in DECLARED_NON_SECRETS
    ):  # the demo's placeholder
        raise UserError(
            f"the model key variable {s.key_var} is not set in this environment: the gateway reads the "
            f"key from it (export {s.key_var}, then start again)"
        )
    gdir = gateway_dir(out)
    gdir.mkdir(parents=True, exist_ok=True)
    launched = subprocess.run(
        [sys.executable, "-m", "runner.ops.gateway.process", str(gdir / LOG_FILE), *gateway_argv(out, s)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_project_env(held), timeout=60,
    )  # fmt: skip
    word = (launched.stdout or "").strip()
    if launched.returncode != 0 or not word.isdigit():
        tail = " | ".join(((launched.stdout or "") + (launched.stderr or "")).strip().splitlines()[-3:])
        raise UserError(f"the gateway did not start (launcher exit {launched.returncode}): {tail}")
    ident = identity_of(int(word))
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        st = running(out, s.host)
        if st is not None and ident is not None and st.pid == ident.pid:
            return st
        if not alive(ident):
            raise UserError(f"the gateway exited at once: {_log_tail(out)}")
        time.sleep(0.05)
    raise UserError(f"the gateway (PID {word}) did not serve within {wait_sec:.0f} s; see {gdir / LOG_FILE}")


def _log_tail(out: Path, n: int = 3) -> str:
    raw = safeio.read_own(gateway_dir(out) / LOG_FILE)
    text = "" if isinstance(raw, safeio.Refused) else raw.decode(errors="replace")
    lines = [safetext.clean(x) for x in text.strip().splitlines()[-n:]]
    return " | ".join(lines) or "no output"


def ensure(out: Path, s: GatewaySettings, *, by: str) -> tuple[GatewayState, bool]:
    """The tree's gateway on this host: the running one, or one started now. A gateway that died
    while attempts were live at it (their harbor still running) is an outage, recorded once the new
    one serves. Returns (state, started now)."""
    st = running(out, s.host)
    if st is not None:
        return st, False
    # Two jobs starting on one host at once would each find no gateway and start one: the check
    # and the start are one step among this host's processes (the second finds the first serving).
    with safeio.held_lock(gateway_dir(Path(out).resolve()) / f"start.{s.host or 'local'}.lock"):
        st = running(out, s.host)
        if st is not None:
            return st, False
        old = read_state(out, s.host)
        live = [r for r in att.list_records(out, s.host) if r.state == att.LIVE and not r.gone()]
        noticed = time.time()
        new = start_detached(out, s)
        if old is not None and live:
            record_outage(out, s.host, old, noticed, new, by, live)
        return new, True


#: gateway instances found stopped on purpose (a tender asks once a second; the ledger is read once)
_STOPPED: set[str] = set()


def _stopping_path(out: Path, ident: Any) -> Path:
    return gateway_dir(Path(out).resolve()) / "stopping" / f"{ident.boot_id}-{ident.pid}-{ident.start_ticks}"


def mark_stopping(out: Path, ident: Any) -> None:
    """Before a gateway is signalled to stop (``stop``, ``marathon kill``): it is stopped on purpose,
    whether it then writes its own stop line or the kill's grace ends it with SIGKILL."""
    if ident is None:
        return
    path = _stopping_path(out, ident)
    safeio.ensure_dir(path.parent, gateway_dir(Path(out).resolve()))
    safeio.write_atomic(path, "")


def stopped_on_purpose(out: Path, st: GatewayState) -> bool:
    """Did this gateway stop as it was asked to (a signal: ``marathon kill``, ``gateway --stop``,
    the run's end)? Then it wrote its stop line on the ledger, or the one who stopped it marked it
    first (``mark_stopping``); a killed or crashed one has neither."""
    from runner.results import ledger as L

    if st.instance not in _STOPPED and (
        _stopping_path(out, st.ident).exists()
        or any(
            g.get("kind") == L.GATEWAY_STOP and g.get("gateway") == st.instance
            for g in L.read_ledger(out).gateways
        )
    ):
        _STOPPED.add(st.instance)
    return st.instance in _STOPPED


def restart_if_failed(out: Path, s: GatewaySettings, *, by: str) -> GatewayState | None:
    """The tender's rule, the same for the runner on one host and for each cluster job on its host:
    a gateway of this host that died without being asked to (killed, crashed) is started again at
    once (``ensure``: the outage recorded, its live attempts voided by the voiding table's
    ``gateway_failed`` row); one that is running, or was stopped on purpose, is left as it is (a
    tender that restarted a gateway ``marathon kill`` had just stopped would outlive the kill).
    Returns the new gateway's state when one was started."""
    if running(out, s.host) is not None:
        return None
    old = read_state(out, s.host)
    if old is None or stopped_on_purpose(out, old):
        return None
    new, started = ensure(out, s, by=by)
    return new if started else None


def record_outage(
    out: Path,
    host: str | None,
    old: GatewayState,
    noticed: float,
    new: GatewayState,
    by: str,
    live: list[att.AttemptRecord],
) -> None:
    """One line of ``outages.jsonl`` (read by ``runner.results.ledger.read_outages``): the attempts
    that were live at the gateway when it was found dead are the ones it failed."""
    row = {
        "host": host, "down_since": old.at, "noticed_at": noticed, "restarted_at": new.started,
        "old_pid": old.pid, "new_pid": new.pid, "by": by,
        "live_attempts": [{"id": r.id, "task": r.task, "arm": r.arm, "stamp": r.stamp} for r in live],
    }  # fmt: skip
    safeio.append_line(outages_path(out), (safetext.dumps(row, nonfinite_as_null=True) + "\n").encode())


def stop(out: Path, host: str | None = None, wait_sec: float = 10.0) -> str:
    """SIGTERM to the tree's gateway (by its registered identity); one line saying what happened."""
    out = Path(out).resolve()
    st = running(out, host)
    if st is None:
        return f"no gateway of {out} is running"
    mark_stopping(out, st.ident)
    return terminate(st.ident, f"gateway of {out}", wait_sec)


# ------------------------------------------------------------------------------ serving


def _pdeathsig() -> None:
    """The scripted upstream dies with its gateway (a killed gateway leaves no model behind)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_scripted(
    out: Path, tasks_dir: str | None, instance: str, key_var: str
) -> tuple[subprocess.Popen, str]:
    """The scripted Responses-API model (stdlib, ``agents/scripted_model/host.py``) as this gateway's
    upstream, on a unix socket next to the attempts' sockets; its request log under the gateway dir.
    It gets the key only as the gateway sends it, per call: not in its environment, nor any other
    credential the operator's shell exported."""
    root = att.ensure_socket_root(out)
    sock = str(root / f"scripted-{instance}.sock")
    log_dir = gateway_dir(out) / "scripted"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in without_secrets(os.environ).items() if k != key_var}
    env |= {"SCRIPTED_SOCKET": sock, "SCRIPTED_LOG": str(log_dir / "requests.jsonl")}
    if tasks_dir:
        env["SCRIPTED_TASKS"] = str(tasks_dir)
    with open(log_dir / "server.log", "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-S", str(SCRIPTED_SERVER)], stdin=subprocess.DEVNULL, stdout=fh,
            stderr=subprocess.STDOUT, env=env, preexec_fn=_pdeathsig,
        )  # fmt: skip
    deadline = time.monotonic() + 15
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise UserError(f"the scripted model did not start; see {log_dir / 'server.log'}")
        time.sleep(0.02)
    return proc, sock


def serve(
    out: Path,
    *,
    upstream: str,
    key_var: str,
    tasks_dir: str | None = None,
    host: str | None = None,
    tls_listen: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    say: Any = print,
) -> int:
    """``marathon gateway``: serve until SIGTERM/SIGINT/SIGHUP, registered as ``gateway`` meanwhile."""
    import ssl
    import uuid

    from runner.ops.gateway import server
    from runner.secrets import DECLARED_NON_SECRETS

    out = Path(out).resolve()
    key = os.environ.get(key_var) or DECLARED_NON_SECRETS.get(key_var)
    if not key:
        raise UserError(f"the model key variable {key_var} is not set: the gateway reads the key from it")
    tcp = tls = None
    if tls_listen:
        host_s, _, port_s = tls_listen.rpartition(":")
        if not port_s.isdigit():
            raise UserError(f"--tls-listen {tls_listen!r}: expected HOST:PORT")
        tcp = (host_s or "0.0.0.0", int(port_s))
        try:
            tls = server.load_tls(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise UserError(f"--tls-cert/--tls-key: cannot load the certificate: {exc}") from None
        if tls is None:
            raise UserError("--tls-listen needs --tls-cert and --tls-key (the operator's certificate)")
    instance = uuid.uuid4().hex[:12]
    child = None
    label = upstream
    if upstream == SCRIPTED_UPSTREAM:
        child, sock = start_scripted(out, tasks_dir, instance, key_var)
        upstream = f"unix:{sock}"
        label = f"scripted model (PID {child.pid})"
    try:
        up = server.Upstream.parse(upstream)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    registry = Registry(out)
    gw = server.Gateway(
        out, key, up, host, tcp, tls, instance=instance, say=say, upstream_label=label, key_var=key_var
    )
    gw.on_beat = lambda: write_state(gw)
    del key
    registered = False

    def ready() -> None:
        nonlocal registered
        registry.register(os.getpid(), ROLE_GATEWAY, list(sys.argv), node=host)
        registered = True
        write_state(gw)
        say(f"gateway of {out}: upstream {label}, key from ${key_var}, PID {os.getpid()}"
            + (f", TLS on {tcp[0]}:{gw.tcp_port}" if tcp else ""))  # fmt: skip

    import asyncio

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, gw.stop_event.set)
        await gw.run(ready=ready)

    server.small_reads()
    try:
        asyncio.run(main())
    finally:
        if registered:
            with contextlib.suppress(Exception):
                registry.unregister(os.getpid(), host)
        if child is not None:
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(5)
            with contextlib.suppress(OSError):
                os.unlink(upstream[len("unix:") :])
    say("gateway stopped")
    return 0


def _launch(log: str, argv: list[str]) -> int:
    """The launcher's one job: start the gateway in its own session, print its PID, exit."""
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=_project_env(),
        )  # fmt: skip
    print(proc.pid, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1], sys.argv[2:]))
