"""The equal budget: every arm gets ``GOAL_TIMEOUT_SEC`` of model time, from its first model request.

Why: the harness's preparation (the LoopX profile install, gates, goal setup and body; for every
codex arm the preflight and the app-server start) is paid before the budget starts, so a LoopX arm
must not get less model time than plain because its preparation is longer. harbor 0.25.0 gives an
agent one ``asyncio.wait_for`` around ``run()`` (``trial.py:_run_agent_phase``), so the preparation
also runs inside harbor's agent timeout; the runner therefore raises that timeout (through
``--agent-timeout-multiplier``) to hold the budget, the preparation allowance and the wind-down
margin, the same for every arm of a task. A preparation longer than the allowance clamps that
trial's budget; its receipt then shows a smaller ``budget_sec`` and the fairness audit says so.
Through the gateway (its socket and its TLS routes alike) the harness starts its clock at the request itself (the relay's
mark, ``agents.conversation.Conversation.anchor_budget``), where the gateway starts the wire's, so
the harness and the wire cut each arm at the same model time.
"""

from __future__ import annotations

import math

#: Room for the harness's preparation inside harbor's agent timeout, the same for every arm. The LoopX
#: preparation measured 33 s on a quiet machine (benchmarks/bench_loopx_profile.py) and up to 235 s
#: on this 2-core machine at load 20-36 (tests/runner/test_equal_budgets.py next to a demo run); an
#: allowance costs nothing unless a trial hangs, and a preparation beyond it clamps the budget.
PREP_ALLOWANCE_SEC = 600.0
#: The longest wind-down margin (``deadline_margin_sec``): the deadline ends the agent phase this
#: long before harbor's timeout would.
MAX_MARGIN_SEC = 60.0


def deadline_margin_sec(harbor_timeout_sec: float) -> float:
    """How long before harbor's agent timeout our deadline ends the phase (room to wind down)."""
    return max(5.0, min(MAX_MARGIN_SEC, 0.05 * harbor_timeout_sec))


def harbor_timeout_needed_sec(goal_timeout_sec: float) -> float:
    """The harbor agent timeout that holds the budget for every arm: budget + allowance + margin."""
    return float(goal_timeout_sec) + PREP_ALLOWANCE_SEC + MAX_MARGIN_SEC


def agent_timeout_multiplier(goal_timeout_sec: float, task_timeout_sec: float | None, knob: float) -> float:
    """harbor's ``--agent-timeout-multiplier`` for one task: the knob, raised where the task's own
    agent timeout times the knob could not hold the budget (rounded up to 1/1000, so harbor's float
    product is never a hair short). Without a task timeout harbor sets none, and the knob stands."""
    if not task_timeout_sec:
        return knob
    need = harbor_timeout_needed_sec(goal_timeout_sec) / float(task_timeout_sec)
    return max(knob, math.ceil(need * 1000) / 1000)
