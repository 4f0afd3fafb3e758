"""Stopping the runner gracefully: SIGTERM to the runner process alone, never its group.

The runner's own SIGTERM handler winds the run down -- it stops starting trials, TERMs its harbor
jobs, cleans up this run's containers and networks, releases its claims and exits -- and its process
group may hold the helpers it still uses for that, so only the runner is signalled. This is "stop"
as the console's T offers it; stopping the runner and its trials at once is ``runner.ops.kill``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.ops.procs import DEFAULT_GRACE_SEC, Registry, StopPlan, StopReport, act_stop, plan_stop

#: How long a runner may take to stop by itself after SIGTERM: TERM its harbor jobs, wait
#: DEFAULT_GRACE_SEC, KILL and wait what is left (10 s), remove its Docker objects, release claims.
#: Only then does it get SIGKILL (alone too).
RUNNER_WIND_DOWN_SEC = DEFAULT_GRACE_SEC + 10.0 + 60.0


@dataclass
class RunnerStopPlan:
    """The runner to stop, frozen at plan time (``stop`` is None: no live runner); a
    ``runner.ops.plan.Plan``."""

    out: str
    stop: StopPlan | None
    listed = True

    @property
    def possible(self) -> bool:
        return self.stop is not None and bool(self.stop.targets)

    @property
    def empty(self) -> bool:
        return not self.possible

    def to_json(self) -> dict:
        return {"out": self.out, "stop_plan": self.stop.to_json() if self.stop else None}

    def act(self) -> StopReport:
        return act_stop_runner(self)

    def render(self) -> str:
        if self.stop is None:
            return "No runner of this tree is alive (by its registry)."
        return (
            "Send SIGTERM to the runner process alone (not its process group); it stops starting trials,\n"
            "stops its harbor jobs, cleans up this run's containers and networks, releases its claims and\n"
            f"exits. If it is still running after {RUNNER_WIND_DOWN_SEC:.0f} s it gets SIGKILL (alone too).\n\n"
            f"{self.stop.render()}"
        )


def plan_stop_runner(out: Path) -> RunnerStopPlan:
    """Freeze the tree's live runner (by its registry entry and process identity); nothing changes."""
    entry = Registry(Path(out)).runner_entry()
    if entry is None:
        return RunnerStopPlan(str(out), None)
    plan = plan_stop(Path(out))
    plan.targets = [t for t in plan.targets if t.pid == entry.pid]
    return RunnerStopPlan(str(out), plan)


def act_stop_runner(plan: RunnerStopPlan) -> StopReport:
    """TERM the planned runner alone, wait its wind-down, then KILL it if it is still there."""
    if plan.stop is None:
        return StopReport()
    return act_stop(plan.stop, grace_sec=RUNNER_WIND_DOWN_SEC, by_group=False)
