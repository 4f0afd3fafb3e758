"""A run the circuit breaker paused shows a banner with the one-line reason, until a runner starts again."""

from __future__ import annotations

import shutil

import pytest
from console_support import run_async, wait_for
from textual_screen import screen_text

from console.app import make_app
from runner.results.events import EventLog

pytestmark = [pytest.mark.docker]


def test_paused_run_shows_the_reason_in_a_banner_until_a_runner_starts(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    log = EventLog(out, "20261201T000000Z-abcdef")
    log.emit("runner_start", pid=1, arms=["oracle", "nop"], tasks=[])
    reason = "3 attempts in a row across arms nop, oracle failed with the same error: ArmFailure: 401"
    log.emit("run_paused", reason=reason, scope="infrastructure", pairs=["a/nop", "a/oracle", "b/nop"])

    async def go():
        app = make_app(out, docker=False, offer_start=False)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(pilot, lambda: "RUN PAUSED" in screen_text(app), 60, "the paused banner")
            assert "3 attempts in a row across arms nop, oracle" in screen_text(app)
            EventLog(out, "20261201T000100Z-123456").emit("runner_start", pid=2, arms=[], tasks=[])
            await wait_for(pilot, lambda: "RUN PAUSED" not in screen_text(app), 60, "the banner to go")

    run_async(go)
