"""Where the suite's time goes: a pytest plugin that writes, per test, its wall time by phase and the
CPU it cost on the host and inside the containers it started.

Loaded by tests/conftest.py when ``MARATHON_CI_PROFILE=<file.jsonl>`` is set; ``benchmarks/ci_cost.py``
turns the file into the per-module table in docs/testing.md. Wall time alone misleads on a shared
2-core machine (a module waits for a core as often as for its trials); CPU seconds say what a test
costs whatever else runs, and wall minus CPU over the cores says how much of it is waiting.

- host CPU: this process and every child it waited for (``RUSAGE_CHILDREN``: ``harbor run``,
  ``marathon``, ``docker compose``; a detached runner that is never waited for is not counted);
- container CPU: ``cpuacct.usage`` of every container cgroup (cgroup v1, Docker's cgroupfs driver),
  sampled twice a second; a container counts when its compose project is that of a trial dir under
  this session's temporary roots (``modes.naming.compose_project``) or when the machine's engine does
  not know it (a private engine a test started). Up to half a second of a container's last CPU is lost.

Only meaningful without xdist (one process sees the whole machine).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from modes.naming import compose_project

CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")
_ID = re.compile(r"^[0-9a-f]{64}$")


def _own_cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class ContainerCpu(threading.Thread):
    """The summed CPU seconds of this session's containers, alive or gone."""

    def __init__(self, roots: list[str]) -> None:
        super().__init__(daemon=True, name="ci-profile-containers")
        self.roots = [r.rstrip("/") + "/" for r in roots]
        self.last: dict[str, float] = {}
        self.mine: dict[str, bool] = {}
        self.projects: set[str] = set()
        self.lock = threading.Lock()
        self.stop_evt = threading.Event()

    def _trial_projects(self) -> None:
        """The compose projects of every trial dir under the session's roots (a dir named
        ``<task>__<id>`` holding harbor's config.json), found by a pruned walk."""
        skip = {"sessions", "vendor", "node_modules", "wheels", "node", ".git", "agent", "verifier"}
        stack = [(Path(r), 0) for r in self.roots]
        while stack:
            d, depth = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            names = {e.name for e in entries}
            if "__" in d.name and "config.json" in names:
                self.projects.add(compose_project(d.name))
                continue
            if depth < 12:
                stack += [(Path(e.path), depth + 1) for e in entries
                          if e.is_dir(follow_symlinks=False) and e.name not in skip]  # fmt: skip

    def _is_mine(self, cid: str) -> bool:
        r = subprocess.run(
            ["docker", "inspect", "--format", '{{index .Config.Labels "com.docker.compose.project"}}', cid],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if r.returncode != 0:
            return "No such object" in r.stderr  # another engine's container: a test's private engine
        project = r.stdout.strip()
        if project and project not in self.projects:
            self._trial_projects()
        return bool(project) and project in self.projects

    def sample(self) -> None:
        try:
            ids = [p.name for p in CGROUP.iterdir() if _ID.match(p.name)]
        except OSError:
            return
        for cid in ids:
            if cid not in self.mine:
                self.mine[cid] = self._is_mine(cid)
            if not self.mine[cid]:
                continue
            try:
                usage = int((CGROUP / cid / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                continue
            with self.lock:
                self.last[cid] = max(usage, self.last.get(cid, 0.0))

    def total(self) -> float:
        with self.lock:
            return sum(self.last.values())

    def run(self) -> None:
        while not self.stop_evt.wait(0.5):
            self.sample()


class Profile:
    def __init__(self, path: Path, roots: list[str]) -> None:
        self.path = path
        self.containers = ContainerCpu(roots)
        self.containers.start()
        self.cur: dict = {}
        self.fh = path.open("a")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        t0, c0 = time.monotonic(), _own_cpu()
        self.containers.sample()
        k0 = self.containers.total()
        self.cur = {"nodeid": item.nodeid, "phases": {}}
        try:
            return (yield)
        finally:
            self.containers.sample()
            self.cur.update(
                wall=round(time.monotonic() - t0, 2),
                host_cpu=round(_own_cpu() - c0, 2),
                container_cpu=round(self.containers.total() - k0, 2),
                load1=round(os.getloadavg()[0], 2),
            )
            self.fh.write(json.dumps(self.cur) + "\n")
            self.fh.flush()

    def pytest_runtest_logreport(self, report) -> None:
        self.cur.setdefault("phases", {})[report.when] = round(report.duration, 2)
        if report.failed:
            self.cur["failed"] = True

    def pytest_unconfigure(self, config) -> None:
        self.containers.stop_evt.set()
        self.fh.close()


def register(config: pytest.Config) -> None:
    """Install the plugin when MARATHON_CI_PROFILE names the output file."""
    out = os.environ.get("MARATHON_CI_PROFILE")
    if not out or hasattr(config, "workerinput"):
        return
    roots = [tempfile.gettempdir()]
    if config.option.basetemp:
        roots.append(str(Path(config.option.basetemp).resolve()))
    config.pluginmanager.register(Profile(Path(out), roots), "marathon-ci-profile")
