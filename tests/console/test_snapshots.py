"""Snapshot tests of the main screens at 80x24 and 160x48, on a real (normalised) harbor tree.

Text captures of the composited screen are compared with tests/console/snapshots/*.txt;
MARATHON_UPDATE_SNAPSHOTS=1 rewrites them. Volatile inputs are pinned: the tree is a copy of a real
run with fixed timestamps, the clock is injected, and Docker pool polling is off.
"""

from __future__ import annotations

import pytest
from console_support import check_snapshot, normalise, run_async, wait_for

from console.app import make_app, screen_text

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def snap_tree(mini_tree, tmp_path_factory):
    return normalise(mini_tree, tmp_path_factory.mktemp("snap") / "snap")


def capture(tree, size, keys=()):
    texts = {}

    async def go():
        app = make_app(tree, watch=False, docker=False, offer_start=False, clock=lambda: 0.0)
        async with app.run_test(size=size) as pilot:
            await wait_for(
                pilot, lambda: bool(app.cells) and app.last_change_at is not None, 30, "first grid"
            )
            await pilot.pause()
            for k in keys:
                await pilot.press(k)
                await pilot.pause(0.3)
            texts["screen"] = screen_text(app)

    run_async(go)
    return texts["screen"]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(snap_tree, size):
    check_snapshot(f"main_{size[0]}x{size[1]}", capture(snap_tree, size))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_arm_major_snapshot(snap_tree, size):
    check_snapshot(f"arm_major_{size[0]}x{size[1]}", capture(snap_tree, size, keys=("t",)))


def test_help_screen_snapshot(snap_tree):
    check_snapshot("help_80x24", capture(snap_tree, (80, 24), keys=("question_mark",)))
