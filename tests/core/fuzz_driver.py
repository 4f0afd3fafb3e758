"""Run every reader command once on a tree, in this one process, and record how each went.

``python tests/core/fuzz_driver.py OUT RESULTS_DIR``: status (text and JSON), report (json, md, csv,
html), health --json, plan-size (text and JSON) and the console's --screenshot, each through
``marathon.cli.main`` as a user runs it, and the jobs folder ``marathon view`` serves (made in
the results dir), its stdout and stderr written to files (UTF-8, strict: a lone surrogate would
fail the write), its exit code or the exception that escaped, its wall time and its own peak RSS (the
kernel's ``VmHWM``, reset before each command by writing 5 to ``/proc/self/clear_refs``). The
property test (tests/core/test_fuzz_hostile.py) runs it as a child with a timeout, so a hang is a
failure naming the command that hung (``progress``), never a stuck test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def commands(out: str, res: Path) -> list[tuple[str, list[str]]]:
    return [
        ("status", ["status", out, "--all"]),
        ("status.json", ["status", out, "--all", "--json"]),
        ("report.json", ["report", out, "--format", "json"]),
        ("report.md", ["report", out, "--format", "md"]),
        ("report.csv", ["report", out, "--format", "csv"]),
        ("report.html", ["report", out, "--format", "html"]),
        ("health", ["health", out, "--json"]),
        ("plan-size", ["plan-size", out]),
        ("plan-size.json", ["plan-size", out, "--json"]),
        ("viewjobs", ["viewjobs", out, str(res / "viewjobs")]),
        ("screenshot", ["console", out, "--screenshot", str(res / "screenshot.svg"), "--size", "130x40"]),
    ]


def viewjobs(out: str, root: str) -> int:
    """``marathon view``'s jobs folder made from the tree (what harbor's viewer would be served),
    into ``root``; its report's counts printed."""
    from runner.ops.viewjobs import JobsFolder, plan_entries
    from runner.results.model import RunModel

    rep = JobsFolder(Path(root)).sync(plan_entries(RunModel.load(out), all_attempts=True))
    print(f"{rep.entries} entries, {rep.linked} linked, {rep.copied} copied, {len(rep.left_out)} left out")
    return 0


def peak_kb() -> int:
    with open("/proc/self/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))


def main(out: str, res_dir: str) -> int:
    sys.path.insert(0, str(REPO))
    from marathon import cli

    res = Path(res_dir)
    results = []
    for name, args in commands(out, res):
        (res / "progress").write_text(name)
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            pass
        t0 = time.monotonic()
        with (
            open(res / f"{name}.out", "wb") as o,
            open(res / f"{name}.err", "wb") as e,
            io.TextIOWrapper(o, encoding="utf-8", errors="strict", write_through=True) as so,
            io.TextIOWrapper(e, encoding="utf-8", errors="strict", write_through=True) as se,
            contextlib.redirect_stdout(so),
            contextlib.redirect_stderr(se),
        ):
            try:
                rc: int | str = viewjobs(*args[1:]) if args[0] == "viewjobs" else cli.main(args)
            except SystemExit as exc:
                rc = f"SystemExit {exc.code}"
            except BaseException as exc:  # noqa: BLE001 - what escaped is the finding
                rc = f"raised {type(exc).__name__}: {str(exc)[:300]}"
        results.append({"name": name, "rc": rc, "sec": time.monotonic() - t0, "peak_kb": peak_kb()})
    (res / "results.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    sys.exit(main(sys.argv[1], sys.argv[2]))
