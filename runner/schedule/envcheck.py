"""The install-only checks of every arm's environment (``marathon verify-envs``), on this host.

Why: the field's failures were silent (exit 0, clean logs) -- a missing sidecar, a config written in
two appends, LoopX without Node or skills. This runs each arm's *own* agent code on a mini task's
image, up to the point where a model would be asked, and never starts a thread or a turn, so no
token is spent. The CLI runs it here; on a cluster, the probe runs it on each Docker host in a task
pinned there (``runner.schedule.fleet.probe``), which is why it lives below the commands.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from modes import safetext
from runner.errors import Unavailable, UserError

REPO = Path(__file__).resolve().parents[2]
MINI_TASK = REPO / "runner" / "demo" / "tasks" / "calc-partial"
LABEL = "org.marathon.verify-envs"
#: A credential variable for the handshake only: its value is never sent (no turn is started).
VERIFY_KEY_VAR = "MARATHON_VERIFY_ENVS_NO_TOKEN"


@dataclass
class Check:
    arm: str
    check: str
    status: str  # ok | FAIL | skip
    detail: str

    def line(self) -> str:
        """One line (its detail may quote an image's workdir or an exception: escaped)."""
        c = safetext.clean
        return f"{c(self.arm):<10} {c(self.check):<17} {c(self.status):<4}  {c(self.detail, None)}"


def _build_image(task: Path) -> str:
    """The mini task's image, built locally (FROM images built from marathon-base)."""
    from agents.scripted_model.image import ensure_demo_image

    env_dir = task / "environment"
    if not (env_dir / "Dockerfile").is_file():
        raise UserError(f"{task} is not a harbor task with environment/Dockerfile")
    from runner.ops.dockerapi import connect

    connect().close()  # an engine that does not answer: its one line (exit 3), not a missing image
    ensure_demo_image()
    tag = f"marathon-verify-envs:{task.name}"
    proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(env_dir)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unavailable(f"building the mini task image failed: {proc.stderr.strip()[-300:]}")
    return tag


def _start_container(image: str, mounts: list[dict], run_id: str, arm: str) -> str:
    argv = ["docker", "run", "-d", "--network", "none", "--label", f"{LABEL}={run_id}:{arm}"]
    for m in mounts:
        argv += ["-v", f"{m['source']}:{m['target']}:ro"]
    argv += [image, "sleep", "infinity"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"docker run failed: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


async def _verify_arm(
    arm: str, image: str, codex_root: Path, parts_root: Path | None, run_id: str
) -> list[Check]:
    from agents.loopx_gates import GateFailure, skills_list_verdict
    from agents.transport import DockerExecTransport, container_workdir
    from modes.profiles import ARMS

    mode = ARMS[arm]
    checks: list[Check] = []
    cid = None
    logs = Path(tempfile.mkdtemp(prefix=f"verify-envs-{arm}-"))

    def add(check: str, ok: bool, detail: str) -> bool:
        checks.append(Check(arm, check, "ok" if ok else "FAIL", detail))
        return ok

    try:
        module, _, cls = mode.agent_import_path.partition(":")
        agent_cls = getattr(__import__(module, fromlist=[cls]), cls)
        kwargs = {"api_key_var": VERIFY_KEY_VAR}
        if mode.loopx:
            kwargs["mode"] = arm
        agent = agent_cls(logs_dir=logs, model_name="openai/scripted/solve", **kwargs)
        from agents.staging import CONTAINER_CODEX_ROOT

        mounts = [{"source": str(codex_root), "target": CONTAINER_CODEX_ROOT}]
        if mode.loopx:
            from agents.loopx_staging import CONTAINER_PARTS_ROOT

            mounts.append({"source": str(parts_root), "target": CONTAINER_PARTS_ROOT})
        cid = await asyncio.to_thread(_start_container, image, mounts, run_id, arm)
        workdir = container_workdir(cid)
        transport = DockerExecTransport(cid, workdir, None)
        add("container", True, f"{image} workdir {workdir} (network none)")
        agent.receipt = agent.new_receipt()
        if mode.loopx:
            t0 = time.monotonic()
            try:
                agent.instruction = (MINI_TASK / "instruction.md").read_text()
                await agent.prepare(transport)
            except Exception as exc:  # noqa: BLE001 - the message names the failing step
                lx = agent.loopx
                for g in lx.get("gates", []):
                    add(f"gate:{g['gate']}", g["ok"], g["detail"])
                if not lx.get("gates"):
                    add("loopx-profile", False, str(exc))
                return checks
            p = agent.loopx["profile"]
            add(
                "loopx-profile",
                True,
                f"python {p['python']}, node {p['node']}, {p['loopx']} ({agent.loopx['parts']['delivery']} parts, "
                f"{time.monotonic() - t0:.1f}s incl. gates)",
            )
            for g in agent.loopx["gates"]:
                add(f"gate:{g['gate']}", g["ok"], g["detail"])
            if agent.body is not None:
                add("body", True, f"{agent.body.chars} chars, sha256 {agent.body.sha256[:16]}")
        os.environ.setdefault(VERIFY_KEY_VAR, "verify-envs-no-token")
        try:
            secret = agent.codex_preflight(transport)
        except Exception as exc:  # noqa: BLE001
            add("codex+config", False, str(exc))
            return checks
        add(
            "codex+config",
            True,
            f"{agent.receipt.extra.get('codex_version_in_container')}, config.toml strict",
        )
        t0 = time.monotonic()
        try:
            client = await agent.start_appserver(transport, secret)
        except Exception as exc:  # noqa: BLE001
            add("app-server", False, str(exc))
            return checks
        try:
            add("app-server", True, f"initialize in {time.monotonic() - t0:.1f}s ({agent.codex_home})")
            if mode.loopx:
                res = await client.request(
                    "skills/list", {"cwds": [workdir], "forceReload": True}, timeout=60
                )
                try:
                    agent.record_gate(skills_list_verdict(res, agent.required, workdir))
                    add("gate:skills/list", True, agent.loopx["gates"][-1]["detail"])
                except GateFailure as exc:
                    add("gate:skills/list", False, exc.result.detail)
        finally:
            await client.close(grace=2)
            client.kill()
    except Exception as exc:  # noqa: BLE001 - one arm's surprise must not hide the others
        add("setup", False, f"{type(exc).__name__}: {exc}")
    finally:
        if cid:
            await asyncio.to_thread(
                subprocess.run, ["docker", "rm", "-f", cid], capture_output=True, timeout=120
            )
    return checks


async def verify(arms: list[str], task: Path, codex_root: Path, parts_root: Path | None) -> list[Check]:
    image = await asyncio.to_thread(_build_image, task)
    run_id = uuid.uuid4().hex[:12]
    results = await asyncio.gather(*(_verify_arm(a, image, codex_root, parts_root, run_id) for a in arms))
    return [c for r in results for c in r]


def checks_here(
    arms: list[str], task: Path, codex_root: Path | None = None, parts_root: Path | None = None
) -> list[Check]:
    """Every check of ``arms`` on this host: its staged parts (its own cache unless given) and its
    Docker engine (``DOCKER_HOST``); what ``verify-envs`` runs here and, with ``--cluster``, on each
    Docker host in a task pinned to it."""
    from agents.loopx_staging import load_staged as load_loopx
    from agents.staging import StagingError, check_tree
    from agents.staging import load_staged as load_codex
    from modes.profiles import ARMS

    pre: list[Check] = []
    try:
        codex_root = codex_root or load_codex().root
        version = check_tree(codex_root)
        pre.append(Check("*", "staged-codex", "ok", f"{version} at {codex_root} (sidecar present)"))
    except StagingError as exc:
        return [*pre, Check("*", "staged-codex", "FAIL", str(exc))]
    if any(ARMS[a].loopx for a in arms):
        try:
            parts_root = parts_root or load_loopx().root
            pre.append(Check("*", "staged-loopx", "ok", f"parts at {parts_root}"))
        except StagingError as exc:
            return [*pre, Check("*", "staged-loopx", "FAIL", str(exc))]
    return pre + asyncio.run(verify(arms, Path(task), Path(codex_root), parts_root))
