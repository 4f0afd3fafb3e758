"""The run's progress from its events (``runner.schedule.display``): counts per arm, ETA from the observed
trial durations at the run's concurrency, and spend per hour, on fixed events."""

from __future__ import annotations

import pytest

from runner.results.run_progress import Tally, eta_sec, per_hour, progress_bar


def ev(t: int, kind: str, **fields) -> dict:
    return {"ts": f"2026-12-01T06:{t // 60:02d}:{t % 60:02d}.000000Z", "event": kind, "run_id": "r", **fields}


def test_eta_is_the_mean_duration_per_pair_at_the_concurrency():
    assert eta_sec(10, [60.0, 120.0], 3) == pytest.approx(10 * 90.0 / 3)
    assert eta_sec(2, [60.0, 120.0], 4) == pytest.approx(90.0)  # two pairs left run side by side
    assert eta_sec(0, [], 4) == 0.0
    assert eta_sec(5, [], 4) is None  # nothing observed yet
    assert eta_sec(5, [30.0], None) is None


def test_spend_per_hour():
    assert per_hour(0.5, 1800) == pytest.approx(1.0)
    assert per_hour(120_000, 600) == pytest.approx(720_000)
    assert per_hour(None, 600) is None and per_hour(1.0, 0) is None


def test_progress_bar_counts_done_then_running():
    assert progress_bar(2, 1, 4, 8) == "████▒▒░░"
    assert progress_bar(0, 0, 0, 4) == "░░░░"
    assert progress_bar(4, 0, 4, 4) == "████"


def test_the_tally_of_a_run():
    t = Tally()
    events = [
        ev(0, "gate_wait", reason="stale, from a run before"),
        ev(
            10,
            "runner_start",
            arms=["plain", "goal"],
            pairs_per_arm={"plain": 3, "goal": 3},
            already_done={"plain": ["a"]},
            concurrency=2,
        ),  # fmt: skip
        ev(11, "pass_start", pass_no=1),
        ev(12, "job_start", task="b", arm="plain"),
        ev(12, "job_start", task="a", arm="goal"),
        ev(72, "job_finish", task="b", arm="plain", status="done", elapsed_sec=60),
        ev(102, "job_finish", task="a", arm="goal", status="errored", elapsed_sec=90),
        ev(103, "void", task="a", arm="goal"),
        ev(110, "gate_wait", reason="31 of 31 in use"),
        ev(140, "gate_wait", reason="31 of 31 in use"),
    ]
    for e in events:
        t.add(e)
    p = t.snapshot()
    assert [(a.arm, a.total, a.done, a.running, a.voided) for a in p.arms] == [
        ("plain", 3, 2, 0, 0),
        ("goal", 3, 0, 0, 1),
    ]
    assert (p.total, p.done, p.pass_no, p.concurrency) == (6, 2, 1, 2)
    assert p.durations == (60.0, 90.0)
    # 4 pairs left, 75 s each (errored trials take a slot too), 2 at a time
    assert p.eta_sec() == pytest.approx(4 * 75.0 / 2)
    assert p.gate_waits == 2 and p.gate_reason == "31 of 31 in use"
    assert p.gate_waited_sec(p.gate_waiting_since + 301) == pytest.approx(301)  # since the first wait
    assert p.elapsed_sec(p.started_at + 200) == pytest.approx(200)
    assert p.end is None
    t.add(ev(150, "gate_open", waited_sec=40))
    t.add(ev(190, "runner_exit", reason="max passes (1) reached", done=2, total=6))
    p = t.snapshot()
    assert p.gate_waiting_since is None
    assert p.end is not None and (p.end.done, p.end.total, p.end.reason) == (2, 6, "max passes (1) reached")
    assert p.elapsed_sec(p.started_at + 10_000) == pytest.approx(180)  # the clock stopped at the exit
    t.add(ev(200, "runner_start", arms=["plain"], pairs_per_arm={"plain": 1}, concurrency=1))
    p = t.snapshot()  # a new run starts over
    assert (p.total, p.done, p.end, p.durations, p.gate_waits) == (1, 0, None, (), 0)


def test_a_void_takes_out_only_the_attempt_it_names():
    """Found by a review: an errored attempt left beside the done retry of its pair, voided by the
    operator, took the pair out of the done ones (the console said 0/1 while status said 1/1); a
    void of the running attempt's predecessor took the running one out. A void of the done attempt
    itself, or one with no stamp known (a pair done before this run), still does."""
    t = Tally()
    t.add(ev(0, "runner_start", arms=["plain"], pairs_per_arm={"plain": 3}, already_done={"plain": ["c"]}))
    t.add(ev(1, "job_finish", task="a", arm="plain", stamp="S1", status="errored"))
    t.add(ev(2, "job_finish", task="a", arm="plain", stamp="S2", status="done"))
    t.add(ev(3, "job_finish", task="b", arm="plain", stamp="S3", status="errored"))
    t.add(ev(4, "job_start", task="b", arm="plain", stamp="S4"))
    t.add(ev(5, "void", task="a", arm="plain", stamp="S1", by="operator"))
    t.add(ev(6, "void", task="b", arm="plain", stamp="S3", by="operator"))
    (a,) = t.snapshot().arms
    assert (a.done, a.running, a.voided) == (2, 1, 2)
    t.add(ev(7, "void", task="a", arm="plain", stamp="S2", by="operator"))  # the done one itself
    t.add(ev(8, "void", task="c", arm="plain", stamp="S0", by="operator"))  # done before this run
    t.add(ev(9, "void", task="b", arm="plain", stamp="S4", run_id="r"))  # the running one
    (a,) = t.snapshot().arms
    assert (a.done, a.running, a.voided) == (0, 0, 5)
    # the voider says whether the pair is still done after the move (``pair_done``): a pair done
    # before this run (its done stamp unknown here) stays done when an older attempt is voided
    t = Tally()
    t.add(
        ev(0, "runner_start", arms=["plain"], pairs_per_arm={"plain": 2}, already_done={"plain": ["a", "b"]})
    )
    t.add(ev(1, "void", task="a", arm="plain", stamp="S0", by="health --fix", pair_done=True))
    t.add(ev(2, "void", task="b", arm="plain", stamp="S9", by="operator", pair_done=False))
    (a,) = t.snapshot().arms
    assert (a.done, a.voided) == (1, 2)


def test_a_field_of_the_wrong_type_or_size_is_left_out_and_the_tally_goes_on():
    """One journal line with a list where a name belongs, or a duration of 1e308, once ended the
    console: its reading of the runner (a TypeError in the tally) or the whole app (an ETA of inf)."""
    from console.view import duration

    t = Tally()
    bad = [
        ev(1, "runner_start", arms=7, pairs_per_arm=[1, 2], already_done={"a": 5}, concurrency=1),
        ev(
            2,
            "runner_start",
            arms=["a"],
            pairs_per_arm={"a": 5, "b": True},
            already_done=["x"],
            concurrency=1,
        ),
        ev(3, "job_start", task=["t"], arm=["x"]),
        ev(3, "job_start", task="t", arm={"x": 1}),
        ev(4, "void", task="t", arm={"x": 1}),
        ev(5, "job_finish", task="t1", arm="a", status="done", elapsed_sec=1e308),
        ev(5, "job_finish", task="t2", arm="a", status="done", elapsed_sec=1e308),
        ev(6, "job_finish", task="t3", arm="a", status="done", elapsed_sec=-5),
        ev(7, "job_finish", task="t4", arm="a", status="done", elapsed_sec=30),
    ]
    for e in bad:
        t.add(e)
    p = t.snapshot()
    assert [(a.arm, a.total, a.done, a.running, a.voided) for a in p.arms] == [("a", 5, 4, 0, 0)]
    assert p.durations == (30.0,) and p.eta_sec() == pytest.approx(30.0)
    assert duration(float("inf")) == duration(float("nan")) == "-" and duration(3700) == "1h01"
