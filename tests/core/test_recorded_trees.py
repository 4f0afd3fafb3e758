"""The recorded trees the fast tier reads still match what harbor writes today (Docker tier).

A fresh run of each recorded tree's harbor jobs must give the same files, the same JSON shapes and
the same report cells as the recording. When harbor is upgraded (or a demo task or test agent
changes) this fails, and ``uv run --frozen python tests/data/record.py`` refreshes the recording.
The recording is read from a copy at another path than the one it was recorded at, so the absolute
paths inside harbor's config.json and result.json are shown not to matter.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
import real_trees

REFRESH = "the recording is stale: refresh it with `uv run --frozen python tests/data/record.py`"


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(real_trees.TREES))
def test_fresh_harbor_run_matches_the_recording(live_trees, tmp_path, name):
    recorded = real_trees.signature(real_trees.copy_recorded(name, tmp_path / "out"))
    fresh = real_trees.signature(live_trees[name])
    assert fresh["files"] == recorded["files"], REFRESH
    assert fresh["json_shapes"] == recorded["json_shapes"], REFRESH
    assert fresh["empty_dirs"] == recorded["empty_dirs"], REFRESH
    assert fresh["cells"] == recorded["cells"], REFRESH


def test_recording_is_of_the_installed_harbor_and_the_current_jobs():
    """Fast tier: upgrading harbor or changing a recorded tree's jobs asks for a new recording."""
    man = real_trees.manifest()
    assert set(man["trees"]) == set(real_trees.TREES), REFRESH
    for name, spec in real_trees.TREES.items():
        rec = man["trees"][name]
        assert rec["harbor"] == version("harbor"), (name, REFRESH)
        assert [tuple(j) for j in rec["jobs"]] == list(spec.jobs), (name, REFRESH)
        assert tuple(rec["harbor_run_extra"]) == spec.extra, (name, REFRESH)
