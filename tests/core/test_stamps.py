"""An attempt's stamp (``runner.schedule.attempt.new_stamp``): a cell orders its attempts by their
stamps, so a new one must sort after every stamp already in its arm dir, whatever the clock did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runner.errors import UserError
from runner.results.tree import STAMP_FORMAT, stamp_time, with_repeat
from runner.schedule.attempt import new_stamp


def _stamp(t: datetime) -> str:
    return t.strftime(STAMP_FORMAT)


def test_a_clock_stepped_back_still_gives_a_stamp_after_the_latest(tmp_path):
    """The clock stepped back an hour since the last attempt (its stamp is an hour ahead of now):
    the new stamp is the latest one's time plus a second, later as text and as time."""
    arm = tmp_path / "calc-partial" / "plain"
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    (arm / _stamp(ahead)).mkdir(parents=True)
    (arm / _stamp(ahead - timedelta(hours=3))).mkdir()
    s = new_stamp(arm)
    assert stamp_time(s) == ahead + timedelta(seconds=1)
    assert sorted([*(p.name for p in arm.iterdir()), s])[-1] == s


def test_a_taken_second_moves_on_by_a_second_and_repeats_count(tmp_path):
    """Stamps of the next seconds taken (another repeat's among them) and an older ``-<n>``
    collision name: the new stamp is after all of them, with its own repeat's mark."""
    arm = tmp_path / "plain"
    now = datetime.now(UTC).replace(microsecond=0)
    arm.mkdir()
    for i in range(3):
        (arm / _stamp(now + timedelta(seconds=i))).mkdir()
    (arm / with_repeat(_stamp(now + timedelta(seconds=3)), 2)).mkdir()
    (arm / f"{_stamp(now + timedelta(seconds=4))}-12").mkdir()  # an earlier marathon's collision name
    s = new_stamp(arm, repeat=3)
    assert s == with_repeat(_stamp(now + timedelta(seconds=5)), 3)
    before = datetime.now(UTC).replace(microsecond=0)
    t = stamp_time(new_stamp(tmp_path / "no-such-arm-dir"))  # a pair's first attempt: the clock's time
    assert t is not None and before <= t <= datetime.now(UTC)


def test_a_stamp_named_with_an_offset_is_compared_in_utc(tmp_path):
    """Found by a review: a name in ISO form with an offset (``stamp_time`` reads it) gave the new
    stamp its local time plus a second, read as UTC: five hours before it."""
    from datetime import timezone

    arm = tmp_path / "plain"
    arm.mkdir()
    ahead = (
        (datetime.now(UTC) + timedelta(hours=1))
        .replace(microsecond=0)
        .astimezone(timezone(timedelta(hours=-5)))
    )
    (arm / ahead.isoformat()).mkdir()
    assert stamp_time(new_stamp(arm)) == ahead.astimezone(UTC) + timedelta(seconds=1)


def test_a_stamp_at_the_end_of_the_calendar_is_a_one_line_error(tmp_path):
    arm = tmp_path / "plain"
    (arm / "9999-12-31__23-59-59").mkdir(parents=True)
    with pytest.raises(UserError, match="last second of the calendar"):
        new_stamp(arm)
