"""The ledger's sums kept between processes (runner.results.ledger_memo): a warm scan reads only the
ledger's new lines, and the sums it ends with are always those of reading every line afresh,
whatever happened to the files in between (appended, torn, edited in place, truncated, replaced,
a second host's file, another version of the readers)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

from handmade_tree import STAMP, TASKS
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.ops.gateway.server import LedgerWriter
from runner.results import ledger as L
from runner.results import ledger_memo
from runner.results.model import RunModel
from runner.results.report import build_report
from runner.results.tree import gateway_dir, ledger_path, voided_root


def _row(n: int, task: str = "t01", arm: str = "plain", stamp: str = STAMP, host: str | None = None) -> dict:
    return {
        "kind": L.CALL, "v": L.SCHEMA, "at": 1.7e9 + n, "gateway": "g1", "host": host,
        "attempt": f"{arm}-{task}", "task": task, "arm": arm, "stamp": stamp, "method": "POST",
        "path": "/v1/responses", "request_id": f"{arm}-{task}.{n}", "params": {"model": "gpt-5.5"},
        "outcome": L.OK, "status": 200, "usage": {"input": 1000 + n, "cached": 10, "output": 7, "reasoning": 2},
    }  # fmt: skip


def _line(n: int, **kw) -> bytes:
    return (json.dumps(_row(n, **kw)) + "\n").encode()


def _sums(led: L.Ledger) -> str:
    """The sums, in an order that does not depend on which file was read first."""
    per = {}
    for key, u in led.attempts.items():
        d = dataclasses.asdict(u)
        d["params"] = {k: sorted(v) for k, v in u.params.items()}
        d["by_price"] = sorted(([*k, v] for k, v in u.by_price.items()), key=json.dumps)
        per["/".join(key)] = d
    return json.dumps({"n_calls": led.n_calls, "gateways": led.gateways, "attempts": per}, sort_keys=True)


def test_a_warm_scan_reads_only_the_new_lines_and_an_edit_anywhere_is_read_again(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    shutil.copytree(voided_root(handmade), voided_root(out), symlinks=True)
    w = LedgerWriter(ledger_path(out))
    for i, task in enumerate(TASKS):
        w.write(_row(i, task=task))
    w.close()
    first = RunModel.load(out)  # reads every line, keeps the sums
    assert first.ledger.n_calls == len(TASKS)

    # kept: the next process starts where this one stopped
    reader = L.LedgerReader(out)
    got = ledger_memo.restore(out, reader)
    assert got is not None and _sums(got[0]) == _sums(first.ledger)
    assert reader.read_new() == []  # nothing after the kept offset

    with ledger_path(out).open("ab") as fh:
        fh.write(_line(100, task="t01") + _line(101, task="t02"))
    reader = L.LedgerReader(out)
    assert ledger_memo.restore(out, reader) is not None
    assert [r["request_id"] for r in reader.read_new()] == ["plain-t01.100", "plain-t02.101"]
    warm = RunModel.load(out)
    assert warm.ledger.n_calls == len(TASKS) + 2 and _sums(warm.ledger) == _sums(L.read_ledger(out))
    i01 = TASKS.index("t01")
    t01 = warm.ledger.usage("t01", "plain", STAMP)
    assert t01.calls == 2 and t01.input == 1000 + i01 + 1100

    # an edit before the kept offset (same size, same inode): never served, the edit is read
    raw = ledger_path(out).read_bytes()
    line = raw.index(b'"plain-t01.%d"' % i01)
    start = raw.rindex(b"\n", 0, line) + 1
    at = raw.index(b"%d" % (1000 + i01), start)  # t01's first input count, as the writer wrote it
    with ledger_path(out).open("r+b") as fh:
        fh.seek(at)
        fh.write(b"%d" % (9000 + i01))
    assert ledger_memo.restore(out, L.LedgerReader(out)) is None
    edited = RunModel.load(out)
    assert edited.ledger.usage("t01", "plain", STAMP).input == 9000 + i01 + 1100
    # the report from the kept sums is the report from every line read afresh (no index at all)
    assert build_report(RunModel.load(out))["cells"] == build_report(RunModel.load(out, index=False))["cells"]

    # truncated: read again from its start
    os.truncate(ledger_path(out), len(raw) // 2)
    assert ledger_memo.restore(out, L.LedgerReader(out)) is None
    assert _sums(RunModel.load(out).ledger) == _sums(L.read_ledger(out))


def test_sums_kept_by_other_code_are_not_served(tmp_path, monkeypatch):
    out = tmp_path / "out"
    w = LedgerWriter(ledger_path(out))
    w.write(_row(1))
    w.close()
    RunModel.load(out)
    assert ledger_memo.restore(out, L.LedgerReader(out)) is not None
    monkeypatch.setattr(ledger_memo, "fingerprint", lambda: "another version of the readers")
    assert ledger_memo.restore(out, L.LedgerReader(out)) is None


OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(min_value=1, max_value=5)),
    st.tuples(st.just("torn"), st.integers(min_value=1, max_value=60)),
    st.tuples(st.just("finish"), st.just(0)),
    st.tuples(st.just("edit"), st.integers(min_value=0, max_value=10_000)),
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=10_000)),
    st.tuples(st.just("replace"), st.integers(min_value=1, max_value=3)),
    st.tuples(st.just("host"), st.integers(min_value=1, max_value=3)),
    st.tuples(st.just("remove_host"), st.just(0)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, min_size=1, max_size=8))
def test_the_kept_sums_equal_a_fresh_read_whatever_happened_to_the_files(ops):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        main = ledger_path(out)
        main.parent.mkdir(parents=True)
        main.write_bytes(_line(0))
        n = 1
        torn = b""
        for op, k in ops:
            if op == "append":
                with main.open("ab") as fh:
                    for _ in range(k):
                        fh.write(_line(n, task=f"t{n % 3}"))
                        n += 1
            elif op == "torn":  # a line the gateway is writing: its first bytes only
                whole = _line(n, task="t9")
                n += 1
                torn = whole[min(k, len(whole) - 1) :]
                with main.open("ab") as fh:
                    fh.write(whole[: min(k, len(whole) - 1)])
            elif op == "finish" and torn:
                with main.open("ab") as fh:
                    fh.write(torn)
                torn = b""
            elif op == "edit":
                raw = bytearray(main.read_bytes())
                digits = [i for i, b in enumerate(raw) if 0x30 <= b <= 0x39]
                if digits:
                    i = digits[k % len(digits)]
                    raw[i] = 0x30 + (raw[i] - 0x30 + 1) % 10
                    with main.open("r+b") as fh:  # in place: the same inode and size
                        fh.write(bytes(raw))
            elif op == "truncate":
                size = main.stat().st_size
                os.truncate(main, k % (size + 1))
                torn = b""
            elif op == "replace":
                tmp_file = main.with_suffix(".new")
                tmp_file.write_bytes(b"".join(_line(n + i) for i in range(k)))
                n += k
                os.replace(tmp_file, main)
                torn = b""
            elif op == "host":
                with ledger_path(out, "h2").open("ab") as fh:
                    for _ in range(k):
                        fh.write(_line(n, task="t1", host="h2"))
                        n += 1
            elif op == "remove_host":
                ledger_path(out, "h2").unlink(missing_ok=True)
            model = RunModel.load(out)
            assert _sums(model.ledger) == _sums(L.read_ledger(out)), (op, k)
        assert (gateway_dir(out).parent.parent / ".marathon").is_dir()  # the sums were kept
