"""Compose-aware cleanup of a run's Docker objects: plan first, then act.

Why: ``docker rm -f`` on a trial's containers leaves its compose network behind, and leaked
networks exhausted the address pool in the field. A trial killed hard (SIGKILL) never runs
harbor's ``compose down``. Cleanup selects containers and networks whose
``com.docker.compose.project`` label exactly equals the compose project of one of the trials of
the output tree -- never by name, substring or regex -- removes containers first (force, anonymous
volumes) and then the networks, re-reading each object's labels right before deleting it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runner.docker_pool import is_ours, our_projects, project_of
from runner.dockerapi import COMPOSE_PROJECT, connect, engine_error
from runner.errors import NotAnOutputTree

if TYPE_CHECKING:
    import docker


@dataclass
class DockerObj:
    kind: str  # "container" | "network"
    id: str
    name: str
    project: str
    state: str = ""  # container state, or "N attached" for networks


@dataclass
class CleanupPlan:
    out: str
    scope: dict[str, str | None]
    projects: list[str]
    containers: list[DockerObj] = field(default_factory=list)
    networks: list[DockerObj] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.containers and not self.networks

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        scope = ", ".join(f"{k}={v}" for k, v in self.scope.items() if v) or "whole tree"
        lines = [
            f"cleanup plan for {self.out} ({scope}): {len(self.projects)} compose project(s) of its trials",
            f"  containers to remove (force, with anonymous volumes): {len(self.containers)}",
        ]
        for c in self.containers:
            lines.append(f"    {c.id[:12]}  {c.name:<40} {c.state:<10} project={c.project}")
        lines.append(f"  networks to remove (after the containers): {len(self.networks)}")
        for n in self.networks:
            lines.append(f"    {n.id[:12]}  {n.name:<40} {n.state:<10} project={n.project}")
        lines.append('  selected by exact label "com.docker.compose.project" = a trial\'s compose project')
        return "\n".join(lines)


@dataclass
class CleanupReport:
    removed_containers: list[str] = field(default_factory=list)
    removed_networks: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # gone before we got to them: not an error
    skipped: list[str] = field(default_factory=list)  # label changed since the plan
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict:
        return asdict(self) | {"ok": self.ok}

    def render(self) -> str:
        lines = [
            f"  removed {len(self.removed_containers)} container(s): {', '.join(self.removed_containers) or '-'}",
            f"  removed {len(self.removed_networks)} network(s): {', '.join(self.removed_networks) or '-'}",
        ]
        if self.vanished:
            lines.append(f"  already gone: {', '.join(self.vanished)}")
        if self.skipped:
            lines.append(f"  skipped (label changed since the plan): {', '.join(self.skipped)}")
        for f in self.failed:
            lines.append(f"  FAILED: {f}")
        return "\n".join(lines)


def plan_cleanup(
    out: Path,
    *,
    task: str | None = None,
    arm: str | None = None,
    trial: str | None = None,
    client: docker.DockerClient | None = None,
) -> CleanupPlan:
    """List the containers and networks of the output tree's trials (or one task/arm/trial)."""
    import docker.errors
    import requests

    out = Path(out)
    if not out.is_dir():
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    projects = our_projects(out, task=task, arm=arm, trial=trial)
    plan = CleanupPlan(
        out=str(out), scope={"task": task, "arm": arm, "trial": trial}, projects=sorted(projects)
    )
    if not projects:
        return plan
    client = client or connect()
    has_label = {"label": COMPOSE_PROJECT}  # key only; the value is compared exactly below
    try:
        containers = client.containers.list(all=True, filters=has_label)
        networks = client.networks.list(filters=has_label, greedy=True)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise engine_error(exc, client) from None
    for c in containers:
        labels = c.attrs.get("Config", {}).get("Labels") or c.labels
        if is_ours(labels, projects):
            plan.containers.append(DockerObj("container", c.id, c.name, project_of(labels) or "", c.status))
    for n in networks:
        labels = n.attrs.get("Labels") or {}
        if is_ours(labels, projects):
            attached = len(n.attrs.get("Containers") or {})
            plan.networks.append(
                DockerObj("network", n.id, n.name, project_of(labels) or "", f"{attached} attached")
            )
    plan.containers.sort(key=lambda o: (o.project, o.name))
    plan.networks.sort(key=lambda o: (o.project, o.name))
    return plan


def _is_not_found(exc: Exception) -> bool:
    import docker.errors

    if isinstance(exc, docker.errors.NotFound):
        return True
    return isinstance(exc, docker.errors.APIError) and exc.status_code == 404


def act_cleanup(plan: CleanupPlan, client: docker.DockerClient | None = None) -> CleanupReport:
    """Remove the plan's containers (force, anonymous volumes), then its networks.

    Each object is re-read right before deletion and removed only if its project label still
    exactly equals a project of the plan. Objects that vanished meanwhile are reported, not errors.
    """
    import docker.errors
    import requests

    report = CleanupReport()
    if plan.empty:
        return report
    client = client or connect()
    projects = set(plan.projects)
    try:
        for obj in plan.containers:
            try:
                c = client.containers.get(obj.id)
                if not is_ours(c.attrs.get("Config", {}).get("Labels"), projects):
                    report.skipped.append(obj.name)
                    continue
                c.remove(force=True, v=True)
                report.removed_containers.append(obj.name)
            except docker.errors.APIError as exc:
                if _is_not_found(exc):
                    report.vanished.append(obj.name)
                elif exc.status_code == 409 and "already in progress" in str(exc):
                    report.vanished.append(obj.name)  # someone else (compose down) is removing it
                else:
                    report.failed.append(f"container {obj.name}: {exc.explanation or exc}")
        for obj in plan.networks:
            try:
                n = client.networks.get(obj.id)
                if not is_ours(n.attrs.get("Labels"), projects):
                    report.skipped.append(obj.name)
                    continue
                n.remove()
                report.removed_networks.append(obj.name)
            except docker.errors.APIError as exc:
                if _is_not_found(exc):
                    report.vanished.append(obj.name)
                else:
                    report.failed.append(f"network {obj.name}: {exc.explanation or exc}")
    except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
        if isinstance(exc, docker.errors.APIError):
            raise
        raise engine_error(exc, client) from None
    return report
