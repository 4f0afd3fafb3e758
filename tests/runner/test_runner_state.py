"""Claims, the runner lock, the configuration file and the infrastructure classifier, with real
processes as holders (a live child, an exited child, this test process) and no Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from runner.errors import Busy, UserError
from runner.ops.void import classify_trial
from runner.results.tree import claim_path
from runner.schedule import claims
from runner.schedule.config import read_driver_env, resolve, write_driver_env
from runner.schedule.lock import Holder, RunnerLock, holder_for, me


def _holder_of(p: subprocess.Popen) -> Holder:
    return holder_for(p.pid, "other-run")


@pytest.fixture
def live_other():
    p = subprocess.Popen(["sleep", "60"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


@pytest.fixture
def dead_other():
    p = subprocess.Popen(["sleep", "0.1"])
    h = _holder_of(p)
    p.wait()
    return h


def test_claim_is_exclusive_between_live_holders(tmp_path, live_other):
    other = _holder_of(live_other)
    assert claims.try_claim(tmp_path, "t1", "plain", other).acquired
    r = claims.try_claim(tmp_path, "t1", "plain", me("mine"))
    assert not r.acquired and r.claim is not None and r.claim.holder.pid == live_other.pid
    assert claims.read_claim(claim_path(tmp_path, "t1", "plain")).holder == other


def test_stale_claim_is_taken_over_and_released(tmp_path, dead_other):
    assert claims.try_claim(tmp_path, "t1", "goal", dead_other).acquired
    mine = me("mine")
    r = claims.try_claim(tmp_path, "t1", "goal", mine)
    assert r.acquired and r.replaced is not None and r.replaced.holder == dead_other
    assert claims.release(tmp_path, r.claim)
    assert not claim_path(tmp_path, "t1", "goal").exists()


def test_orphan_job_blocks_until_adopted(tmp_path, dead_other, live_other):
    c = claims.try_claim(tmp_path, "t1", "goal", dead_other).claim
    job = claims.job_ref(live_other.pid, "stamp1")
    claims.set_job(tmp_path, c, job)
    orphan = claims.read_claim(claim_path(tmp_path, "t1", "goal"))
    assert orphan.state == claims.ORPHAN
    assert not claims.try_claim(tmp_path, "t1", "goal", me("mine")).acquired
    r = claims.try_claim(tmp_path, "t1", "goal", me("mine"), adopt=True)
    assert r.acquired and r.claim.job == job


def test_second_runner_is_refused_with_the_holder(tmp_path):
    first = RunnerLock(tmp_path, "run-a")
    first.acquire()
    code = (
        "import sys; from pathlib import Path; from runner.schedule.lock import RunnerLock; from runner.errors import Busy\n"
        "try:\n    RunnerLock(Path(sys.argv[1]), 'run-b').acquire()\nexcept Busy as e:\n    print(e); sys.exit(4)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 4 and f"PID {first.holder.pid}" in r.stdout and "run-a" in r.stdout
    first.release()
    assert not (tmp_path / ".runner" / "lock").exists()


#: a second process that takes the lock (or a claim) and holds it until its stdin closes
_RIVAL = """
import json, sys
from pathlib import Path
from runner.errors import Busy
from runner.schedule import claims
from runner.schedule.lock import RunnerLock, me
out, what = Path(sys.argv[1]), sys.argv[2]
if what == "lock":
    try:
        lock = RunnerLock(out, "rival")
        lock.acquire()
        print(json.dumps({"acquired": True, "took_over": bool(lock.took_over)}), flush=True)
    except Busy:
        print(json.dumps({"acquired": False}), flush=True)
else:
    print(json.dumps({"acquired": claims.try_claim(out, "t1", "nop", me("rival")).acquired}), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("what", ["lock", "claim"])
def test_a_start_racing_another_never_finds_its_file_empty(tmp_path, monkeypatch, what):
    """Found by a probe: the lock (and a claim) was created empty, then written; a second runner
    that read it in between found no holder and took it over, and two runners ran one tree. Here
    the rival comes exactly then: while the first writes its record. One of the two holds it."""
    from modes import safeio

    rivals: list[subprocess.Popen] = []
    write_all = safeio.write_all

    def racing(fd: int, data: bytes) -> None:
        if not rivals:  # the rival starts and decides while this record is being written
            rivals.append(
                subprocess.Popen(
                    [sys.executable, "-c", _RIVAL, str(tmp_path), what],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
            )
            rivals.append(json.loads(rivals[0].stdout.readline()))
        write_all(fd, data)

    monkeypatch.setattr(safeio, "write_all", racing)
    try:
        if what == "lock":
            try:
                RunnerLock(tmp_path, "first").acquire()
                mine = True
            except Busy:
                mine = False
        else:
            mine = claims.try_claim(tmp_path, "t1", "nop", me("first")).acquired
        rival = rivals[1]
        assert mine != rival["acquired"], (mine, rival)
        assert not rival.get("took_over")  # nobody's record was taken for a dead one's
    finally:
        if rivals:
            rivals[0].stdin.close()
            rivals[0].wait(30)


def test_a_copy_of_a_live_tree_names_none_of_its_processes(tmp_path, live_other):
    """Found by a probe: ``cp -a`` of a tree while it ran, then ``kill`` of the copy, planned (and
    with ``--yes`` stopped) the original's runner and harbors, named in the copied registry. The
    registry belongs to its tree (its dir's inode): a copy's names none; the tree's own still does."""
    import shutil

    from runner.ops.procs import Registry, plan_stop

    out, copy = tmp_path / "out", tmp_path / "copy"
    (out / ".runner").mkdir(parents=True)
    Registry(out).register(live_other.pid, "runner", ["marathon", "run", str(out)])
    shutil.copytree(out, copy, symlinks=True)
    assert Registry(copy).entries() == [] and Registry(copy).runner_entry() is None
    assert plan_stop(copy).targets == []
    assert [e.pid for e in Registry(out).entries()] == [live_other.pid]
    assert [t.pid for t in plan_stop(out).targets] == [live_other.pid]
    # a process registered in the copy is the copy's own from then on
    Registry(copy).register(os.getpid(), "console", ["marathon", "console", str(copy)])
    assert [e.pid for e in Registry(copy).entries()] == [os.getpid()]


def test_a_copy_of_a_tree_adopts_none_of_its_jobs_and_is_held_by_none_of_its_runners(
    tmp_path, dead_other, live_other
):
    """Found by a review: a copy of a tree whose runner was killed while its harbor jobs ran showed
    them as orphans of the copy; `health --fix` of the copy started a runner there that adopted
    them (and ended them when it stopped). The lock and the claims belong to their tree, as the
    registry does: a copy's name nothing of the original's."""
    import shutil

    from runner.schedule.lock import RunnerLock, lock_holder

    out, copy = tmp_path / "out", tmp_path / "copy"
    c = claims.try_claim(out, "t1", "goal", dead_other).claim
    claims.set_job(out, c, claims.job_ref(live_other.pid, "stamp1"))
    holder = RunnerLock(out, "run-1")
    holder.holder = _holder_of(live_other)  # the original's runner, alive
    holder.acquire()
    shutil.copytree(out, copy, symlinks=True)
    assert [x.state for x in claims.list_claims(out)] == [claims.ORPHAN]
    assert claims.list_claims(copy) == [] and lock_holder(copy) is None
    r = claims.try_claim(copy, "t1", "goal", me("mine"), adopt=True)
    assert r.acquired and r.claim.job is None and r.replaced is None  # started afresh, nothing adopted
    RunnerLock(copy, "run-2").acquire()  # the copy's own runner
    assert lock_holder(out).pid == live_other.pid and claims.list_claims(out)[0].job.pid == live_other.pid


def test_stale_lock_is_taken_over(tmp_path, dead_other):
    path = tmp_path / ".runner" / "lock"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(dead_other.__dict__))
    lock = RunnerLock(tmp_path, "run-c")
    lock.acquire()
    assert lock.took_over == dead_other
    lock.release()


def test_config_precedence_and_round_trip(tmp_path):
    env = {"MARATHON_CONCURRENCY": "7", "GOAL_TIMEOUT_SEC": "100", "MARATHON_ARMS": "oracle,nop"}
    cfg = resolve(tmp_path, {"tasks_dir": str(tmp_path), "concurrency": 3}, environ=env)
    assert (cfg.concurrency, cfg.goal_timeout_sec, cfg.arms, cfg.verifier_mult) == (
        3,
        100,
        ("oracle", "nop"),
        4.0,
    )
    write_driver_env(cfg)
    # --resume: the file beats the environment; a flag given now beats the file
    again = resolve(tmp_path, {"max_passes": 5}, resume=True, environ={"MARATHON_CONCURRENCY": "9"})
    assert (again.concurrency, again.goal_timeout_sec, again.max_passes) == (3, 100, 5)
    assert again.tasks_dir == cfg.tasks_dir and again.arms == cfg.arms


def test_agent_env_secrets_only_by_reference(tmp_path):
    for literal in ("OPENAI_API_KEY=sk-live-123", "WEN_MODE=heartbeat"):  # a literal, whatever the name
        with pytest.raises(UserError, match="not a pure reference") as exc:
            resolve(tmp_path, {"tasks_dir": str(tmp_path), "agent_env": [literal]}, environ={})
        assert literal.partition("=")[2] not in str(exc.value)
    cfg = resolve(
        tmp_path,
        {
            "tasks_dir": str(tmp_path),
            "agent_env": ["OPENAI_API_KEY"],
            "agent_env_literal": ["WEN_MODE=heartbeat"],
        },
        environ={},
    )
    assert cfg.agent_env == ("OPENAI_API_KEY=${OPENAI_API_KEY}",)
    assert cfg.agent_env_literal == ("WEN_MODE=heartbeat",)
    write_driver_env(cfg)
    stored = read_driver_env(tmp_path)
    assert stored["MARATHON_AGENT_ENV"] == '["OPENAI_API_KEY=${OPENAI_API_KEY}"]'
    assert stored["MARATHON_AGENT_ENV_LITERAL"] == '["WEN_MODE=heartbeat"]'


def test_bad_arm_and_missing_resume_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="unknown arm"):
        resolve(tmp_path, {"tasks_dir": str(tmp_path), "arms": ["bogus"]}, environ={})
    with pytest.raises(UserError, match="nothing to resume"):
        resolve(tmp_path / "nope", {}, resume=True, environ={})


@pytest.mark.parametrize(
    "flags, says",
    [
        ({"arms": [""]}, "--arms names no arm"),
        ({"tasks": ["calc-partial", "calc-partial"]}, "task given twice in --tasks: calc-partial"),
        ({"goal_timeout_sec": 0}, "--goal-timeout-sec must be from 1 to 2592000"),
        ({"concurrency": 10**20}, "--concurrency must be from 1 to 4096"),
        ({"max_passes": 0}, "--max-passes must be from 1 to 1000"),
        # a probe's unbounded knobs (2026-12-07): --min-free-gb 10^20 would have held every attempt
        ({"min_free_gb": 10**20}, "--min-free-gb must be from 0 to 1000000 (got 1e+20)"),
        ({"net_margin": 10**20}, "--net-margin must be from 0 to 1000000"),
        ({"breaker_k": 10**20}, "--breaker-k must be from 0 to 1000000"),
        ({"agent_timeout_mult": 1e20}, "--agent-timeout-mult must be from 0 to 1000"),
        ({"max_spend": 1e20}, "--max-spend must be from 0 to 1000000000"),
        ({"env": ""}, "--env names no harbor environment"),  # an internal error later (a probe)
    ],
)
def test_a_run_flag_no_run_can_use_is_refused_before_anything_starts(tmp_path, flags, says):
    """Values a probe of the CLI got through to the preflight (found 2026-12-06): refused in one line."""
    with pytest.raises(UserError) as exc:
        resolve(tmp_path, {"tasks_dir": str(tmp_path), **flags}, environ={})
    assert str(exc.value) == says or str(exc.value).startswith(says), str(exc.value)
    assert not (tmp_path / ".driver_env").exists()


def test_the_longest_deadline_a_run_takes_is_a_duration_its_eta_counts():
    from runner.results.run_progress import MAX_TRIAL_SEC
    from runner.schedule.config import BOUNDS

    (longest,) = [hi for attr, _flag, _lo, hi in BOUNDS if attr == "goal_timeout_sec"]
    assert MAX_TRIAL_SEC > longest


def _trial(tmp_path, exc_type, agent_ran=True, msg="x"):
    t = tmp_path / "task__abc"
    t.mkdir()
    res = {
        "exception_info": {"exception_type": exc_type, "exception_message": msg},
        "agent_setup": {"started_at": "a"},
    }
    res["agent_execution"] = {"started_at": "a", "finished_at": "b"} if agent_ran else None
    (t / "result.json").write_text(json.dumps(res))
    return t


@pytest.mark.parametrize(
    ("etype", "ran", "msg", "kind"),
    [
        ("EnvironmentStartTimeoutError", False, "x", "infra"),  # harbor: sandbox_failed
        ("RuntimeError", False, "Docker compose command failed ... fully subnetted", "infra"),
        ("RuntimeError", False, "Agent install failed", "infra"),  # setup failed: the agent never ran
        ("RuntimeError", True, "Error response from daemon: container 0123456789ab is not running", "infra"),
        ("CancelledError", True, "", "infra"),
        ("RuntimeError", True, "boom in the agent", "errored"),
        ("AgentTimeoutError", True, "timed out", "errored"),
        ("ApiRateLimitError", True, "429", "errored"),
    ],
)
def test_infrastructure_classifier(tmp_path, etype, ran, msg, kind):
    assert classify_trial(_trial(tmp_path, etype, ran, msg)).kind == kind


def test_progress_plain_lines_json_and_tty_bars():
    import io

    from runner.schedule.display import Progress

    start = {"ts": "2026-11-29T08:00:00.000000Z", "event": "runner_start", "run_id": "r", "arms": ["oracle", "nop"],
             "pairs_per_arm": {"oracle": 2, "nop": 2}, "already_done": {"oracle": ["a"]}, "n_pairs": 4, "concurrency": 2}  # fmt: skip
    gate = {
        "ts": "2026-11-29T08:00:01.000000Z",
        "event": "gate_wait",
        "run_id": "r",
        "reason": "wait: 9 used + 1 > cap 9",
    }
    plain, js, tty = io.StringIO(), io.StringIO(), io.StringIO()
    for mode, s in (("plain", plain), ("json", js), ("tty", tty)):
        p = Progress(mode, s)
        p(start)
        p(gate)
    assert plain.getvalue().splitlines()[1] == "2026-11-29 08:00:01Z gate: waiting (wait: 9 used + 1 > cap 9)"
    assert [json.loads(ln)["event"] for ln in js.getvalue().splitlines()] == ["runner_start", "gate_wait"]
    assert "oracle [" in tty.getvalue() and "1/2 done" in tty.getvalue() and "\x1b[" in tty.getvalue()


def test_an_errored_attempts_hostile_reason_is_one_line_without_a_control_character(tmp_path):
    """harbor's exception message often carries the sandbox's own stderr: a newline in it would
    forge a verdict line of the runner's log, an escape write to the operator's terminal (a
    clipboard write by OSC 52). The reason is the voiding table's, as the driver emits it."""
    import io

    from runner.schedule.display import Progress

    forged = "2026-12-01 09:00:00Z done    calc/plain in 42.0s reward=1.0"
    msg = "app-server did not initialize; stderr: \x1b]52;c;ZXZpbA==\x1b\\\r\n" + forged
    v = classify_trial(_trial(tmp_path, "RuntimeError", True, msg))
    assert v.kind == "errored" and "\x1b]52" in v.reason  # the verdict keeps the words as they were
    ev = {"ts": "2026-11-29T08:00:02.000000Z", "run_id": "r", "task": "calc", "arm": "plain"}
    for mode in ("plain", "tty"):
        s = io.StringIO()
        p = Progress(mode, s)
        p({**ev, "event": "job_finish", "status": "errored", "elapsed_sec": 3.0, "detail": v.reason})
        p({**ev, "event": "retry", "next_pass": 2, "reason": v.reason})
        text = s.getvalue().replace("\x1b[2K", "").replace("\x1b[1F", "")  # the bars' own moves
        assert "\x1b" not in text and "\r" not in text, repr(text)
        if mode == "plain":
            lines = text.splitlines()
            assert len(lines) == 2 and not any(ln.startswith(forged[:20]) for ln in lines), lines
            assert "ZXZpbA==" in lines[0]  # shown, as text


def test_health_flags_a_trial_past_its_budget(tmp_path, live_other):
    """A running trial (no result.json) whose pair is held by a live claim, started (by its UTC stamp)
    longer ago than goal budget + verifier x mult + slack, is reported; a fresh one is not."""
    from runner.schedule.health import check

    tasks = tmp_path / "tasks"
    (tasks / "t1").mkdir(parents=True)
    (tasks / "t1" / "task.toml").write_text("[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 10.0\n")
    out = tmp_path / "out"
    write_driver_env(
        resolve(out, {"tasks_dir": str(tasks), "arms": ["nop"], "goal_timeout_sec": 30}, environ={})
    )
    for stamp in ("2020-01-01__00-00-00", "2999-01-01__00-00-00"):
        (out / "t1" / "nop" / stamp / "nop" / "t1__abcdefg").mkdir(parents=True)
    claims.try_claim(out, "t1", "nop", _holder_of(live_other))
    rep, _ = check(out)
    past = [f for f in rep.findings if f.kind == "past_budget"]
    assert [f.data["stamp"] for f in past] == ["2020-01-01__00-00-00"]
    assert rep.running_trials == 2 and not rep.ok


def test_unreachable_engine_is_refused_by_the_preflight_and_nothing_written(tmp_path):
    import os

    from runner_support import DEMO_TASKS, run_marathon

    out = tmp_path / "out"
    r = run_marathon(
        "run", str(out), "--tasks-dir", str(DEMO_TASKS), "--arms", "nop", timeout=60,
        DOCKER_HOST=f"unix://{tmp_path}/no-such.sock", PATH=os.environ["PATH"],
    )  # fmt: skip
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 2, r.stderr
    assert lines[0].startswith("marathon: cannot start the runner") and "no Docker engine" in lines[1]
    assert not out.exists()


def test_a_zombie_holder_is_dead(tmp_path):
    """After kill -9 a runner can linger as a zombie until a subreaper reaps it: its claims are stale."""
    import time

    p = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    holder = holder_for(p.pid, "zombie-run")
    deadline = time.monotonic() + 10
    while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not holder.is_live()
        assert claims.try_claim(tmp_path, "t1", "nop", holder).acquired
        r = claims.try_claim(tmp_path, "t1", "nop", me("mine"))
        assert r.acquired and r.replaced is not None and r.replaced.holder == holder
    finally:
        p.wait()


def test_a_dead_runners_stale_claim_on_a_done_pair_is_released_by_the_next_runner(
    mini_tree, tmp_path, dead_other
):
    """A pair an orphan harbor finished after its runner was killed keeps the dead runner's claim;
    the next runner releases it (else `health` reports a stale claim forever). The tree is the recorded
    mini tree (every pair done), the runner a real `marathon run` process, the holder a real exited one."""
    import shutil

    from runner_support import DEMO_TASKS, events, run_marathon

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    assert claims.try_claim(out, "calc-partial", "nop", dead_other).acquired
    assert claims.try_claim(out, "calc-partial", "oracle", dead_other).acquired
    claim = next(c for c in claims.list_claims(out) if c.arm == "nop")
    assert claim.state == claims.STALE
    r = run_marathon("run", str(out), "--tasks-dir", str(DEMO_TASKS), "--arms", "oracle,nop", "--plain",
                     "--env", "tests.envs.remote_like:RemoteLikeEnvironment", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert claims.list_claims(out) == []
    released = {(e["task"], e["arm"]) for e in events(out, "claim_release") if e.get("stale_of")}
    assert released == {("calc-partial", "nop"), ("calc-partial", "oracle")}


def test_a_claim_counts_as_running_only_while_its_runner_or_its_job_lives(tmp_path, live_other, dead_other):
    """Found by a probe: after a runner killed hard, ``status`` showed its claimed pair running while
    ``health`` reported the claim stale and nothing ran. A cell runs while its claim's holder lives,
    or its harbor job does (an orphan the next runner adopts); a stale claim is pending."""
    from runner.results.attempts import PENDING, RUNNING
    from runner.results.model import RunModel
    from runner.results.tree import events_path

    out = tmp_path / "out"
    events_path(out).parent.mkdir(parents=True)
    start = {"ts": "2026-11-29T08:00:00Z", "event": "runner_start", "run_id": "r", "tasks": ["t1", "t2", "t3"],
             "arms": ["nop"]}  # fmt: skip
    events_path(out).write_text(json.dumps(start) + "\n")
    claims.try_claim(out, "t1", "nop", _holder_of(live_other))  # its runner lives
    stale = claims.try_claim(out, "t2", "nop", dead_other).claim  # its runner died, nothing runs
    orphan = claims.try_claim(out, "t3", "nop", dead_other).claim  # its runner died, its job runs
    claims.set_job(out, orphan, claims.job_ref(live_other.pid, "2026-11-29__08-00-01"))
    assert stale is not None
    cells = RunModel.load(out).scoped("run")
    assert {k[0]: c.status for k, c in cells.items()} == {"t1": RUNNING, "t2": PENDING, "t3": RUNNING}


def test_health_says_a_driver_env_the_runner_could_not_resume_from(tmp_path):
    """Found by a probe: a .driver_env the config step refuses (MARATHON_CONCURRENCY=abc, an arm
    that does not exist) read "pairs: 0/0 finished ... OK: nothing to fix"."""
    from runner.results.tree import driver_env_path
    from runner.schedule.health import check

    tasks = tmp_path / "tasks"
    (tasks / "t1").mkdir(parents=True)
    (tasks / "t1" / "task.toml").write_text("[agent]\ntimeout_sec = 60.0\n")
    out = tmp_path / "out"
    write_driver_env(resolve(out, {"tasks_dir": str(tasks), "arms": ["nop"]}, environ={}))
    rep, cfg = check(out)
    assert cfg is not None and not [f for f in rep.findings if f.kind == "config_unusable"]
    env = driver_env_path(out)
    env.write_text(env.read_text().replace("MARATHON_ARMS=nop", "MARATHON_ARMS=nosuch"))
    rep, cfg = check(out)
    (bad,) = [f for f in rep.findings if f.kind == "config_unusable"]
    assert cfg is None and not rep.ok and "nosuch" in bad.what and not bad.fixable


def test_a_detached_start_on_a_tree_with_a_live_runner_rewrites_nothing(tmp_path, live_other):
    """A probe: ``run OUT --detach`` wrote its ``.driver_env`` before it found the live runner and
    exited 4, so that runner's next restart (``--resume``, ``health --fix``) took up the refused
    settings. Refused first now: the file is as the live runner wrote it."""
    from dataclasses import asdict

    from runner_support import DEMO_TASKS, run_marathon

    from runner.schedule.lock import create_exclusive, lock_path

    out = tmp_path / "out"
    write_driver_env(
        resolve(out, {"tasks_dir": str(DEMO_TASKS), "arms": ["oracle", "nop"], "concurrency": 2})
    )
    before = (out / ".driver_env").read_bytes()
    assert create_exclusive(lock_path(out), asdict(_holder_of(live_other)))
    for extra in ([], ["--resume"]):
        r = run_marathon(
            "run", str(out), "--detach", "--tasks-dir", str(DEMO_TASKS), "--tasks", "calc-partial",
            "--arms", "oracle", "--concurrency", "3", *extra, timeout=60,
        )  # fmt: skip
        assert r.returncode == 4 and f"PID {live_other.pid}" in r.stderr, (extra, r.stderr)
        assert (out / ".driver_env").read_bytes() == before


def test_an_output_dir_that_is_a_file_or_read_only_is_a_preflight_problem(tmp_path, mount_tmpfs):
    """A probe: ``run FILE`` and ``run OUT`` on a read-only filesystem ended in an internal error
    (FileExistsError, EROFS) after the preflight passed them."""
    import subprocess

    from runner_support import DEMO_TASKS, run_marathon

    afile = tmp_path / "afile"
    afile.write_text("")
    ro = mount_tmpfs(tmp_path / "ro", "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    for out, says in ((afile, "is a file, not a directory"), (ro / "out", "is on a read-only filesystem")):
        r = run_marathon("run", str(out), "--tasks-dir", str(DEMO_TASKS), "--arms", "nop", timeout=60)
        assert r.returncode == 2 and says in r.stderr and "internal error" not in r.stderr, r.stderr
    assert afile.read_text() == "" and list(ro.iterdir()) == []
