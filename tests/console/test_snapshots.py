"""Snapshot tests of the main screens at 80x24 and 160x48, on a real (normalised) harbor tree.

Text captures of the composited screen are compared with tests/console/snapshots/*.txt;
MARATHON_UPDATE_SNAPSHOTS=1 rewrites them. Volatile inputs are pinned: the tree is a copy of a real
run (the recorded mini tree) with fixed timestamps, the clock is injected, and Docker pool polling
is off. One Docker test shows that a fresh harbor run of that tree paints the very same screens.
"""

from __future__ import annotations

import pytest
from console_support import capture as support_capture
from console_support import check_snapshot, normalise


@pytest.fixture(scope="module")
def snap_tree(mini_tree, tmp_path_factory):
    return normalise(mini_tree, tmp_path_factory.mktemp("snap") / "snap")


SCREENS = {  # name: (size, keys)
    "main_160x48": ((160, 48), ()),
    "arm_major_80x24": ((80, 24), ("t",)),
}


def capture(tree, size, keys=()):
    return support_capture(tree, size, keys)[0]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(snap_tree, size):
    check_snapshot(f"main_{size[0]}x{size[1]}", capture(snap_tree, size))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_arm_major_snapshot(snap_tree, size):
    check_snapshot(f"arm_major_{size[0]}x{size[1]}", capture(snap_tree, size, keys=("t",)))


def test_help_screen_snapshot(snap_tree):
    check_snapshot("help_80x24", capture(snap_tree, (80, 24), keys=("question_mark",)))


@pytest.mark.docker
def test_a_fresh_harbor_run_paints_the_same_screens_as_the_recording(live_trees, snap_tree, tmp_path):
    """The console tests read a recording; harbor today must still produce a tree that looks the same."""
    live = normalise(live_trees["mini"], tmp_path / "snap")
    for name, (size, keys) in SCREENS.items():
        assert capture(live, size, keys) == capture(snap_tree, size, keys), name
