"""The scan index is a cache: deleting it, corrupting it, two processes writing it at once, an
index of another user and a file changed behind its back never change a figure.

Every test compares against a scan that reads every file (``RunModel.load(out, index=False)``), on
the recorded real harbor trees. The tree is aged past ``RACY_NS`` first: the index never stores a
file changed less than that before a scan.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.results import index as scan_index
from runner.results.model import RunModel
from runner.results.report import build_report, render
from runner.results.tree import INDEX_DIR, INDEX_FILE

REPO = Path(__file__).resolve().parents[2]


def _age(out: Path) -> Path:
    """Wait until every file of the fresh copy is older than the index's racy window."""
    time.sleep(scan_index.RACY_NS / 1e9 + 0.2)
    return out


@pytest.fixture(scope="module")
def aged(core_tree, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scan_index") / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    return _age(out)


def figures(out: Path, index: bool = True) -> str:
    """Everything `marathon report --format json` shows, but the time it was made."""
    rep = build_report(RunModel.load(out, index=index), "all")
    rep.pop("generated_at", None)
    return render(rep, "json")


def _index(out: Path) -> Path:
    return out / INDEX_DIR / INDEX_FILE


def test_a_warm_index_serves_every_finished_attempt_and_the_same_figures(aged):
    plain = figures(aged, index=False)
    assert not (aged / INDEX_DIR).exists()  # a scan without the index leaves nothing
    cold = RunModel.load(aged)
    assert _index(aged).is_file() and cold.index_hits[0] == 0
    warm = RunModel.load(aged)
    hits, misses = warm.index_hits
    # every settled attempt is served; the errored ones with an exception are read each time too
    # when clean, so the only misses are attempts the index may not store (none in this tree)
    assert hits >= 8 and hits + misses == warm.n_attempts
    assert warm.cells == RunModel.load(aged, index=False).cells
    assert figures(aged) == plain


def test_deleting_the_index_changes_no_figure(aged):
    before = figures(aged)
    shutil.rmtree(aged / INDEX_DIR)
    assert figures(aged) == before == figures(aged, index=False)
    assert RunModel.load(aged).index_hits[0] > 0  # made again


@pytest.mark.parametrize("how", ["garbage", "truncated", "garbage_rows", "empty"])
def test_a_corrupt_index_changes_no_figure_and_is_made_again(aged, how):
    plain = figures(aged, index=False)
    RunModel.load(aged)
    p = _index(aged)
    if how == "garbage":
        p.write_bytes(os.urandom(4096))
    elif how == "truncated":
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        p.write_bytes(b"")
    else:  # a database whose entries are nonsense
        import sqlite3

        conn = sqlite3.connect(p)
        conn.execute("UPDATE stamps SET entry = '[1, 2' WHERE rowid % 3 = 0")
        conn.execute('UPDATE stamps SET entry = \'["k", [], ["a", [], [[1]]]]\' WHERE rowid % 3 = 1')
        # one attempt's entry under another's key: its files are not the other's
        first = conn.execute("SELECT entry FROM stamps WHERE rowid % 3 = 2 LIMIT 1").fetchone()[0]
        conn.execute("UPDATE stamps SET entry = ? WHERE rowid % 3 = 2", (first,))
        conn.commit()
        conn.close()
    assert figures(aged) == plain
    assert figures(aged) == plain
    assert RunModel.load(aged).index_hits[0] > 0


def test_two_processes_scanning_and_writing_at_once_change_no_figure(aged, tmp_path):
    """Real processes, each deleting or filling the index while the other reads it."""
    plain = figures(aged, index=False)
    script = tmp_path / "scan.py"
    script.write_text(
        "import shutil, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from runner.results.model import RunModel\n"
        "from runner.results.report import build_report, render\n"
        "out, n, drop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == '1'\n"
        "for i in range(n):\n"
        "    if drop and i % 3 == 0:\n"
        "        shutil.rmtree(out + '/.marathon', ignore_errors=True)\n"
        "    rep = build_report(RunModel.load(out), 'all')\n"
        "    rep.pop('generated_at', None)\n"
        "    print(render(rep, 'json'), end='')\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(aged), "6", drop], stdout=subprocess.PIPE, text=True
        )
        for drop in ("0", "1")
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    for text in outs:
        reports = text.splitlines()
        assert len(reports) == 6 and set(reports) == {plain.rstrip("\n")}
    assert figures(aged) == plain


def test_an_index_of_another_user_or_writable_by_others_is_ignored(aged):
    RunModel.load(aged)
    p = _index(aged)
    plain = RunModel.load(aged, index=False).cells
    if os.geteuid() == 0:
        os.chown(p, 12345, 12345)
        m = RunModel.load(aged)
        assert m.index_hits is None and m.cells == plain  # not used at all
        assert os.stat(p).st_uid == 12345  # and never rewritten
        os.chown(p, 0, 0)
    os.chmod(p, 0o666)
    m = RunModel.load(aged)
    assert m.index_hits is None and m.cells == plain
    os.chmod(p, 0o600)
    os.chmod(aged / INDEX_DIR, 0o777)
    assert RunModel.load(aged).index_hits is None
    os.chmod(aged / INDEX_DIR, 0o700)
    assert RunModel.load(aged).index_hits[0] > 0


def test_an_unreadable_index_is_ignored(aged):
    RunModel.load(aged)
    p = _index(aged)
    p.unlink()
    p.symlink_to("/etc/hostname")
    try:
        m = RunModel.load(aged)
        assert m.index_hits is None and m.cells == RunModel.load(aged, index=False).cells
        assert p.is_symlink()  # not followed, not replaced
    finally:
        p.unlink()


def test_a_fifo_in_place_of_the_clock_probe_neither_hangs_a_scan_nor_changes_a_figure(aged, tmp_path):
    """The index's clock probe (``.marathon/clock``) replaced by a FIFO: the scan opened it to
    write and waited for a reader forever (`marathon status`, `report` and `plan-size` hung)."""
    plain = figures(aged, index=False)
    out = tmp_path / "out"
    shutil.copytree(aged, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    (out / INDEX_DIR).mkdir(mode=0o700)
    os.mkfifo(out / INDEX_DIR / "clock")
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from runner.results.model import RunModel\n"
        "from runner.results.report import build_report, render\n"
        "rep = build_report(RunModel.load(sys.argv[1]), 'all'); rep.pop('generated_at', None)\n"
        "sys.stdout.write(render(rep, 'json'))\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=120
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == plain.replace(str(aged), str(out))
    assert stat.S_ISFIFO(os.lstat(out / INDEX_DIR / "clock").st_mode)  # left as it was


def test_a_dir_name_that_is_not_utf8_is_read_every_time_and_breaks_no_scan(aged, tmp_path):
    """A task dir renamed to a name with a byte that is not UTF-8: sqlite refused the name, and
    every later `marathon status`, `report` and `plan-size` of the tree exited with an internal error."""
    out = tmp_path / "out"
    shutil.copytree(aged, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    task = next(p for p in sorted(out.iterdir()) if not p.name.startswith("."))
    os.rename(os.fsencode(task), os.fsencode(task) + b"\xff")
    _age(out)
    plain = figures(out, index=False)
    assert figures(out) == plain and _index(out).is_file()  # the other attempts are stored
    warm = RunModel.load(out)
    assert warm.index_hits[0] > 0 and warm.index_hits[1] > 0  # and the renamed task's read again
    assert figures(out) == plain


def test_the_readers_size_cap_is_part_of_what_an_entry_depends_on(aged, tmp_path):
    """MARATHON_MAX_JSON_BYTES=1 read every cell unreadable on a cold tree and done from a warm
    index (a probe's find): the cap is in the index's fingerprint."""
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from runner.results.model import RunModel\n"
        "m = RunModel.load(sys.argv[1], index=sys.argv[2] == '1')\n"
        "print(sorted((k, c.status) for k, c in m.cells.items()))\n"
    )

    def statuses(index: bool, cap: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "MARATHON_MAX_JSON_BYTES"}
        if cap:
            env["MARATHON_MAX_JSON_BYTES"] = cap
        got = subprocess.run([sys.executable, "-c", script, str(aged), "1" if index else "0"],
                             capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert got.returncode == 0, got.stderr
        return got.stdout

    statuses(True, None)  # warm under the default cap
    assert statuses(True, "1") == statuses(False, "1") != statuses(False, None)
    assert statuses(True, None) == statuses(False, None)


def _rewrite_behind_the_index(out: Path) -> None:
    """Index the aged tree warm, then rewrite calc-partial x nop's metrics.json in place as an
    agent's leftover process could: the same size, its mtime set back."""
    RunModel.load(out)
    cell = RunModel.load(out).cells[("calc-partial", "nop")]
    assert cell.status == "done" and cell.partial == pytest.approx(0.2)
    att = next(a for a in cell.attempts if a.stamp == cell.scored_by)
    (trial,) = att.trials
    metrics = Path(att.job_dir) / trial / "verifier" / "metrics.json"
    st = os.stat(metrics)
    metrics.write_bytes(json.dumps({**json.loads(metrics.read_bytes()), "partial_score": 0.9}).encode())
    os.utime(metrics, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_file_changed_behind_the_index_is_never_served_stale(core_tree, tmp_path):
    """An agent's leftover process rewrites metrics.json in place, same size, mtime set back: the
    index must not show the old score (its ctime changed), and the tamper rule still holds."""
    out = tmp_path / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(out)
    _rewrite_behind_the_index(out)
    after = RunModel.load(out)
    assert after.cells == RunModel.load(out, index=False).cells
    assert after.cells[("calc-partial", "nop")].status == "tampered"


def test_an_unchecked_load_says_so_and_its_refresh_is_the_truth(core_tree, tmp_path):
    """``trust_index`` (the console's first paint) serves the entries without checking their
    files: a score rewritten behind the index shows as it was, the model says it is unchecked,
    and ``refresh`` (the checked scan that follows) gives the figures of a scan that reads every
    file. Commands never trust: their load is checked."""
    out = tmp_path / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(out)
    _rewrite_behind_the_index(out)
    first = RunModel.load(out, trust_index=True)
    assert not first.checked and first.index_hits[0] > 0
    assert first.cells[("calc-partial", "nop")].partial == pytest.approx(0.2)  # as indexed
    assert RunModel.load(out).checked
    first.refresh()
    assert first.checked and first.cells == RunModel.load(out, index=False).cells
    assert first.cells[("calc-partial", "nop")].status == "tampered"


def test_an_unchecked_load_of_a_copied_tree_checks_every_entry(core_tree, tmp_path):
    """A tree copied with its index (an rsync from a fleet host, a test's copy): its dirs are other
    inodes, so no arm dir's listing is served and no entry is taken unchecked."""
    src = tmp_path / "src"
    shutil.copytree(core_tree, src, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(src)
    RunModel.load(src)
    assert RunModel.load(src, trust_index=True)._scan.checked is False
    copy = tmp_path / "copy"
    shutil.copytree(src, copy, symlinks=True)
    assert (copy / INDEX_DIR).is_dir()
    first = RunModel.load(copy, trust_index=True)
    assert first.checked and first.cells == RunModel.load(copy, index=False).cells


def test_an_unchecked_load_without_an_index_reads_every_file_and_stores_them(core_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(out)
    first = RunModel.load(out, trust_index=True)
    assert first.checked and first.index_hits[0] == 0  # nothing was taken unchecked
    assert first.cells == RunModel.load(out, index=False).cells
    hits, misses = RunModel.load(out).index_hits  # what it read is in the index, for the next scan
    assert hits >= 8 and misses == 0


def test_dir_listings_come_from_the_index_only_while_their_dirs_are_unchanged(core_tree, tmp_path):
    """The task and arm dirs' listings are remembered (a 2,010-task tree has 12,000 of them): a new
    attempt, a new arm dir, a removed one, a dir swapped for a symlink and nonsense rows in the
    table each show at once, as a scan that lists every dir shows them."""
    import sqlite3

    out = tmp_path / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(out)
    RunModel.load(out)
    conn = sqlite3.connect(_index(out))
    stored = dict(conn.execute("SELECT path, names FROM dirs").fetchall())
    conn.close()
    assert stored["calc-partial"] == "crash/nop/oracle/partial" and "calc-partial/nop" in stored
    assert figures(out) == figures(out, index=False)

    src = out / "calc-partial" / "nop"
    (stamp,) = os.listdir(src)
    shutil.copytree(src / stamp, src / "20991231T235959Z", symlinks=True)  # a new attempt of a pair
    goal = out / "calc-partial" / "goal"
    shutil.copytree(src, goal, symlinks=True)  # a new arm dir
    for st in os.listdir(goal):
        (goal / st / "nop").rename(goal / st / "goal")
    shutil.rmtree(out / "build-gate" / "nop")  # a removed one
    shutil.rmtree(out / "two-stage" / "oracle")
    os.symlink(out / "words-passrate" / "oracle", out / "two-stage" / "oracle")  # a dir swapped for a symlink
    m = RunModel.load(out)
    assert m.cells.keys() == RunModel.load(out, index=False).cells.keys()
    assert {"20991231T235959Z"} <= {a.stamp for a in m.cells[("calc-partial", "nop")].attempts}
    assert ("calc-partial", "goal") in m.cells and m.cells[("build-gate", "nop")].status == "pending"
    assert not m.cells[("two-stage", "oracle")].attempts
    assert figures(out) == figures(out, index=False)

    conn = sqlite3.connect(_index(out))
    conn.execute("UPDATE dirs SET names = 'no-such-arm/../x'")
    conn.execute("UPDATE dirs SET ident = 'nonsense' WHERE rowid % 2 = 0")
    conn.commit()
    conn.close()
    assert figures(out) == figures(out, index=False)


def test_an_attempts_host_json_is_looked_for_on_every_scan_behind_the_index(core_tree, tmp_path):
    """``host.json`` sits in the attempt's stamp dir, outside the files an index entry validates:
    every scan looks for it again (the name itself, a link not followed), so one that appears,
    changes, turns into a symlink or goes shows at once, as in a scan without the index."""
    out = tmp_path / "out"
    shutil.copytree(core_tree, out, symlinks=True, ignore=shutil.ignore_patterns(INDEX_DIR))
    _age(out)
    RunModel.load(out)
    key = ("calc-partial", "nop")
    warm = RunModel.load(out)
    assert warm.index_hits[0] >= 8 and warm.hosts() == {} and warm.cells[key].scored_on is None
    cell = warm.cells[key]
    att = next(a for a in cell.attempts if a.stamp == cell.scored_by)
    host = Path(att.job_dir).parent / "host.json"

    def scored_on() -> str | None:
        m, plain = RunModel.load(out), RunModel.load(out, index=False)
        assert m.index_hits[0] >= 8 and m.cells == plain.cells and m.hosts() == plain.hosts()
        return m.cells[key].scored_on

    host.write_text(json.dumps({"host": "h1", "node_id": "n1", "engine_id": "e1"}))
    assert scored_on() == "h1" and "h1" in RunModel.load(out).hosts()
    host.write_text(json.dumps({"host": "h2", "node_id": "n1", "engine_id": "e1", "node_ip": "10.0.0.2"}))
    assert scored_on() == "h2/10.0.0.2"
    host.unlink()
    elsewhere = tmp_path / "host.json"
    elsewhere.write_text(json.dumps({"host": "h3", "node_id": "n1", "engine_id": "e1"}))
    host.symlink_to(elsewhere)  # never followed: no host
    assert scored_on() is None
    host.unlink()
    assert scored_on() is None and RunModel.load(out).hosts() == {}


def test_an_entrys_identities_are_checked_in_the_format_they_are_stored_in(tmp_path):
    """``_idents`` (the check of every served entry) writes each identity itself, for speed: in
    the very format ``_ident`` stores (else no entry would ever be served again), and a change
    of any file shows."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "result.json").write_text("{}")
    rels = ["", "job", "job/result.json"]
    stored = "|".join(scan_index._ident(os.lstat(tmp_path / r)) for r in rels)
    assert scan_index._idents(str(tmp_path), rels) == stored
    (tmp_path / "job" / "result.json").write_text("{} ")
    assert scan_index._idents(str(tmp_path), rels) != stored
