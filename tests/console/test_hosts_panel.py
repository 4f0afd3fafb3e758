"""A cluster run's hosts in the console: the hosts panel (alive or lost, this tree's pairs running
there against its slots) and the host of each attempt in the drill-down.

The tree is the recorded mini tree with ``host.json`` written by the job's own writer
(``runner.schedule.fleet.hostinfo.write_host``) and one attempt made to look as harbor leaves it
mid-trial (no result files yet). The cluster's account reaches the screen as the ``NodesData``
record its worker posts; what the worker asks of a real Ray head is tested with the two-host
cluster in ``tests/fleet/test_fleet_run.py``.
"""

from __future__ import annotations

import shutil

import pytest
from console_support import run_async, wait_for
from textual_screen import screen_text

from console.app import ConsoleApp
from console.messages import NodesData
from console.screens.drill import DrillScreen
from runner.results.hosts import HostRecord
from runner.results.model import RunModel
from runner.schedule.fleet.cluster import NodeState
from runner.schedule.fleet.hostinfo import write_host

NODE_A, NODE_B, NODE_C = "a" * 56, "b" * 56, "c" * 56
HOST_A = HostRecord("vm-a", NODE_A, "ENG:A", "10.0.0.1", "unix:///run/a.sock")
HOST_B = HostRecord("vm-b", NODE_B, "ENG:B", "10.0.0.2", "unix:///run/b.sock")


def trial_rows(app) -> int:
    """Rows in the drill-down's trials table (0 until the drill-down is up)."""
    if not isinstance(app.screen, DrillScreen):
        return 0
    tables = app.screen.query("#trials")
    return tables.first().row_count if tables else 0


@pytest.fixture
def cluster_tree(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    for task_dir in out.iterdir():
        if not task_dir.is_dir() or task_dir.name.startswith("."):
            continue
        host = HOST_B if task_dir.name == "words-passrate" else HOST_A
        for stamp in task_dir.glob("*/*"):
            write_host(stamp, host)
    # words-passrate x oracle is mid-trial: harbor has written neither the job's nor the trial's result
    (job,) = out.glob("words-passrate/oracle/*/oracle")
    (job / "result.json").unlink()
    for r in job.glob("*__*/result.json"):
        r.unlink()
    return out


def test_the_model_counts_each_hosts_attempts_and_running_pairs(cluster_tree):
    use = {u.name: u for u in RunModel.load(cluster_tree).host_use()}
    assert set(use) == {"vm-a/10.0.0.1", "vm-b/10.0.0.2"}
    assert use["vm-a/10.0.0.1"].attempts == 6 and use["vm-a/10.0.0.1"].running == ()
    b = use["vm-b/10.0.0.2"]
    assert (b.node_id, b.attempts, b.running) == (NODE_B, 2, (("words-passrate", "oracle"),))
    assert dict(b.by_status) == {"done": 1, "running": 1}
    # status prints the same counts (its per-host lines are model.hosts())
    assert RunModel.load(cluster_tree).hosts()["vm-b/10.0.0.2"] == {"attempts": 2, "done": 1, "running": 1}


def test_the_hosts_panel_and_the_drill_down_name_each_host(cluster_tree):
    nodes = (
        NodeState(NODE_A, "10.0.0.1", True, 2.0, None, ""),
        NodeState(NODE_B, "10.0.0.2", False, 2.0, 1796140000000, "health check failed"),
        NodeState(NODE_C, "10.0.0.3", True, 4.0, None, ""),  # a host this tree has not used yet
        NodeState("d" * 56, "10.0.0.9", True, 0.0, None, ""),  # the head without Docker slots: not a host
    )

    async def go():
        app = ConsoleApp(cluster_tree, docker=False, offer_start=False, watch=False, runner_sec=0.2)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: bool(app.main.hosts), 30, "the tree's hosts")
            panel = app.main.query_one("#hosts")
            assert panel.display
            await wait_for(pilot, lambda: "vm-b/10.0.0.2" in screen_text(app), 30, "the hosts panel")
            assert "cluster: asking" in screen_text(app)  # no answer from the cluster yet: not guessed
            app.post_message(NodesData(nodes, None))
            await wait_for(pilot, lambda: "10.0.0.3" in screen_text(app), 30, "the cluster's nodes")
            lines = screen_text(app).splitlines()
            a = next(ln for ln in lines if "vm-a/10.0.0.1" in ln)
            b = next(ln for ln in lines if "vm-b/10.0.0.2" in ln)
            c = next(ln for ln in lines if "10.0.0.3" in ln)
            assert "● vm-a/10.0.0.1" in a and "0/2 idle" in a, a
            assert "○ lost vm-b/10.0.0.2" in b and "1/2 words-passrate/oracle" in b, b
            assert "● 10.0.0.3" in c and "0/4 idle" in c, c
            assert "10.0.0.9" not in screen_text(app)
            app.post_message(NodesData(None, "cannot reach the Ray job API at http://10.0.0.1:8265"))
            await wait_for(pilot, lambda: "cannot reach the Ray job API" in screen_text(app), 30, "the error")

            app.main.selected = ("words-passrate", "nop")
            app.action_open()
            await wait_for(pilot, lambda: trial_rows(app) > 0, 30, "the drill-down's trial rows")
            table = app.screen.query_one("#trials")
            assert [str(c.label) for c in table.columns.values()][-1] == "host"
            assert str(table.get_row_at(0)[-1]) == "vm-b/10.0.0.2"  # a Text: never read as markup

    run_async(go)


def test_a_single_host_tree_shows_no_hosts_panel(mini_tree):
    async def go():
        app = ConsoleApp(mini_tree, docker=False, offer_start=False, watch=False, runner_sec=0.2)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: bool(app.main.cells), 30, "the grid")
            await pilot.pause()
            assert app.main.hosts == () and not app.main.query_one("#hosts").display
            app.main.selected = ("calc-partial", "nop")
            app.action_open()
            await wait_for(pilot, lambda: trial_rows(app) > 0, 30, "the drill-down's trial rows")
            table = app.screen.query_one("#trials")
            assert "host" not in [str(c.label) for c in table.columns.values()]

    run_async(go)
