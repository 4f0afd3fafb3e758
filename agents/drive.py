"""The five arms' drive loops: what each arm does with a ready codex session, and nothing else.

Stdlib only (with the other ``agents`` modules it imports): the same loops run on the host (the
``docker-exec`` transport) and inside the sandbox (``agents.sandbox_driver``, uploaded with the
environment's ``upload_dir``). Each harness carries its state as plain data (``state()`` /
``harness_from_state``), so the host can prepare an arm (the LoopX profile, gates 1-2, goal, body)
and hand the loop to the in-sandbox driver unchanged.

- plain: one thread, one turn with the instruction, no goal;
- goal: ``thread/goal/set`` with the Mode's fixed objective, the instruction as the first turn,
  codex owns continuation;
- LoopX (ssh-goal, codex-cli, heartbeat): gate 3 (``skills/list`` before ``thread/start``), then
  by ``Mode.body_role``: the body as the goal objective (codex owns continuation, the harness
  plays the user and resumes a self-locked goal when ``ungated``), or each heartbeat tick a fresh
  turn whose input is the body rendered with a new turn instance id, paced by LoopX's
  ``scheduler_hint``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.loopx_body import GoalBody, render_body
from agents.loopx_gates import GateFailure, skills_list_verdict
from agents.loopx_profile import (
    ContainerExec,
    GoalSetup,
    InstalledProfile,
    ProfileError,
    ProfilePaths,
    loopx_argv,
    run_loopx_json,
)
from agents.session import ArmFailure, CodexSession
from modes import safeio
from modes.profiles import ARMS, Mode
from modes.receipt import Receipt

DEFAULT_OBJECTIVE = "Finish the task."


class Harness:
    """One arm's loop over a ready session; writes its outcome into ``receipt``."""

    kind = ""

    def __init__(self, receipt: Receipt) -> None:
        self.receipt = receipt

    async def drive(self, session: CodexSession, instruction: str) -> None:
        raise NotImplementedError

    def state(self) -> dict:
        """Plain data that rebuilds this harness elsewhere (``harness_from_state``)."""
        return {"kind": self.kind}

    def finish(self, session: CodexSession) -> None:
        """After the run (the goal store reconciled): the arm's own summary in the receipt."""


class PlainHarness(Harness):
    kind = "plain"

    async def drive(self, session: CodexSession, instruction: str) -> None:
        await session.thread_start()
        turn_id = await session.turn_start(instruction)
        turn = await session.wait_turn_end(turn_id)
        self.receipt.stop_reason = f"turn_{turn.get('status')}"


class GoalHarness(Harness):
    kind = "goal"

    def __init__(self, receipt: Receipt, objective: str | None = None) -> None:
        super().__init__(receipt)
        self.objective = objective or DEFAULT_OBJECTIVE

    async def drive(self, session: CodexSession, instruction: str) -> None:
        await session.thread_start()
        await session.goal_set_and_turn_start(self.objective, instruction)
        status = await session.follow_goal()
        self.receipt.stop_reason = f"goal_{status}"

    def state(self) -> dict:
        return {"kind": self.kind, "objective": self.objective}


def tick_instance(n: int) -> str:
    """The LoopX turn instance of heartbeat tick ``n`` (unique per render)."""
    return f"marathon-tick-{n}-{uuid.uuid4().hex[:8]}"


class LoopxHarness(Harness):
    """The LoopX arms' loop; ``loopx`` is the receipt's ``extra["loopx"]`` (shared, mutated here)."""

    kind = "loopx"

    def __init__(
        self,
        receipt: Receipt,
        *,
        mode: Mode,
        profile: InstalledProfile,
        goal: GoalSetup,
        body: GoalBody | None,
        required: tuple[str, ...],
        loopx: dict,
        logs_dir: Path,
        run: ContainerExec,
        user: str | None,
        ungated: bool = True,
        max_unblocks: int = 10,
        heartbeat_max_ticks: int = 30,
        heartbeat_max_wait_sec: float = 180,
        heartbeat_idle_ticks: int = 1,
        placeholders: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(receipt)
        self.mode = mode
        self.profile = profile
        self.goal = goal
        self.body = body
        self.required = tuple(required)
        self.loopx = loopx
        self.logs_dir = Path(logs_dir)
        self.run = run
        self.user = user
        self.ungated = ungated
        self.max_unblocks = int(max_unblocks)
        self.heartbeat_max_ticks = int(heartbeat_max_ticks)
        self.heartbeat_max_wait_sec = float(heartbeat_max_wait_sec)
        self.heartbeat_idle_ticks = int(heartbeat_idle_ticks)
        self.placeholders = placeholders

    def state(self) -> dict:
        return {
            "kind": self.kind,
            "arm": self.mode.arm,
            "profile": {**asdict(self.profile), "paths": asdict(self.profile.paths)},
            "goal": asdict(self.goal),
            "body": asdict(self.body) if self.body is not None else None,
            "required": list(self.required),
            "loopx": json.loads(json.dumps(self.loopx, default=str)),
            "user": self.user,
            "ungated": self.ungated,
            "max_unblocks": self.max_unblocks,
            "heartbeat_max_ticks": self.heartbeat_max_ticks,
            "heartbeat_max_wait_sec": self.heartbeat_max_wait_sec,
            "heartbeat_idle_ticks": self.heartbeat_idle_ticks,
            "placeholders": list(self.placeholders) if self.placeholders is not None else None,
        }

    def finish(self, session: CodexSession) -> None:
        self.loopx["unblock_events"] = [{**t, "n": i} for i, t in enumerate(session.unblock_transitions(), 1)]
        self.loopx["blocked_events"] = [{**t, "n": i} for i, t in enumerate(session.blocked_transitions(), 1)]
        self.receipt.extra["loopx"] = json.loads(json.dumps(self.loopx, default=str))

    def record_body(self, body: GoalBody) -> None:
        self.loopx.setdefault("bodies", []).append(body.receipt())
        self.loopx["body"] = body.receipt()
        name = (
            "loopx-body.txt" if body.turn_instance_id is None else f"loopx-body-{body.turn_instance_id}.txt"
        )
        safeio.write_atomic(self.logs_dir / name, body.text)

    def gate(self, result) -> None:
        self.loopx["gates"].append(result.as_dict())
        self.receipt.extra["loopx"] = self.loopx
        result.require()

    async def drive(self, session: CodexSession, instruction: str) -> None:
        res = await session.skills_list([session.workdir])
        try:
            self.gate(skills_list_verdict(res, self.required, session.workdir))
        except GateFailure as exc:
            self.loopx["failed_gate"] = exc.result.gate
            raise ArmFailure(str(exc)) from exc
        await session.thread_start()
        if self.mode.body_role == "goal_objective":
            await self._drive_goal(session, instruction)
        else:
            await self._drive_heartbeat(session, instruction)

    async def _drive_goal(self, session: CodexSession, instruction: str) -> None:
        tid = await session.goal_set_and_turn_start(self.body.text, instruction)
        # codex merges our turn into the goal turn it auto-started; when that turn already ended
        # (a very fast model) the instruction runs as a turn of its own, possibly on a blocked goal
        first = session.turn_ids[0] if session.turn_ids else tid
        self.loopx["instruction_turn"] = "merged" if first == tid else "separate"
        resumed = 0
        while True:
            status = await session.follow_goal()
            if (
                status == "blocked"
                and self.ungated
                and len(session.unblock_transitions()) < self.max_unblocks
            ):
                resumed += 1
                await session.goal_resume()
                # codex starts the goal's continuation turn itself once the goal is active again
                continue
            if status == "blocked" and self.ungated:
                self.receipt.warnings.append(
                    f"goal still blocked after {self.max_unblocks} unblocks; ending as blocked"
                )
            self.loopx["harness_resumes"] = resumed
            self.receipt.stop_reason = f"goal_{status}"
            return

    async def _drive_heartbeat(self, session: CodexSession, instruction: str) -> None:
        counts = {"loopx": 0, "work": 0}
        cli_bin = self.profile.paths.cli_bin

        def on_item(method: str, p: dict) -> None:
            item = p.get("item") or {}
            if method == "item/completed" and item.get("type") == "commandExecution":
                key = "loopx" if cli_bin in str(item.get("command")) else "work"
                counts[key] += 1

        session.client.add_listener(on_item)
        idle = 0
        for n in range(1, self.heartbeat_max_ticks + 1):
            t_render: float | None = None
            if n == 1 and self.body is not None and self.body.turn_instance_id is not None:
                # the first tick's body was rendered in the preparation, before the budget started,
                # as the goal modes' body is (a render is a LoopX process in the sandbox: seconds
                # quiet, tens of seconds on a loaded machine, taken from heartbeat's model time)
                body, turn_instance = self.body, self.body.turn_instance_id
            else:
                t_render = time.monotonic()
                turn_instance = tick_instance(n)
                body = await render_body(
                    self.run,
                    self.profile,
                    self.mode,
                    self.goal,
                    turn_instance_id=turn_instance,
                    user=self.user,
                    placeholders=self.placeholders,
                )
            # the budget's seconds this tick spent rendering its body (None for the first tick, whose
            # body the preparation rendered): what heartbeat pays in model time the goal modes do not
            render_sec = None if t_render is None else round(time.monotonic() - t_render, 3)
            self.record_body(body)
            before = dict(counts)
            tid = await session.turn_start(f"{body.text}\n\n---\n\n{instruction}")
            turn = await session.wait_turn_end(tid)
            tick = {
                "n": n,
                "loopx_turn": turn_instance,
                "turn_id": tid,
                "status": turn.get("status"),
                "work_commands": counts["work"] - before["work"],
                "loopx_commands": counts["loopx"] - before["loopx"],
                "body_sha256": body.sha256,
                "render_sec": render_sec,
            }
            idle = idle + 1 if tick["work_commands"] == 0 else 0
            if idle >= self.heartbeat_idle_ticks:
                self.loopx["ticks"].append(tick)
                self.receipt.stop_reason = "heartbeat_idle"
                return
            tick["wait_sec"] = await self._pace(session)
            self.loopx["ticks"].append(tick)
        self.receipt.stop_reason = "heartbeat_max_ticks"

    async def _pace(self, session: CodexSession) -> float:
        """LoopX's generic_cli scheduling hint: run_now -> next tick at once; else its interval, capped."""
        try:
            q = await run_loopx_json(
                self.run,
                self.profile,
                loopx_argv(
                    self.profile.paths,
                    self.goal.registry,
                    "quota",
                    "should-run",
                    "--goal-id",
                    self.goal.goal_id,
                    "--agent-id",
                    self.goal.agent_id,
                    "--runtime-profile",
                    "generic_cli",
                    "--dry-run",
                    "--include-detail",
                    "scheduler",
                ),
                "loopx quota should-run (pacing)",
                user=self.user,
                cwd=self.goal.project,
            )
        except ProfileError as exc:
            self.receipt.warnings.append(f"heartbeat pacing probe failed, next tick at once: {exc}")
            return 0.0
        hint = q.get("scheduler_hint") or {}
        action = hint.get("action")
        wait = 0.0
        if action != "run_now":
            local = ((hint.get("cold_path_detail") or {}).get("local_scheduler")) or {}
            wait = float(local.get("recommended_interval_minutes") or 0) * 60
            wait = min(wait, self.heartbeat_max_wait_sec)
            if session.deadline is not None:
                wait = min(wait, max(0.0, session.deadline - time.monotonic()))
        self.loopx.setdefault("pacing", []).append(
            {"action": action, "should_run": q.get("should_run"), "wait_sec": wait}
        )
        if wait > 0:
            await asyncio.sleep(wait)
        return wait


def harness_from_state(
    state: dict[str, Any], receipt: Receipt, logs_dir: Path, run: ContainerExec
) -> Harness:
    """Rebuild the harness ``Harness.state()`` described (inside the sandbox)."""
    kind = state.get("kind")
    if kind == PlainHarness.kind:
        return PlainHarness(receipt)
    if kind == GoalHarness.kind:
        return GoalHarness(receipt, state.get("objective"))
    if kind != LoopxHarness.kind:
        raise ValueError(f"unknown harness kind {kind!r}")
    prof = dict(state["profile"])
    prof["paths"] = ProfilePaths(**prof["paths"])
    loopx = state["loopx"]
    receipt.extra["loopx"] = loopx
    body = state.get("body")
    placeholders = state.get("placeholders")
    return LoopxHarness(
        receipt,
        mode=ARMS[state["arm"]],
        profile=InstalledProfile(**prof),
        goal=GoalSetup(**state["goal"]),
        body=GoalBody(**{**body, "placeholders_replaced": tuple(body["placeholders_replaced"])})
        if body
        else None,
        required=tuple(state["required"]),
        loopx=loopx,
        logs_dir=logs_dir,
        run=run,
        user=state.get("user"),
        ungated=bool(state.get("ungated", True)),
        max_unblocks=state.get("max_unblocks", 10),
        heartbeat_max_ticks=state.get("heartbeat_max_ticks", 30),
        heartbeat_max_wait_sec=state.get("heartbeat_max_wait_sec", 180),
        heartbeat_idle_ticks=state.get("heartbeat_idle_ticks", 1),
        placeholders=tuple(placeholders) if placeholders is not None else None,
    )
