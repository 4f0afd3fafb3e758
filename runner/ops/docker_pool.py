"""Docker address-pool accounting, network classification (ours/foreign/empty) and the start gate.

Why: in the field one exhausted address pool killed 12 trials at once. Every trial's compose
project takes one bridge network out of the daemon's address pools, and on a shared server other
people hold many of them. Before starting a trial the runner asks ``verdict(pool_status(out))``;
while it waits it reclaims empty networks that are ours (``reclaim_empty_ours``, never anyone
else's).

"Ours" is decided in exactly one place: ``our_projects(out)`` + ``is_ours(labels, projects)``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from modes import safeio
from modes.naming import compose_project
from modes.trial_files import TrialFiles
from runner.errors import UserError
from runner.ops.dockerapi import COMPOSE_PROJECT, call_engine, connect, list_networks
from runner.results.tree import iter_job_dirs, iter_trial_dirs, voided_root

if TYPE_CHECKING:
    import docker

# Docker's built-in local-scope default pools, used when `docker info` lists no
# DefaultAddressPools. Source: moby libnetwork/ipamutils/utils.go (vendored in Docker 20.10,
# github.com/docker/libnetwork ipamutils `localScopeDefaultNetworks`): each entry is split into
# subnets of the given size -> 3 + 4 + 4 + 4 = 15 networks of /16 from 172.17-31, plus 16 /20s
# from 192.168/16 = 31 networks. The default bridge (docker0, 172.17.0.0/16) takes one of them.
# The global-scope pool (10.0.0.0/8 split into /24) is for swarm overlays and is not counted.
# The allocator (libnetwork ipam/allocator.go getPredefinedPool) skips a predefined subnet that
# overlaps an allocated one, and -- verified on Docker 20.10.24 with a bridge route in the daemon's
# network namespace -- one that overlaps a host route (netutils.CheckRouteOverlaps). So routes
# (VPNs, other daemons' bridges) count as "blocked" and reduce what is free.
BUILTIN_LOCAL_POOLS: tuple[tuple[str, int], ...] = (
    ("172.17.0.0/16", 16),
    ("172.18.0.0/16", 16),
    ("172.19.0.0/16", 16),
    ("172.20.0.0/14", 16),
    ("172.24.0.0/14", 16),
    ("172.28.0.0/14", 16),
    ("192.168.0.0/16", 20),
)

ENV_CAP = "MARATHON_NET_CAP"
ENV_MARGIN = "MARATHON_NET_MARGIN"
DEFAULT_MARGIN = 2


# --- "is this compose project ours": the one rule ----------------------------------------

# harbor/trial/trial.py _MAX_VERIFIER_ENV_SESSION_ID_LEN
_MAX_VERIFIER_SESSION_LEN = 63
# harbor/trial/single_step.py: a single-step task's separate verifier environment uses this key;
# multi-step tasks use the step name (their trial dir has steps/<name>/).
SINGLE_STEP_VERIFIER_KEY = "trial"


def verifier_session_id(trial_name: str, key: str) -> str:
    """harbor 0.25.0 ``Trial._separate_verifier_session_id``: the session id of a trial's separate
    verifier environment (chars outside alnum and "-._" become "_"; over 63 chars: cut + sha1)."""
    raw = f"{trial_name}__verifier__{key}"
    safe = "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in raw)
    if len(safe) <= _MAX_VERIFIER_SESSION_LEN:
        return safe
    suffix = "__" + hashlib.sha1(safe.encode()).hexdigest()[:8]
    return safe[: _MAX_VERIFIER_SESSION_LEN - len(suffix)].rstrip("-._") + suffix


def verifier_compose_project(trial_name: str, key: str) -> str:
    """The compose project of a trial's separate verifier environment. Uses the one sanitizer in
    ``modes.naming.compose_project`` (which appends "__env", all valid chars, so it strips off)."""
    return compose_project(verifier_session_id(trial_name, key)).removesuffix("__env")


#: harbor's trial config.json is a few KB
CONFIG_CAP = 1 << 20


def is_harbor_trial(trial_dir: Path) -> bool:
    """True when the dir holds harbor's trial ``config.json`` naming this very trial. harbor writes
    it first thing in ``Trial.run`` (``_init_result``), before any container exists, so a dir
    without it has no Docker objects -- and a mistyped OUT never makes other people's objects ours.
    Read by the rules of the runner's own files (``modes.safeio.load_own_json``): a FIFO there never
    blocks health, cleanup, kill or the runner's network gate; a symlink is not followed."""
    cfg = safeio.load_own_json(Path(trial_dir) / TrialFiles.CONFIG, CONFIG_CAP)
    return isinstance(cfg, dict) and cfg.get("trial_name") == Path(trial_dir).name


def trial_projects(trial_dir: Path) -> set[str]:
    """Every compose project harbor may create for one trial: its environment, and the separate
    verifier environments (single-step key, and one per step dir). Empty if it is no harbor trial."""
    if not is_harbor_trial(trial_dir):
        return set()
    name = trial_dir.name
    keys = {SINGLE_STEP_VERIFIER_KEY}
    try:
        keys |= {d.name for d in (trial_dir / "steps").iterdir() if d.is_dir()}
    except OSError:
        pass
    return {compose_project(name)} | {verifier_compose_project(name, k) for k in keys}


@dataclass
class ProjectScan:
    """The compose projects of a tree's trials, and what could have named one but is not trusted to
    decide a removal (``modes.safeio.untrusted``: another user's, or writable by others): each such
    dir is named in the plan and none of its projects is taken."""

    projects: set[str] = field(default_factory=set)
    left_alone: list[str] = field(default_factory=list)
    #: each project's trial dir (where the trial's containers mount its logs from)
    trial_of: dict[str, Path] = field(default_factory=dict)


def _untrusted_chain(top: Path, below: Path) -> str:
    """Why ``below`` or a dir between ``top`` and it (both included) is not trusted, or ""."""
    p = below
    chain = [below]
    while p != top and top in p.parents:
        p = p.parent
        chain.append(p)
    for d in reversed(chain):
        why = safeio.untrusted(d)
        if why:
            return f"{d}: {why}"
    return ""


def project_scan(
    out: Path,
    *,
    task: str | None = None,
    arm: str | None = None,
    trial: str | None = None,
    trials: Iterable[str] | None = None,
) -> ProjectScan:
    """The compose projects of the trials of an output tree (optionally one task, arm, trial, or
    set of trial dir names), its voided attempts included: a trial voided while the engine was down
    keeps its containers until someone removes them, and they are still this tree's. A trial counts
    only when every dir from the tree (or the voided root beside it: OUT's parent may be a shared
    /tmp) down to the trial and its config.json is the runner's user's and writable by nobody else."""
    out = Path(out)
    wanted = None if trials is None else set(trials)
    scan = ProjectScan()
    vroot = voided_root(out)
    roots = [(out, out)]
    if vroot.is_dir():
        roots.append((vroot, vroot.parent))
    for root, top in roots:
        why = _untrusted_chain(top, root)
        if why:
            scan.left_alone.append(why)
            continue
        for t, a, _arm_dir, _stamp, job in iter_job_dirs(root):
            if task is not None and t != task:
                continue
            if arm is not None and a != arm:
                continue
            why = _untrusted_chain(root, job)
            if why:
                if why not in scan.left_alone:
                    scan.left_alone.append(why)
                continue
            for tdir in iter_trial_dirs(job):
                if trial is not None and tdir.name != trial:
                    continue
                if wanted is not None and tdir.name not in wanted:
                    continue
                # harbor makes the trial dir 0o777 (TrialPaths.mkdir): its owner counts, and the
                # config.json in it must be the runner's and writable by nobody else
                cfg = tdir / TrialFiles.CONFIG
                why = safeio.untrusted(tdir, others_may_write=True)
                why = f"{tdir}: {why}" if why else (f"{cfg}: {w}" if (w := safeio.untrusted(cfg)) else "")
                if why:
                    scan.left_alone.append(why)
                    continue
                found = trial_projects(tdir)
                scan.projects |= found
                scan.trial_of.update(dict.fromkeys(found, tdir))
    return scan


def our_projects(
    out: Path,
    *,
    task: str | None = None,
    arm: str | None = None,
    trial: str | None = None,
    trials: Iterable[str] | None = None,
) -> set[str]:
    """The compose projects of the tree's trials (``project_scan``), trusted ones only."""
    return project_scan(out, task=task, arm=arm, trial=trial, trials=trials).projects


def project_of(labels: Mapping[str, str] | None) -> str | None:
    return (labels or {}).get(COMPOSE_PROJECT)


def is_ours(labels: Mapping[str, str] | None, projects: Iterable[str]) -> bool:
    """True when the object's compose-project label EXACTLY equals one of our projects."""
    proj = project_of(labels)
    return proj is not None and proj in set(projects)


# --- pools --------------------------------------------------------------------------------


@dataclass
class Pool:
    base: str
    size: int
    capacity: int  # networks this pool can hand out
    used: int = 0  # of which taken by existing networks (ours or foreign)
    blocked: int = 0  # of which not taken but overlapping a host route
    source: str = "daemon"  # "daemon" (docker info DefaultAddressPools) or "builtin"


@dataclass
class NetInfo:
    name: str
    id: str
    subnets: list[str]
    pool: str | None  # base of the pool the subnet came from, None when outside every pool
    project: str | None
    ours: bool
    empty: bool
    driver: str = ""
    created: str = ""  # the engine's RFC 3339 creation time


@dataclass
class PoolStatus:
    capacity: int
    used_ours: int
    used_foreign: int
    free: int  # capacity - used - blocked: what the daemon will still hand out
    empty_ours: list[str]  # network names (for display); act on ids from `networks`
    pools: list[Pool] = field(default_factory=list)
    networks: list[NetInfo] = field(default_factory=list)
    pools_source: str = "daemon"
    blocked: int = 0  # pool subnets no network holds but a host route overlaps (the daemon skips them)

    @property
    def used(self) -> int:
        return self.used_ours + self.used_foreign

    def to_json(self) -> dict:
        d = asdict(self)
        d["used"] = self.used
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> PoolStatus:
        """The status ``to_json`` gave (another host's, carried back as JSON)."""
        fields = {k: v for k, v in d.items() if k not in ("used", "pools", "networks")}
        return cls(**fields, pools=[Pool(**p) for p in d.get("pools", [])],
                   networks=[NetInfo(**n) for n in d.get("networks", [])])  # fmt: skip


def pools_from_info(info: Mapping) -> list[Pool]:
    """The daemon's address pools (or Docker's built-in defaults when it lists none)."""
    configured = info.get("DefaultAddressPools") or []
    if configured:
        pools = [(str(p["Base"]), int(p["Size"])) for p in configured]
        source = "daemon"
    else:
        pools = list(BUILTIN_LOCAL_POOLS)
        source = "builtin"
    out = []
    for base, size in pools:
        net = ipaddress.ip_network(base, strict=False)
        cap = 2 ** (size - net.prefixlen) if size >= net.prefixlen else 0
        out.append(Pool(base=str(net), size=size, capacity=cap, source=source))
    return out


def _slots(subnet: ipaddress._BaseNetwork, pool: Pool) -> set[int]:
    """Indices of the pool's predefined subnets that ``subnet`` overlaps (the allocator skips
    every predefined subnet overlapping an allocated one)."""
    base = ipaddress.ip_network(pool.base)
    if subnet.version != base.version or pool.size < base.prefixlen or not subnet.overlaps(base):
        return set()
    shift = base.max_prefixlen - pool.size
    lo = max(int(subnet.network_address), int(base.network_address))
    hi = min(int(subnet.broadcast_address), int(base.broadcast_address))
    first = (lo - int(base.network_address)) >> shift
    last = (hi - int(base.network_address)) >> shift
    return set(range(first, last + 1))


def host_routes(pid: int | str = "self") -> list[str]:
    """IPv4 destinations of the main routing table in the network namespace of ``pid``
    (default: ours), without the default route -- what the daemon checks new subnets against."""
    routes = []
    try:
        lines = Path(f"/proc/{pid}/net/route").read_text().splitlines()[1:]
    except OSError:
        return routes
    for line in lines:
        f = line.split()
        if len(f) < 8:
            continue
        dest, mask = int(f[1], 16), int(f[7], 16)
        if mask == 0:
            continue
        addr = ipaddress.IPv4Address(int.from_bytes(dest.to_bytes(4, "little"), "big"))
        bits = bin(mask).count("1")
        routes.append(str(ipaddress.ip_network(f"{addr}/{bits}", strict=False)))
    return sorted(set(routes))


def pool_status(
    out: Path | None,
    client: docker.DockerClient | None = None,
    *,
    routes: Iterable[str] | None = None,
    projects: set[str] | None = None,
) -> PoolStatus:
    """Capacity and use of the daemon's address pools, with every network classified.

    ``routes``: the host routes of the daemon's network namespace (default: this process's,
    which is the daemon's when marathon runs on the Docker host).
    ``projects``: the tree's compose projects when the caller already has them (the console keeps
    them current from its model instead of walking a 10,000-trial tree every few seconds).
    """
    client = client or connect()
    if projects is None:
        projects = our_projects(out) if out is not None else set()
    info = call_engine(client, lambda c: c.info())
    nets = call_engine(client, list_networks)
    pools = pools_from_info(info)
    taken: dict[int, dict[int, bool]] = {i: {} for i in range(len(pools))}  # slot -> ours?
    infos: list[NetInfo] = []
    for attrs in nets:
        if attrs.get("Scope", "local") != "local":
            continue
        labels = attrs.get("Labels") or {}
        subnets = [c.get("Subnet") for c in (attrs.get("IPAM") or {}).get("Config") or [] if c.get("Subnet")]
        ours = is_ours(labels, projects)
        pool_of: str | None = None
        for s in subnets:
            try:
                sn = ipaddress.ip_network(s, strict=False)
            except ValueError:
                continue
            for i, p in enumerate(pools):
                slots = _slots(sn, p)
                if slots:
                    pool_of = pool_of or p.base
                    for k in slots:
                        taken[i][k] = taken[i].get(k, False) or ours
        infos.append(
            NetInfo(
                name=attrs.get("Name", ""),
                id=attrs.get("Id", ""),
                subnets=subnets,
                pool=pool_of,
                project=project_of(labels),
                ours=ours,
                empty=not attrs.get("Containers"),
                created=attrs.get("Created", ""),
                driver=attrs.get("Driver", ""),
            )
        )
    route_nets = [
        ipaddress.ip_network(r, strict=False) for r in (host_routes() if routes is None else routes)
    ]
    used_ours = used_foreign = blocked = 0
    for i, p in enumerate(pools):
        p.used = len(taken[i])
        o = sum(1 for v in taken[i].values() if v)
        used_ours += o
        used_foreign += p.used - o
        routed: set[int] = set()
        for r in route_nets:
            routed |= _slots(r, p)
        p.blocked = len(routed - set(taken[i]))
        blocked += p.blocked
    capacity = sum(p.capacity for p in pools)
    infos.sort(key=lambda x: (not x.ours, x.name))
    return PoolStatus(
        capacity=capacity,
        used_ours=used_ours,
        used_foreign=used_foreign,
        free=capacity - used_ours - used_foreign - blocked,
        blocked=blocked,
        empty_ours=[x.name for x in infos if x.ours and x.empty],
        pools=pools,
        networks=infos,
        pools_source=pools[0].source if pools else "daemon",
    )


# --- the gate -----------------------------------------------------------------------------


@dataclass
class GateVerdict:
    ok: bool
    reason: str
    status: PoolStatus
    cap: int = 0
    margin: int = 0

    def to_json(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "cap": self.cap, "margin": self.margin}

    @classmethod
    def from_json(cls, d: Mapping, status: PoolStatus) -> GateVerdict:
        return cls(bool(d["ok"]), str(d["reason"]), status, int(d.get("cap", 0)), int(d.get("margin", 0)))


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        val = int(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a whole number") from None
    if val < 0:
        raise UserError(f"{name}={raw!r} must not be negative")
    return val


def gate_limits(cap: int | None = None, margin: int | None = None, *, capacity: int) -> tuple[int, int]:
    """The effective cap (networks in use we allow at most) and margin: flag, else env, else
    the daemon's capacity and DEFAULT_MARGIN."""
    if cap is None:
        cap = _env_int(ENV_CAP)
    if margin is None:
        margin = _env_int(ENV_MARGIN)
    return (capacity if cap is None else min(cap, capacity)), (DEFAULT_MARGIN if margin is None else margin)


def verdict(
    status: PoolStatus, n: int = 1, *, cap: int | None = None, margin: int | None = None
) -> GateVerdict:
    """The gate rule: start ``n`` more networks only if ``occupied + n <= cap - margin``, where
    occupied = capacity - free (networks of anyone, plus subnets blocked by host routes)."""
    eff_cap, eff_margin = gate_limits(cap, margin, capacity=status.capacity)
    occupied = status.capacity - status.free
    limit = eff_cap - eff_margin
    what = f"{occupied} occupied + {n} new"
    if occupied + n <= limit:
        return GateVerdict(
            True, f"ok: {what} <= cap {eff_cap} - margin {eff_margin}", status, eff_cap, eff_margin
        )
    reason = f"wait: {what} > cap {eff_cap} - margin {eff_margin}"
    if status.empty_ours:
        reason += f" ({len(status.empty_ours)} empty network(s) of ours can be reclaimed)"
    return GateVerdict(False, reason, status, eff_cap, eff_margin)


def wait_for_gate(
    n: int = 1,
    *,
    out: Path,
    cap: int | None = None,
    margin: int | None = None,
    client: docker.DockerClient | None = None,
    poll_sec: float = 10.0,
    timeout_sec: float | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_wait: Callable[[GateVerdict, list[str]], None] = lambda v, reclaimed: None,
    min_free_gb: int = 0,
    on_disk_wait: Callable[[str], None] = lambda reason: None,
) -> GateVerdict:
    """Block until the gate opens for ``n`` more trials (or timeout / should_stop); while waiting,
    reclaim empty networks of ours (never foreign ones) and tell ``on_wait`` the verdict and what
    was reclaimed. With ``min_free_gb``, first until the disks have that much free
    (``runner.ops.disk``; ``on_disk_wait`` hears why it waits). The single-host driver checks the
    same ``verdict`` without blocking (it has other pairs to look after); a cluster job has one pair
    and waits here on its own host."""
    from runner.ops import disk

    client = client or connect()
    deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
    root = disk.engine_root(client) if min_free_gb else None
    while min_free_gb and not (dv := disk.verdict(out, root, min_free_gb)).ok:  # the disks first
        on_disk_wait(dv.reason)
        if should_stop() or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(poll_sec)
    while True:
        v = verdict(pool_status(out, client=client), n, cap=cap, margin=margin)
        if v.ok:
            return v
        reclaimed = reclaim_empty_ours(out, client=client) if v.status.empty_ours else []
        on_wait(v, reclaimed)
        if reclaimed:
            continue
        if should_stop() or (deadline is not None and time.monotonic() >= deadline):
            return v
        time.sleep(poll_sec)


# compose creates a trial's network a moment before it attaches the first container: a network
# younger than this may be about to be used, so it is never reclaimed.
RECLAIM_MIN_AGE_SEC = 120.0


def age_sec(created: str, now: float | None = None) -> float | None:
    """Seconds since an engine timestamp like 2026-11-29T08:27:03.123456789Z (None if unparsable)."""
    import datetime as dt

    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", created or "")
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    when = dt.datetime.fromisoformat(m.group(1) + frac + tz).timestamp()
    return (time.time() if now is None else now) - when


def reclaim_empty_ours(
    out: Path, client: docker.DockerClient | None = None, *, min_age_sec: float = RECLAIM_MIN_AGE_SEC
) -> list[str]:
    """Remove networks that are ours, have no container attached and are older than
    ``min_age_sec``; return their names.

    Each network is re-read just before removal: its label must still be ours and it must still be
    empty. Foreign networks are never touched. A network that vanished meanwhile is skipped.
    """
    client = client or connect()
    projects = our_projects(out)
    if not projects:
        return []
    candidates = []
    for n in pool_status(out, client=client).networks:
        age = age_sec(n.created)
        if n.ours and n.empty and age is not None and age >= min_age_sec:
            candidates.append(n)
    return call_engine(client, _remove_if_still_empty_and_ours, candidates, projects)


def _remove_if_still_empty_and_ours(
    client: docker.DockerClient, nets: list[NetInfo], projects: set[str]
) -> list[str]:
    import docker.errors

    removed = []
    for ni in nets:
        try:
            now = client.api.inspect_network(ni.id)
            if not is_ours(now.get("Labels"), projects) or now.get("Containers"):
                continue
            client.api.remove_network(ni.id)
            removed.append(ni.name)
        except docker.errors.APIError as exc:
            if exc.status_code == 404 or "active endpoints" in str(exc):
                continue  # gone meanwhile, or a container attached meanwhile: no longer empty
            raise
    return removed
