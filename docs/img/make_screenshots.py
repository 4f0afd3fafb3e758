#!/usr/bin/env python3
"""Refresh the console screenshots in docs/img/ from a varied demo's output tree.

    uv run marathon demo --headless --out /tmp/demo      # the varied run (about 5 min)
    uv run python docs/img/make_screenshots.py /tmp/demo

Drives the real console through a Textual Pilot at 130x40 (the README's terminal) and saves, with
Textual's own SVG export: ``grid.svg`` (the task x arm grid), ``compare.svg`` (the five arms on
calc-partial with the tests x arms table) and ``reader.svg`` (codex-cli's trajectory on
calc-partial, opened from the comparison, with the goal's block and resume on screen).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from console.app import make_app  # noqa: E402
from console.screens.compare import CompareScreen  # noqa: E402
from console.screens.reader import ReaderScreen  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZE = (130, 40)
TASK, LOOPX_ARM = "calc-partial", "codex-cli"


async def _until(pilot, cond, what: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        await pilot.pause(0.1)
    await pilot.pause(0.3)


async def shoot(out: Path, dest: Path) -> list[Path]:
    app = make_app(out, watch=False, docker=False, offer_start=False)
    saved = []
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, "the grid")
        saved.append(Path(app.save_screenshot("grid.svg", str(dest))))
        app.action_compare(TASK)
        await _until(pilot, lambda: isinstance(app.screen, CompareScreen), "the comparison")
        scr = app.screen
        await _until(pilot, lambda: len(scr.facts) == len(scr.arms), "every arm's trajectory")
        saved.append(Path(app.save_screenshot("compare.svg", str(dest))))
        figures = scr.query_one("#compare-figures")
        figures.focus()
        figures.move_cursor(column=scr.arms.index(LOOPX_ARM) + 1)
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, ReaderScreen), "the reader")
        reader = app.screen
        await _until(pilot, lambda: reader.index is not None and reader.index.complete, "the step index")
        saved.append(Path(app.save_screenshot("reader.svg", str(dest))))
    return saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a varied demo's output tree")
    ap.add_argument("--dest", type=Path, default=HERE, help=f"where the SVGs go (default {HERE})")
    args = ap.parse_args(argv)
    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    for p in asyncio.run(shoot(args.out.resolve(), args.dest)):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
