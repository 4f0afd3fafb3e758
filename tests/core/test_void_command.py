"""``marathon void``: the console's V as a command, on a copy of a real harbor tree (no Docker)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from runner.results.scan import pair_done
from runner.results.tree import VOID_README, iter_trial_dirs, voided_root

REPO = Path(__file__).resolve().parents[2]


def _marathon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marathon.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_void_plans_then_moves_the_attempt_aside_and_the_pair_is_not_done(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    assert pair_done(out, "calc-partial", "oracle")
    (trial,) = [t for job in (out / "calc-partial" / "oracle").glob("*/oracle") for t in iter_trial_dirs(job)]

    dry = _marathon("void", str(trial), str(out), "--reason", "a test")
    assert dry.returncode == 0, dry.stderr
    assert (
        f"void {trial.parent.parent}" in dry.stdout
        and "reason: a test" in dry.stdout
        and "dry run" in dry.stdout
    )
    assert trial.is_dir() and not voided_root(out).exists()

    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    # the plan shown before acting with --json too (on stderr; a review found it only after, in the JSON)
    assert f"void {trial.parent.parent}" in r.stderr and "reason: a test" in r.stderr
    got = json.loads(r.stdout)
    dest = Path(got["report"]["dest"])
    assert got["report"]["ok"] and got["plan"]["reason"] == "a test"
    assert dest.is_relative_to(voided_root(out)) and (dest / VOID_README).read_text().startswith(
        "# Voided: a test"
    )
    assert not trial.exists() and not pair_done(out, "calc-partial", "oracle")


def test_an_operators_void_is_journalled_and_the_progress_no_longer_counts_the_pair(mini_tree, tmp_path):
    """Found by a probe: after `marathon void` of a finished run's attempt the console's progress
    (folded from the journal) still said every pair done beside the voided cell. The void is now an
    event, and a void takes the pair out of the done ones."""
    from runner.results.events import append_event, read_events
    from runner.results.run_progress import Tally

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (job,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    (trial,) = iter_trial_dirs(job)
    stamp = job.parent.name
    start = {"ts": "2026-12-01T00:00:00Z", "event": "runner_start", "run_id": "r1", "arms": ["oracle"],
             "tasks": ["calc-partial"], "pairs_per_arm": {"oracle": 1}}  # fmt: skip
    append_event(out, start)
    append_event(out, {"ts": "2026-12-01T00:01:00Z", "event": "job_finish", "run_id": "r1",
                       "task": "calc-partial", "arm": "oracle", "stamp": stamp, "status": "done"})  # fmt: skip

    def done() -> int:
        t = Tally()
        for ev in read_events(out):
            t.add(ev)
        return t.snapshot().done

    assert done() == 1
    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes")
    assert r.returncode == 0, r.stderr
    (ev,) = [e for e in read_events(out) if e["event"] == "void"]
    assert (ev["task"], ev["arm"], ev["stamp"], ev["by"], ev["reason"]) == (
        "calc-partial",
        "oracle",
        stamp,
        "operator",
        "a test",
    ) and "run_id" not in ev
    assert done() == 0 and ev["pair_done"] is False
    # an attempt voided beside another done one of its pair: the pair stays done (the voider says so)
    (other,) = (out / "words-passrate" / "oracle").glob("*/oracle")
    (second,) = iter_trial_dirs(other)
    twin = other.parent.with_name(other.parent.name + "-twin")
    shutil.copytree(other.parent, twin, symlinks=True)
    append_event(out, {"ts": "2026-12-01T00:02:00Z", "event": "job_finish", "run_id": "r1",
                       "task": "words-passrate", "arm": "oracle", "stamp": other.parent.name, "status": "done"})  # fmt: skip
    assert done() == 1
    r = _marathon("void", str(twin / "oracle" / second.name), str(out), "--reason", "a copy", "--yes")
    assert r.returncode == 0, r.stderr
    ev = [e for e in read_events(out) if e["event"] == "void"][-1]
    assert ev["stamp"] == twin.name and ev["pair_done"] is True and done() == 1


def test_a_health_fix_void_is_journalled_as_healths_and_found_no_more(mini_tree, tmp_path, monkeypatch):
    """`marathon health --fix` voids a finished attempt whose gateway died under it (the voiding
    table's ``gateway_failed`` row, from the run's outage record): the void is journalled once, as
    health's (no run id: no runner made it), the attempt leaves the tree, and the next check finds
    nothing more to void."""
    from runner.results.events import read_events
    from runner.results.tree import outages_path
    from runner.schedule.health import check, fix

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # leaks not looked at here
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (job,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    stamp = job.parent.name
    live = {"id": "a1", "task": "calc-partial", "arm": "oracle", "stamp": stamp}
    outages_path(out).parent.mkdir(parents=True, exist_ok=True)
    outages_path(out).write_text(
        json.dumps(
            {"host": None, "down_since": 1.0, "restarted_at": 2.0, "by": "runner", "live_attempts": [live]}
        )
        + "\n"
    )
    rep, _ = check(out)
    (found,) = [f for f in rep.findings if f.kind == "errored_not_voided"]
    assert found.fixable and "model gateway failed" in found.what
    fixed = fix(out)
    assert [x for x in fixed.fixes if x.startswith(f"voided calc-partial/oracle stamp {stamp} -> ")], (
        fixed.fixes
    )
    (ev,) = [e for e in read_events(out) if e["event"] == "void"]
    assert (ev["task"], ev["arm"], ev["stamp"], ev["by"]) == ("calc-partial", "oracle", stamp, "health --fix")
    assert "run_id" not in ev and "gateway failed" in ev["reason"] and ev["pair_done"] is False
    assert not job.parent.exists() and not pair_done(out, "calc-partial", "oracle")
    again, _ = check(out)
    assert not [f for f in again.findings if f.kind == "errored_not_voided"]
    assert fix(out).fixes == [] and len([e for e in read_events(out) if e["event"] == "void"]) == 1


def test_void_refuses_what_is_not_a_trial_of_the_tree(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    outside = _marathon("void", str(tmp_path), str(out), "--yes")
    assert outside.returncode == 2 and outside.stderr.startswith(f"marathon: {tmp_path}:"), outside.stderr
    missing = _marathon("void", str(out / "nope"), str(out), "--yes")
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    assert len(outside.stderr.splitlines()) == 1 and not voided_root(out).exists()


def test_void_refuses_a_dir_four_or_five_deep_that_is_not_an_attempt(mini_tree, tmp_path):
    """Found by a probe: any dir four or five levels under the tree was planned as an attempt (the
    runner's own task copies under .runner, a source dir), and with --yes moved with a void's README."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (out / ".runner" / "tasks" / "abc" / "calc-partial" / "environment").mkdir(parents=True)
    (out / "x1" / "x2" / "x3" / "x4").mkdir(parents=True)
    job = next((out / "calc-partial" / "oracle").glob("*/oracle"))
    (job.parent / "notes").mkdir()
    for p in (
        out / ".runner" / "tasks" / "abc" / "calc-partial",
        out / ".runner" / "tasks" / "abc" / "calc-partial" / "environment",
        out / "x1" / "x2" / "x3" / "x4",
        job.parent / "notes",  # a stamp's other dir: not the arm's job
    ):
        r = _marathon("void", str(p), str(out), "--yes")
        assert r.returncode == 2 and "is not a job or trial dir" in r.stderr and r.stderr.count("\n") == 1, (
            p,
            r,
        )
        assert p.is_dir()
    assert not voided_root(out).exists()


def test_a_voided_root_of_another_user_or_a_symlink_receives_nothing(mini_tree, tmp_path):
    """Found by a review: beside a tree in a shared dir another user could make marathon-voided (or
    the tree's own voided root) first, as a symlink or a dir of theirs, and receive every void."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (trial,) = [t for job in (out / "calc-partial" / "oracle").glob("*/oracle") for t in iter_trial_dirs(job)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    vroot = voided_root(out)
    vroot.parent.mkdir()
    vroot.symlink_to(elsewhere)
    r = _marathon("void", str(trial), str(out), "--yes")
    assert r.returncode != 0 and "nothing moved" in r.stderr and "symlink" in r.stderr, r.stderr
    assert trial.is_dir() and not any(elsewhere.iterdir())
    assert not any(trial.glob("void.json")) and not any(trial.glob("README.md"))  # nothing written either
    vroot.unlink()
    import os

    if os.geteuid() == 0:
        os.chown(vroot.parent, 12345, 12345)
        r = _marathon("void", str(trial), str(out), "--yes")
        assert r.returncode != 0 and "another user's" in r.stderr and trial.is_dir(), r.stderr
        os.chown(vroot.parent, 0, 0)
    # one that others may write: they could plant a symlink in it (a review's umask 002 case)
    os.chmod(vroot.parent, 0o775)
    r = _marathon("void", str(trial), str(out), "--yes")
    assert r.returncode != 0 and "group- or world-writable" in r.stderr and trial.is_dir(), r.stderr
    os.chmod(vroot.parent, 0o755)
    r = _marathon("void", str(trial), str(out), "--yes")
    assert r.returncode == 0, r.stderr
    assert not trial.exists()


def test_void_refuses_an_attempt_whose_harbor_still_runs(mini_tree, tmp_path):
    """Found by a probe: harbor writes the trial's result.json a second or so before it exits; a
    void in between moved the attempt from under its runner, which then journalled a false reason.
    While the claim's job (a live process of ours here) runs that attempt, the void is refused."""
    from runner.schedule import claims
    from runner.schedule.lock import me

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (trial,) = [t for job in (out / "calc-partial" / "oracle").glob("*/oracle") for t in iter_trial_dirs(job)]
    stamp = trial.parent.parent.name
    harbor = subprocess.Popen(["sleep", "60"])
    try:
        got = claims.try_claim(out, "calc-partial", "oracle", me("run"))
        claims.set_job(out, got.claim, claims.job_ref(harbor.pid, stamp))
        r = _marathon("void", str(trial), str(out), "--yes")
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"its harbor (PID {harbor.pid}) is still running" in r.stderr and trial.is_dir()
    finally:
        harbor.kill()
        harbor.wait()
    r = _marathon("void", str(trial), str(out), "--yes")  # its harbor gone: the operator's to void
    assert r.returncode == 0, r.stderr
    assert not trial.exists()


def test_a_new_tree_where_an_old_one_was_removed_does_not_take_its_voided_attempts(mini_tree, tmp_path):
    """Found by a probe: the voided root was found by the tree's name, so a new run in a path whose
    old tree was removed (`rm -rf marathon-out`) showed the old tree's voided attempts as its own
    (arms it never ran, void rate 1.0). A fresh tree gets an id at its first runner start, and its
    voided root is named by it; a tree made before the id keeps its voided root."""
    from runner.results.model import RunModel
    from runner.results.tree import make_tree_id, tree_id

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (job,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    (trial,) = iter_trial_dirs(job)
    legacy = voided_root(out)
    assert legacy.name == "out" and tree_id(out) is None
    assert _marathon("void", str(trial), str(out), "--yes").returncode == 0  # the old tree's void
    old = RunModel.load(out, index=False)
    assert old.cells[("calc-partial", "oracle")].n_voided == 1
    # the old tree is removed, a new one made at its path: its first runner start gives it an id
    shutil.rmtree(out)
    shutil.copytree(mini_tree, out)
    tid = make_tree_id(out)
    assert tid is not None and tree_id(out) == tid and voided_root(out).name == f"out@{tid}"
    assert legacy.is_dir()  # the old tree's voided attempts are kept, and not this tree's
    m = RunModel.load(out, index=False)
    assert all(c.n_voided == 0 for c in m.cells.values())
    # a tree that already ran (events.jsonl) never gets an id later: its voided root stays
    other = tmp_path / "ran"
    shutil.copytree(mini_tree, other)
    (other / ".runner").mkdir()
    (other / ".runner" / "events.jsonl").write_text("")
    assert make_tree_id(other) is None and voided_root(other).name == "ran"


def test_a_watching_model_follows_the_voided_root_when_the_tree_gets_its_id(mini_tree, tmp_path):
    """The console may open a fresh tree before its runner's first start gives it an id: the model
    reads the voided root anew when ``.runner/tree_id`` appears, and voids after it show."""
    from runner.results.model import RunModel
    from runner.results.tree import TREE_ID_FILE, make_tree_id

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    m = RunModel.load(out, index=False)
    make_tree_id(out)
    m.update([out / ".runner" / TREE_ID_FILE])
    assert m.voided_root == voided_root(out) and "@" in m.voided_root.name
    (job,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    (trial,) = iter_trial_dirs(job)
    r = _marathon("void", str(trial), str(out), "--yes", "--json")
    dest = Path(json.loads(r.stdout)["report"]["dest"])
    assert dest.is_relative_to(voided_root(out))
    m.update([job.parent, dest])
    assert m.cells[("calc-partial", "oracle")].n_voided == 1


def test_health_fix_shows_what_it_acts_on_before_acting(mini_tree, tmp_path):
    """Found by a review: `health --fix` removed claims, containers and attempts and restarted the
    runner, printing only afterwards what it had done: the plan comes first now."""
    from runner.schedule import claims
    from runner.schedule.lock import holder_for

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    dead = subprocess.Popen(["true"])
    holder = holder_for(dead.pid, "dead-run")
    dead.wait()
    assert claims.try_claim(out, "calc-partial", "nop", holder).acquired
    r = _marathon("health", str(out), "--fix")
    lines = r.stdout.splitlines()
    plan_at = lines.index("health --fix acts on:")
    assert lines[plan_at + 1].split()[0] == "stale_claim" and "calc-partial/nop" in lines[plan_at + 1]
    fixed_at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("FIXED: removed stale claim"))
    assert plan_at < fixed_at, r.stdout
    assert not (out / ".claims" / "calc-partial__nop.claim").exists()
    r = _marathon("health", str(out), "--fix", "--json")  # the plan on stderr, stdout one JSON document
    assert r.stderr.startswith("health --fix: nothing to act on") and json.loads(r.stdout)["out"] == str(out)


def test_void_refuses_a_running_job_and_an_attempt_voided_already(mini_tree, tmp_path):
    """A probe: a job dir was voided while its trial had no result.json (the trial dir was
    refused), and an attempt in the voided root, given with that root as the tree, was voided
    again: its void.json (the reason, the evidence, the run) overwritten."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (job,) = (out / "two-stage" / "nop").glob("*/nop")
    (trial,) = iter_trial_dirs(job)
    (trial / "result.json").rename(trial / "result.json.later")
    r = _marathon("void", str(job), str(out), "--yes")
    assert r.returncode == 2 and "still running (no result.json in " in r.stderr and job.is_dir(), r.stderr
    (trial / "result.json.later").rename(trial / "result.json")

    (done,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    assert _marathon("void", str(done), str(out), "--reason", "first", "--yes").returncode == 0
    (again,) = (voided_root(out) / "calc-partial" / "oracle").glob("*/oracle")
    record = (again.parent / "void.json").read_text()
    for target in (again, next(iter_trial_dirs(again))):
        r = _marathon("void", str(target), str(voided_root(out)), "--reason", "second", "--yes")
        assert r.returncode == 2 and "voided already" in r.stderr, r.stderr
    assert (again.parent / "void.json").read_text() == record


def test_a_void_waits_for_another_of_the_same_attempt_and_then_moves_nothing(mini_tree, tmp_path):
    """A probe: two voids of one attempt at once (reasons A and B): one moved it, the other said
    "nothing moved", and the moved attempt's README said A where its void.json said B. A void holds
    the attempt's dir (an flock) while it writes and moves it: here the test holds it as the first
    void would, moves the attempt as that void does, and lets go; the second moves nothing."""
    import fcntl
    import os
    import time

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    (job,) = (out / "calc-partial" / "oracle").glob("*/oracle")
    stamp_dir = job.parent
    held = os.open(stamp_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        second = subprocess.Popen(
            [sys.executable, "-m", "marathon.cli", "void", str(job), str(out), "--reason", "B", "--yes"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # the void waits at the lock (the kernel lists it as a waiter on the dir's inode)
        waiting = f":{os.stat(stamp_dir).st_ino} "
        deadline = time.monotonic() + 60
        while not any(
            "->" in line and waiting in line for line in Path("/proc/locks").read_text().splitlines()
        ):
            assert second.poll() is None and time.monotonic() < deadline, second.communicate()
            time.sleep(0.05)
        first = voided_root(out) / "calc-partial" / "oracle" / stamp_dir.name
        first.parent.mkdir(parents=True)
        (stamp_dir / "void.json").write_text('{"reason": "A"}')
        stamp_dir.rename(first)  # the first void's move
    finally:
        os.close(held)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 1 and "nothing moved (voided meanwhile)" in err, err
    assert json.loads((first / "void.json").read_text()) == {"reason": "A"}
    assert not (first / VOID_README).exists() and [p.name for p in first.parent.iterdir()] == [first.name]
