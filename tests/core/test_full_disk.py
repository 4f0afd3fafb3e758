"""What marathon's own writers do when the disk fills or a second filesystem is in the way: each on a
tmpfs mounted for the test (the kernel's own short writes, ENOSPC and EXDEV; nothing simulated).

The rule: a write that cannot be whole raises (or says so in one line) and never leaves a file a
later read trusts; once space is freed the next write is read. Found by filling a tmpfs under each
writer (2026-12-06): a journal line cut short was taken as written and swallowed the next one, a
report over a full disk destroyed the one that was there, a void across filesystems left a partial
copy the scan counted as a second attempt, and an empty claim file read as a pair running.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner.ops.gateway.attempts import AttemptRecord
from runner.ops.gateway.process import GatewayState, record_outage
from runner.results import caps as C
from runner.results.events import EventKind, append_event, read_events
from runner.results.ledger import read_outages
from runner.results.scan import pair_done
from runner.results.tree import CLAIMS_DIR, VOID_README, iter_trial_dirs, voided_root
from runner.schedule import claims
from runner.schedule.lock import me

REPO = Path(__file__).resolve().parents[2]
PAD = "x" * 6000  # longer than what is left of a journal's last page: the write is cut short


def _fill(d: Path) -> Path:
    """Fill the filesystem of ``d`` to its last byte; the filler's path (remove it to free space)."""
    filler = d / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                if os.write(fd, b"\0" * 4096) < 4096:
                    break
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    finally:
        os.close(fd)
    return filler


def _marathon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marathon.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _event(out: Path, n: int, pad: str = "") -> None:
    append_event(out, {"ts": "t", "event": EventKind.PREFLIGHT_NOTE, "run_id": "r", "n": n, "pad": pad})


def _events(out: Path) -> list[int]:
    return [e["n"] for e in read_events(out) if "n" in e]


def _cut(out: Path, n: int, pad: str = "") -> None:
    C.write_cut(out, C.Reached(C.ARM, f"arm{pad}", 2.0, 1.0), [(f"t{n}", "goal", "s")])


def _cuts(out: Path) -> list[int]:
    return [int(a["task"][1:]) for d in C.read_cuts(out) for a in d["attempts"]]


def _outage(out: Path, n: int, pad: str = "") -> None:
    C.gateway_dir(out).mkdir(parents=True, exist_ok=True)  # made by the gateway
    st = GatewayState(str(out), 1, 1, "b", "i", None, "http://127.0.0.1:1", "K", 0.0, 0.0)
    record_outage(out, None, st, 1.0, st, f"test{pad}", [AttemptRecord(f"a{n}", "h", f"t{n}", "goal", "s")])


def _outages(out: Path) -> list[int]:
    return sorted(int(t[1:]) for o in read_outages(out) for (t, _a, _s) in o.attempts)


@pytest.mark.parametrize(
    "write, read",
    [(_event, _events), (_cut, _cuts), (_outage, _outages)],
    ids=["events.jsonl", "cuts", "outages.jsonl"],
)
def test_a_journal_line_the_full_disk_cuts_short_raises_and_the_next_line_is_read(
    tmp_path, mount_tmpfs, write, read
):
    out = mount_tmpfs(tmp_path / "out", "256k")
    write(out, 1)
    (journal,) = [p for p in out.rglob("*") if p.is_file()]
    filler = _fill(out)
    with pytest.raises(OSError) as got:
        write(out, 2, PAD)
    assert got.value.errno == errno.ENOSPC
    assert not journal.read_bytes().endswith(b"\n")  # the write was cut short: a torn line is left
    assert read(out) == [1]
    filler.unlink()
    write(out, 3)
    assert read(out) == [1, 3]  # the torn line is ended before the next one: 3 is its own line


def test_a_report_over_a_full_disk_leaves_the_one_that_was_there(mini_tree, tmp_path, mount_tmpfs):
    disk = mount_tmpfs(tmp_path / "disk", "1m")
    target = disk / "r.html"
    target.write_text("the report of yesterday\n")
    filler = _fill(disk)
    r = _marathon("report", str(mini_tree), "--format", "html", "--out", str(target))
    # exit 6 as for any write on a full disk (it was 2, against the README), where and what is free
    assert r.returncode == 6 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"no space left on the disk of {target} (ENOSPC, 0.0 GB free there now)" in r.stderr
    assert target.read_text() == "the report of yesterday\n"
    assert sorted(os.listdir(disk)) == ["filler", "r.html"]  # no temp file left either
    filler.unlink()
    r = _marathon("report", str(mini_tree), "--format", "md", "--out", str(target))
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"wrote {target} (md, {target.stat().st_size} bytes)"  # bytes, not characters
    d = disk / "a-dir"
    d.mkdir()
    r = _marathon("report", str(mini_tree), "--out", str(d))
    assert r.returncode == 2 and "is a directory" in r.stderr and d.is_dir() and not os.listdir(d)
    # a name with a trailing / is a dir: the file r.html was replaced, "newdir/" made a file newdir
    before = target.read_bytes()
    for name in (f"{target}/", f"{disk / 'newdir'}/"):
        r = _marathon("report", str(mini_tree), "--out", name)
        assert r.returncode == 2 and "not a directory" in r.stderr, r.stderr
    assert target.read_bytes() == before and not (disk / "newdir").exists()


def _trial(out: Path, task: str = "calc-partial", arm: str = "oracle") -> Path:
    (trial,) = [t for job in (out / task / arm).glob(f"*/{arm}") for t in iter_trial_dirs(job)]
    return trial


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*")) if d.exists() else []


def test_a_void_across_filesystems_moves_nothing_until_it_can_move_everything(
    mini_tree, tmp_path, mount_tmpfs
):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out)
    trial = _trial(out)
    os.mkfifo(trial / "agent" / "planted.fifo")  # the agent's: carried as a FIFO, never opened
    before = _files(out)
    vroot = voided_root(out)
    mount_tmpfs(vroot.parent, "8k")  # the voided root: a filesystem of its own, too small
    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "nothing moved" in r.stderr and "No space left on device" in r.stderr
    assert len(r.stderr) < 600, r.stderr  # the first failed file and a count, not a list of them all
    assert _files(out) == before and pair_done(out, "calc-partial", "oracle")  # no README left in it
    assert not [p for p in vroot.parent.rglob("*") if p.is_file()]  # no partial copy, hidden or not

    subprocess.run(["umount", "-l", str(vroot.parent)], check=True)
    mount_tmpfs(vroot.parent, "64m")
    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    dest = Path(json.loads(r.stdout)["report"]["dest"])
    assert dest.is_relative_to(vroot) and (dest / VOID_README).read_text().startswith("# Voided: a test")
    assert not trial.exists() and not pair_done(out, "calc-partial", "oracle")
    (moved,) = [p for p in dest.rglob("planted.fifo")]
    assert stat.S_ISFIFO(moved.lstat().st_mode)
    assert [n for n in os.listdir(dest.parent) if n.startswith(".")] == []


def test_a_void_on_a_full_disk_moves_nothing_and_goes_through_once_space_is_freed(
    mini_tree, tmp_path, mount_tmpfs
):
    disk = mount_tmpfs(tmp_path / "disk", "4m")
    out = disk / "out"
    shutil.copytree(mini_tree, out)
    trial = _trial(out)
    before = _files(out)
    filler = _fill(disk)
    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "nothing moved" in r.stderr, r.stderr
    assert _files(out) == before and pair_done(out, "calc-partial", "oracle")
    filler.unlink()
    r = _marathon("void", str(trial), str(out), "--reason", "a test", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    dest = Path(json.loads(r.stdout)["report"]["dest"])
    assert (dest / VOID_README).read_text().startswith("# Voided: a test") and not trial.exists()


def test_a_claim_the_full_disk_refuses_leaves_no_file_that_reads_as_running(tmp_path, mount_tmpfs):
    out = mount_tmpfs(tmp_path / "out", "64k")
    (out / CLAIMS_DIR).mkdir(parents=True)
    _fill(out)
    with pytest.raises(OSError) as got:
        claims.try_claim(out, "calc-partial", "oracle", me())
    assert got.value.errno == errno.ENOSPC
    assert os.listdir(out / CLAIMS_DIR) == []


def test_a_device_node_an_agent_made_does_not_stop_a_void_across_filesystems_without_root(tmp_path):
    """Found by a review (2026-12-06): making a device node again needs CAP_MKNOD, so a runner
    without it failed every cross-filesystem void of such a trial (an agent is root in its container
    and may make one); a placeholder file takes its place. The copy runs without CAP_MKNOD
    (``setpriv --bounding-set -mknod``)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("making the device node needs root; dropping CAP_MKNOD needs setpriv")
    os.mknod(tmp_path / "dev", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code = "import sys; from runner.ops.void import _copy_entry; _copy_entry(sys.argv[1], sys.argv[2])"
    r = subprocess.run(["setpriv", "--bounding-set", "-mknod", sys.executable, "-c", code,
                        str(tmp_path / "dev"), str(tmp_path / "copy")],
                       cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert stat.S_ISREG((tmp_path / "copy").lstat().st_mode)
    assert "a character device was here" in (tmp_path / "copy").read_text()
