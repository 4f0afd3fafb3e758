#!/usr/bin/env python3
"""A scripted Responses-API model for tests: stdlib only, runs INSIDE the trial container.

codex reaches it at http://127.0.0.1:<port>/v1/responses (the container's own loopback), so test
traffic never leaves the container. The scenario is the model name codex sends:

  scripted/solve         run the task plan's commands with ``exec_command``, then answer; in a goal
                         turn, call ``update_goal`` status=complete before answering
  scripted/never-finish  run the plan's first ``partial_steps`` commands, then keep calling tools
                         forever (the deadline path: partial progress, never a final answer)
  scripted/block         in a goal turn, call ``update_goal`` status=blocked once; after the goal is
                         resumed it solves like ``solve``
  scripted/block-always  in a goal turn, always block
  scripted/noise         ``solve`` with SSE noise: comments, unknown events, one-char deltas
  scripted/two-turns     ``solve``, but the first goal turn ends without ``update_goal`` (codex starts a
                         continuation turn by itself, which completes the goal)
  scripted/unsupported   call a tool codex no longer has (``shell_command``), then answer: codex replies
                         "unsupported call" and still completes the turn (a silent failure)
  scripted/zero-usage    answer every request at once, reporting zero tokens, never finishing a goal
                         (the empty-turn loop the harness must stop)
  scripted/unauthorized  answer every request HTTP 401 ``invalid_api_key``, as a provider does once a
                         credential is revoked (the runner's circuit breaker must pause the run)
  scripted/loopx         first run every LoopX quota guard command found in the turn's input (the goal
                         body: goal objective or user text; a ``LOOPX_TURN=`` line before it is kept),
                         so the real LoopX CLI executes in the container; then ``solve``
  scripted/demo          ``marathon demo``'s varied run: the guards as ``loopx``, then the scenario the
                         task's plan assigns to the harness the request shows (``"demo"``: harness ->
                         scenario; see ``harness_of``), default ``solve``. Besides the ones above a plan
                         may name ``partial:N`` (run the first N plan steps, then finish as ``solve``
                         does) and ``break`` (run the plan's ``break_steps`` instead, then finish)

Any request that carries ``internal_chat_message_metadata_passthrough`` gets HTTP 400
``unknown_parameter``, as some gateways do. Every request is recorded as one JSON line in the log
(``SCRIPTED_LOG``, created empty at start-up so its existence proves the server ran); the
credential is recorded only as a short sha256 prefix, never in clear. ``GET /__scripted/stats``
returns the request count.

The plan (``SCRIPTED_PLAN``, default /opt/scripted/plan.json) is shipped by each task's image:
``{"steps": ["<shell command>", ...], "answer": "<final text>", "partial_steps": 1}``, optionally
``"break_steps": [...]`` and ``"demo": {"<harness>": "<scenario>"}``.

Why the demo reads the harness from the request: the model is never told which arm it serves (every
arm sends the same model name, the same image, the same budget, so the fairness audit stays clean).
What it sees is what the arms are declared to differ in: whether the turn is a goal turn, and the
``--runtime-profile`` of the LoopX guard in the body. A real model reacts to its harness the same way.
The SSE event sequence is the one codex's own tests use (core/tests/common/responses.rs).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PASSTHROUGH = "internal_chat_message_metadata_passthrough"
CALL_PREFIX = "call_scr_"
SCENARIOS = (
    "solve",
    "never-finish",
    "block",
    "block-always",
    "noise",
    "loopx",
    "two-turns",
    "zero-usage",
    "unsupported",
    "unauthorized",
    "demo",
)
#: what ``scripted/demo`` may assign in a plan's ``"demo"`` table (``partial:N`` takes a number)
DEMO_SCENARIOS = ("solve", "never-finish", "block", "break", "partial")
#: the LoopX runtime profile in a guard line -> the harness (modes/profiles.py's runtime_profile)
PROFILE_HARNESS = {"codex_app_ssh_goal": "ssh-goal", "codex_cli": "codex-cli", "generic_cli": "heartbeat"}

_lock = threading.Lock()
_count = 0


def _log_path() -> str:
    return os.environ.get("SCRIPTED_LOG", "/var/log/scripted/requests.jsonl")


def _plan() -> dict:
    path = os.environ.get("SCRIPTED_PLAN", "/opt/scripted/plan.json")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"steps": [], "answer": "No plan was shipped with this task."}


def _find_key(obj, key: str) -> bool:
    if isinstance(obj, dict):
        return key in obj or any(_find_key(v, key) for v in obj.values())
    if isinstance(obj, list):
        return any(_find_key(v, key) for v in obj)
    return False


def _record(entry: dict) -> int:
    global _count
    with _lock:
        _count += 1
        entry = {"n": _count, "time": time.time(), **entry}
        with open(_log_path(), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        return _count


# --- SSE building blocks -------------------------------------------------------------------------


def _event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _usage(body_len: int) -> dict:
    inp = max(50, body_len // 4)
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + 20,
    }


def _function_call(resp_id: str, call_id: str, name: str, args: dict, usage: dict) -> str:
    item = {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
    }
    return (
        _event("response.created", {"response": {"id": resp_id}})
        + _event("response.output_item.added", {"output_index": 0, "item": item})
        + _event("response.output_item.done", {"output_index": 0, "item": item})
        + _event("response.completed", {"response": {"id": resp_id, "usage": usage}})
    )


def _message(resp_id: str, text: str, usage: dict, noise: bool = False) -> str:
    msg_id = f"msg_{resp_id}"
    started = {"type": "message", "id": msg_id, "role": "assistant", "content": []}
    done = {
        "type": "message",
        "id": msg_id,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }
    pieces = list(text) if noise else [text[i : i + 16] for i in range(0, len(text), 16)]
    out = _event("response.created", {"response": {"id": resp_id}})
    if noise:
        out += ": keepalive\n\n" + _event("response.scripted_noise", {"note": "ignore me"})
        out += _event("response.in_progress", {"response": {"id": resp_id}})
    out += _event("response.output_item.added", {"output_index": 0, "item": started})
    for p in pieces:
        out += _event(
            "response.output_text.delta",
            {"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": p},
        )
        if noise:
            out += ": tick\n\n"
    out += _event("response.output_item.done", {"output_index": 0, "item": done})
    out += _event("response.completed", {"response": {"id": resp_id, "usage": usage}})
    return out


# --- the decision: what to answer, from the request alone ------------------------------------------


def _our_outputs(body: dict) -> list[str]:
    """call_ids of this server's earlier calls that codex has answered (codex adds its own too)."""
    ids = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            cid = str(item.get("call_id", ""))
            if cid.startswith(CALL_PREFIX):
                ids.append(cid)
    return ids


def _user_texts(body: dict, head: int = 60) -> list[str]:
    """The start of each user message's text in the request, in order: what a test reads to know
    whether the harness's instruction was in a request (codex's own goal context is one too)."""
    out = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("role") == "user" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    out.append(part["text"][:head])
    return out


def _is_goal_turn(body: dict, headers) -> bool:
    meta = headers.get("x-codex-turn-metadata") or ""
    try:
        if json.loads(meta).get("turn_trigger") == "goal":
            return True
    except (ValueError, AttributeError):
        pass
    return any(isinstance(i, dict) and i.get("name") == "goal_objective" for i in body.get("input") or [])


def _answered_block_in_this_turn(body: dict) -> bool:
    """A blocked update_goal was answered and no assistant message followed yet (same turn)."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    last = -1
    for idx, item in enumerate(items):
        if item.get("type") == "function_call_output" and str(item.get("call_id", "")).startswith(
            CALL_PREFIX + "blocked"
        ):
            last = idx
    if last < 0:
        return False
    return not any(i.get("type") == "message" and i.get("role") == "assistant" for i in items[last + 1 :])


def _texts(body: dict) -> list[str]:
    """Texts codex was given (user/developer messages, goal objective outputs), not our tool outputs."""
    out = []
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message" and item.get("role") in ("user", "developer"):
            for c in item.get("content") or []:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    out.append(c["text"])
        elif item.get("type") == "function_call_output" and isinstance(item.get("output"), str):
            if not str(item.get("call_id", "")).startswith(CALL_PREFIX):
                out.append(item["output"])
    return out


def loopx_guards(body: dict) -> list[str]:
    """The distinct LoopX quota guard commands in the input, in order (with a LOOPX_TURN line)."""
    guards: list[str] = []
    for text in _texts(body):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            cmd = line.strip().strip("`").strip()
            if " quota should-run " not in cmd or not cmd.startswith("/"):
                continue
            prev = lines[i - 1].strip() if i else ""
            if prev.startswith("LOOPX_TURN="):
                cmd = f"{prev}\n{cmd}"
            if cmd not in guards:
                guards.append(cmd)
    return guards


def _has_assistant_message(body: dict) -> bool:
    return any(
        isinstance(i, dict) and i.get("type") == "message" and i.get("role") == "assistant"
        for i in body.get("input") or []
    )


def harness_of(body: dict, headers) -> str:
    """Which harness sent the request, from what it sent: a LoopX guard's ``--runtime-profile``
    (ssh-goal, codex-cli, heartbeat), else a goal turn (goal), else a plain turn (plain)."""
    for guard in loopx_guards(body):
        words = guard.split()
        if "--runtime-profile" in words[:-1]:
            harness = PROFILE_HARNESS.get(words[words.index("--runtime-profile") + 1])
            if harness:
                return harness
    return "goal" if _is_goal_turn(body, headers) else "plain"


def demo_scenario(plan: dict, harness: str) -> tuple[str, int | None]:
    """The plan's scenario for ``harness`` as (name, N of ``partial:N``); ``solve`` when unlisted."""
    table = plan.get("demo") if isinstance(plan.get("demo"), dict) else {}
    name, _, arg = str(table.get(harness) or "solve").partition(":")
    if name not in DEMO_SCENARIOS:
        return "solve", None
    return name, (int(arg) if name == "partial" and arg.isdigit() else None)


def decide(scenario: str, body: dict, headers, plan: dict) -> tuple[str, dict]:
    """("call", {call_id, name, args}) or ("message", {text}) for one request."""
    done = _our_outputs(body)
    n_steps_limit: int | None = None
    if scenario == "zero-usage":
        return "message", {"text": "Nothing to do."}
    if scenario == "unsupported":
        if not done:
            return "call", {
                "call_id": f"{CALL_PREFIX}legacy",
                "name": "shell_command",
                "args": {"command": "echo hello > out.txt"},
            }
        return "message", {"text": "Done."}
    if scenario in ("loopx", "demo"):
        guards = loopx_guards(body)
        ran = sum(1 for c in done if c.startswith(CALL_PREFIX + "guard_"))
        if ran < len(guards):
            return "call", {
                "call_id": f"{CALL_PREFIX}guard_{ran}",
                "name": "exec_command",
                "args": {"cmd": guards[ran], "yield_time_ms": 30000},
            }
        scenario, n_steps_limit = (
            demo_scenario(plan, harness_of(body, headers)) if scenario == "demo" else ("solve", None)
        )
    steps = list(plan.get("break_steps") or []) if scenario == "break" else list(plan.get("steps") or [])
    if scenario == "partial":
        steps = steps[: n_steps_limit if n_steps_limit is not None else int(plan.get("partial_steps", 1))]
    answer = plan.get("answer") or "Done."
    goal = _is_goal_turn(body, headers)
    blocked_before = sum(1 for c in done if c.startswith(CALL_PREFIX + "blocked"))
    if scenario in ("block", "block-always") and goal:
        if _answered_block_in_this_turn(body):
            return "message", {"text": "I am blocked: the task needs a decision I cannot make."}
        if scenario == "block-always" or blocked_before == 0:
            return "call", {
                "call_id": f"{CALL_PREFIX}blocked_{blocked_before}",
                "name": "update_goal",
                "args": {"status": "blocked"},
            }
        # ``block`` after a resume: solve below
    if scenario == "never-finish":
        partial = int(plan.get("partial_steps", 1))
        n_steps = sum(1 for c in done if c.startswith(CALL_PREFIX + "step_"))
        if n_steps < min(partial, len(steps)):
            return "call", {
                "call_id": f"{CALL_PREFIX}step_{n_steps}",
                "name": "exec_command",
                "args": {"cmd": steps[n_steps], "yield_time_ms": 5000},
            }
        ticks = sum(1 for c in done if c.startswith(CALL_PREFIX + "tick_"))
        return "call", {
            "call_id": f"{CALL_PREFIX}tick_{ticks}",
            "name": "exec_command",
            "args": {"cmd": "sleep 1; echo still working", "yield_time_ms": 5000},
        }
    n_steps = sum(1 for c in done if c.startswith(CALL_PREFIX + "step_"))
    if n_steps < len(steps):
        return "call", {
            "call_id": f"{CALL_PREFIX}step_{n_steps}",
            "name": "exec_command",
            "args": {"cmd": steps[n_steps], "yield_time_ms": 10000},
        }
    if scenario == "two-turns" and goal and not _has_assistant_message(body):
        return "message", {"text": "First pass done; I will check again."}
    if goal and not any(c.startswith(CALL_PREFIX + "complete") for c in done):
        return "call", {
            "call_id": f"{CALL_PREFIX}complete",
            "name": "update_goal",
            "args": {"status": "complete"},
        }
    return "message", {"text": answer}


# --- HTTP ------------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep the container's stderr quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def _error(self, status: int, code: str, message: str, param: str | None = None) -> None:
        err = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
        self._send(status, json.dumps(err).encode(), "application/json")

    def do_GET(self):
        if self.path.rstrip("/") == "/__scripted/stats":
            with _lock:
                n = _count
            self._send(200, json.dumps({"requests": n}).encode(), "application/json")
            return
        _record({"method": "GET", "path": self.path, "outcome": "404"})
        self._error(404, "not_found", f"no route {self.path}")

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            raw = gzip.decompress(raw)
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        entry = {
            "method": "POST",
            "path": self.path,
            "auth_sha256_12": hashlib.sha256(token.encode()).hexdigest()[:12] if token else None,
            "turn_metadata": self.headers.get("x-codex-turn-metadata"),
        }
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            _record({**entry, "outcome": "400 bad json"})
            self._error(400, "invalid_json", "request body is not JSON (compressed?)")
            return
        model = str(body.get("model") or "")
        entry.update(
            model=model,
            n_input_items=len(body.get("input") or []),
            user_texts=_user_texts(body),
            tools=sorted(
                t.get("name", t.get("type", "?")) for t in body.get("tools") or [] if isinstance(t, dict)
            ),
        )
        if not self.path.endswith("/responses"):
            _record({**entry, "outcome": "404"})
            self._error(404, "not_found", f"no route {self.path}")
            return
        if _find_key(body, PASSTHROUGH):
            _record({**entry, "passthrough": True, "outcome": "400 passthrough"})
            self._error(
                400,
                "unknown_parameter",
                f"Unknown parameter: 'input[0].{PASSTHROUGH}.content_item_kinds'.",
                f"input[0].{PASSTHROUGH}",
            )
            return
        scenario = model.split("/", 1)[1] if model.startswith("scripted/") else ""
        if scenario not in SCENARIOS:
            _record({**entry, "outcome": "400 unknown model"})
            self._error(400, "model_not_found", f"the scripted model has no scenario {model!r}")
            return
        if scenario == "unauthorized":
            _record({**entry, "scenario": scenario, "outcome": "401 unauthorized"})
            self._error(
                401,
                "invalid_api_key",
                "Incorrect API key provided. The credential was rejected by the provider.",
            )
            return
        plan = _plan()
        kind, what = decide(scenario, body, self.headers, plan)
        harness = harness_of(body, self.headers)
        n = _record(
            {
                **entry,
                "scenario": scenario,
                "harness": harness,
                **({"demo": demo_scenario(plan, harness)[0]} if scenario == "demo" else {}),
                "goal_turn": _is_goal_turn(body, self.headers),
                "outcome": kind,
                "answer": what,
            }
        )
        usage = _usage(len(raw))
        if scenario == "zero-usage":
            usage = {k: ({kk: 0 for kk in v} if isinstance(v, dict) else 0) for k, v in usage.items()}
        if kind == "call":
            sse = _function_call(f"resp_{n}", what["call_id"], what["name"], what["args"], usage)
        else:
            sse = _message(f"resp_{n}", what["text"], usage, noise=scenario == "noise")
        self._send(200, sse.encode(), "text/event-stream")


def main() -> int:
    port = int(os.environ.get("SCRIPTED_PORT", "18080"))
    log = _log_path()
    os.makedirs(os.path.dirname(log), exist_ok=True)
    open(log, "a").close()
    os.chmod(log, 0o644)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"scripted model on 127.0.0.1:{port}, log {log}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
