"""Compose-aware cleanup of a run's Docker objects: plan first, then act.

Why: ``docker rm -f`` on a trial's containers leaves its compose network behind, and leaked
networks exhausted the address pool in the field. A trial killed hard (SIGKILL) never runs
harbor's ``compose down``. Cleanup selects containers, networks and images whose
``com.docker.compose.project`` label exactly equals the compose project of one of the trials of
the output tree -- never by name, substring or regex. It removes the containers first (force,
anonymous volumes), then the networks, then the images compose built for those projects (Compose
labels them with the project too; harbor's ``down --rmi local`` never ran for a killed trial),
re-reading each object's labels right before deleting it. Images are never forced: one that
another tag or a container still uses stays.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modes import safetext
from runner.errors import NotAnOutputTree
from runner.ops.docker_pool import is_ours, project_of, project_scan
from runner.ops.dockerapi import (
    COMPOSE_PROJECT,
    call_engine,
    connect,
    list_containers,
    list_images,
    list_networks,
)
from runner.results.tree import voided_root

if TYPE_CHECKING:
    import docker


@dataclass
class DockerObj:
    kind: str  # "container" | "network" | "image"
    id: str
    name: str
    project: str
    state: str = ""  # container state, "N attached" for networks, size for images


@dataclass
class CleanupPlan:
    """One host's removals for an output tree, frozen (a ``runner.ops.plan.Plan``)."""

    out: str
    scope: dict[str, str | None]
    projects: list[str]
    containers: list[DockerObj] = field(default_factory=list)
    networks: list[DockerObj] = field(default_factory=list)
    images: list[DockerObj] = field(default_factory=list)
    #: dirs that could have named a project but are not trusted to decide a removal (another
    #: user's, or writable by others: ``docker_pool.project_scan``), named and left alone
    left_alone: list[str] = field(default_factory=list)
    listed = True

    @property
    def empty(self) -> bool:
        return not self.containers and not self.networks and not self.images

    def to_json(self) -> dict:
        return asdict(self)

    def act(self) -> CleanupReport:
        return act_cleanup(self)

    @classmethod
    def from_json(cls, d: dict) -> CleanupPlan:
        """The plan ``to_json`` gave (made on another host, carried back as JSON)."""
        objs = {k: [DockerObj(**o) for o in d.get(k, [])] for k in ("containers", "networks", "images")}
        left = [str(x) for x in d.get("left_alone") or []]
        return cls(
            str(d["out"]), dict(d.get("scope") or {}), list(d.get("projects") or []), **objs, left_alone=left
        )

    def render(self, host: str = "") -> str:
        """The plan, one line per object; ``host`` (a cluster run's host) leads every object line."""
        scope = ", ".join(f"{k}={v}" for k, v in self.scope.items() if v) or "whole tree"
        at = f"{host}  " if host else ""
        where = f" on {host}" if host else ""
        lines = [
            f"cleanup plan for {self.out}{where} ({scope}): {len(self.projects)} compose project(s) of its trials",
            f"  containers to remove (force, with anonymous volumes): {len(self.containers)}",
        ]
        for c in self.containers:
            lines.append(f"    {at}{c.id[:12]}  {c.name:<40} {c.state:<10} project={c.project}")
        lines.append(f"  networks to remove (after the containers): {len(self.networks)}")
        for n in self.networks:
            lines.append(f"    {at}{n.id[:12]}  {n.name:<40} {n.state:<10} project={n.project}")
        lines.append(f"  images compose built for them (last, never forced): {len(self.images)}")
        for i in self.images:
            lines.append(
                f"    {at}{i.id.removeprefix('sha256:')[:12]}  {i.name:<40} {i.state:<10} project={i.project}"
            )
        lines.append('  selected by exact label "com.docker.compose.project" = a trial\'s compose project')
        for why in self.left_alone:
            lines.append(f"  left alone (not trusted to decide a removal): {safetext.clean(why, None)}")
        return "\n".join(lines)


@dataclass
class CleanupReport:
    removed_containers: list[str] = field(default_factory=list)
    removed_networks: list[str] = field(default_factory=list)
    removed_images: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # gone before we got to them: not an error
    skipped: list[str] = field(default_factory=list)  # no longer ours, or an image still in use
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict:
        return asdict(self) | {"ok": self.ok}

    @classmethod
    def from_json(cls, d: dict) -> CleanupReport:
        return cls(**{k: list(d.get(k) or []) for k in cls.__dataclass_fields__})

    def render(self) -> str:
        lines = [
            f"  removed {len(self.removed_containers)} container(s): {', '.join(self.removed_containers) or '-'}",
            f"  removed {len(self.removed_networks)} network(s): {', '.join(self.removed_networks) or '-'}",
            f"  removed {len(self.removed_images)} image(s): {', '.join(self.removed_images) or '-'}",
        ]
        if self.vanished:
            lines.append(f"  already gone: {', '.join(self.vanished)}")
        if self.skipped:
            lines.append(f"  left alone (no longer ours, or image still in use): {', '.join(self.skipped)}")
        for f in self.failed:
            lines.append(f"  FAILED: {f}")
        return "\n".join(lines)


def plan_cleanup(
    out: Path,
    *,
    task: str | None = None,
    arm: str | None = None,
    trial: str | None = None,
    trials: Iterable[str] | None = None,
    client: docker.DockerClient | None = None,
) -> CleanupPlan:
    """List the containers, networks and built images of the tree's trials (or one task, arm,
    trial, or set of trial dir names)."""
    out = Path(out)
    if not out.is_dir():
        raise NotAnOutputTree(f"{out} is not a directory (expected a marathon output tree)")
    scan = project_scan(out, task=task, arm=arm, trial=trial, trials=trials)
    projects = scan.projects
    scope = {"task": task, "arm": arm, "trial": trial}
    if trials is not None:
        scope["trials"] = ",".join(sorted(trials))
    plan = CleanupPlan(out=str(out), scope=scope, projects=sorted(projects), left_alone=scan.left_alone)
    if not projects:
        return plan
    client = client or connect()
    has_label = {"label": COMPOSE_PROJECT}  # key only; the value is compared exactly below
    foreign: set[str] = set()  # projects whose containers run another tree's trial (a copy's original)
    mine = []
    for c in call_engine(client, list_containers, has_label):
        labels = c.get("Labels") or {}
        if is_ours(labels, projects):
            name = (c.get("Names") or ["/" + c["Id"][:12]])[0].lstrip("/")
            project = project_of(labels) or ""
            elsewhere = _trial_elsewhere(c, scan.trial_of.get(project), out)
            if elsewhere:
                foreign.add(project)
                plan.left_alone.append(
                    f"container {name}: mounts {elsewhere}, the trial of another tree (this one a copy of it?)"
                )
                continue
            mine.append((c, name, project))
    for c, name, project in mine:
        if project in foreign:  # the project's other containers (a task's db, harbor's sidecars) too:
            # harbor mounts the trial on main alone, and a review's cleanup of a copy removed the rest
            plan.left_alone.append(f"container {name}: of project {project}, which runs another tree's trial")
            continue
        plan.containers.append(DockerObj("container", c["Id"], name, project, c.get("State", "")))
    for n in call_engine(client, list_networks, has_label):
        labels = n.get("Labels") or {}
        if is_ours(labels, projects) and project_of(labels) not in foreign:
            attached = f"{len(n.get('Containers') or {})} attached"
            plan.networks.append(
                DockerObj("network", n["Id"], n.get("Name", ""), project_of(labels) or "", attached)
            )
    for i in call_engine(client, list_images, has_label):
        labels = i.get("Labels") or {}
        if is_ours(labels, projects) and project_of(labels) not in foreign:
            tags = [t for t in i.get("RepoTags") or [] if t != "<none>:<none>"]
            name = tags[0] if tags else i["Id"].removeprefix("sha256:")[:12]
            size = f"{(i.get('Size') or 0) / 1e6:.0f}MB"
            plan.images.append(DockerObj("image", i["Id"], name, project_of(labels) or "", size))
    for objs in (plan.containers, plan.networks, plan.images):
        objs.sort(key=lambda o: (o.project, o.name))
    return plan


def _trial_elsewhere(container: dict, trial_dir: Path | None, out: Path) -> str:
    """A bind mount of the container that is its trial's dir (by name) outside this tree and its
    voided root, when none is inside them: the container runs a trial of another tree whose copy
    this is (``cp -a`` of a live run gives the copy the same trial names, so the same compose
    projects; a probe's cleanup of such a copy removed the live run's containers). "" otherwise,
    and when no mount names the trial (nothing to tell by)."""
    if trial_dir is None:
        return ""
    ours = [Path(os.path.realpath(out)), Path(os.path.realpath(voided_root(out)))]
    naming = []
    for m in container.get("Mounts") or []:
        src = m.get("Source") if isinstance(m, dict) and m.get("Type") == "bind" else None
        if isinstance(src, str) and trial_dir.name in Path(src).parts:
            naming.append(Path(os.path.realpath(src)))
    if not naming or any(p == r or r in p.parents for p in naming for r in ours):
        return ""
    return str(naming[0])


def _labels(client: docker.DockerClient, obj: DockerObj) -> dict:
    """The object's labels as the engine has them now (raises NotFound when it is gone)."""
    if obj.kind == "container":
        return client.api.inspect_container(obj.id)["Config"].get("Labels") or {}
    if obj.kind == "network":
        return client.api.inspect_network(obj.id).get("Labels") or {}
    return client.api.inspect_image(obj.id)["Config"].get("Labels") or {}


def _remove(client: docker.DockerClient, obj: DockerObj) -> None:
    if obj.kind == "container":
        client.api.remove_container(obj.id, force=True, v=True)
    elif obj.kind == "network":
        client.api.remove_network(obj.id)
    else:
        client.api.remove_image(obj.id)  # never forced: other tags or containers keep it


def _act(
    client: docker.DockerClient, projects: set[str], objs: list[DockerObj], report: CleanupReport
) -> list[str]:
    import docker.errors

    removed = []
    for obj in objs:
        try:
            if not is_ours(_labels(client, obj), projects):
                report.skipped.append(obj.name)
                continue
            _remove(client, obj)
            removed.append(obj.name)
        except docker.errors.APIError as exc:
            msg = str(exc.explanation or exc)
            if exc.status_code == 404:
                report.vanished.append(obj.name)
            elif obj.kind == "container" and exc.status_code == 409 and "already in progress" in msg:
                report.vanished.append(obj.name)  # someone (compose down) is removing it right now
            elif obj.kind == "image" and exc.status_code == 409:
                report.skipped.append(f"{obj.name} (still used: {msg})")
            else:
                report.failed.append(f"{obj.kind} {obj.name}: {msg}")
    return removed


def act_cleanup(plan: CleanupPlan, client: docker.DockerClient | None = None) -> CleanupReport:
    """Remove the plan's containers (force, anonymous volumes), then its networks, then its images.

    Each object is re-read right before deletion and removed only if its project label still
    exactly equals a project of the plan. Objects that vanished meanwhile are reported, not errors.
    """
    report = CleanupReport()
    if plan.empty:
        return report
    client = client or connect()
    projects = set(plan.projects)
    report.removed_containers = call_engine(client, _act, projects, plan.containers, report)
    report.removed_networks = call_engine(client, _act, projects, plan.networks, report)
    report.removed_images = call_engine(client, _act, projects, plan.images, report)
    return report


@dataclass
class HostPlan:
    """One host's part of a cluster run's cleanup: its plan, made on that host (None when the host
    was down or its plan could not be made), and what acting on it did."""

    host: str  # NAME/IP
    plan: CleanupPlan | None
    error: str = ""  # why there is no plan, when the host was up
    report: CleanupReport | None = None
    node_id: str = ""  # its Ray node: where acting on the plan runs

    @property
    def listed(self) -> bool:
        return self.plan is not None


def render_host_plans(hosts: list[HostPlan]) -> str:
    """A cluster run's whole cleanup plan: every host's, each object named with its host, and every
    host whose objects could not be listed said as such."""
    lines = []
    for h in hosts:
        if h.plan is not None:
            lines.append(h.plan.render(host=h.host))
        elif h.error:
            lines.append(f"host {h.host}: its objects were not listed ({h.error})")
        else:
            lines.append(f"host {h.host} down: its objects were not listed")
    unlisted = [h.host for h in hosts if not h.listed]
    total = sum(len(h.plan.containers) + len(h.plan.networks) + len(h.plan.images) for h in hosts if h.plan)
    lines.append(
        f"{len(hosts)} host(s), {total} object(s) to remove"
        + (f"; NOT listed: {', '.join(unlisted)}" if unlisted else "")
    )
    return "\n".join(lines)


def render_host_reports(hosts: list[HostPlan]) -> str:
    lines = []
    for h in hosts:
        if h.report is not None:
            lines += [f"host {h.host}:", h.report.render()]
        elif h.listed and h.error:
            lines.append(f"host {h.host}: FAILED: {h.error}")
    return "\n".join(lines)
