"""``marathon view`` as a user runs it: a real process serving on loopback, read over real HTTP."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from console_support import marathon  # noqa: F401 - the CLI as a user runs it, for the viewer tests

REPO = Path(__file__).resolve().parents[2]
_URL = re.compile(r"open:\s+(http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        import json

        return json.loads(self.body)


def request(
    port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


class Viewer:
    """``marathon view OUT`` in the foreground of a child process, as from a terminal."""

    def __init__(self, out: Path, *args: str, timeout: float = 180) -> None:
        env = dict(
            os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "marathon.cli", "view", str(out), *args],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        m = None
        while m is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("marathon view did not serve:\n" + "".join(self.lines))
            m = next((m for line in list(self.lines) if (m := _URL.search(line))), None)
            time.sleep(0.05)
        self.url, self.port, self.token = m.group(1), int(m.group(2)), m.group(3)
        self.pid = self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def get(self, path: str, **headers: str) -> Reply:
        return request(self.port, "GET", path, headers)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self._reader.join(5)
        return rc


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
