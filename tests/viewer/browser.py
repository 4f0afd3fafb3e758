"""A real headless Chromium (Debian's package), driven over the DevTools protocol (a pipe).

The viewer is a single-page app: its job list and trajectories are rendered by JavaScript after
``fetch`` calls, which ``--dump-dom`` does not wait for. So the test opens a page target and polls
``document.body.innerText`` until what it looks for is there (or the time is up).

Chromium runs in a network namespace of its own (``unshare -n``) that has only loopback, and
reaches the viewer's ports through a relay in this process. Why: on the host, Chromium watches
every interface (netlink) and on any address change (Docker's and Compose's bridges and veths,
which other tests make and remove all the time) fails the requests it has queued with
``net::ERR_NETWORK_CHANGED``, loopback ones included. The viewer's pages load dozens of modules at
once, so such a change while a page loads leaves it blank ("Failed to fetch dynamically imported
module"), however sound the viewer is. In its own namespace Chromium sees no such change.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

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
    "--remote-debugging-pipe",  # commands on fd 3, answers on fd 4 (no port, in any namespace)
    "--window-size=1400,1000",
)

#: run in the new namespace (before Chromium, which it becomes): loopback up, a listener on each
#: relayed port handed to the test's process, the DevTools pipe moved to fds 3 and 4
_LAUNCH = """
import os, socket, subprocess, sys
chan, cmd, res = (int(a) for a in sys.argv[1:4])
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
listeners = []
for port in (int(p) for p in sys.argv[4].split(",") if p):
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(128)
    listeners.append(s)
socket.send_fds(socket.socket(fileno=chan), [b"ready"], [s.fileno() for s in listeners])
for s in listeners:
    s.close()
cmd, res = os.dup(cmd), os.dup(res)  # copies first: either may be 3 or 4 already
os.dup2(cmd, 3)
os.dup2(res, 4)
os.set_inheritable(3, True)  # dup2 onto itself leaves the flag as dup made it
os.set_inheritable(4, True)
os.execv(sys.argv[5], sys.argv[5:])
"""


def available() -> bool:
    return all(shutil.which(t) is not None for t in (CHROMIUM, "unshare", "ip"))


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


class Browser:
    """One Chromium with a fresh profile, one page, in a network namespace that reaches only the
    loopback ``ports`` (relayed to this host's); ``close()`` ends it and its children."""

    def __init__(self, profile: Path, ports: tuple[int, ...] | list[int] = (), timeout: float = 60.0) -> None:
        self.profile = Path(profile)
        self.profile.mkdir(parents=True, exist_ok=True)
        self._ids = itertools.count(1)
        #: what the page reported: console errors, uncaught exceptions, CSP refusals, answers of 400 or
        #: more (Log / Runtime), requests that failed or were cancelled (Network)
        self.problems: list[str] = []
        #: the requests sent and not yet answered in full (requestId: method and URL)
        self.pending: dict[str, str] = {}
        self._open: set[socket.socket] = set()  # the relay's listeners and connections
        self._lock = threading.Lock()
        self._buf = b""
        self.session: str | None = None
        mine, theirs = socket.socketpair()
        cmd_r, self._cmd = os.pipe()
        self._res, res_w = os.pipe()
        unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]
        fds = (theirs.fileno(), cmd_r, res_w)
        self._log = self.profile / "chromium.log"
        with open(self._log, "wb") as log:
            self.proc = subprocess.Popen(
                [*unshare, "--", sys.executable, "-c", _LAUNCH, *map(str, fds), ",".join(map(str, ports)),
                 CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=fds, start_new_session=True,
            )  # fmt: skip
        for fd in (cmd_r, res_w):
            os.close(fd)
        theirs.close()
        try:
            mine.settimeout(timeout)
            try:
                ready, listeners, _, _ = socket.recv_fds(mine, 16, max(len(ports), 1))
            except OSError:
                ready, listeners = b"", []
            if ready != b"ready" or len(listeners) != len(ports):
                self.close()
                raise RuntimeError(f"chromium's network namespace was not made: {self._stderr()}")
        finally:
            mine.close()
        for port, fd in zip(ports, listeners, strict=True):
            lsn = socket.socket(fileno=fd)
            self._open.add(lsn)
            threading.Thread(target=self._relay, args=(lsn, port), daemon=True).start()
        deadline = time.monotonic() + timeout
        while self.session is None:
            pages = [t for t in self.call("Target.getTargets")["targetInfos"] if t.get("type") == "page"]
            if pages:
                got = self.call("Target.attachToTarget", targetId=pages[0]["targetId"], flatten=True)
                self.session = got["sessionId"]
            elif time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium opened no page")
            else:
                time.sleep(0.1)
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Network.enable")

    def _stderr(self) -> str:
        state = "running" if self.proc.poll() is None else f"exit {self.proc.returncode}"
        return f"{state}: {self._log.read_text(errors='replace')[-2000:]}"

    def _relay(self, listener: socket.socket, port: int) -> None:
        """Each connection to ``port`` in Chromium's namespace, to the same port on this host's loopback."""
        while True:
            try:
                inner, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                outer = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                inner.close()  # as the viewer would have refused it
                continue
            outer.settimeout(None)
            with self._lock:
                self._open.update((inner, outer))
            threading.Thread(target=self._connection, args=(inner, outer), daemon=True).start()

    def _connection(self, inner: socket.socket, outer: socket.socket) -> None:
        back = threading.Thread(target=_pump, args=(outer, inner), daemon=True)
        back.start()
        _pump(inner, outer)
        back.join()
        with self._lock:
            self._open.difference_update((inner, outer))
        inner.close()
        outer.close()

    def _send(self, msg: dict) -> None:
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._cmd, data) :]

    def _recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._res], [], [], left)[0]:
                raise TimeoutError("chromium did not answer on its DevTools pipe")
            chunk = os.read(self._res, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its DevTools pipe ({self._stderr()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, **params) -> dict:
        n = next(self._ids)
        msg = {"id": n, "method": method, "params": params}
        self._send(msg | {"sessionId": self.session} if self.session else msg)
        while True:
            msg = self._recv(timeout=60)
            if msg.get("sessionId") == self.session:
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
        elif method == "Network.requestWillBeSent":
            self.pending[params["requestId"]] = f"{params['request']['method']} {params['request']['url']}"
        elif method == "Network.loadingFailed":
            what = self.pending.pop(params["requestId"], "?")
            why = " ".join(str(params[k]) for k in ("errorText", "blockedReason") if params.get(k))
            self.problems.append(f"network: {what} failed ({why})")
        elif method == "Network.loadingFinished":
            self.pending.pop(params["requestId"], None)

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
        raise AssertionError(
            f"page at {self.location()} ({self.eval('document.readyState')}) never showed {missing};"
            f" it showed:\n{text[:3000] or '(empty)'}\nproblems: {self.problems[-40:]}\n"
            f"unanswered requests: {list(self.pending.values())[-40:]}"
        )

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def close(self) -> None:
        try:
            with self._lock:
                for s in self._open:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
                self._open.clear()
            for fd in (self._cmd, self._res):
                with contextlib.suppress(OSError):
                    os.close(fd)
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
