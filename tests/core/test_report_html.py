"""The HTML report renders its figures in a real browser: headless Debian chromium, no network.

The file is opened from disk with every networking feature of chromium off; the screenshot must
be non-empty and not blank, and the DOM chromium built must hold each figure's SVG. One
screenshot is kept for the docs (MARATHON_SAVE_REPORT_PNG=path saves it there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from marathon import cli
from runner.results import plots

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (.ci/setup-machine installs it)"
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )


@pytest.fixture(scope="module")
def report_html(handmade, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("html") / "report.html"
    assert cli.main(["report", str(handmade), "--format", "html", "--out", str(target)]) == 0
    return target


def test_the_html_report_is_one_self_contained_file(report_html):
    text = report_html.read_text(encoding="utf-8")
    assert text.count("<svg") == len(plots.FIGURES)
    # no network: nothing is fetched from anywhere (SVG's own xmlns names are not fetches)
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text)
    assert "<script" not in text and "<link" not in text and "@import" not in text


def test_chromium_renders_every_figure(report_html, tmp_path):
    from PIL import Image

    shot = tmp_path / "report.png"
    r = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", report_html.as_uri())
    assert shot.exists() and shot.stat().st_size > 10_000, (r.returncode, r.stderr[-2000:])
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2400)
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, tables and plots; a blank page has 1
    white = (
        max(n for n, c in colours if c == (255, 255, 255))
        if any(c == (255, 255, 255) for _, c in colours)
        else 0
    )
    assert white < 0.97 * img.size[0] * img.size[1]
    # the heatmap's viridis colours and the plots' default blue are on screen: the figures drew
    assert any(abs(c[0] - 31) < 20 and abs(c[1] - 119) < 20 and abs(c[2] - 180) < 20 for _, c in colours)
    dom = chromium(tmp_path, "--dump-dom", report_html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    for fid in plots.FIGURES:
        m = re.search(rf'<figure id="fig-{fid}">.*?</figure>', dom.stdout, re.S)
        assert m, fid
        assert "<svg" in m.group(0) and "<path" in m.group(0), fid
    save = os.environ.get("MARATHON_SAVE_REPORT_PNG")
    if save:
        shutil.copyfile(shot, save)


def test_figures_of_a_tree_with_nothing_done_yet_render(tmp_path, capsys):
    import json

    out = tmp_path / "out"
    (out / ".runner").mkdir(parents=True)
    ev = {"ts": 1, "event": "runner_start", "run_id": "r1", "tasks": ["a", "部分"], "arms": ["plain", "goal"]}
    (out / ".runner/events.jsonl").write_text(json.dumps(ev) + "\n")
    assert cli.main(["report", str(out), "--format", "html"]) == 0
    text = capsys.readouterr().out
    assert text.count("<svg") == len(plots.FIGURES)
    empty = {"arms": [], "tasks": [], "cells": {}, "arm_summary": {}, "paired": []}
    assert [f[0] for f in plots.figures(empty)] == list(plots.FIGURES)
