"""The in-sandbox driver: one detached process that runs an arm's whole conversation with codex.

Why: harbor's generic ``environment.exec`` has no stdin, and app-server speaks JSON-RPC over stdio,
so on any environment but a local Docker engine the conversation has to happen where codex runs.
The host (agents.sandbox_host) uploads this package (stdlib only, python3 >= 3.11 as in the image),
writes ``config.json`` and a 0600 credentials file into the control dir, and starts
``python3 -m agents.sandbox_driver <control dir>`` with one short exec; from then on it only reads
``status.json`` and may create the ``stop`` file.

What runs here is the same code the host runs over ``docker exec -i``: agents.conversation (preflight
verdict, budget, wind-down), agents.session, agents.appserver and the arm's loop from agents.drive.
Files (control dir, all under /logs/agent so harbor downloads them from any environment):

- ``status.json``: rewritten every ``STATUS_EVERY_SEC`` with a sequence number, the phase, turns,
  tokens, goal status, and this process's pid and start time (so the host signals exactly it);
- ``receipt.json``: the driver's receipt at the end (the host merges it into goal_receipt.json);
- ``stop``: created by the host at its deadline; the driver winds down as at its own deadline
  (SIGTERM does the same).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

MIN_PYTHON = (3, 11)
STATUS_EVERY_SEC = 2.0
STATUS_NAME = "status.json"
RECEIPT_NAME = "receipt.json"
STOP_NAME = "stop"
CONFIG_NAME = "config.json"
#: app-server stdout lines can be long (aggregated command output); asyncio's default is 64 KiB.
STREAM_LIMIT = 64 * 1024 * 1024


def proc_start_ticks(pid: int) -> str:
    """Field 22 of /proc/<pid>/stat: with the pid, the identity of a process (pids are reused)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[19]


def read_credentials(path: str) -> dict[str, str]:
    """Read and delete the credentials file the host uploaded (name -> value); never logged."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return {str(k): str(v) for k, v in data.items()}


def copy_regular(src: str, dest: Path) -> bool:
    """Copy a file or tree into ``dest``: regular files and dirs only, links never followed."""
    if os.path.islink(src) or not os.path.exists(src):
        return False
    if os.path.isfile(src):
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / os.path.basename(src))
        return True
    top = dest / os.path.basename(src.rstrip("/"))
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        (top / rel).mkdir(parents=True, exist_ok=True)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                try:
                    shutil.copyfile(p, top / rel / name)
                except OSError:
                    continue
    return True


def local_exec(user: str | None):
    """A ContainerExec (agents.loopx_profile) that runs ``bash -c`` here, as this process's user."""
    from agents.loopx_profile import ExecResult

    me = {str(os.getuid())}
    try:
        import pwd

        me.add(pwd.getpwuid(os.getuid()).pw_name)
    except (ImportError, KeyError):
        pass

    async def run(command, env=None, as_user=None, timeout_sec=None):
        if as_user not in (None, "") and str(as_user) not in me:
            raise RuntimeError(f"the driver runs as {sorted(me)}, cannot run a step as {as_user}")
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            env={**os.environ, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_sec)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return ExecResult(124, "", f"timed out after {timeout_sec}s")
        return ExecResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    del user
    return run


class Status:
    """``status.json``, rewritten atomically; the host's only view of a running driver."""

    def __init__(self, ctrl: Path) -> None:
        self.ctrl = ctrl
        self.seq = 0
        self.phase = "starting"
        self.pid = os.getpid()
        self.ticks = proc_start_ticks(self.pid)
        self.session = None
        self.done = False
        self.outcome: dict = {}

    def write(self) -> None:
        from modes import safeio

        self.seq += 1
        s = self.session
        receipt = s.receipt if s is not None else None
        data = {
            "seq": self.seq,
            "phase": self.phase,
            "pid": self.pid,
            "start_ticks": self.ticks,
            "turns": len(s.turn_ids) if s is not None else 0,
            "tokens": s.total_tokens if s is not None else 0,
            "token_usage": receipt.token_usage if receipt is not None else {},
            "goal_status": s.goal_status if s is not None else None,
            "budget_left_sec": (s.deadline - time.monotonic()) if s is not None and s.deadline else None,
            "done": self.done,
            **self.outcome,
            "at": time.time(),
        }
        safeio.write_atomic(self.ctrl / STATUS_NAME, json.dumps(data) + "\n")

    async def beat(self, stop: asyncio.Event) -> None:
        while not self.done:
            self.write()
            if (self.ctrl / STOP_NAME).exists():
                stop.set()
            await asyncio.sleep(STATUS_EVERY_SEC)


def _preflight(cfg: dict, receipt) -> None:
    from agents.conversation import CONFIG_WRITE_SCRIPT, preflight_script, preflight_verdict

    res = subprocess.run(["sh", "-c", preflight_script(cfg["codex_bin"])], capture_output=True, timeout=120)
    out = (res.stdout + res.stderr).decode(errors="replace").strip()
    receipt.extra["codex_version_in_container"] = preflight_verdict(res.returncode, out, cfg["codex_version"])
    write = subprocess.run(
        ["sh", "-c", CONFIG_WRITE_SCRIPT, "sh", cfg["codex_home"]],
        input=cfg["config_toml"].encode(),
        capture_output=True,
        timeout=60,
    )
    if write.returncode != 0:
        from agents.session import ArmFailure

        raise ArmFailure(f"writing {cfg['codex_home']}/config.toml failed: {write.stderr.decode()[-300:]}")


def _save_evidence(cfg: dict, logs_dir: Path, receipt, session) -> None:
    """Sessions, goal store, scripted log, LoopX registry into /logs/agent (best effort)."""
    home = cfg["codex_home"]
    copies = [(f"{home}/sessions", logs_dir), (cfg.get("scripted_log") or "", logs_dir / "scripted-model")]
    copies += [(src, logs_dir / sub) for src, sub in cfg.get("extra_evidence", [])]
    for src, dest in copies:
        try:
            if src and copy_regular(src, dest):
                receipt.evidence.append(str((dest / os.path.basename(src.rstrip("/"))).relative_to(logs_dir)))
        except OSError as exc:
            receipt.warnings.append(f"evidence copy of {src} failed: {exc}")
    try:
        names = sorted(os.listdir(home))
    except OSError:
        names = []
    for name in names:
        if ".sqlite" in name and name.startswith(("goals_", "state_")):
            try:
                if copy_regular(f"{home}/{name}", logs_dir / "codex-state"):
                    receipt.evidence.append(f"codex-state/{name}")
            except OSError as exc:
                receipt.warnings.append(f"evidence copy of {name} failed: {exc}")
    if session is not None:
        for store in sorted((logs_dir / "codex-state").glob("goals_*.sqlite")):
            try:
                session.reconcile_goal_store(store)
            except sqlite3.Error as exc:
                receipt.warnings.append(f"goal store {store.name}: {exc}")
    for name in ("appserver.stdout.jsonl", "appserver.stderr.log"):
        if (logs_dir / name).exists():
            receipt.evidence.append(name)


async def start_relay(r: dict):
    """The relay to the model gateway (``agents.relay``): the sandbox's loopback to the attempt's
    mounted socket (local Docker) or to the gateway's TLS address (``r["tls"]``: a remote sandbox),
    before codex starts. A missing mount is a loud failure here, not a failed first turn."""
    from agents.relay import Relay
    from agents.session import ArmFailure

    if r.get("tls"):
        tls = r["tls"]
        relay = Relay(r["host"], int(r["port"]), tls=(tls["host"], int(tls["port"]), tls.get("ca")))
    else:
        sock_dir = os.path.dirname(r["socket"])
        if not os.path.isdir(sock_dir):
            raise ArmFailure(
                f"the model gateway's socket dir {sock_dir} is not mounted in the sandbox (the runner mounts "
                "it with harbor --mounts; a remote sandbox reaches the gateway by its TLS URL instead)"
            )
        relay = Relay(r["host"], int(r["port"]), r["socket"])
    try:
        await relay.start()
    except OSError as exc:
        raise ArmFailure(
            f"the relay to the model gateway cannot listen on {r['host']}:{r['port']}: {exc}"
        ) from exc
    return relay


async def drive_in_sandbox(ctrl: Path) -> int:
    """The whole conversation; returns 0, and leaves the outcome in receipt.json and status.json."""
    from agents.conversation import Conversation
    from agents.drive import harness_from_state
    from modes import safeio
    from modes.receipt import Receipt

    cfg = json.loads((ctrl / CONFIG_NAME).read_text())
    t0 = time.monotonic() - float(cfg.get("prep_before_sec") or 0)
    logs_dir = Path(cfg["logs_dir"])
    receipt = Receipt(**cfg["receipt"])
    status = Status(ctrl)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    beat = asyncio.create_task(status.beat(stop))
    conv: Conversation | None = None
    harness = None
    failure: dict | None = None
    relay = None
    try:
        secret = read_credentials(cfg["credentials_file"])
        if cfg.get("relay"):
            relay = await start_relay(cfg["relay"])
        status.phase = "preflight"
        await asyncio.to_thread(_preflight, cfg, receipt)
        receipt.mark("preflight_done")
        status.phase = "appserver"
        proc = await asyncio.create_subprocess_exec(
            cfg["codex_bin"],
            "app-server",
            "--strict-config",
            cwd=cfg["workdir"],
            env={**os.environ, **cfg["appserver_env"], **secret},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=STREAM_LIMIT,
            start_new_session=False,
        )
        del secret
        conv = Conversation(
            receipt, logs_dir, cfg["workdir"], zero_token_limit=int(cfg.get("zero_token_limit", 3))
        )
        run_deadline = cfg.get("run_deadline_in_sec")
        await conv.open(proc, time.monotonic() + run_deadline if run_deadline else None)
        status.session = conv.session
        harness = harness_from_state(cfg["harness"], receipt, logs_dir, local_exec(cfg.get("user")))
        conv.start_budget(t0, cfg.get("goal_timeout_sec"), cfg.get("harbor_sec"))
        if relay is not None:  # the budget starts again at codex's first request (the wire's start)
            relay.on_first = conv.anchor_budget
        status.phase = "drive"
        drive = asyncio.create_task(conv.drive(harness.drive, cfg["instruction"]))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({drive, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not drive.done():  # the host's deadline (stop file or SIGTERM): wind down as at ours
            status.phase = "wind-down"
            drive.cancel()
            try:
                await drive
            except asyncio.CancelledError:
                pass
            receipt.extra["stopped_by"] = "host (stop file or SIGTERM)"
            await conv.wind_down()
        else:
            stopper.cancel()
            drive.result()
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the host as data
        receipt.stop_reason = "error"
        if str(exc) not in receipt.errors:
            receipt.errors.append(f"{type(exc).__name__}: {exc}")
        failure = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        status.phase = "evidence"
        if conv is not None:
            conv.finish()
        if relay is not None:
            await relay.close()
            receipt.extra["relay"] = relay.stats
        try:
            _save_evidence(cfg, logs_dir, receipt, conv.session if conv else None)
            if harness is not None and conv is not None and conv.session is not None:
                harness.finish(conv.session)
        except Exception as exc:  # noqa: BLE001 - evidence is best effort
            receipt.warnings.append(f"evidence: {type(exc).__name__}: {exc}")
        if conv is not None:
            conv.record_times(t0, "driver_duration_sec")
        from dataclasses import asdict

        safeio.write_atomic(
            ctrl / RECEIPT_NAME, json.dumps({"receipt": asdict(receipt), "failure": failure}, default=str)
        )
        status.phase = "finished"
        status.done = True
        status.outcome = {"failure": failure, "stop_reason": receipt.stop_reason}
        status.write()
        beat.cancel()
    return 0


def main(argv: list[str]) -> int:
    if sys.version_info < MIN_PYTHON:
        print(f"marathon driver needs python3 >= {'.'.join(map(str, MIN_PYTHON))}", file=sys.stderr)
        return 5
    if len(argv) != 2:
        print("usage: python3 -m agents.sandbox_driver <control dir>", file=sys.stderr)
        return 2
    return asyncio.run(drive_in_sandbox(Path(argv[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
