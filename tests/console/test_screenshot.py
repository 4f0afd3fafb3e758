"""Screenshots: the key (any screen) and ``marathon console --screenshot`` (scripts, no terminal)
write a valid SVG of what the console draws, on the recorded real tree (no Docker)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from console_support import marathon, run_async, wait_for
from textual_screen import screen_text

from console.app import make_app

SVG_NS = "{http://www.w3.org/2000/svg}"


def _svg_text(path: Path) -> str:
    """The text an SVG shows, from its <text> elements (it must parse as XML: a valid SVG)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG_NS}svg"
    return "".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")).replace("\xa0", " ")


def test_the_key_saves_the_current_screen_as_svg(mini_tree, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = {}

    async def go():
        app = make_app(mini_tree, watch=False, docker=False, offer_start=False)
        async with app.run_test(size=(120, 32)) as pilot:
            await wait_for(
                pilot, lambda: bool(app.main.cells) and app.main.last_change_at is not None, 30, "first grid"
            )
            await pilot.pause()
            seen["screen"] = screen_text(app)
            await pilot.press("ctrl+s")
            await pilot.pause()

    run_async(go)
    (svg,) = tmp_path.glob("marathon-console-*.svg")
    text = _svg_text(svg)
    for word in ("calc-partial", "words-passrate", "oracle", "nop"):
        assert word in seen["screen"] and word in text, word


def test_the_flag_saves_the_populated_grid_and_exits_without_a_terminal(mini_tree, tmp_path):
    target = tmp_path / "grid.svg"
    r = marathon("console", str(mini_tree), "--screenshot", str(target), "--size", "120x32", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(target) in r.stdout
    text = _svg_text(target)
    for word in ("build-gate", "calc-partial", "two-stage", "words-passrate", "oracle", "nop"):
        assert word in text, word
    assert "1.00" in text  # a score: the grid was populated, not an empty frame
