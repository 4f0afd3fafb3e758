"""``marathon prebuild --tasks-dir DIR``: build task images, proxy (from the environment) only at build time."""

from __future__ import annotations

import argparse
import os

from modes import safetext

HELP = "build the task images once, with a proxy only at build time (never in running containers)"
DESCRIPTION = (
    "Build every task image of DIR the way harbor does (docker compose with harbor's build file), "
    "giving the proxy only to the build: as HTTP(S)_PROXY build args taken from the environment (never "
    "in argv) and with the host network. The proxy is read from the environment (HTTPS_PROXY, "
    "HTTP_PROXY, or the variable --proxy-env names), so its credentials never sit on a command line; "
    "--proxy URL is accepted only without credentials. Never uses ~/.docker/config.json proxies, which would also "
    "reach running containers. Each image is recorded by digest (its id and its content digest, what "
    "receipts record) and tagged marathon-task-<task>:<id12>; `marathon run` builds (or verifies) each "
    "task's image once the same way, so a prebuilt task's cached build is the image every trial runs "
    "(run the runner with the same --build-network, default host)."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks-dir", dest="tasks_dir", default=os.environ.get("MARATHON_TASKS_DIR"), help="tasks dir"
    )
    p.add_argument("--tasks", help="comma list of task dir names (default: all)")
    p.add_argument("--proxy", default=None, help="proxy URL for the build only, WITHOUT credentials")
    p.add_argument(
        "--proxy-env", dest="proxy_env", metavar="NAME", default=None,
        help="environment variable holding the proxy URL (default: MARATHON_BUILD_PROXY, HTTPS_PROXY, HTTP_PROXY)",
    )  # fmt: skip
    p.add_argument("--no-proxy", dest="no_proxy", default=None, help="NO_PROXY for the build")
    p.add_argument("--build-network", dest="build_network", choices=("host", "default"), default="host")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--cluster",
        metavar="ADDR",
        help="build on every Docker host of this Ray cluster, each on its own engine with the proxy of its "
        "own environment (a task pinned to each; DIR must be the same path on every host)",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runner.errors import UserError
    from runner.schedule.prebuild import (
        DEFAULT_NO_PROXY,
        build_proxy,
        docker_config_proxies,
        prebuild,
        redact,
    )
    from runner.secrets import screen

    if not args.tasks_dir:
        raise UserError("no tasks dir: pass --tasks-dir DIR (or set MARATHON_TASKS_DIR)")
    if args.cluster:
        return run_hosts(args)
    if not Path(args.tasks_dir).is_dir():  # (it printed "prebuilding" and exited 0: a probe)
        raise UserError(f"--tasks-dir {safetext.clean(args.tasks_dir)}: no such directory")
    proxy, source = build_proxy(args.proxy, args.proxy_env, os.environ)
    no_proxy = args.no_proxy or os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or DEFAULT_NO_PROXY
    if args.no_proxy:
        screen("--no-proxy", args.no_proxy)
    if proxy and args.build_network != "host":
        print("note: with --build-network default the build reaches the proxy through the bridge network")
    if docker_config_proxies():
        print(
            "WARNING: ~/.docker/config.json has a proxies section: Docker also injects it into running "
            "containers (egress for no-network tasks). Remove it; give the proxy here (HTTPS_PROXY) instead."
        )
    if not args.json:
        via = f"proxy {redact(proxy)} from {source} (build only)" if proxy else "no proxy"
        print(f"prebuilding tasks of {args.tasks_dir}: {via}, build network {args.build_network}")

    def show(r) -> None:
        if not args.json:
            print(render_result(r.to_json()))

    tasks = [t for t in (args.tasks or "").split(",") if t] or None
    results = prebuild(
        Path(args.tasks_dir), tasks, proxy=proxy, no_proxy=no_proxy,
        build_network=args.build_network, on_result=show,
    )  # fmt: skip
    if args.json:
        print(safetext.dumps([r.to_json() for r in results], pretty=True))
    return 0 if all(r.ok for r in results) else 1


def run_hosts(args) -> int:
    """Each Docker host builds on its own engine; every host answers (its builds, or why not, or
    down). The proxy is read on each host from its own environment: only ``--proxy`` (a URL without
    credentials) or the *name* ``--proxy-env`` travels. Exit 0 only when every host built every task."""
    from pathlib import Path

    from runner.errors import UserError
    from runner.schedule.fleet.probe import BUILD_SEC, ask_hosts
    from runner.schedule.prebuild import build_proxy
    from runner.secrets import NAME, screen

    if args.proxy:
        build_proxy(args.proxy, None, {})  # refuses a URL with credentials before it travels
    if args.proxy_env and not NAME.match(args.proxy_env):
        raise UserError("--proxy-env: expected the NAME of an environment variable")
    if args.no_proxy:
        screen("--no-proxy", args.no_proxy)
    tasks = [t for t in (args.tasks or "").split(",") if t] or None
    params = {"tasks_dir": str(Path(args.tasks_dir).resolve()), "tasks": tasks, "proxy": args.proxy,
              "proxy_env": args.proxy_env, "no_proxy": args.no_proxy, "build_network": args.build_network}  # fmt: skip
    answers = ask_hosts(args.cluster, None, "prebuild", params, job_sec=BUILD_SEC + 600).get("prebuild", [])
    if args.json:
        print(safetext.dumps([a.to_json() for a in answers], pretty=True))
    ok = bool(answers)
    for a in answers:
        built = a.ok and all(r["ok"] for r in a.result["results"])
        ok = ok and built
        if args.json:
            continue
        if not a.ok:
            print(f"host {safetext.clean(a.label)}: NOT built ({safetext.clean(a.error or 'down', None)})")
            continue
        print(
            f"host {safetext.clean(a.label)}: {safetext.clean(a.result['via'])}, build network {args.build_network}"
        )
        for r in a.result["results"]:
            print(render_result(r))
    return 0 if ok else 1


def render_result(r: dict) -> str:
    """One task's build (``BuildResult.to_json``), as a line (its image by digest below it) and its
    error below."""
    c = safetext.clean  # a task's name and its build's output are the dataset's words: never raw
    state = "ok " if r["ok"] else "FAILED"
    line = (
        f"  {state} {c(r['task']):<28} {c(r['image']):<44} {c(r['seconds']):>6}s"
        f"  {c(r['cached'])}/{c(r['steps'])} steps cached"
    )
    if r.get("image_id"):
        line += f"\n       {c(r['tag'])}  id {c(r['image_id'])}  content {c(r['content_sha256'])}"
    if r["error"]:
        line += "\n       " + c(r["error"], None, newlines=True).replace("\n", "\n       ")
    return line
