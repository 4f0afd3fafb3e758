"""The viewer's jobs folder (runner.ops.viewjobs) on real recorded trees: names, entries, voided
attempts, hostile shapes left out, running trials held back, and kept current. harbor's own
``JobScanner`` reads the result, as its viewer does. No Docker."""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from pathlib import Path

import hostile_tree
import pytest
import real_trees

from runner.ops import viewjobs
from runner.ops.viewjobs import NOTE_FILE, Entry, JobsFolder, LiveJobsFolder, TrialSource, entry_name
from runner.ops.void import act_void, plan_void
from runner.results.tree import JOB_FILES, iter_job_dirs, iter_trial_dirs

PAIRS = [
    (t, a) for t in ("build-gate", "calc-partial", "two-stage", "words-passrate") for a in ("nop", "oracle")
]
LATER = "20261201T095651Z"


@pytest.fixture
def mini(mini_tree, tmp_path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    return out


def _rerun(out: Path, task: str, arm: str, stamp: str = LATER) -> Path:
    """A later attempt of the pair: its real recorded job copied under a later stamp."""
    (src,) = [s for t, a, _, s, _ in iter_job_dirs(out) if (t, a) == (task, arm)][:1]
    shutil.copytree(out / task / arm / src, out / task / arm / stamp, symlinks=True)
    return out / task / arm / stamp / arm


def _void(out: Path, task: str, arm: str) -> Path:
    (job,) = [j for t, a, _, _, j in iter_job_dirs(out) if (t, a) == (task, arm)]
    (trial,) = iter_trial_dirs(job)
    return act_void(plan_void(out, trial, "InjectedSetupFault: failed before the agent ran", ["x"]))


def _scanner(folder: Path):
    from harbor.viewer.scanner import JobScanner

    return JobScanner(folder)


def _walk(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            yield Path(dirpath) / n


def test_names_say_task_arm_and_attempt():
    assert entry_name("calc-partial", "ssh-goal", 1) == "calc-partial__ssh-goal__attempt-1"
    assert entry_name("two-stage", "plain", 1, voided=True) == "two-stage__plain__attempt-1__voided"


def test_one_real_entry_per_pair_that_harbor_reads(mini):
    live = LiveJobsFolder(mini)
    rep = live.sync_all()
    names = sorted(entry_name(t, a, 1) for t, a in PAIRS)
    assert sorted(os.listdir(live.root)) == names and rep.entries == 8 and rep.left_out == []
    assert live.root == mini / ".marathon" / "view" / "jobs"
    scanner = _scanner(live.root)
    assert sorted(scanner.list_jobs()) == names
    for t, a in PAIRS:
        name = entry_name(t, a, 1)
        entry = live.root / name
        assert not entry.is_symlink() and entry.is_dir()
        assert scanner.get_job_result(name) is not None and scanner.get_job_config(name) is not None
        (trial,) = scanner.list_trials(name)
        assert scanner.get_trial_result(name, trial).task_name == f"marathon-demo/{t}"
        # the job's own files are the tree's files themselves (hard links: same inode, no copy)
        (job,) = [j for tt, aa, _, _, j in iter_job_dirs(mini) if (tt, aa) == (t, a)]
        for f in (JOB_FILES - {"result.json"}) & set(os.listdir(job)):
            assert os.stat(entry / f).st_ino == os.stat(job / f).st_ino
        # the job's result.json is a copy: the scan index knows it by its ctime, which a link renews
        assert os.stat(entry / "result.json").st_ino != os.stat(job / "result.json").st_ino
        # the trial's result.json is a copy (a link would renew its ctime, which the tamper rule reads)
        mine, theirs = os.stat(entry / trial / "result.json"), os.stat(job / trial / "result.json")
        assert mine.st_ino != theirs.st_ino and (mine.st_size, mine.st_mtime_ns) == (
            theirs.st_size,
            theirs.st_mtime_ns,
        )
    # nothing but dirs and regular files, and a second sync changes nothing
    assert all(p.is_dir() or stat.S_ISREG(os.lstat(p).st_mode) for p in _walk(live.root))
    again = live.sync_all()
    assert (again.linked, again.copied, again.removed) == (0, 0, 0)


def test_a_voided_attempt_is_named_so_and_the_rerun_scores(mini):
    dest = _void(mini, "calc-partial", "nop")
    # the pair's rerun: the same real job, started later (its voided stamp dir copied back, minus the README)
    shutil.copytree(dest, mini / "calc-partial" / "nop" / LATER, symlinks=True)
    for f in ("README.md", "void.json"):
        (mini / "calc-partial" / "nop" / LATER / f).unlink()
    _rerun(mini, "calc-partial", "oracle")  # a second done attempt of another pair

    scoring = LiveJobsFolder(mini)
    scoring.sync_all()
    got = set(os.listdir(scoring.root))
    assert "calc-partial__nop__attempt-2" in got and "calc-partial__oracle__attempt-2" in got
    assert not {"calc-partial__nop__attempt-1__voided", "calc-partial__oracle__attempt-1"} & got
    assert len(got) == 8

    every = LiveJobsFolder(mini, all_attempts=True)
    every.sync_all()
    got = set(os.listdir(every.root))
    assert len(got) == 10
    assert {"calc-partial__nop__attempt-1__voided", "calc-partial__nop__attempt-2"} <= got
    assert {"calc-partial__oracle__attempt-1", "calc-partial__oracle__attempt-2"} <= got
    voided = every.root / "calc-partial__nop__attempt-1__voided"
    (trial,) = [p for p in voided.iterdir() if p.is_dir()]
    note = (trial / NOTE_FILE).read_text()
    assert note.startswith("voided: InjectedSetupFault: failed before the agent ran") and str(dest) in note
    assert (voided / "result.json").is_file()  # the job's files moved with it, and are shown
    assert _scanner(every.root).get_trial_result(voided.name, trial.name) is not None


def test_what_would_take_the_viewers_memory_or_hide_a_trials_files_is_left_out(tmp_path, monkeypatch):
    """Found by a probe of ``marathon view`` (2026-12-06): harbor reads what it serves whole, at
    about 26 times its size in memory, so a 250 MiB trajectory, or sparse command outputs costing
    the agent a few KB of disk each, took the viewer to 5-7 GB; one file named with a byte that is
    not UTF-8 made harbor's file list answer 500 for the whole trial."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    hostile_tree.make(out, outside, ["normal"])
    trial_dir = out / "normal" / "plain" / hostile_tree.STAMP / "plain" / "normal__AbC1234"
    agent = trial_dir / "agent"
    with open(agent / "holes.txt", "wb") as fh:
        fh.truncate(8 << 20)  # 8 MiB, no block written
    os.close(os.open(os.fsencode(agent) + b"/bad\xff.txt", os.O_WRONLY | os.O_CREAT, 0o644))
    (agent / "spoof\u202etxt.exe").write_text("x")
    for i in range(3):
        (agent / f"command-{i}").mkdir()
        (agent / f"command-{i}" / "stdout.txt").write_bytes(b"y" * 4096)
    (trial_dir / "verifier" / "test-stdout.txt").write_bytes(b"v" * 4096)
    monkeypatch.setattr(viewjobs, "MAX_TRIAL_BYTES", 10_000)  # the trial's other files and a command's output
    monkeypatch.setattr(viewjobs, "SMALL_FILE", 1024)
    live = LiveJobsFolder(out, all_attempts=True)
    live.sync_all()
    trial = live.root / "normal__plain__attempt-1" / "normal__AbC1234"
    note = (trial / NOTE_FILE).read_text()
    assert "agent/holes.txt: 8 MiB, mostly holes (a sparse file)" in note
    assert not (trial / "agent" / "holes.txt").exists()
    assert "agent/bad\\xff.txt: a name the viewer cannot show as it is" in note
    assert "agent/spoof\\u202etxt.exe: a name the viewer cannot show as it is" in note
    assert all(n.isascii() for n in os.listdir(trial / "agent"))
    mirrored = [p for p in trial.rglob("*") if p.is_file() and p.name != NOTE_FILE]
    assert sum(p.stat().st_size for p in mirrored) <= 10_000
    assert "over the viewer's 0 MiB for one trial" in note  # the output past the trial's share
    # what the trial is judged by came first, whatever the agent's dirs hold
    assert (trial / "verifier" / "test-stdout.txt").is_file() and (trial / "result.json").is_file()
    assert (trial / "verifier" / "metrics.json").is_file()
    assert not (trial / "agent" / "command-2" / "stdout.txt").exists()
    assert note.isascii()


def test_hostile_shapes_never_reach_the_viewer(tmp_path, monkeypatch):
    out, outside = tmp_path / "out", tmp_path / "outside"
    cases = [
        "normal",
        "fifo-metrics",
        "loop-metrics",
        "out-metrics",
        "out-verifier-dir",
        "inside-link",
        "fifo-result",
    ]
    hostile_tree.make(out, outside, cases)
    big = out / "normal" / "plain" / hostile_tree.STAMP / "plain" / "normal__AbC1234" / "verifier" / "big.log"
    big.write_bytes(b"x" * 4096)
    monkeypatch.setattr(viewjobs, "MAX_FILE_BYTES", 2048)
    live = LiveJobsFolder(out, all_attempts=True)
    rep = live.sync_all()
    assert rep.entries == len(cases)
    for p in _walk(live.root):
        mode = os.lstat(p).st_mode
        assert stat.S_ISDIR(mode) or stat.S_ISREG(mode), f"{p} is not a dir or regular file"
        if stat.S_ISREG(mode):
            assert b"OUTSIDE-SECRET" not in p.read_bytes() and os.path.getsize(p) <= 2048
    trial = live.root / "normal__plain__attempt-1" / "normal__AbC1234"
    note = (trial / NOTE_FILE).read_text()
    assert "agent/leak: a symlink" in note and "agent/trajectory.json: a FIFO" in note
    assert "verifier/big.log: " in note and not (trial / "verifier" / "big.log").exists()
    assert (trial / "verifier" / "metrics.json").is_file()
    assert (
        "verifier: a symlink"
        in (
            live.root / "out-verifier-dir__plain__attempt-1" / "out-verifier-dir__AbC1234" / NOTE_FILE
        ).read_text()
    )
    # a FIFO result.json: the trial is not finished, so its mounts are held back; nothing blocks
    fifo = (live.root / "fifo-result__plain__attempt-1" / "fifo-result__AbC1234" / NOTE_FILE).read_text()
    assert "result.json: a FIFO" in fifo and "shown once the trial has finished" in fifo
    assert any("agent/leak" in x for x in rep.left_out)


def test_a_running_trial_shows_only_harbors_files_until_it_finishes(mini):
    (job,) = [j for t, a, _, _, j in iter_job_dirs(mini) if (t, a) == ("build-gate", "oracle")]
    (trial,) = iter_trial_dirs(job)
    result = trial / "result.json"
    kept = result.read_bytes()
    result.unlink()
    live = LiveJobsFolder(mini)
    live.sync_all()
    mirrored = live.root / "build-gate__oracle__attempt-1" / trial.name
    assert sorted(p.name for p in mirrored.iterdir()) == [NOTE_FILE, "config.json", "lock.json", "trial.log"]
    assert (
        "agent/, artifacts/, verifier/: shown once the trial has finished"
        in (mirrored / NOTE_FILE).read_text()
    )
    result.write_bytes(kept)
    assert live.update([result]) is not None
    assert {"agent", "verifier", "artifacts", "result.json"} <= set(os.listdir(mirrored))
    assert not (mirrored / NOTE_FILE).exists()


def _wait_for(root: Path, present: str, absent: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = set(os.listdir(root))
        if present in names and absent not in names:
            return
        time.sleep(0.2)
    raise AssertionError(f"{present} never replaced {absent}: {sorted(names)}")


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_kept_current_while_the_run_goes_on(mini, poll):
    live = LiveJobsFolder(mini, all_attempts=False)
    live.sync_all()
    stop = threading.Event()
    t = threading.Thread(target=live.follow, args=(stop,), kwargs={"poll": poll}, daemon=True)
    t.start()
    try:
        # whenever the watch gets set up, before or after this: follow() rescans once it watches
        _rerun(mini, "two-stage", "nop")
        _wait_for(live.root, "two-stage__nop__attempt-2", "two-stage__nop__attempt-1")
        # it watches now (the rescan above came from its first look): this one only the watch sees
        _rerun(mini, "two-stage", "nop", stamp="20261201T105651Z")
        _wait_for(live.root, "two-stage__nop__attempt-3", "two-stage__nop__attempt-2")
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()


def test_a_name_that_is_not_utf8_costs_a_rescan_not_the_watch(mini):
    """watchfiles raises on a file name that is not UTF-8 (an agent can make one in its trial dir):
    that ended the viewer's watch for good; now it watches again and rescans."""
    live = LiveJobsFolder(mini, all_attempts=False)
    live.sync_all()
    stop = threading.Event()
    said: list[str] = []
    t = threading.Thread(target=live.follow, args=(stop,), kwargs={"say": said.append}, daemon=True)
    t.start()
    touching = threading.Event()
    try:
        deadline = time.monotonic() + 60
        n = 0
        while not said:  # a new such name until the watch (set up at its own pace) sees one
            assert t.is_alive(), "the watch died"
            assert time.monotonic() < deadline, "the name never reached the watch"
            n += 1
            (mini / "two-stage" / os.fsdecode(b"agent-\xff-%d" % n)).write_text("x")
            time.sleep(0.3)
        assert "could not be read" in said[0]

        # an agent that keeps making such names fails every watch before its first report: the
        # folder still follows the run (a review found it frozen, saying so 5 times a second)
        def touch() -> None:
            k = 0
            while not touching.wait(0.2):
                k += 1
                (mini / "two-stage" / os.fsdecode(b"agent-\xfe-%d" % k)).write_text("x")

        toucher = threading.Thread(target=touch, daemon=True)
        toucher.start()
        time.sleep(1.0)
        _rerun(mini, "two-stage", "nop")  # after: only a watch that goes on (or its rescan) sees it
        _wait_for(live.root, "two-stage__nop__attempt-2", "two-stage__nop__attempt-1")
        assert len(said) <= 2, said  # once a minute at most
    finally:
        touching.set()
        stop.set()
        t.join(10)
    assert not t.is_alive()


def test_a_copy_where_a_link_cannot_be_made(tmp_path, mini_tree):
    """Another filesystem (here /dev/shm): the files are copied, bounded by the cap, mtime kept."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to copy across")
    src = Path(shm) / f"marathon-viewjobs-{os.getpid()}"
    try:
        real_trees.copy_recorded("mini", src)
        (task, arm, _, stamp, job) = next(iter_job_dirs(src))
        trials = tuple(TrialSource(p.name, str(p)) for p in iter_trial_dirs(job))
        folder = JobsFolder(tmp_path / "jobs")
        rep = folder.sync([Entry("x__y__attempt-1", task, arm, 1, stamp, "done", str(job), trials)])
        assert rep.copied > 0 and rep.linked == 0
        copy = tmp_path / "jobs" / "x__y__attempt-1" / "result.json"
        assert copy.read_bytes() == (job / "result.json").read_bytes()
        assert os.stat(copy).st_mtime_ns == os.stat(job / "result.json").st_mtime_ns
        again = folder.sync([Entry("x__y__attempt-1", task, arm, 1, stamp, "done", str(job), trials)])
        assert again.copied == 0  # unchanged copies are not made again
        folder.sync([])
        assert os.listdir(tmp_path / "jobs") == []
    finally:
        shutil.rmtree(src, ignore_errors=True)


def _one_entry(out: Path) -> tuple[Entry, Path]:
    (task, arm, _, stamp, job) = next(iter_job_dirs(out))
    (trial,) = iter_trial_dirs(job)
    trials = (TrialSource(trial.name, str(trial)),)
    return Entry("x__y__attempt-1", task, arm, 1, stamp, "done", str(job), trials), trial


def test_viewing_a_run_renews_no_ctime_the_tamper_rule_reads(mini, tmp_path):
    """Found by a review: a hard link (and its removal when the viewer ends) renews the file's ctime,
    and the tamper rule dates a verifier file changed after result.json by their ctimes: viewing a
    run once marked a trial "tampered" and changed its score. Those files are copied; the agent's
    files are still linked."""
    entry, trial = _one_entry(mini)
    judged = [trial / "result.json", *(p for p in (trial / "verifier").rglob("*") if p.is_file())]
    assert len(judged) >= 2
    # and what the scan index knows by its ctime: the job's result.json, the receipt
    judged += [trial.parent / "result.json", *(p for p in (trial / "agent").glob("*receipt.json"))]
    before = {p: os.lstat(p).st_ctime_ns for p in judged}
    time.sleep(0.05)  # a renewed ctime would be later than this
    folder = JobsFolder(tmp_path / "jobs")
    rep = folder.sync([entry])
    assert rep.linked > 0 and rep.copied >= len(judged)
    mirrored = tmp_path / "jobs" / entry.name / trial.name
    assert (mirrored / "verifier").is_dir() and (mirrored / "result.json").read_bytes() == judged[
        0
    ].read_bytes()
    assert (mirrored.parent / "result.json").read_bytes() == (trial.parent / "result.json").read_bytes()
    folder.sync([entry])  # again: unchanged copies stay
    folder.remove()  # as when the viewer ends
    assert {p: os.lstat(p).st_ctime_ns for p in judged} == before


def test_a_path_past_the_systems_limit_is_left_out_not_the_whole_sync(mini, tmp_path):
    """Found by a review: 17 names of 250 characters fit within MAX_DEPTH, and the mirror's path
    (written by absolute path) raised ENAMETOOLONG out of the sync: `marathon view` failed for the
    whole run, and a running one stopped following it."""
    entry, trial = _one_entry(mini)
    fd = os.open(trial / "agent", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(17):  # made by descriptors: the whole path is past PATH_MAX
            os.mkdir("d" * 249 + str(i % 10), dir_fd=fd)
            nxt = os.open("d" * 249 + str(i % 10), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    rep = JobsFolder(tmp_path / "jobs").sync([entry])
    assert any("File name too long" in x for x in rep.left_out), rep.left_out
    assert (tmp_path / "jobs" / entry.name / trial.name / "result.json").is_file()


def test_the_agents_small_files_dirs_and_left_out_names_are_all_bounded(mini, tmp_path, monkeypatch):
    """Found by a review: files under SMALL_FILE escaped the trial's byte cap in agent/ too (one
    64 KiB output linked 20,000 times: 1.2 GiB mirrored, the viewer at 3.8 GB for one answer);
    dirs counted toward no cap (100,000 empty ones: a 10 s sync, 271 MiB); the left-out list had
    no end (100,000 symlinks: a 221 MiB note harbor will not show, 969 MiB of memory)."""
    entry, trial = _one_entry(mini)
    agent = trial / "agent"
    for i in range(40):
        (agent / f"out-{i:02d}.txt").write_bytes(b"y" * 500)
        (agent / f"dir-{i:02d}").mkdir()
        os.symlink("/etc/hostname", agent / f"link-{i:02d}")
    monkeypatch.setattr(viewjobs, "SMALL_FILE", 1024)
    monkeypatch.setattr(viewjobs, "MAX_TRIAL_BYTES", 10_000)
    monkeypatch.setattr(viewjobs, "MAX_FILES", 60)
    monkeypatch.setattr(viewjobs, "MAX_NOTES", 25)
    rep = JobsFolder(tmp_path / "jobs").sync([entry])
    mirrored = tmp_path / "jobs" / entry.name / trial.name
    outs = sorted((mirrored / "agent").glob("out-*.txt"))
    assert 0 < len(outs) < 40  # the byte cap reached them
    assert sum(p.stat().st_size for p in mirrored.rglob("*") if p.is_file() and p.name != NOTE_FILE) <= 10_000
    entries = sum(1 for _ in mirrored.rglob("*"))
    assert entries <= 60 + 1  # files and dirs, and the note
    note = (mirrored / NOTE_FILE).read_text().splitlines()
    assert len(note) <= 25 + 3 and note[-1].startswith("  and ") and note[-1].endswith(" more left out")
    assert len(rep.left_out) == 25 and rep.left_out_more > 0
    assert (mirrored / "result.json").is_file() and (mirrored / "verifier").is_dir()  # judged files first


def test_a_link_an_earlier_viewer_left_to_a_judged_file_is_replaced_by_a_copy(mini, tmp_path):
    """Found by a review: a link left in the jobs folder (by a viewer before the copy rule, or one
    that was killed) was kept as "the same file already", and its removal at the end renewed the
    file's ctime after all."""
    entry, trial = _one_entry(mini)
    folder = JobsFolder(tmp_path / "jobs")
    folder.sync([entry])
    mirrored = tmp_path / "jobs" / entry.name / trial.name
    judged = [trial / "result.json", *(p for p in (trial / "verifier").rglob("*") if p.is_file())]
    for p in judged:  # as an earlier viewer left them: links
        dst = mirrored / p.relative_to(trial)
        dst.unlink()
        os.link(p, dst)
    folder.sync([entry])
    for p in judged:
        assert os.stat(mirrored / p.relative_to(trial)).st_ino != os.stat(p).st_ino, p
    after = {p: os.lstat(p).st_ctime_ns for p in judged}
    time.sleep(0.05)
    folder.remove()
    assert {p: os.lstat(p).st_ctime_ns for p in judged} == after


def test_a_judged_file_rewritten_with_its_size_and_mtime_kept_is_copied_again(mini, tmp_path):
    """Found by a review: the copy was kept while size and mtime matched, so a verifier file or
    receipt rewritten after the sync with both kept (os.utime) showed its old words in the viewer,
    while the scan read the new ones (its ctime changed)."""
    entry, trial = _one_entry(mini)
    folder = JobsFolder(tmp_path / "jobs")
    folder.sync([entry])
    src = next(p for p in (trial / "verifier").rglob("*") if p.is_file() and p.stat().st_size > 1)
    old = src.read_bytes()
    st = src.stat()
    time.sleep(0.05)
    src.write_bytes(bytes([old[0] ^ 1]) + old[1:])  # the same size, another first byte
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    rep = folder.sync([entry])
    assert rep.copied >= 1
    assert (
        tmp_path / "jobs" / entry.name / trial.name / src.relative_to(trial)
    ).read_bytes() == src.read_bytes()


def test_small_files_in_the_verifier_dir_count_against_the_trials_bytes(mini, tmp_path, monkeypatch):
    """A probe: every file under SMALL_FILE outside agent/ and artifacts/ was exempt from the
    trial's byte cap, and the agent can write /logs/verifier: 20,000 of them copied 1.25 GiB per
    trial. Only the files a trial is judged by are exempt now; they are shown whatever else."""
    entry, trial = _one_entry(mini)
    for i in range(40):
        (trial / "verifier" / f"flood-{i:02d}.txt").write_bytes(b"v" * 500)
    monkeypatch.setattr(viewjobs, "SMALL_FILE", 1024)
    monkeypatch.setattr(viewjobs, "MAX_TRIAL_BYTES", 10_000)
    JobsFolder(tmp_path / "jobs").sync([entry])
    mirrored = tmp_path / "jobs" / entry.name / trial.name
    floods = sorted((mirrored / "verifier").glob("flood-*.txt"))
    assert 0 < len(floods) < 40, len(floods)
    judged = [f for f in viewjobs.ALWAYS_SHOWN if (trial / f).is_file()]
    assert judged and all((mirrored / f).is_file() for f in judged)
    assert (mirrored / "result.json").is_file()
    assert "over the viewer's 0 MiB for one trial" in (mirrored / NOTE_FILE).read_text()


def test_a_full_disk_under_the_folder_is_said_and_the_folder_catches_up_once_there_is_room(mini, mount_tmpfs):
    """A probe: a re-mirror that failed (the mirror's disk full) was taken for a failure of the
    watch, and the next one ended the following thread in a traceback: the viewer served a folder
    that no longer followed the run. It is said now, and tried again until it succeeds. The disk is
    a real one that fills (a tmpfs), then grows."""
    import subprocess

    from runner.results.tree import view_dir

    disk = mount_tmpfs(view_dir(mini), "16k")
    live = LiveJobsFolder(mini)
    said: list[str] = []
    stop = threading.Event()
    keeper = threading.Thread(target=live.follow, args=(stop,), kwargs={"say": said.append}, daemon=True)
    t0 = time.monotonic()
    keeper.start()
    try:
        deadline = t0 + 60
        while not any("could not be updated" in s for s in said):
            assert keeper.is_alive() and time.monotonic() < deadline, said
            time.sleep(0.1)
        assert "No space left on device" in said[0] and keeper.is_alive()
        r = subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        names = {entry_name(t, a, 1) for t, a, *_ in iter_job_dirs(mini)}
        while not all((live.root / n / "result.json").is_file() for n in names):
            assert keeper.is_alive() and time.monotonic() < deadline, (said, sorted(os.listdir(live.root)))
            time.sleep(0.1)
    finally:
        stop.set()
        keeper.join(30)
    assert not keeper.is_alive()
    # said once a minute at most, not at every retry (one every 2 s)
    assert (
        sum("could not be updated" in s for s in said)
        <= 1 + (time.monotonic() - t0) // viewjobs.SAY_EVERY_SEC
    )
