"""``marathon gateway OUT``: the model gateway of a run (the runner starts it; this runs it by hand)."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.results.tree import default_out

HELP = "the model gateway of a run: per-attempt tokens, the real key kept here, every call on the ledger"
DESCRIPTION = (
    "Serve the run's attempts on this host: each attempt gets its own unix socket (bind-mounted into "
    "its trial) and a random token; calls are forwarded to the model provider with the real key, read "
    "by NAME from this process's environment (--key-var), and every call is written to "
    "OUT/.runner/gateway/ledger.jsonl. `marathon run` starts it (and restarts it if it dies); run it "
    "by hand with --detach, stop it with --stop. Without flags the run's own settings (OUT/.driver_env) "
    "are used. See docs/gateway.md."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", nargs="?", type=Path, default=None, help="output tree [$MARATHON_OUT]")
    p.add_argument(
        "--model-base-url", dest="upstream", help="the provider (default: the run's, else OpenAI's)"
    )
    p.add_argument("--key-var", help="NAME of the variable holding the real key (default: the run's)")
    p.add_argument("--scripted-tasks", help="tasks dir of the scripted upstream (--model-base-url scripted)")
    p.add_argument("--node", help=argparse.SUPPRESS)  # a cluster host's Ray node (its own files)
    p.add_argument("--tls-listen", metavar="HOST:PORT", help="also serve remote sandboxes over TLS here")
    p.add_argument("--tls-cert", help="the operator's certificate (PEM chain) for --tls-listen")
    p.add_argument("--tls-key", help="its private key (PEM)")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--detach", action="store_true", help="serve in the background (or show the running one)"
    )
    what.add_argument(
        "--stop", action="store_true", help="stop the tree's gateway (SIGTERM to its registered PID)"
    )
    what.add_argument("--serve-detached", action="store_true", help=argparse.SUPPRESS)


def settings_of(args: argparse.Namespace, out: Path):
    from runner.ops.gateway.process import GatewaySettings
    from runner.schedule.config import stored_config
    from runner.schedule.gateway import settings_for

    cfg = stored_config(out)
    base = settings_for(cfg) if cfg is not None else GatewaySettings()
    return GatewaySettings(
        upstream=args.upstream or base.upstream,
        key_var=args.key_var or base.key_var,
        tasks_dir=args.scripted_tasks or base.tasks_dir,
        host=args.node or base.host,
        tls_listen=args.tls_listen or base.tls_listen,
        tls_cert=args.tls_cert or base.tls_cert,
        tls_key=args.tls_key or base.tls_key,
    )


def run(args: argparse.Namespace) -> int:
    from runner.ops.gateway import process

    out = Path(args.out or default_out()).resolve()
    if args.stop:
        print(process.stop(out, args.node))
        return 0
    s = settings_of(args, out)
    if args.detach:
        st, started = process.ensure(out, s, by="marathon gateway --detach")
        print(("started: " if started else "already running: ") + st.describe())
        return 0
    return process.serve(
        out, upstream=s.upstream, key_var=s.key_var, tasks_dir=s.tasks_dir, host=s.host,
        tls_listen=s.tls_listen, tls_cert=s.tls_cert, tls_key=s.tls_key, say=lambda m: print(m, flush=True),
    )  # fmt: skip
