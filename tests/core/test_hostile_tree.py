"""What a hostile agent can plant in the output tree never hangs, exhausts or misleads marathon.

A hand-made tree (no Docker): FIFOs, a symlink loop, symlinks out of the tree (a file and a whole
dir), a 300 MB metrics.json and a metrics.json rewritten after the verifier finished. `marathon
status` and `report` finish (pytest-timeout is the guard, never a timed assertion), stay under
300 MB RSS, and show each such cell `unreadable` or `tampered` with its reason, never as a score.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import hostile_tree
import pytest

from modes import safeio
from runner.results.model import RunModel

REPO = Path(__file__).resolve().parents[2]
RSS_CAP_KB = 300 * 1024


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile")
    out, outside = root / "out", root / "outside"
    hostile_tree.make(out, outside)
    return out, outside


def _marathon(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    return hostile_tree.run_marathon(*args)


@pytest.mark.timeout(600)
def test_status_lists_each_hostile_cell_unreadable_with_its_reason(hostile):
    out, _ = hostile
    p, rss_kb = _marathon("status", str(out), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    notes = {n["task"]: n for n in d["notes"]}
    for case, (status, phrase) in hostile_tree.EXPECT.items():
        if status == "done":
            assert case not in notes or notes[case]["status"] == "done", notes.get(case)
            continue
        assert notes[case]["status"] == status, (case, notes[case])
        assert phrase in notes[case]["note"], (case, notes[case])
    total = d["total"]
    assert total["done"] == 2 and total["unreadable"] == 8 and total["tampered"] == 1
    # the forged 1.0 partials never count: the two normal pairs score 0.2, and every hole the agent
    # could have made (all but the FIFO at harbor's own result.json) counts as a failure, flagged
    assert total["n"] == 10 and total["flagged_in_n"] == 8
    assert total["partial"] == pytest.approx(0.04)
    assert not notes["fifo-result"]["flagged"] and notes["fifo-metrics"]["flagged"]
    assert "OUTSIDE-SECRET" not in p.stdout + p.stderr
    assert 0 < rss_kb < RSS_CAP_KB, f"status peaked at {rss_kb} KB"
    text, _ = _marathon("status", str(out))
    assert text.returncode == 0
    assert "not a regular file (a FIFO)" in text.stdout and "symlink loop" in text.stdout


@pytest.mark.timeout(600)
def test_model_cells_are_never_scored_from_a_refused_or_forged_file(hostile):
    out, _ = hostile
    m = RunModel.load(out)
    for case, (status, phrase) in hostile_tree.EXPECT.items():
        c = m.cells[(case, hostile_tree.ARM)]
        assert c.status == status, (case, c.status, c.note)
        assert phrase in c.note, (case, c.note)
        if status == "done":
            assert c.partial == pytest.approx(0.2)  # the inside link is followed, the real file read
        else:
            assert c.partial is None and c.reward is None and c.pass_rate is None
    # re-reading one changed file touches its cell alone and keeps the verdict (the console's
    # incremental path)
    tdir = next((out / "fifo-metrics").rglob("fifo-metrics__*"))
    assert m.update([tdir / "verifier" / "metrics.json"]) == {("fifo-metrics", "plain")}
    assert m.cells[("fifo-metrics", "plain")].status == "unreadable"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["md", "json"])
def test_report_shows_the_reasons_and_leaks_nothing(hostile, fmt):
    out, _ = hostile
    p, _ = _marathon("report", str(out), "--format", fmt)
    assert p.returncode == 0, p.stderr
    assert "not a regular file (a FIFO)" in p.stdout and "after the verifier finished" in p.stdout
    assert "OUTSIDE-SECRET" not in p.stdout


def test_safe_open_rules_one_by_one(tmp_path, monkeypatch):
    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.mkfifo(trial / "agent" / "fifo")
    os.symlink(outside, trial / "agent" / "out")
    os.symlink("../agent/real", trial / "agent" / "in")
    (trial / "agent" / "real").write_text("{}")
    os.symlink("nowhere", trial / "agent" / "dangling")
    (trial / "agent" / "big").write_bytes(b"x" * 64)
    assert safeio.read_capped(trial / "agent" / "real", trial) == b"{}"
    assert safeio.read_capped(trial / "agent" / "in", trial) == b"{}"
    reasons = {
        name: safeio.read_capped(trial / "agent" / name, trial).reason
        for name in ("fifo", "out", "dangling", "absent")
    }
    assert reasons == {
        "fifo": "not a regular file (a FIFO)",
        "out": "symlink out of the trial dir",
        "dangling": "dangling symlink",
        "absent": "missing",
    }
    assert safeio.read_capped(outside, trial).reason == "outside the trial dir"
    assert isinstance(safeio.read_capped(trial / "agent", trial), safeio.Refused)  # a directory
    monkeypatch.setattr(safeio, "JSON_CAP", 63)  # MARATHON_MAX_JSON_BYTES=63 at start-up
    assert safeio.read_capped(trial / "agent" / "big", trial).reason.startswith("too large")
    monkeypatch.setattr(safeio, "JSON_CAP", 64)
    assert safeio.read_capped(trial / "agent" / "big", trial) == b"x" * 64
    assert safeio.read_capped(str(trial / "agent" / "real"), f"{trial}/") == b"{}"  # trailing slash
    # a stream (trajectory, log) has no cap but the same rules
    fd = safeio.open_tree_file(trial / "agent" / "big", trial, safeio.STREAM)
    assert isinstance(fd, int)
    os.close(fd)
    assert safeio.open_tree_file(trial / "agent" / "fifo", trial, safeio.STREAM).reason.startswith("not a")


def test_console_file_view_refuses_and_never_blocks(tmp_path):
    from console.fileindex import LineSource

    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    os.mkfifo(trial / "agent" / "trajectory.json")
    (tmp_path / "shadow").write_text("root:SECRET-HASH:19000:0:99999:7:::\n")
    os.symlink(tmp_path / "shadow", trial / "agent" / "leak")
    with open(trial / "agent" / "sparse.bin", "wb") as fh:
        fh.truncate(2 << 30)  # 2 GB, sparse
    fifo = LineSource(trial / "agent" / "trajectory.json", trial)
    assert fifo.error and "not a regular file" in fifo.error and not fifo.missing
    leak = LineSource(trial / "agent" / "leak", trial)
    assert leak.error and "symlink out of the trial dir" in leak.error
    assert leak.get_line(0) == ""
    big = LineSource(trial / "agent" / "sparse.bin", trial)
    assert big.error is None and big.size == 2 << 30
    big.index_more()  # one chunk: never the whole file
    assert 0 < big.scanned < big.size
    big.close()


def test_console_file_view_indexes_at_most_max_lines_of_a_file_of_newlines(tmp_path, monkeypatch):
    """Found by a probe of the file views (2026-12-06): a 200 MB log of newlines alone took 1.6 GB
    to index (8 bytes a line). The index stops at ``MAX_LINES`` whole lines and says so."""
    from console import fileindex
    from console.fileindex import LineSource

    monkeypatch.setattr(fileindex, "MAX_LINES", 1000)
    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    log = trial / "agent" / "log.txt"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(5000)))
    src = LineSource(log, trial)
    while src.index_more(4096):
        pass
    assert src.capped and src.complete and src.line_count == 1000
    assert src.get_line(999) == "line 999" and src.get_line(1000) == ""
    assert not src.index_more()  # nothing more, ever, until the file is replaced
    src.close()


def test_host_writes_replace_planted_fifos_symlinks_and_dirs(tmp_path):
    """The arms' host-side writes into /logs/agent: a planted name neither blocks nor redirects."""
    from modes.receipt import RECEIPT_NAME, Receipt

    agent = tmp_path / "trial" / "agent"
    agent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    os.mkfifo(agent / RECEIPT_NAME)
    os.symlink(victim, agent / "trajectory.json")
    (agent / "loopx-body.txt").mkdir()
    os.mkfifo(agent / f"{RECEIPT_NAME}.tmp")  # the old fixed temp name, planted too
    Receipt("plain", None, [], "codex", "0", "m", {}).write(agent)
    safeio.write_atomic(agent / "trajectory.json", "{}")
    safeio.write_atomic(agent / "loopx-body.txt", "body")
    assert json.loads((agent / RECEIPT_NAME).read_text())["arm"] == "plain"
    assert not (agent / "trajectory.json").is_symlink() and (agent / "trajectory.json").read_text() == "{}"
    assert (agent / "loopx-body.txt").read_text() == "body"
    assert [p.name.split(".planted-")[0] for p in agent.glob("*.planted-*")] == ["loopx-body.txt"]
    assert victim.read_text() == "untouched"
    os.symlink(victim, agent / "appserver.stderr.log")
    fd = safeio.open_append(agent / "appserver.stderr.log")
    os.write(fd, b"log line\n")
    os.close(fd)
    assert victim.read_text() == "untouched"
    assert (agent / "appserver.stderr.log").read_bytes() == b"log line\n"


def test_evidence_copy_never_follows_links_out(tmp_path):
    """What the transport extracts: regular files and dirs, inside the copied tree only."""
    import io
    import tarfile

    from agents.transport import extract_evidence

    agent = tmp_path / "trial" / "agent"
    agent.mkdir(parents=True)
    elsewhere = tmp_path / "home-ssh"
    elsewhere.mkdir()
    os.symlink(elsewhere, agent / "loopx")  # planted before the copy
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, kind, data in [
            ("state", tarfile.DIRTYPE, b""),
            ("state/ok.json", tarfile.REGTYPE, b"{}"),
            ("state/leak", tarfile.SYMTYPE, b"/etc/shadow"),
            ("state/inside", tarfile.SYMTYPE, b"ok.json"),
            ("state/fifo", tarfile.FIFOTYPE, b""),
            ("state/hard", tarfile.LNKTYPE, b"/etc/shadow"),
        ]:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                ti.linkname = data.decode()
                data = b""
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data) if data else None)
    safeio.ensure_dir(agent / "loopx", agent)
    assert (agent / "loopx").is_dir() and not (agent / "loopx").is_symlink()
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tf:
        assert extract_evidence(tf, agent / "loopx", agent) == ["state/ok.json"]
    got = sorted(str(p.relative_to(agent / "loopx")) for p in (agent / "loopx").rglob("*"))
    assert got == ["state", "state/ok.json"]
    assert list(elsewhere.iterdir()) == []


def test_a_dir_swapped_for_a_symlink_after_it_was_opened_still_receives_the_write(tmp_path):
    """A probe's race: a process the agent left beside the shared agent dir swapped a dir for a
    symlink between the host's check and its write, and the host wrote outside the trial. The
    host now writes through the descriptor of the dir it checked: the swap, made here at the
    worst moment, changes nothing."""
    agent = tmp_path / "trial" / "agent"
    (agent / "sessions").mkdir(parents=True)
    outside = tmp_path / "home"
    outside.mkdir()
    dir_fd = safeio.open_dir_in(agent, "sessions/2026")
    try:
        os.rename(agent / "sessions", agent / "moved")  # the agent's swap, after the open
        os.symlink(outside, agent / "sessions")
        safeio.write_in(dir_fd, "rollout.jsonl", b"{}\n")
    finally:
        os.close(dir_fd)
    assert list(outside.iterdir()) == []
    assert (agent / "moved" / "2026" / "rollout.jsonl").read_bytes() == b"{}\n"
    # opened again, the planted link is moved aside (kept) and a real dir made in its place
    safeio.ensure_dir(agent / "sessions" / "x", agent)
    assert (agent / "sessions").is_dir() and not (agent / "sessions").is_symlink()
    assert [p.name for p in agent.iterdir() if p.name.startswith("sessions.planted-")] and not any(
        outside.iterdir()
    )
    with pytest.raises(ValueError):
        safeio.open_dir_in(agent, "../home")


def test_runner_readers_do_not_block_on_planted_files(hostile, tmp_path):
    """The runner's own readers (done check, void classification, score detail) use the same rules."""
    from runner.ops import void
    from runner.results.scan import pair_done

    out, _ = hostile
    tdir = next((out / "fifo-metrics").rglob("fifo-metrics__*"))
    # the trial's own result says it finished: done, read at once (the FIFO metrics are not its verdict)
    assert void.classify_trial(tdir).kind == "done"
    assert pair_done(out, "fifo-result", "plain")  # the job's own result says done; nothing blocks
    trial = tmp_path / "t"
    trial.mkdir()
    os.mkfifo(trial / "exception.txt")
    os.mkfifo(trial / "result.json")
    v = void.classify_trial(trial)
    assert (v.kind, v.rule) == ("infra", "no_result")  # a FIFO is no result: never read, never waited on


@pytest.mark.timeout(600)
def test_console_shows_each_cell_unreadable_or_tampered_and_the_drill_down_refuses(hostile):
    import asyncio
    import time

    from textual_screen import screen_text

    from console import view
    from console.app import make_app
    from console.screens.drill import FILES, DrillScreen
    from console.widgets.grid import Grid

    out, _ = hostile

    async def go() -> list[str]:
        app = make_app(out, docker=False, offer_start=False)
        screens = []
        async with app.run_test(size=(140, 40)) as pilot:
            deadline = time.monotonic() + 120
            while not (app.main.cells and app.main.last_change_at is not None):
                assert time.monotonic() < deadline, "no grid"
                await pilot.pause(0.2)
            for case, (status, phrase) in hostile_tree.EXPECT.items():
                cell = app.main.cells[(case, hostile_tree.ARM)]
                assert view.status_of(cell) == status
                assert phrase in view.cell_detail(case, hostile_tree.ARM, cell)
            app.screen.query_one(Grid).move_to("out-receipt", hostile_tree.ARM)
            await pilot.pause()
            await pilot.press("enter")
            for i in range(len(FILES)):
                while not (isinstance(app.screen, DrillScreen) and app.screen.source is not None):
                    assert time.monotonic() < deadline, "no drill-down"
                    await pilot.pause(0.2)
                await pilot.pause(0.3)
                screens.append(screen_text(app))
                if i + 1 < len(FILES):
                    app.screen.source = None
                    await pilot.press("tab")
        return screens

    screens = asyncio.run(go())
    text = "\n".join(screens)
    assert "unreadable: goal_receipt.json: symlink out of the trial dir" in text
    assert "unreadable: trajectory.json: not a regular file (a FIFO)" in text
    assert "OUTSIDE-SECRET" not in text


def test_a_crafted_goal_store_is_refused_or_cut_short(tmp_path, monkeypatch):
    """The docker-exec route opens codex's goal store on the host, and the agent is root where it
    is written: a ``thread_goals`` view that counts forever held the arm's collection (a review).
    A view is refused, and a query that runs past ``GOAL_STORE_SEC`` is interrupted."""
    import sqlite3

    from agents import session

    good = tmp_path / "goals_1.sqlite"
    with sqlite3.connect(good) as con:
        con.execute("CREATE TABLE thread_goals (thread_id TEXT PRIMARY KEY, status) WITHOUT ROWID")
        con.execute("INSERT INTO thread_goals VALUES ('t1', 'complete'), ('t2', 7)")
    assert [session.read_goal_status(good, t) for t in ("t1", "t2", "t3")] == ["complete", None, None]

    view = tmp_path / "goals_2.sqlite"
    with sqlite3.connect(view) as con:
        con.execute(
            "CREATE VIEW thread_goals AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
            "SELECT 't1' AS thread_id, 'x' || i AS status FROM n WHERE i < 0"
        )
    with pytest.raises(sqlite3.DatabaseError, match="thread_goals is view, not a table"):
        session.read_goal_status(view, "t1")
    (tmp_path / "goals_3.sqlite").touch()
    with pytest.raises(sqlite3.DatabaseError, match="thread_goals is missing"):
        session.read_goal_status(tmp_path / "goals_3.sqlite", "t1")

    slow = tmp_path / "goals_4.sqlite"  # a table the query must scan whole, past the limit
    with sqlite3.connect(slow) as con:
        con.execute("CREATE TABLE thread_goals (thread_id TEXT, status TEXT)")
        con.execute(
            "INSERT INTO thread_goals WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
            "WHERE i < 20000) SELECT 'x' || i, 'active' FROM n"
        )
    assert session.read_goal_status(slow, "x20000") == "active"
    monkeypatch.setattr(session, "GOAL_STORE_SEC", 0.0)
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        session.read_goal_status(slow, "x20000")


def test_an_evidence_tar_writes_no_sparse_member_and_nothing_outside_what_was_asked(tmp_path):
    """A review: the agent is root where ``tar cf -`` runs, so the tar is its word. A sparse
    member (10 KB of tar declaring 20 MiB; a TiB the same way) was written out as zeros, and a
    member outside the dir asked for replaced the host's own files in the agent dir."""
    import io
    import tarfile

    from agents.transport import extract_evidence

    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "codex-config.toml").write_text("the host's")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        big = tarfile.TarInfo("sessions/big.jsonl")
        big.size = 1
        big.pax_headers = {"GNU.sparse.map": f"{(20 << 20) - 1},1", "GNU.sparse.size": str(20 << 20)}
        tf.addfile(big, io.BytesIO(b"x"))
        for name, data in (("sessions/ok.jsonl", b"{}\n"), ("codex-config.toml", b"the agent's")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tf:
        assert extract_evidence(tf, agent, agent, top="sessions") == ["sessions/ok.jsonl"]
    assert (agent / "sessions" / "ok.jsonl").read_bytes() == b"{}\n" and not (
        agent / "sessions" / "big.jsonl"
    ).exists()
    assert sum(p.stat().st_size for p in agent.rglob("*") if p.is_file()) < 1024
    assert (agent / "codex-config.toml").read_text() == "the host's"
