"""Property test: hostile contents in any file marathon reads never crash, hang or bend a figure.

Hypothesis (fixed seed, no example database) draws, for a copy of a recorded real tree
(tests/data/trees: harbor's oracle and nop, agents that crash, time out, exit non-zero and
half-solve), a few files marathon reads from a trial (metrics, reward, test output, receipt,
harbor's results and configs, the verifier dir itself) and from the runner's own parts
(``.runner/events.jsonl``, ``registry.json``, ``lock``, a claim, ``.driver_env``, ``host.json``, the
scan index), and gives each hostile contents: JSON of any shape and depth, huge, infinite, negative
and non-numeric numbers, wrong types, invalid UTF-8, control and bidi characters, FIFOs, devices,
directories, symlinks in, out, looping and dangling, sparse 2 GiB files, or nothing at all. Then
``fuzz_driver.py`` runs status (text and JSON), report (json, md, csv, html), health, plan-size
(text and JSON), the console's screenshot and ``marathon view``'s jobs folder on it in a child,
and the test asserts: no exception escapes and no command
fails, each finishes within a bound, each stays under a peak RSS, the JSON is strict RFC 8259, no
output holds a control byte, the SVG is valid XML, no counted cell leaves a mean, a mutated cell
that is not flagged keeps its exact scores, and no arm's mean is higher than with each flagged
cell scored as a failure.

The fast tier runs ``FAST_EXAMPLES``; ``-m slow`` runs ``SLOW_EXAMPLES`` more. Each example's
slowest command and largest peak are printed (``-s``) and kept in ``fuzz-hostile-stats.json`` in the
test's tmp dir.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import real_trees
from hostile_tree import no_control_bytes, strict_json
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from runner.results import rules
from runner.results.model import RunModel
from runner.results.report import build_report

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("fuzz_driver.py")
FAST_EXAMPLES = 6
#: MARATHON_FUZZ_SLOW=1 runs the slow test with 60 examples, MARATHON_FUZZ_SLOW=<n> with n
_SLOW = os.environ.get("MARATHON_FUZZ_SLOW", "")
SLOW_EXAMPLES = int(_SLOW) if _SLOW.isdigit() and int(_SLOW) > 1 else 60
#: the examples drawn; MARATHON_FUZZ_SEED=<n> draws others (a long run with a new seed explores
#: what the fixed one never reaches; a failure it finds is kept as a test of its own)
SEED = int(os.environ.get("MARATHON_FUZZ_SEED", "20261203"))
#: bounds: a command's wall time (the machine is shared and loaded: a hang is minutes), peak RSS
CMD_SEC = 90.0
CHILD_SEC = 900.0
PEAK_KB = 400 * 1024
MEASURES = ("reward", "partial", "pass_rate")

AGENT, HARNESS, RUNNER = "agent", "harness", "runner"


# ------------------------------------------------------------------------------ the tree


def _trials(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.glob("*/*/*/*/*/config.json"))


def add_runner_parts(out: Path) -> None:
    """The runner's own files, as a run leaves them (so that each can be made hostile)."""
    rdir = out / ".runner"
    rdir.mkdir(exist_ok=True)
    events = [
        {"ts": "2026-12-01T08:56:00Z", "event": "runner_start", "run_id": "r1", "tasks": ["calc-partial"],
         "arms": ["oracle", "nop"], "pid": 999999},
        {"ts": "2026-12-01T08:56:51Z", "event": "job_start", "run_id": "r1", "task": "calc-partial",
         "arm": "nop", "stamp": "20261201T085651Z"},
        {"ts": "2026-12-01T08:57:51Z", "event": "job_finish", "run_id": "r1", "task": "calc-partial",
         "arm": "nop", "stamp": "20261201T085651Z"},
    ]  # fmt: skip
    (rdir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    proc = {"pid": 999999, "create_time": 1.0, "role": "runner", "argv": ["marathon", "run"], "task": None,
            "arm": None, "registered_at": 1.0, "start_ticks": 1, "boot_id": "x", "node": None}  # fmt: skip
    (rdir / "registry.json").write_text(json.dumps({"processes": [proc]}))
    holder = {"pid": 999999, "create_time": 1.0, "host": "h", "since": "2026-12-01T08:56:00Z", "run_id": "r1",
              "start_ticks": 1, "boot_id": "x"}  # fmt: skip
    (rdir / "lock").write_text(json.dumps(holder))
    (out / ".claims").mkdir(exist_ok=True)
    claim = {**holder, "task": "calc-partial", "arm": "nop", "job": None}
    (out / ".claims" / "calc-partial__nop.claim").write_text(json.dumps(claim))
    tasks = REPO / "runner" / "demo" / "tasks"
    (out / ".driver_env").write_text(
        f"MARATHON_OUT={out}\nMARATHON_TASKS_DIR={tasks}\nMARATHON_ARMS=oracle,nop\n"
    )
    stamp = next((out / "calc-partial" / "oracle").iterdir())
    (stamp / "host.json").write_text(json.dumps({"host": "vm-a", "node_id": "n1", "engine_id": "e1"}))


@pytest.fixture(scope="module")
def base(core_tree, tmp_path_factory) -> Path:
    """The recorded tree with the runner's parts, and its scan index made (a cache to corrupt)."""
    out = tmp_path_factory.mktemp("fuzz_base") / "out"
    shutil.copytree(core_tree, out, symlinks=True)
    add_runner_parts(out)
    real_trees.restore_write_order(out)
    RunModel.load(out)  # writes .marathon/index.sqlite
    return out


@pytest.fixture(scope="module")
def targets(base) -> list[tuple[str, str]]:
    """(path relative to the tree, whose) of every file marathon reads that an example may spoil."""
    out = []
    for t in _trials(base):
        rel = t.relative_to(base).as_posix()
        out += [(f"{rel}/{f}", AGENT) for f in ("verifier/metrics.json", "verifier/reward.txt",
                                                "verifier/test-stdout.txt", "agent/goal_receipt.json", "verifier")]  # fmt: skip
        out += [(f"{rel}/{f}", HARNESS) for f in ("result.json", "config.json", "exception.txt")]
        job = t.parent.relative_to(base).as_posix()
        out += [(f"{job}/result.json", HARNESS), (f"{job}/config.json", HARNESS)]
    out += [(p, RUNNER) for p in (".runner/events.jsonl", ".runner/registry.json", ".runner/lock",
                                  ".claims/calc-partial__nop.claim", ".driver_env", ".marathon/index.sqlite")]  # fmt: skip
    stamp = next((base / "calc-partial" / "oracle").iterdir()).relative_to(base).as_posix()
    out.append((f"{stamp}/host.json", HARNESS))
    return sorted(set(out))


@pytest.fixture(scope="module")
def baseline(base) -> dict:
    return build_report(RunModel.load(base, index=False))


# ------------------------------------------------------------------------------ hostile contents

_NASTY = "\x00\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202e\u2066\u200b\ufeff\x7f\x85[/]<img onerror=x>=1+1"
nasty_text = st.text(alphabet=st.sampled_from(list(_NASTY) + list("abc 01.-_")), max_size=30)
numbers = st.one_of(
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, -1, 1e308, -1e308, 1e-308, 5e-324, 100, 50]),
    st.floats(allow_nan=True, allow_infinity=True),
)
leaves = st.one_of(st.none(), st.booleans(), numbers, nasty_text)
json_values = st.recursive(
    leaves,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.one_of(nasty_text, st.sampled_from(
        ["partial_score", "pass_rate", "passed", "failed", "total", "phase", "reward", "continuations",
         "errors", "processes", "pid", "event", "run_id", "tasks", "stats", "n_completed_trials"])), c, max_size=4),
    max_leaves=12,
)  # fmt: skip
#: keys an example may set in a real file's JSON (the fields marathon reads), at any depth it has
HOT_KEYS = ["partial_score", "pass_rate", "passed", "failed", "total", "phase", "pytest", "gates_total",
            "continuations", "unblocks", "errors", "turns", "goal_status_final", "deadline_hit", "arm",
            "reward", "rewards", "verifier_result", "agent_result", "cost_usd", "n_input_tokens",
            "exception_info", "exception_type", "started_at", "finished_at", "task_name", "trial_name",
            "stats", "n_completed_trials", "n_errored_trials", "evals", "reward_stats", "processes", "pid",
            "start_ticks", "boot_id", "host", "node_id", "run_id", "tasks", "arms", "event", "ts"]  # fmt: skip

#: what a dir (a trial's verifier/) may be replaced by
DIR_KINDS = ("fifo", "chardev", "link_out", "link_in", "link_loop", "dangling", "sparse", "absent")
KINDS = ("json", "perturb", "deep", "bytes", "text", "fifo", "chardev", "dir", "link_out", "link_in",
         "link_loop", "dangling", "sparse", "absent", "empty")  # fmt: skip


@st.composite
def spoil(draw, targets: list[tuple[str, str]]) -> tuple[str, str, str, object]:
    rel, whose = draw(st.sampled_from(targets))
    kind = draw(st.sampled_from(DIR_KINDS if rel.endswith("/verifier") else KINDS))
    if rel.endswith("/verifier") and kind == "absent":
        whose = HARNESS  # harbor's mount point: the agent cannot remove it, only the harness's side can
    if kind == "json":
        arg: object = draw(json_values)
    elif kind == "perturb":
        arg = (draw(st.sampled_from(HOT_KEYS)), draw(json_values), draw(st.integers(0, 3)))
    elif kind == "bytes":
        arg = draw(st.binary(max_size=64))
    elif kind == "text":
        arg = draw(nasty_text)
    elif kind == "deep":
        arg = draw(st.integers(1_000, 200_000))
    else:
        arg = None
    return rel, whose, kind, arg


def _perturb(d: object, key: str, value: object, depth: int) -> object:
    """Set ``key`` to ``value`` in the ``depth``-th object met walking ``d`` (top-level: 0)."""
    seen = 0
    stack = [d]
    while stack:
        x = stack.pop(0)
        if isinstance(x, dict):
            if seen == depth:
                x[key] = value
                return d
            seen += 1
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    if isinstance(d, dict):
        d[key] = value
    return d


def apply(out: Path, outside: Path, rel: str, kind: str, arg: object) -> None:
    path = out / rel
    if path.is_dir() and not path.is_symlink():
        if kind in ("json", "perturb", "deep", "bytes", "text", "empty", "dir"):
            return  # a dir (verifier/): only replaced by a link, a FIFO, a file of nothing, or removed
        shutil.rmtree(path)
    old = b""
    if path.is_file() and not path.is_symlink() and kind == "perturb":
        old = path.read_bytes()
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return  # its dir was spoiled by an earlier spoil of the same example (a FIFO at verifier/)
    if kind == "json":
        path.write_text(json.dumps(arg))
    elif kind == "perturb":
        key, value, depth = arg  # type: ignore[misc]
        lines = old.splitlines() or [b"{}"]
        i = len(lines) - 1 if rel.endswith(".jsonl") else None
        try:
            d = json.loads(lines[i] if i is not None else old or b"{}")
        except ValueError:
            d = {}
        new = json.dumps(_perturb(d, key, value, depth)).encode()
        if i is not None:
            lines[i] = new
            path.write_bytes(b"\n".join(lines) + b"\n")
        elif rel.endswith(".driver_env"):
            path.write_bytes(old + f"{key.upper()}={json.dumps(value)}\n".encode())
        else:
            path.write_bytes(new)
    elif kind == "deep":
        path.write_text("[" * int(arg) + "]" * int(arg))  # type: ignore[call-overload]
    elif kind == "bytes":
        path.write_bytes(arg)  # type: ignore[arg-type]
    elif kind == "text":
        path.write_text(str(arg), errors="surrogateescape")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        if os.geteuid() == 0:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # what /dev/null is
        else:
            os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
        (path / "x").write_text("{}")
    elif kind == "link_out":
        os.symlink(outside, path)
    elif kind == "link_in":
        os.symlink("../result.json" if "/" in rel else "calc-partial", path)
    elif kind == "link_loop":
        os.symlink(path.name, path)
    elif kind == "dangling":
        os.symlink("nowhere-at-all", path)
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(2 << 30)
    elif kind == "empty":
        path.write_bytes(b"")
    # "absent": removed above


def pair_of(rel: str) -> tuple[str, str] | None:
    parts = rel.split("/")
    return (parts[0], parts[1]) if len(parts) >= 5 and not parts[0].startswith(".") else None


# ------------------------------------------------------------------------------ the property


def check_example(base: Path, baseline: dict, spoils: list, work: Path, stats: list) -> None:
    out = work / "out"
    shutil.copytree(base, out, symlinks=True)
    real_trees.restore_write_order(out)
    outside = work / "outside.json"
    outside.write_text(json.dumps({"partial_score": 1.0, "pass_rate": 1.0, "passed": 5, "total": 5}))
    for rel, _whose, kind, arg in spoils:
        apply(out, outside, rel, kind, arg)
    res = work / "res"
    res.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), TEXTUAL_ANIMATIONS="none")
    try:
        p = subprocess.run(
            [sys.executable, str(DRIVER), str(out), str(res)], cwd=REPO, env=env,
            capture_output=True, timeout=CHILD_SEC,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        hung = (res / "progress").read_text() if (res / "progress").exists() else "?"
        pytest.fail(f"{hung} did not finish in {CHILD_SEC:.0f} s on {spoils}")
    assert p.returncode == 0, (spoils, p.stderr.decode(errors="replace")[-3000:])
    results = json.loads((res / "results.json").read_text())
    slow = max(results, key=lambda r: r["sec"])
    big = max(results, key=lambda r: r["peak_kb"])
    stats.append({"spoils": repr(spoils)[:400], "slowest": slow, "largest": big})
    print(f"fuzz example: slowest {slow['name']} {slow['sec']:.1f} s, largest {big['name']} "
          f"{big['peak_kb'] / 1024:.0f} MB; {repr(spoils)[:160]}")  # fmt: skip
    driver_env_spoiled = any(rel == ".driver_env" for rel, *_ in spoils)
    for r in results:
        name, rc = r["name"], r["rc"]
        err = (res / f"{name}.err").read_bytes().decode("utf-8")
        allowed = {0, 1} if name == "health" else {0}
        if name == "health" and driver_env_spoiled:
            allowed |= {2}  # a .driver_env that is not NAME=value lines: a one-line error
        assert rc in allowed, (name, rc, err[-2000:], spoils)
        assert "Traceback" not in err and "internal error" not in err, (name, err[-2000:], spoils)
        if rc == 2:
            assert err.count("\n") == 1 and err.startswith("marathon: "), (name, err)
        assert r["sec"] < CMD_SEC, (name, r["sec"], spoils)
        assert r["peak_kb"] < PEAK_KB, (name, r["peak_kb"], spoils)
        text = (res / f"{name}.out").read_bytes()
        no_control_bytes(text, name)
        no_control_bytes(err, f"{name} stderr")
        if name in ("status.json", "report.json", "plan-size.json") or (name == "health" and rc != 2):
            strict_json(text.decode("utf-8"))
    svg = (res / "screenshot.svg").read_text(encoding="utf-8")
    ET.fromstring(svg)
    no_control_bytes(svg, "screenshot")
    check_means(baseline, strict_json((res / "report.json.out").read_text(encoding="utf-8")), spoils)


def _score(c: dict, m: str) -> float | None:
    return rules.scored_measure(c[m], c["build_failed"], m, c.get("flagged", False))


def check_means(before: dict, after: dict, spoils: list) -> None:
    """No counted cell leaves the means; a spoiled cell that is not flagged keeps its scores; no
    arm's mean is above the one with every flagged spoiled cell scored as a failure."""
    harness = {pair_of(rel) for rel, whose, *_ in spoils if whose == HARNESS} - {None}
    agent = {pair_of(rel) for rel, whose, *_ in spoils if whose == AGENT} - {None}
    for arm in before["arms"]:
        if any(a == arm for _, a in harness) or arm not in after["arms"]:
            continue  # a file only harbor writes, spoiled: infrastructure, not this property's
        cells_b = {t: row[arm] for t, row in before["cells"].items() if arm in row}
        cells_a = {t: row[arm] for t, row in after["cells"].items() if arm in row}
        for t, cb in cells_b.items():
            ca = cells_a.get(t)
            assert ca is not None, (t, arm, spoils)
            counted_b = cb["status"] == "done" or cb.get("flagged")
            counted_a = ca["status"] == "done" or ca["flagged"]
            assert counted_a or not counted_b, (f"{t} x {arm} left the means", ca, spoils)
            if (t, arm) in agent and not ca["flagged"]:
                assert [ca[m] for m in MEASURES] == [cb[m] for m in MEASURES], (t, arm, cb, ca, spoils)
        for m in MEASURES:
            ref = []
            for t, ca in cells_a.items():
                cb = cells_b.get(t)
                if ca["flagged"]:
                    ref.append(0.0)
                elif cb is not None and cb["status"] == "done" and (v := _score(cb, m)) is not None:
                    ref.append(v)
            got = after["arm_summary"][arm][m]
            if ref:
                want = sum(ref) / len(ref)
                assert got is not None and got <= want + 1e-4, (arm, m, got, want, spoils)
                assert math.isfinite(got) and 0.0 <= got <= 1.0


def run_examples(base, baseline, targets, tmp_path_factory, tmp_path: Path, examples: int) -> list:
    """Draw ``examples`` spoiled trees (fixed seed) and check each; the stats of those that ran."""
    stats: list = []

    @seed(SEED)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(spoil(targets), min_size=1, max_size=4))
    def prop(spoils):
        check_example(base, baseline, spoils, tmp_path_factory.mktemp("fuzz"), stats)

    try:
        prop()
    finally:
        _keep(stats, tmp_path)
    return stats


def _keep(stats: list, tmp_path: Path) -> None:
    (tmp_path / "fuzz-hostile-stats.json").write_text(json.dumps(stats, indent=1))
    if stats:
        slow = max(stats, key=lambda s: s["slowest"]["sec"])
        big = max(stats, key=lambda s: s["largest"]["peak_kb"])
        print(
            f"\n{len(stats)} examples; slowest: {slow['slowest']['name']} {slow['slowest']['sec']:.1f} s on "
            f"{slow['spoils'][:200]}; largest: {big['largest']['name']} {big['largest']['peak_kb'] / 1024:.0f} MB "
            f"on {big['spoils'][:200]}"
        )


@pytest.mark.timeout(3600)
def test_hostile_files_never_crash_hang_or_bend_a_figure(base, baseline, targets, tmp_path_factory, tmp_path):
    assert (
        len(run_examples(base, baseline, targets, tmp_path_factory, tmp_path, FAST_EXAMPLES)) >= FAST_EXAMPLES
    )


@pytest.mark.slow
@pytest.mark.timeout(6 * 3600)
@pytest.mark.skipif(
    not os.environ.get("MARATHON_FUZZ_SLOW"),
    reason=f"{SLOW_EXAMPLES} examples, a few minutes: MARATHON_FUZZ_SLOW=1 pytest -m slow {__name__}",
)
def test_hostile_files_many_more_examples(base, baseline, targets, tmp_path_factory, tmp_path):
    run_examples(base, baseline, targets, tmp_path_factory, tmp_path, SLOW_EXAMPLES)
