"""One attempt as a Ray job, on the host Ray placed it: ``python -m runner.schedule.fleet.job OUT TASK ARM STAMP``.

Why: the host that runs a trial is the one whose engine, address pool and processes it uses, so
everything engine-side happens here, on that host: record the host (``host.json``), wait for this
engine's address-pool gate, run ``harbor run`` against this engine (DOCKER_HOST of this host's Ray
node), then remove what the trial left on this engine. The configuration is the tree's own
``.driver_env`` (the shared tree has the same path on every host); the agent env's ``${NAME}``
references resolve from this host's environment. harbor stays in this job's process group, so when
Ray ends the job -- or its supervisor dies with its node -- harbor ends with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from runner.results.tree import iter_trial_dirs, job_dir, jobs_dir
from runner.schedule.config import resolve
from runner.schedule.driver import HARBOR_LOG, arm_mounts, harbor_argv, job_env
from runner.schedule.fleet.hostinfo import this_host, write_host
from runner.secrets import screen_all


def ray_node() -> tuple[str, str]:
    """(node id, node IP) of the Ray node this job runs on, asked of the cluster itself. The IP is
    this host's address facing the cluster's control store (``RAY_ADDRESS``, set by the job's
    supervisor): Ray's own guess aims at a public resolver, which a host without internet lacks,
    and then falls back to the host name -- and may attach to another node."""
    import socket

    import ray

    gcs = os.environ["RAY_ADDRESS"]
    host, _, port = gcs.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, int(port)))  # UDP: no packet is sent, only the route is chosen
        ip = s.getsockname()[0]
    ray.init(address=gcs, _node_ip_address=ip, log_to_driver=False, logging_level="ERROR")
    try:
        node_id = ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()
    return node_id, ip


def say(msg: str) -> None:
    """One line of the job's log (Ray keeps it: ``ray job logs ID``), with a UTC time to the ms."""
    from datetime import UTC, datetime

    print(f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {msg}", flush=True)


def run(out: Path, task: str, arm: str, stamp: str) -> int:
    from runner.ops.docker_pool import wait_for_gate

    cfg = resolve(out, {}, resume=True)
    spec = {s.name: s for s in cfg.arm_specs()}[arm]
    sdir = jobs_dir(cfg.out, task, arm, stamp)
    rec = this_host(*ray_node())
    write_host(sdir, rec)
    say(f"attempt {task}/{arm}/{stamp} on {rec.host} (Ray node {rec.node_id[:12]}, engine {rec.engine_id})")
    if cfg.env == "docker":
        v = wait_for_gate(
            1, out=cfg.out, cap=cfg.net_cap, margin=cfg.net_margin, poll_sec=2.0,
            on_wait=lambda v, reclaimed: say(f"gate waits: {v.reason}; reclaimed {len(reclaimed)}"),
        )  # fmt: skip
        say(f"gate open: {v.reason}")
    argv = harbor_argv(cfg, task, spec, sdir, arm_mounts(cfg, spec))
    screen_all(("harbor argv", a) for a in argv)
    with open(sdir / HARBOR_LOG, "ab") as logfh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logfh, stderr=subprocess.STDOUT,
                                cwd=str(cfg.out), env=job_env())  # fmt: skip
    say(f"harbor run PID {proc.pid}")

    def forward(signum, _frame):  # Ray's stop: harbor cancels and tears its environment down
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = proc.wait()
    say(f"harbor exited with {rc}")
    if cfg.env == "docker":
        cleanup_here(cfg.out, {t.name for t in iter_trial_dirs(job_dir(cfg.out, task, arm, stamp))})
    return rc


def cleanup_here(out: Path, trials: set[str]) -> None:
    """What the trial left on this host's engine (harbor's own compose down fails when the engine
    was away at that moment), by exact compose-project label."""
    from runner.ops.cleanup import act_cleanup, plan_cleanup

    if not trials:
        return
    try:
        plan = plan_cleanup(out, trials=trials)
        if not plan.empty:
            say(plan.render())
            act_cleanup(plan)
    except Exception as exc:  # noqa: BLE001 - reported in the job's log; the runner's cleanup retries
        say(f"cleanup error: {type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m runner.schedule.fleet.job OUT TASK ARM STAMP", file=sys.stderr)
        return 2
    out, task, arm, stamp = args
    return run(Path(out), task, arm, stamp)


if __name__ == "__main__":
    sys.exit(main())
