"""Searching for a canary secret everywhere a run could leak it: files (binary too), process command
lines sampled while the run goes on, and ``docker inspect`` of the run's containers (and their exec
instances) sampled while they exist. The secret is searched raw, URL-encoded and base64-encoded
(standard and URL-safe alphabets, at each of the three byte alignments).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus


def needles(secret: str) -> dict[str, bytes]:
    """What the secret looks like in each encoding. A base64 needle drops the first and last
    4-character groups, which depend on the bytes around the secret."""
    raw = secret.encode()
    out = {
        "raw": raw,
        "urlencoded": quote(secret, safe="").encode(),
        "urlencoded+": quote_plus(secret).encode(),
    }
    for k in range(3):
        for name, enc in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            out[f"{name}@{k}"] = enc(b"\0" * k + raw)[4:-4]
    return out


def hits_in(data: bytes, found: dict[str, bytes]) -> list[str]:
    return [kind for kind, n in found.items() if n in data]


def scan_tree(root: Path, found: dict[str, bytes]) -> list[str]:
    """Every regular file under ``root`` (hidden and binary too), read whole."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            try:
                data = p.read_bytes()
            except OSError:
                continue
            hits += [f"{p}: {kind}" for kind in hits_in(data, found)]
    return hits


class Sampler(threading.Thread):
    """Calls ``sample()`` every ``every`` seconds until stopped; collects what it returns."""

    def __init__(self, sample: Callable[[], list[str]], every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self._sample = sample
        self.every = every
        self.hits: list[str] = []
        self.samples = 0
        self.errors: list[str] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            try:
                self.hits += self._sample()
            except Exception as exc:  # noqa: BLE001 - keep sampling; the test reports errors
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self.samples += 1
            self._stop_evt.wait(self.every)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(60)


class CmdlineScan:
    """``/proc/*/cmdline`` of every process on the machine. Also notes which command lines it saw
    (to prove the sampling overlapped the processes that matter)."""

    def __init__(self, found: dict[str, bytes], watch: dict[str, bytes]) -> None:
        self.found = found
        self.watch = watch  # label -> substring: how many samples saw such a process
        self.seen: dict[str, int] = dict.fromkeys(watch, 0)

    def __call__(self) -> list[str]:
        hits, saw = [], set()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
            except OSError:
                continue
            hits += [f"pid {pid} cmdline: {kind}" for kind in hits_in(cmd, self.found)]
            saw |= {label for label, s in self.watch.items() if s in cmd}
        for label in saw:
            self.seen[label] += 1
        return hits


class DockerScan:
    """``docker inspect`` of every container whose label ``key`` has a value in ``values()`` (exact
    match), and of each of their exec instances."""

    def __init__(self, found: dict[str, bytes], key: str, values: Callable[[], set[str]]) -> None:
        self.found = found
        self.key = key
        self.values = values
        self.containers: set[str] = set()
        self.execs: set[str] = set()

    def __call__(self) -> list[str]:
        wanted = self.values()
        if not wanted:
            return []
        fmt = '{{.ID}} {{.Label "' + self.key + '"}}'
        ps = subprocess.run(
            ["docker", "ps", "-a", "--no-trunc", "--filter", f"label={self.key}", "--format", fmt],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        ids = [
            ln.split()[0] for ln in ps.stdout.splitlines() if len(ln.split()) == 2 and ln.split()[1] in wanted
        ]
        if not ids:
            return []
        self.containers |= set(ids)
        r = subprocess.run(["docker", "inspect", *ids], capture_output=True, timeout=60)
        hits = [f"docker inspect {ids}: {kind}" for kind in hits_in(r.stdout, self.found)]
        try:
            infos = json.loads(r.stdout or b"[]")
        except ValueError:
            infos = []
        new_execs = {e for info in infos for e in (info.get("ExecIDs") or [])} - self.execs
        self.execs |= new_execs
        for eid in sorted(new_execs):  # an exec instance's config does not change: inspected once
            data = _exec_inspect(eid)
            hits += [f"exec inspect {eid}: {kind}" for kind in hits_in(data, self.found)]
        return hits


def _exec_inspect(exec_id: str) -> bytes:
    """The engine's view of one exec instance (``GET /exec/<id>/json``), as raw JSON bytes."""
    import docker

    client = docker.from_env()
    try:
        return json.dumps(client.api.exec_inspect(exec_id)).encode()
    except docker.errors.NotFound:
        return b""
    finally:
        client.close()


#: run inside a trial container by ``ContainerProcScan``: every process's environ and cmdline,
#: hex-encoded per pid so the host searches them (the needles never enter the container)
_PROC_DUMP = (
    "import os,json\n"
    "out={}\n"
    "for p in os.listdir('/proc'):\n"
    " if p.isdigit():\n"
    "  for f in ('environ','cmdline'):\n"
    "   try: out[p+'/'+f]=open('/proc/'+p+'/'+f,'rb').read().hex()\n"
    "   except OSError: pass\n"
    "print(json.dumps(out))\n"
)


class ContainerProcScan:
    """``/proc/*/environ`` and ``/proc/*/cmdline`` of every process INSIDE each of the run's trial
    containers (``docker exec``, as root: the agent's own view of its sandbox), searched on the host.
    Also keeps, per container, the values of ``capture`` (an environment variable the arms are meant
    to have: the gateway's per-attempt token), for the tests that use a token from elsewhere."""

    def __init__(self, found: dict[str, bytes], containers: Callable[[], set[str]], capture: str) -> None:
        self.found = found
        self.containers = containers
        self.capture = capture.encode() + b"="
        self.captured: dict[str, set[str]] = {}  # container id -> values of ``capture``
        self.scanned: dict[str, int] = {}  # container id -> samples that read its processes
        self.procs_seen = 0

    def __call__(self) -> list[str]:
        hits = []
        for cid in sorted(self.containers()):
            r = subprocess.run(
                ["docker", "exec", "-u", "0", cid, "python3", "-c", _PROC_DUMP],
                capture_output=True, timeout=60,
            )  # fmt: skip
            if r.returncode != 0:
                continue  # gone, or not started yet
            try:
                dump = json.loads(r.stdout)
            except ValueError:
                continue
            self.scanned[cid] = self.scanned.get(cid, 0) + 1
            for name, hexed in dump.items():
                data = bytes.fromhex(hexed)
                self.procs_seen += 1
                hits += [f"container {cid[:12]} /proc/{name}: {kind}" for kind in hits_in(data, self.found)]
                if name.endswith("/environ"):
                    for var in data.split(b"\0"):
                        if var.startswith(self.capture):
                            self.captured.setdefault(cid, set()).add(var[len(self.capture) :].decode())
        return hits


def _cmdline(pid: str) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace")


class HostEnvironScan:
    """``/proc/*/environ`` of every process on this host (root reads all): which processes hold the
    secret, with their command lines, for the test to judge (the gateway and the runner that starts
    it are the ones that may)."""

    def __init__(self, found: dict[str, bytes]) -> None:
        self.found = found
        self.holders: dict[int, str] = {}  # pid -> its command line (first sample that saw it)

    def __call__(self) -> list[str]:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) in self.holders:
                continue
            try:
                # the command line on both sides of the environ: a child the runner forked holds
                # its parent's environment until it execs, and one that execs between the reads
                # would be named by a command line whose environment was never read (skipped:
                # the next sample reads it whole)
                before = _cmdline(pid)
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    env = fh.read()
                if not hits_in(env, self.found):
                    continue
                cmd = _cmdline(pid)
            except OSError:
                continue
            if cmd == before:
                self.holders[int(pid)] = cmd
        return []
