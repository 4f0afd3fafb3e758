"""A real headless Chromium (Debian's package), driven over the DevTools protocol on loopback.

The viewer is a single-page app: its job list and trajectories are rendered by JavaScript after
``fetch`` calls, which ``--dump-dom`` does not wait for. So the test opens a page target and polls
``document.body.innerText`` until what it looks for is there (or the time is up).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
)


def available() -> bool:
    return shutil.which(CHROMIUM) is not None


class Browser:
    """One Chromium with a fresh profile, one page; ``close()`` ends it and its children."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        self.profile = Path(profile)
        self.profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.is_file() or len(port_file.read_text().splitlines()) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not open its DevTools port (exit {self.proc.returncode})")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=10)
        self._ids = itertools.count(1)
        #: what the page reported: console errors, uncaught exceptions, CSP refusals (Log / Runtime)
        self.problems: list[str] = []
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Log.enable")

    def call(self, method: str, **params) -> dict:
        n = next(self._ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            self._note(msg)
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def _note(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            e = params["entry"]
            self.problems.append(f"{e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.problems.append(
                f"exception: {d.get('text')} {d.get('exception', {}).get('description', '')}"
            )
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.problems.append(f"console.error: {args}")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def eval(self, expr: str, *, wait: bool = False):
        """``expr``'s value in the page; ``wait``: await the promise it returns."""
        got = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=wait)
        return got.get("result", {}).get("value")

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''") or ""

    def location(self) -> str:
        return self.eval("location.href") or ""

    def wait_text(self, *needles: str, timeout: float = 60.0) -> str:
        """The page's text once it holds every needle; AssertionError with the text it had."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.25)
        missing = [n for n in needles if n not in text]
        raise AssertionError(f"page at {self.location()} never showed {missing}; it showed:\n{text[:3000]}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
