"""One codex thread driven over app-server: turns, goals, token usage and the silent-failure guards.

Shared by every codex arm (plain, goal and the LoopX arms). API:

    s = CodexSession(client, receipt, workdir, deadline=..., on_usage=fn)
    await s.skills_list()                       # works before thread/start (LoopX gate)
    await s.thread_start()
    await s.goal_set("objective", status=None)  # thread/goal/set; auto-starts a goal turn
    tid = await s.goal_set_and_turn_start("objective", "text")  # both written at once: merged
    await s.goal_resume()                       # blocked/paused -> active (the harness plays the user)
    tid = await s.turn_start("text")            # our turn (merges into an auto-started goal turn)
    turn = await s.wait_turn_end(tid)           # the completed turn (dict)
    status = await s.follow_goal()              # codex-owned continuations until not active
    await s.wind_down()                         # deadline: interrupt the running turn, bounded

Every wait raises ``RuntimeError(DEADLINE_MESSAGE)`` when the deadline passes. Callers recognise it
with ``is_deadline(exc)`` -- by message, never by class: the field lost a night of three arms to two
same-named exception classes, one of which was caught and one not.

Goal status is followed as TRANSITIONS (``goal_transitions``), from every ``thread/goal/updated``
notification and every goal/set|get answer, in the order app-server wrote them: a goal can go
blocked and leave blocked inside one busy stretch (a blocked goal completed by the next turn before
the harness looks), so ``receipt.unblocks`` counts transitions out of ``blocked``, whoever caused
them, never what one poll happened to see.

Guards (raise ArmFailure): a ``warning`` about the code-mode host; an item mentioning an
"unsupported call" or a failed code-mode host spawn; a failed turn; ``zero_token_limit`` consecutive
turns that used no tokens (the field saw 17,945 empty goal turns in 1.5 h).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from agents.appserver import AppServerClient, AppServerError, DeadlineReached
from modes.gateway import names_wire_end
from modes.receipt import Receipt

DEADLINE_MESSAGE = "goal_timeout_before_terminal"
CODE_MODE_MARKERS = ("code-mode host", "code mode is unavailable", "failed to spawn code-mode host")
UNSUPPORTED_MARKER = "unsupported call"
ACTIVE = "active"
BLOCKED = "blocked"
#: goals_N.sqlite spells statuses in snake_case; app-server in camelCase
SQLITE_STATUS = {"usage_limited": "usageLimited", "budget_limited": "budgetLimited"}


def is_deadline(exc: BaseException) -> bool:
    """The deadline, recognised by its message (any RuntimeError class may carry it)."""
    return isinstance(exc, RuntimeError) and str(exc) == DEADLINE_MESSAGE


#: what reading the goal store may cost: codex's own store answers in milliseconds
GOAL_STORE_SEC = 2.0


def read_goal_status(goals_sqlite: Path, thread_id: str) -> str | None:
    """The thread's goal status in codex's goal store, read-only. The store comes out of the
    container, where the agent is root: ``thread_goals`` must be a table (a view the agent wrote
    could compute forever), no schema-defined function is trusted, and the query is interrupted
    after ``GOAL_STORE_SEC`` (``sqlite3.OperationalError``, as any unreadable store)."""
    con = sqlite3.connect(f"{goals_sqlite.resolve().as_uri()}?mode=ro", uri=True)
    try:
        deadline = time.monotonic() + GOAL_STORE_SEC
        con.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
        con.execute("PRAGMA trusted_schema = OFF")
        kind = con.execute("SELECT type FROM sqlite_master WHERE name = 'thread_goals'").fetchone()
        if kind is None or kind[0] != "table":
            raise sqlite3.DatabaseError(f"thread_goals is {kind[0] if kind else 'missing'}, not a table")
        row = con.execute("SELECT status FROM thread_goals WHERE thread_id = ?", (thread_id,)).fetchone()
    finally:
        con.close()
    return row[0] if row is not None and type(row[0]) is str else None


class ArmFailure(RuntimeError):
    """A loud failure of the harness or the codex install; never an empty 'successful' run."""


class CodexSession:
    def __init__(
        self,
        client: AppServerClient,
        receipt: Receipt,
        workdir: str,
        *,
        deadline: float | None = None,
        zero_token_limit: int = 3,
        on_usage: Callable[[dict], None] | None = None,
    ) -> None:
        self.client = client
        self.receipt = receipt
        self.workdir = workdir
        self.deadline = deadline
        self.zero_token_limit = zero_token_limit
        self.on_usage = on_usage
        self.thread_id: str | None = None
        self.goal: dict | None = None
        self.active_turn: str | None = None
        self.turn_ids: list[str] = []
        self.our_turn_ids: set[str] = set()
        self.completed: dict[str, dict] = {}
        self.total_tokens = 0
        self._tokens_at_turn_start: dict[str, int] = {}
        self._zero_token_streak = 0
        self.fatal: ArmFailure | None = None
        self.goal_transitions: list[dict] = []
        client.add_listener(self._on_notification)
        client.add_result_listener(self._on_result)

    # --- bookkeeping (runs for every notification, in order) ----------------------------------------

    @property
    def goal_status(self) -> str | None:
        return (self.goal or {}).get("status")

    def _see_goal(self, goal: dict | None, turn_id: str | None, source: str) -> None:
        """Take a goal as codex reported it; a changed status is recorded as one transition.

        ``by`` is the turn whose tool call changed it, else ``"user"`` (a client request: ours).
        """
        if not goal:
            return
        before = self.goal_status
        self.goal = goal
        self.receipt.goal_status_final = self.goal_status
        after = self.goal_status
        if after == before:
            return
        self.goal_transitions.append(
            {
                "n": len(self.goal_transitions) + 1,
                "from": before,
                "to": after,
                "by": f"turn {turn_id}" if turn_id else "user",
                "source": source,
                "turns_before": len(self.turn_ids),
                "tokens_before": self.total_tokens,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        self.receipt.extra["goal_transitions"] = self.goal_transitions
        self.receipt.unblocks = len(self.unblock_transitions())
        self.receipt.extra["blocked_episodes"] = len(self.blocked_transitions())

    def blocked_transitions(self) -> list[dict]:
        """Every time the goal went blocked."""
        return [t for t in self.goal_transitions if t["to"] == BLOCKED]

    def unblock_transitions(self) -> list[dict]:
        """Every time the goal left blocked (resumed by the user, or moved on by a turn)."""
        return [t for t in self.goal_transitions if t["from"] == BLOCKED]

    def reconcile_goal_store(self, goals_sqlite: Path) -> None:
        """Compare the last status seen with codex's goal store (``goals_N.sqlite``) after the run.

        A status the notifications never showed (app-server died mid-stream) becomes one more
        transition with ``source: "goals_sqlite"``; an unreadable store is a warning, not a result.
        """
        if self.thread_id is None:
            return
        try:
            stored = read_goal_status(goals_sqlite, self.thread_id)
        except sqlite3.Error as exc:
            self.receipt.warnings.append(f"goal store {goals_sqlite.name} unreadable: {exc}")
            return
        if stored is None:
            return
        status = SQLITE_STATUS.get(stored, stored)
        if status != self.goal_status:
            self._see_goal({**(self.goal or {}), "status": status}, None, "goals_sqlite")

    def _on_result(self, method: str, result) -> None:
        if method in ("thread/goal/set", "thread/goal/get") and isinstance(result, dict):
            self._see_goal(result.get("goal"), None, method.removeprefix("thread/"))

    def _on_notification(self, method: str, p: dict) -> None:
        r = self.receipt
        if method == "turn/started":
            tid = (p.get("turn") or {}).get("id")
            if tid and tid not in self.turn_ids:
                self.turn_ids.append(tid)
                self._tokens_at_turn_start[tid] = self.total_tokens
                r.extra["thread_turns"] = list(self.turn_ids)
            self.active_turn = tid
            r.turns = len(self.turn_ids)
            r.continuations = len([t for t in self.turn_ids if t not in self.our_turn_ids])
        elif method == "turn/completed":
            turn = p.get("turn") or {}
            tid = turn.get("id")
            self.completed[tid] = turn
            if self.active_turn == tid:
                self.active_turn = None
        elif method == "thread/tokenUsage/updated":
            total = (p.get("tokenUsage") or {}).get("total") or {}
            self.total_tokens = int(total.get("totalTokens") or 0)
            r.token_usage = total
            if self.on_usage:
                self.on_usage(total)
        elif method == "thread/goal/updated":
            self._see_goal(p.get("goal"), p.get("turnId"), "notification")
        elif method == "thread/goal/cleared":
            r.goal_status_final = "cleared"
        elif method in ("warning", "configWarning"):
            msg = str(p.get("message") or p.get("summary") or json.dumps(p))[:1000]
            r.warnings.append(msg)
            if any(m in msg.lower() for m in CODE_MODE_MARKERS):
                self._fail(f"code-mode host unavailable, tool calls would fail silently: {msg}")
        elif method == "error":
            err = p.get("error") or {}
            line = f"error notification (willRetry={p.get('willRetry')}): {err.get('message')}"
            if self._ended() or names_wire_end(f"{err.get('message')} {err.get('additionalDetails')}"):
                # the model's work has ended (the deadline; the wire's refusal of the spent budget or
                # spend cap): until our interrupt or the host's stop reaches codex, a call it still
                # makes is refused at the wire and codex says "Reconnecting...", then fails the turn.
                # The end, not a fault of the arm: counted as one, the five arms got 0 to 4 error
                # events each for the same cap, by when each harness stopped its codex.
                r.extra.setdefault("errors_at_end", []).append(line)
            else:
                r.errors.append(line)
        elif method == "item/completed":
            item = p.get("item") or {}
            if item.get("type") == "commandExecution":
                r.command_executions += 1
            blob = json.dumps(item).lower()
            if UNSUPPORTED_MARKER in blob or "failed to spawn code-mode host" in blob:
                self._fail(
                    f"tool call failed silently ({item.get('type')} {item.get('id')}): unsupported call"
                )

    def _ended(self) -> bool:
        """The deadline has passed: the model's work is over, whatever codex still reports."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _fail(self, message: str) -> None:
        self.receipt.errors.append(message)
        if self.fatal is None:
            self.fatal = ArmFailure(message)

    def _check(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    async def _next(self):
        while True:
            try:
                note = await self.client.next_notification(self.deadline)
            except DeadlineReached:
                # the deadline may have moved later while this waited (the budget's start moves to the
                # first model request: ``Conversation.anchor_budget``): wait on to the new one
                if self.deadline is not None and time.monotonic() < self.deadline:
                    continue
                raise RuntimeError(DEADLINE_MESSAGE) from None
            self._check()
            return note

    async def request(self, method: str, params: dict, timeout: float = 120):
        """A request bounded by the deadline as well as ``timeout``."""
        (result,) = await self.requests([(method, params)], timeout)
        return result

    async def requests(self, calls: list[tuple[str, dict]], timeout: float = 120) -> list:
        """Requests written back to back (``AppServerClient.requests``), bounded by the deadline as
        well as ``timeout``."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(DEADLINE_MESSAGE)
            if left < timeout:
                try:
                    return await self.client.requests(calls, timeout=left)
                except AppServerError as exc:
                    if "no response within" in str(exc) and time.monotonic() >= self.deadline:
                        raise RuntimeError(DEADLINE_MESSAGE) from None
                    raise
        return await self.client.requests(calls, timeout=timeout)

    # --- thread, goal, turns -------------------------------------------------------------------------

    async def skills_list(self, cwds: list[str] | None = None, force_reload: bool = True) -> dict:
        return await self.request(
            "skills/list", {"cwds": cwds or [self.workdir], "forceReload": force_reload}
        )

    async def thread_start(self, **extra) -> dict:
        params = {"cwd": self.workdir, "approvalPolicy": "never", "sandbox": "danger-full-access", **extra}
        res = await self.request("thread/start", params)
        self.thread_id = res["thread"]["id"]
        self.receipt.extra.setdefault("thread_id", self.thread_id)
        self.receipt.extra.setdefault("rollout_path", res["thread"].get("path"))
        return res

    async def goal_set(
        self, objective: str | None = None, status: str | None = None, token_budget: int | None = None
    ) -> dict:
        params = self._goal_params(objective, status, token_budget)
        return await self.request("thread/goal/set", params)  # the goal itself: _on_result

    def _goal_params(self, objective: str | None, status: str | None, token_budget: int | None) -> dict:
        params: dict = {"threadId": self.thread_id, "origin": "user"}
        if objective is not None:
            params["objective"] = objective
            self.receipt.goal_objective = objective if len(objective) <= 200 else objective[:200] + "..."
            self.receipt.extra["goal_objective_chars"] = len(objective)
        if status is not None:
            params["status"] = status
        if token_budget is not None:
            params["tokenBudget"] = token_budget
        return params

    async def goal_set_and_turn_start(self, objective: str, text: str) -> str:
        """Set the goal and start our turn with ``text``, the two requests written back to back; our
        turn's id. ``thread/goal/set`` starts a goal turn by itself, and codex merges a ``turn/start``
        that reaches it in time into that turn. One that comes after the goal turn's first request
        left costs an answer: codex waits for it, drops it, and asks again with the text (the
        ledger has the answer, codex's own count not; docs/gateway.md). Written together, nothing of
        ours comes between them: not this process being scheduled, not reading the first answer."""
        params = self._goal_params(objective, None, None)
        _goal, turn = await self.requests(
            [("thread/goal/set", params), ("turn/start", self._turn_params(text))]
        )
        return self._started(turn)

    async def goal_get(self) -> dict | None:
        res = await self.request("thread/goal/get", {"threadId": self.thread_id})
        return res.get("goal")  # taken in stdout order by _on_result

    async def goal_resume(self) -> dict:
        """The harness plays the operator: set a blocked/paused goal active again.

        Counted as an unblock by the transition it causes (``blocked -> active``), not by the call.
        """
        return await self.goal_set(status=ACTIVE)

    async def turn_start(self, text: str, **extra) -> str:
        return self._started(await self.request("turn/start", self._turn_params(text, **extra)))

    def _turn_params(self, text: str, **extra) -> dict:
        return {
            "threadId": self.thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
            **extra,
        }

    def _started(self, res: dict) -> str:
        """Our turn, from ``turn/start``'s answer: its id, counted as ours."""
        tid = res["turn"]["id"]
        self.our_turn_ids.add(tid)
        self.receipt.our_turns = len(self.our_turn_ids)
        self.receipt.continuations = len([t for t in self.turn_ids if t not in self.our_turn_ids])
        if "first_turn" not in self.receipt.timings:
            self.receipt.mark("first_turn")
        return tid

    async def turn_interrupt(self, turn_id: str | None = None) -> None:
        tid = turn_id or self.active_turn
        if tid and self.thread_id:
            await self.client.request(
                "turn/interrupt", {"threadId": self.thread_id, "turnId": tid}, timeout=10
            )

    def _after_turn(self, turn: dict) -> None:
        """Per-turn guards: failed turns and zero-token turnover."""
        tid = turn.get("id")
        status = turn.get("status")
        used = self.total_tokens - self._tokens_at_turn_start.get(tid, self.total_tokens)
        if status == "failed":
            err = (
                (turn.get("error") or {}).get("message")
                if isinstance(turn.get("error"), dict)
                else turn.get("error")
            )
            if names_wire_end(str(err)):
                # the wire refused the spent budget (it ends no earlier than our deadline) or the
                # attempt's spend cap: the end of the model's work, wound down as the deadline is
                # (the host says spend cap when it cut), never the arm's failure
                self.receipt.extra.setdefault("errors_at_end", []).append(f"turn {tid} failed: {err}")
                now = time.monotonic()
                self.deadline = now if self.deadline is None else min(self.deadline, now)
                raise RuntimeError(DEADLINE_MESSAGE)
            self._fail(f"turn {tid} failed: {err}")
            self._check()
        self._zero_token_streak = self._zero_token_streak + 1 if used <= 0 else 0
        if self._zero_token_streak >= self.zero_token_limit:
            self._fail(f"stopped: {self._zero_token_streak} consecutive turns used zero tokens")
            self._check()

    async def wait_turn_end(self, turn_id: str | None = None) -> dict:
        """Wait until ``turn_id`` (default: the active turn) completes; returns the turn."""
        tid = turn_id or self.active_turn
        while tid not in self.completed:
            note = await self._next()
            if tid is None and note.method == "turn/completed":
                tid = (note.params.get("turn") or {}).get("id")
        turn = self.completed[tid]
        self._after_turn(turn)
        return turn

    async def follow_goal(self, idle_poll_sec: float = 5.0) -> str | None:
        """Let codex own continuation: return once the goal is no longer active and no turn runs."""
        seen_done: set[str] = set()
        while True:
            for tid, turn in list(self.completed.items()):
                if tid not in seen_done:
                    seen_done.add(tid)
                    self._after_turn(turn)
            if self.goal_status != ACTIVE and self.active_turn is None:
                return self.goal_status
            try:
                wait_until = time.monotonic() + idle_poll_sec
                if self.deadline is not None:
                    wait_until = min(wait_until, self.deadline)
                note = await self.client.next_notification(wait_until)
                self._check()
                del note
            except DeadlineReached:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    raise RuntimeError(DEADLINE_MESSAGE) from None
                if self.active_turn is None:
                    await self.goal_get()  # quiet and idle: refresh the goal status from the source

    async def wind_down(self, timeout: float = 5.0) -> None:
        """After the deadline: interrupt the running turn (bounded); the verifier scores what exists."""
        try:
            await asyncio.wait_for(self.turn_interrupt(), timeout)
        except (AppServerError, TimeoutError, OSError):
            pass
        if self.goal_status == ACTIVE and self.thread_id:
            try:
                await asyncio.wait_for(self.goal_get(), timeout)
            except (AppServerError, TimeoutError, OSError, RuntimeError):
                pass
