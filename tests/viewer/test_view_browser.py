"""``marathon view`` on the five-arm demo tree, read in a real browser (Debian's headless Chromium).

The job list shows all 20 pairs with their rewards (as ``marathon report`` has them), a trajectory
page renders, with no page error and no Content-Security-Policy refusal; a request without the
token gets nothing, the browser's own POST to harbor's run launcher is refused, ``health`` shows
the viewer, and SIGTERM ends it leaving nothing. Everything real: the tree is a completed
``marathon demo --headless`` run (five real arms on Docker, the scripted model the one stand-in).
"""

from __future__ import annotations

import json
import signal
import time
import urllib.parse
from pathlib import Path

import browser
import pytest
from viewer_support import Viewer, descendants, marathon, port_open, request

from runner.ops.procs import Registry
from runner.ops.viewer import ROLE_VIEWER

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not browser.available(), reason="no /usr/bin/chromium (Debian's chromium package), unshare or ip"
    ),
]

#: the rows of harbor's job table, as the browser shows them
ROWS = "Array.from(document.querySelectorAll('tbody tr')).map(r => r.innerText.replace(/\\s+/g, ' ').trim())"


@pytest.fixture(scope="module")
def report(demo_varied_tree) -> dict:
    r = marathon("report", str(demo_varied_tree), "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def served(demo_varied_tree):
    v = Viewer(demo_varied_tree)
    yield v
    v.stop()


@pytest.fixture(scope="module")
def page(served, tmp_path_factory):
    """One browser, signed in by the printed address (the token becomes its cookie)."""
    with browser.Browser(tmp_path_factory.mktemp("chromium"), ports=[served.port]) as b:
        b.open(served.url)
        yield b


def _base(v: Viewer) -> str:
    return f"http://127.0.0.1:{v.port}"


def test_the_job_list_shows_all_20_pairs_with_their_rewards(served, page, report, tmp_path_factory):
    page.wait_text("__attempt-", timeout=90)
    assert page.location() == _base(served) + "/"  # the token left the address bar
    cells = {(t, a): c for t, row in report["cells"].items() for a, c in row.items()}
    assert len(cells) == 20
    rows: list[str] = []
    deadline = time.monotonic() + 90
    while sum("__attempt-" in r for r in rows) < 20:  # the list may still be rendering its rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.25)
        rows = page.eval(ROWS) or []
    page.screenshot(tmp_path_factory.mktemp("shots") / "jobs.png")
    named = {r.split(" ")[0]: r for r in rows if "__attempt-" in r}
    assert len(named) == 20, rows
    for (task, arm), cell in cells.items():
        (name,) = [n for n in named if n.startswith(f"{task}__{arm}__attempt-")]
        assert not name.endswith("__voided")
        # the row shows the pair's reward as harbor formats it, the same as marathon's report
        assert f" {cell['reward']:.2f}" in named[name], (name, cell["reward"], named[name])
    assert "two-stage__plain__attempt-2" in named  # the setup failure was voided; the rerun scores


def test_a_trajectory_page_renders(served, page, demo_varied_tree):
    name = "calc-partial__goal__attempt-1"
    (trial,) = request(served.port, "GET", f"/api/jobs/{name}/trials", served.auth()).json()["items"]
    steps = json.loads(
        next(
            (demo_varied_tree / "calc-partial" / "goal").glob(f"*/goal/{trial['name']}/agent/trajectory.json")
        ).read_text()
    )["steps"]
    page.open(f"{_base(served)}/jobs/{urllib.parse.quote(name)}/trials/{trial['name']}")
    text = page.wait_text("Trajectory", f"{len(steps)} steps", "#1", "reward", timeout=90)
    assert "scripted/demo" in text and name in text
    first = next(s for s in steps if isinstance(s.get("message"), str) and s["message"].strip())
    assert first["message"].strip().splitlines()[0][:40] in text
    csp = [p for p in page.problems if "Content Security Policy" in p or p.startswith("exception")]
    assert csp == [], page.problems


def test_without_the_token_the_browser_gets_nothing(served, tmp_path_factory):
    with browser.Browser(tmp_path_factory.mktemp("chromium-stranger"), ports=[served.port]) as b:
        b.open(_base(served) + "/")
        text = b.wait_text("refused", timeout=60)
        assert "__attempt-" not in text
        b.open(_base(served) + "/api/jobs")
        assert "__attempt-" not in b.wait_text("refused", timeout=60)
    assert request(served.port, "GET", "/api/jobs").status == 401


def test_the_browsers_post_to_the_launcher_is_refused(served, page, demo_varied_tree):
    page.open(_base(served) + "/")
    page.wait_text("__attempt-", timeout=90)
    body = json.dumps({"tasks": [{"path": str(demo_varied_tree.parent)}], "job_name": "from-the-browser"})
    status = page.eval(
        f"fetch('/api/run', {{method: 'POST', headers: {{'content-type': 'application/json'}}, body: {json.dumps(body)}}})"
        ".then(r => r.status)",
        wait=True,
    )
    assert status == 403
    assert page.eval("fetch('/api/run/options').then(r => r.status)", wait=True) == 403
    assert descendants(served.pid) == []  # no `harbor run` was started
    assert not (demo_varied_tree / ".marathon" / "view" / "jobs" / "from-the-browser").exists()


def test_health_shows_the_viewer(served, demo_varied_tree):
    r = marathon("health", str(demo_varied_tree))
    assert f"viewer: serving 127.0.0.1:{served.port} (PID {served.pid}" in r.stdout, r.stdout + r.stderr
    assert served.token not in r.stdout + r.stderr


def test_sigterm_ends_it_and_leaves_nothing(served, page, demo_varied_tree: Path):
    page.close()
    assert served.stop(signal.SIGTERM) == 0, served.output
    assert not port_open(served.port)
    assert [e for e in Registry(demo_varied_tree).entries() if e.role == ROLE_VIEWER] == []
    view = demo_varied_tree / ".marathon" / "view"
    assert not (view / "jobs").exists() and not (view / "access.json").exists()
