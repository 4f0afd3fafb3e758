"""The console's per-arm summaries after a change equal a full recompute.

On a change the feed sums only the changed cells' arms again and keeps the other arms' rows
(``console.feeds.arm_summary`` with ``previous``): one trial finishing on a 2,010-task tree
otherwise re-read every arm's cells. The recorded mini and agents trees (six arms), real harbor
files; a trial is finished again with another score the way harbor writes it (metrics, then
result.json), and the feed's snapshot must say what a fresh summary of the whole model says.
"""

from __future__ import annotations

from pathlib import Path

import real_trees
from trial_writes import finish_trial

from console.feeds import TreeFeed, arm_summary


def test_a_change_sums_its_arm_again_and_keeps_the_others(tmp_path):
    out = tmp_path / "out"
    real_trees.copy_recorded("mini", out)
    real_trees.copy_recorded("agents", out)
    feed = TreeFeed(out)
    try:
        _check(feed)
    finally:
        feed.release()  # what its load froze goes back to this test process's cyclic GC


def _check(feed: TreeFeed) -> None:
    first = feed.load()
    assert len(first.summary) >= 3
    m = feed.model
    assert m is not None
    changed_arms = []
    for (task, arm), cell in sorted(m.cells.items()):
        att = next((a for a in cell.attempts if a.stamp == cell.scored_by), None)
        if att is None or arm in changed_arms or not (Path(att.job_dir) / next(iter(att.trials))).is_dir():
            continue
        trial = Path(att.job_dir) / next(iter(att.trials))
        if not (trial / "verifier" / "reward.txt").is_file():
            continue
        before = feed._summary[arm]
        reward = 0.0 if (cell.reward or 0) > 0 else 1.0
        snap = feed.update(finish_trial(trial, {"reward.txt": f"{reward}\n"}, reward))
        assert snap is not None and (task, arm) in snap.cells
        full, _ = arm_summary(m, feed.scope, m.money())
        assert snap.summary == full, f"after a change of {task} x {arm}"
        assert snap.summary[arm] != before, "the changed arm's row moved"
        changed_arms.append(arm)
        if len(changed_arms) == 2:
            break
    assert len(changed_arms) == 2, changed_arms
