"""Per-test outcomes from a trial's verifier output, for the tests x arms comparison.

The score says how many tests passed; the operator comparing arms asks which ones. The verifier's
stdout (``verifier/test-stdout.txt``) usually names them: pytest (``path::test PASSED``, or the
``-rA`` summary ``FAILED path::test - reason``), cargo (``test mod::name ... ok``), or the
mini-benchmark's ``name: PASS`` lines; ``metrics.json`` may carry them too (``tests``: a mapping of
name to outcome, or a list of ``{name, outcome|status|passed}``). The verifier runs in the agent's
container, so this output is hostile: lines are capped, the file is read up to a limit, and a line
that matches nothing is skipped.

No scoring here: outcomes are shown, never counted into a score (that is ``runner.results.rules``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.results.trajectory import open_regular

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"
#: how much of test-stdout.txt is read, and the longest line looked at
MAX_BYTES = 16 * 1024 * 1024
MAX_LINE = 4096
MAX_TESTS = 20_000
MAX_METRICS_BYTES = 4 * 1024 * 1024

_WORDS = {
    "passed": PASS, "pass": PASS, "ok": PASS, "xpass": PASS, "xpassed": PASS, "true": PASS,
    "failed": FAIL, "fail": FAIL, "xfail": SKIP, "xfailed": SKIP, "false": FAIL,
    "skipped": SKIP, "skip": SKIP, "ignored": SKIP,
    "error": ERROR, "errored": ERROR,
}  # fmt: skip
#: pytest -v: ``tests/test_a.py::test_x PASSED [ 50%]``
_PYTEST_V = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
#: pytest -rA summary: ``PASSED tests/test_a.py::test_x`` / ``FAILED tests/…::test_y - AssertionError``
_PYTEST_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+::\S+?)(?:\s+-\s.*)?$")
#: cargo test: ``test parse::tests::empty ... ok``
_CARGO = re.compile(r"^test\s+(\S+)\s+\.\.\.\s+(ok|FAILED|ignored)\b")
#: the mini-benchmark's verifiers: ``name: PASS``
_SIMPLE = re.compile(r"^([\w.:/\[\]-]{1,200}):\s+(PASS|FAIL|SKIP|ERROR)\s*$")


@dataclass(frozen=True)
class TestOutcomes:
    """Test name -> pass | fail | skip | error, in the order the verifier printed them."""

    outcomes: tuple[tuple[str, str], ...] = ()
    source: str = ""  # where they came from: test-stdout.txt or metrics.json
    truncated: bool = False

    def as_dict(self) -> dict[str, str]:
        return dict(self.outcomes)


def parse_line(line: str) -> tuple[str, str] | None:
    """One verifier output line as (test, outcome), or None."""
    line = line.strip()
    if not line or len(line) > MAX_LINE:
        return None
    for rx, name_first in ((_PYTEST_V, True), (_PYTEST_SUMMARY, False), (_CARGO, True), (_SIMPLE, True)):
        m = rx.match(line)
        if m:
            name, word = (m.group(1), m.group(2)) if name_first else (m.group(2), m.group(1))
            return name, _WORDS[word.lower()]
    return None


def parse_stdout(lines: Any) -> tuple[list[tuple[str, str]], bool]:
    """Outcomes from verifier output lines; a test named twice keeps its last outcome."""
    seen: dict[str, str] = {}
    truncated = False
    for raw in lines:
        got = parse_line(raw)
        if got is None:
            continue
        name, outcome = got
        if name not in seen and len(seen) >= MAX_TESTS:
            truncated = True
            continue
        seen[name] = outcome
    return list(seen.items()), truncated


def parse_metrics(d: Any) -> list[tuple[str, str]]:
    """Per-test outcomes a verifier put into metrics.json (``tests``/``results``), if any."""
    if not isinstance(d, dict):
        return []
    tests = d.get("tests", d.get("results", d.get("test_results")))
    out: list[tuple[str, str]] = []
    if isinstance(tests, dict):
        items = list(tests.items())
    elif isinstance(tests, list):
        items = []
        for t in tests:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                v = t.get("outcome", t.get("status", t.get("passed", t.get("result"))))
                items.append((t["name"], v))
    else:
        return []
    for name, v in items[:MAX_TESTS]:
        word = str(v).lower() if not isinstance(v, bool) else ("true" if v else "false")
        if isinstance(name, str) and word in _WORDS and len(name) <= 500:
            out.append((name, _WORDS[word]))
    return out


def _read_capped(path: Path, limit: int) -> bytes | None:
    """Read at most ``limit`` bytes of a regular file (never a FIFO or device the agent planted)."""
    try:
        with open_regular(path) as fh:
            return fh.read(limit)
    except OSError:
        return None


def read_outcomes(trial_dir: Path | str) -> TestOutcomes:
    """The per-test outcomes of one trial: test-stdout.txt first, else metrics.json; empty if neither."""
    vdir = Path(trial_dir) / "verifier"
    raw = _read_capped(vdir / "test-stdout.txt", MAX_BYTES)
    if raw:
        text = raw.decode("utf-8", "replace")
        found, truncated = parse_stdout(text.splitlines())
        if found:
            return TestOutcomes(tuple(found), "verifier/test-stdout.txt", truncated or len(raw) >= MAX_BYTES)
    raw = _read_capped(vdir / "metrics.json", MAX_METRICS_BYTES)
    if raw:
        try:
            found = parse_metrics(json.loads(raw))
        except (ValueError, RecursionError):
            found = []
        if found:
            return TestOutcomes(tuple(found), "verifier/metrics.json")
    return TestOutcomes()


def disagreements(per_arm: dict[str, TestOutcomes]) -> list[str]:
    """Tests one arm passed and another failed (or errored): the rows the comparison highlights."""
    names: dict[str, None] = {}
    for o in per_arm.values():
        names.update(dict.fromkeys(n for n, _ in o.outcomes))
    maps = [o.as_dict() for o in per_arm.values()]
    out = []
    for name in names:
        got = {m.get(name) for m in maps}
        if PASS in got and (FAIL in got or ERROR in got):
            out.append(name)
    return out
