"""``marathon net``: Docker address-pool capacity, who uses it, and the start gate's verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.options import is_dir
from modes import safetext

HELP = "Docker address pools: capacity, used (ours/foreign), free, empty-and-ours, gate verdict"
DESCRIPTION = (
    "Show the Docker daemon's address-pool capacity in networks, how many are used by this run's "
    "compose projects (ours) and by everyone else (foreign), the empty networks of ours that the "
    "gate would reclaim, and the gate's verdict. Exit 0 when the gate lets a trial start, 1 when it "
    "would wait. Cap and margin: flags, else MARATHON_NET_CAP / MARATHON_NET_MARGIN."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", nargs="?", type=Path, help="output tree (to tell our networks from foreign ones)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--net-cap", type=int, metavar="N", help="allow at most N networks in use (default: capacity)"
    )
    p.add_argument("--net-margin", type=int, metavar="N", help="keep N networks free for others (default 2)")
    p.add_argument("-n", type=int, default=1, metavar="N", help="ask the gate about N new trials (default 1)")
    p.add_argument(
        "--cluster",
        metavar="ADDR",
        help="ask every Docker host of this Ray cluster (default: the cluster OUT's run recorded)",
    )


def render(status, verdict) -> str:
    lines = [
        f"address pools ({status.pools_source}): capacity {status.capacity} networks",
    ]
    for p in status.pools:
        lines.append(
            f"  {p.base:<18} /{p.size:<3} capacity {p.capacity:>5}  used {p.used}  blocked {p.blocked}"
        )
    lines.append(
        f"used {status.used} (ours {status.used_ours}, foreign {status.used_foreign}), "
        f"blocked by host routes {status.blocked}, free {status.free}"
    )
    lines.append(f"empty and ours ({len(status.empty_ours)}): {', '.join(status.empty_ours) or '-'}")
    lines.append("networks:")
    for n in status.networks:
        if not n.subnets:
            continue
        who = "ours" if n.ours else "foreign"
        lines.append(
            f"  {who:<7} {'empty' if n.empty else 'in use':<6} {n.name:<40} {','.join(n.subnets):<18} "
            f"pool={n.pool or '-'}"
        )
    lines.append(f"gate: {'OK' if verdict.ok else 'WAIT'} -- {verdict.reason}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from runner.errors import UserError
    from runner.ops.docker_pool import pool_status, verdict

    for flag in ("net_cap", "net_margin"):
        if getattr(args, flag) is not None and getattr(args, flag) < 0:
            raise UserError(f"--{flag.replace('_', '-')} must not be negative")
    if args.n < 1:
        raise UserError("-n must be at least 1 (the new trials to ask the gate about)")
    if args.out is not None and not is_dir(args.out):
        raise UserError(f"{args.out} is not a directory (expected a marathon output tree)")
    from runner.schedule.fleet.probe import tree_cluster

    cluster = tree_cluster(args.out, args.cluster)
    if cluster:
        return run_hosts(args, cluster)
    status = pool_status(args.out)
    v = verdict(status, args.n, cap=args.net_cap, margin=args.net_margin)
    if args.json:
        print(safetext.dumps({"status": status.to_json(), "gate": v.to_json()}, pretty=True))
    else:
        print(render(status, v))
    return 0 if v.ok else 1


def render_host(answer) -> str:
    """One host's block of a cluster's ``marathon net``: the same rendering as on one host."""
    from runner.ops.docker_pool import GateVerdict, PoolStatus

    if not answer.up:
        return f"host {answer.label}: down (not probed)"
    if not answer.ok:
        return f"host {answer.label}: not probed ({answer.error})"
    status = PoolStatus.from_json(answer.result["status"])
    v = GateVerdict.from_json(answer.result["gate"], status)
    head = (
        f"host {answer.label}: ours {status.used_ours}, foreign {status.used_foreign}, "
        f"free {status.free} (cap {v.cap}, margin {v.margin}): {'OK' if v.ok else 'WAIT'}"
    )
    return head + "\n" + "\n".join("  " + ln for ln in render(status, v).splitlines())


def run_hosts(args: argparse.Namespace, cluster: str) -> int:
    """Every host of the cluster, each probed on itself; exit 0 only when every host was probed
    and every gate lets a trial start."""
    from runner.schedule.fleet.probe import ask_hosts

    params = {"n": args.n, "cap": args.net_cap, "margin": args.net_margin}
    answers = ask_hosts(cluster, args.out, "net", params).get("net", [])
    if args.json:
        print(safetext.dumps({"cluster": cluster, "hosts": [vars(a) for a in answers]}, pretty=True))
    else:
        print(f"cluster {cluster}: {len(answers)} Docker host(s)")
        print("\n".join(render_host(a) for a in answers))
    ok = bool(answers) and all(a.ok and a.result["gate"]["ok"] for a in answers)
    return 0 if ok else 1
