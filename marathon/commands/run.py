"""``marathon run [OUT] --tasks-dir DIR``: run every (task, arm) pair until done, resumably."""

from __future__ import annotations

import argparse
from pathlib import Path

from marathon.options import add_out, tree_out

HELP = "run the comparison headless: every (task, arm) pair until done (resumable)"
DESCRIPTION = (
    "Run every (task, arm) pair of the tasks dir with harbor, one job per pair, skipping pairs that "
    "are done; with --repeats K, K independent attempts per pair, each done exactly once (the "
    "report averages within a task first and resamples tasks). Each knob is a flag and an environment variable; the effective configuration is "
    "written to OUT/.driver_env and reused by --resume and `marathon health --fix`. "
    "Precedence: flag > .driver_env (with --resume) > environment > default."
)


def add_knobs(p: argparse.ArgumentParser) -> None:
    """The knob flags (shared with canary/demo where they apply)."""
    from runner.schedule.config import KNOB_BY_ATTR as K

    def h(attr: str) -> str:
        k = K[attr]
        return f"{k.help} [${k.env}; default {k.default if k.default not in ((), None) else '-'}]"

    p.add_argument("--tasks-dir", dest="tasks_dir", help=h("tasks_dir"))
    p.add_argument("--tasks", help=h("tasks"))
    p.add_argument("--arms", help=h("arms") + "; also oracle, nop, name=module:Class")
    p.add_argument("--repeats", type=int, metavar="K", help=h("repeats"))
    p.add_argument("--concurrency", type=int, help=h("concurrency"))
    p.add_argument("--goal-timeout-sec", dest="goal_timeout_sec", type=int, help=h("goal_timeout_sec"))
    p.add_argument(
        "--agent-timeout-mult", dest="agent_timeout_mult", type=float, help=h("agent_timeout_mult")
    )
    p.add_argument("--verifier-mult", dest="verifier_mult", type=float, help=h("verifier_mult"))
    order = p.add_mutually_exclusive_group()
    order.add_argument("--arm-major", dest="arm_major", action="store_const", const="1", help=h("arm_major"))
    order.add_argument(
        "--task-major", dest="arm_major", action="store_const", const="0", help="order by task (default)"
    )
    p.add_argument("--net-cap", dest="net_cap", type=int, help=h("net_cap"))
    p.add_argument("--net-margin", dest="net_margin", type=int, help=h("net_margin"))
    p.add_argument("--min-free-gb", dest="min_free_gb", type=int, metavar="GB", help=h("min_free_gb"))
    p.add_argument("--max-passes", dest="max_passes", type=int, help=h("max_passes"))
    p.add_argument("--breaker-k", dest="breaker_k", type=int, help=h("breaker_k"))
    p.add_argument("--model", "-m", help=h("model"))
    gw = p.add_mutually_exclusive_group()
    gw.add_argument("--gateway", dest="gateway", action="store_const", const="1", help=h("gateway"))
    gw.add_argument(
        "--no-gateway", dest="gateway", action="store_const", const="0",
        help="the arms reach the provider themselves, with the real key in their sandboxes (not for real keys)",
    )  # fmt: skip
    p.add_argument("--model-base-url", dest="model_base_url", metavar="URL", help=h("model_base_url"))
    p.add_argument("--model-key-var", dest="model_key_var", metavar="NAME", help=h("model_key_var"))
    p.add_argument("--gateway-url", dest="gateway_url", metavar="URL", help=h("gateway_url"))
    p.add_argument(
        "--gateway-tls-listen", dest="gateway_tls_listen", metavar="HOST:PORT", help=h("gateway_tls_listen")
    )
    p.add_argument("--gateway-tls-cert", dest="gateway_tls_cert", metavar="PEM", help=h("gateway_tls_cert"))
    p.add_argument("--gateway-tls-key", dest="gateway_tls_key", metavar="PEM", help=h("gateway_tls_key"))
    p.add_argument("--gateway-ca", dest="gateway_ca", metavar="PEM", help=h("gateway_ca"))
    p.add_argument("--env", "-e", help=h("env"))
    p.add_argument("--cluster", metavar="ray://HEAD:PORT|auto", help=h("cluster"))
    p.add_argument(
        "--build-network", dest="build_network", choices=("host", "default"), help=h("build_network")
    )
    p.add_argument(
        "--ae", dest="agent_env", action="append", metavar="KEY=${VAR}",
        help="agent env passed to harbor by reference only (KEY alone means KEY=${KEY}) [$MARATHON_AGENT_ENV, JSON list]",
    )  # fmt: skip
    p.add_argument(
        "--ae-literal", dest="agent_env_literal", action="append", metavar="NAME=VALUE",
        help="agent env literal, only for known non-secret knobs (GOAL_TIMEOUT_SEC, WEN_MODE) [$MARATHON_AGENT_ENV_LITERAL]",
    )  # fmt: skip
    p.add_argument(
        "--ak", dest="agent_kwargs", action="append", metavar="K=V", help="agent kwarg for every arm"
    )
    p.add_argument("--price", dest="prices", action="append", metavar="MODEL=IN,CACHED,OUT", help=h("prices"))
    p.add_argument("--max-spend", dest="max_spend", type=float, metavar="USD", help=h("max_spend"))
    p.add_argument(
        "--max-spend-arm", dest="max_spend_arm", type=float, metavar="USD", help=h("max_spend_arm")
    )
    p.add_argument(
        "--max-spend-attempt",
        dest="max_spend_attempt",
        type=float,
        metavar="USD",
        help=h("max_spend_attempt"),
    )
    p.add_argument("--on-cap", dest="on_cap", choices=("finish", "stop"), help=h("on_cap"))
    p.add_argument("--mounts", help=h("mounts"))
    p.add_argument(
        "--allow-modified", dest="allow_modified", action="store_true", default=None, help=h("allow_modified")
    )


def configure(p: argparse.ArgumentParser) -> None:
    add_out(p)
    add_knobs(p)
    p.add_argument(
        "--dataset", metavar="NAME@VERSION",
        help="fetch the tasks the way harbor names them, through harbor's registry, into the cache "
        "(instead of --tasks-dir) [recorded as $MARATHON_DATASET]",
    )  # fmt: skip
    p.add_argument("--registry-path", dest="registry_path", type=Path, help="a registry.json for --dataset")
    p.add_argument("--repo", help="a git registry for --dataset (org/name or URL, optionally @ref)")
    p.add_argument(
        "--resume", action="store_true", help="reuse OUT/.driver_env (flags given now override it)"
    )
    p.add_argument(
        "--detach", action="store_true", help="run in its own session; output to OUT/.runner/runner.log"
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument("--json-events", action="store_true", help="print every event as a JSON line")
    view.add_argument("--plain", action="store_true", help="timestamped lines even on a terminal")


def flags_of(args: argparse.Namespace) -> dict:
    from runner.schedule.config import KNOBS

    flags = {k.attr: getattr(args, k.attr, None) for k in KNOBS}
    for attr in ("tasks", "arms"):
        if flags.get(attr) is not None:
            flags[attr] = [x for x in flags[attr].split(",") if x.strip()]
    return flags


def run(args: argparse.Namespace) -> int:
    from runner.schedule.config import resolve, with_changes, write_driver_env
    from runner.schedule.display import Progress
    from runner.schedule.driver import Driver
    from runner.schedule.start import refuse_if_running, start_detached

    out = tree_out(args, must_exist=False)
    flags = flags_of(args)
    if args.dataset:  # resolved once, into the cache: from here on it is an ordinary tasks dir
        from runner.errors import UserError
        from runner.schedule.dataset import fetch_dataset

        if flags.get("tasks_dir"):
            raise UserError("--dataset and --tasks-dir both name the tasks: give one")
        got = fetch_dataset(args.dataset, registry_path=args.registry_path, repo=args.repo)
        flags["tasks_dir"] = str(got.tasks_dir)
        flags["tasks"] = flags.get("tasks") or list(got.tasks)
    elif args.registry_path or args.repo:
        from runner.errors import UserError

        raise UserError("--registry-path and --repo only go with --dataset NAME@VERSION")
    cfg = resolve(out, flags, resume=args.resume)
    if args.detach:
        refuse_if_running(cfg.out)  # before anything of the live runner's is rewritten
        d = Driver(cfg, resumed=args.resume)
        tasks = d.preflight()
        modified = d.check_dataset(tasks)
        if modified:
            cfg = with_changes(cfg, modified_tasks=tuple(modified))
        cfg.out.mkdir(parents=True, exist_ok=True)
        write_driver_env(cfg)
        pid = start_detached(cfg.out)
        print(f"runner started in the background: PID {pid}")
        print(f"  log:    {cfg.out / '.runner' / 'runner.log'}")
        print(f"  events: {cfg.out / '.runner' / 'events.jsonl'}")
        print(f"  watch:  marathon status {cfg.out}    stop: marathon kill {cfg.out}")
        return 0
    mode = "json" if args.json_events else ("plain" if args.plain else None)
    return Driver(cfg, listeners=[Progress(mode)], resumed=args.resume).run()
