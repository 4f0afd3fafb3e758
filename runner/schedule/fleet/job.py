"""One attempt as a Ray job, on the host Ray placed it: ``python -m runner.schedule.fleet.job OUT TASK ARM STAMP``.

Why: the host that runs a trial is the one whose engine, address pool and processes it uses, so
everything engine-side happens here, on that host: record the host (``host.json``), make sure this
engine holds the task's image built once for the run (verified by id; loaded from the shared tree
when it did not arrive yet; else no harbor runs here), wait for this engine's address-pool gate,
run ``harbor run`` against this engine (DOCKER_HOST of this host's Ray
node), then remove what the trial left on this engine. The configuration is the tree's own
``.driver_env`` (the shared tree has the same path on every host); the agent env's ``${NAME}``
references resolve from this host's environment. harbor stays in this job's process group, so
Ray's stop reaches it.

A lost node is ended here too. When this host's raylet dies, the cluster counts the node dead and
the runner voids the attempt and reruns it elsewhere, but Ray does not end the job's processes
(measured with Ray 2.60: an entrypoint outlived its raylet's ``kill -9`` by more than a minute and
ran to its end). Left alone, harbor would finish a trial the runner has already voided and write it
into the tree. So the job watches its own raylet and, once it is gone, ends harbor and what harbor
started (SIGKILL, by the PIDs it started: a SIGTERM would let harbor write a cancelled trial while
the runner moves the attempt away), removes the trial's containers from this host's engine, and
exits only once the cluster too counts the node dead, so the runner voids the attempt for its cause.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from modes.naming import compose_project
from runner.ops.gateway.attempts import set_harbor
from runner.ops.gateway.process import GatewaySettings, hold_key
from runner.ops.gateway.process import ensure as ensure_gateway
from runner.ops.held import start_held
from runner.ops.procs import Registry
from runner.results.tree import iter_trial_dirs, job_dir, jobs_dir
from runner.schedule.attempt import HARBOR_LOG
from runner.schedule.config import resolve
from runner.schedule.fleet.hostinfo import facing_ip, join_here, this_host, write_host
from runner.schedule.gateway import end_attempt, gateway_on, key_var_of, settings_for, wire_attempt
from runner.schedule.harbor_run import ROLE_HARBOR, arm_mounts, harbor_argv, job_env
from runner.schedule.task_images import ImageError, archive_path, ensure_here, read_attempt_image
from runner.secrets import screen_all


def ray_node() -> tuple[str, str]:
    """(node id, node IP) of the Ray node this job runs on. The id is the one this host's raylet
    registered under (its ``--node_id`` argument, read as Ray's own ``find_node_ids`` does; the
    raylet is found as this job's ancestor, never by name): no ``ray.init``, which cost the start of
    every attempt a driver's connection to the cluster. Without a raylet among the ancestors, the
    cluster itself is asked (``ray.init`` attached to this host's node)."""
    raylet = own_raylet()
    node_id = raylet_node_id(raylet) if raylet is not None else None
    if node_id:
        return node_id, facing_ip()
    import ray

    ip = join_here()
    try:
        node_id = ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()
    return node_id, ip


def raylet_node_id(raylet: psutil.Process) -> str | None:
    """The node id a raylet was started with (``--node_id=HEX``), or None."""
    try:
        args = raylet.cmdline()
    except psutil.Error:
        return None
    for arg in args:
        if arg.startswith("--node_id="):
            value = arg.partition("=")[2]
            if re.fullmatch(r"[0-9a-f]{56}", value):
                return value
    return None


def say(msg: str) -> None:
    """One line of the job's log (Ray keeps it: ``ray job logs ID``), with a UTC time to the ms."""
    from datetime import UTC, datetime

    from modes import safetext

    # (it names tasks and quotes errors: Ray's log is read on a terminal)
    print(
        f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {safetext.clean(msg, None, newlines=True)}",
        flush=True,
    )


#: how often the job looks at its raylet: a lost node's harbor ends within this, long before the
#: cluster's health check (about 15 s here) declares the node dead and the runner voids the attempt
RAYLET_POLL_SEC = 0.5
#: how often a job looks at its host's gateway while its harbor runs (the runner on one host: 1 s)
GATEWAY_CHECK_SEC = 1.0
#: the job's exit code when it ended harbor because its raylet was gone
RC_NODE_LOST = 75
#: the job's exit code when this host does not hold the task's image and could not load it: no harbor ran
RC_NO_IMAGE = 76
#: how long such a job waits for the cluster to declare its node dead before it exits (Ray's
#: health check took ~14 s here): a job that ended first would read, to the runner, as an attempt
#: that failed on a live node, and its void would name the wrong cause
LOST_WAIT_SEC = 300.0


def own_raylet() -> psutil.Process | None:
    """The raylet this job runs under: the nearest ancestor whose executable is ``raylet`` (the
    job's supervisor is a worker the raylet started). Only looked at, never signalled."""
    try:
        for p in psutil.Process().parents():
            try:
                if Path(p.exe()).name == "raylet":
                    return p
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
    except psutil.Error:
        pass
    return None


def end_tree(proc: subprocess.Popen) -> list[int]:
    """SIGKILL harbor and every process it started (descendants first looked up, then all ended at
    once, so none is left to start another). Returns the PIDs signalled."""
    try:
        root = psutil.Process(proc.pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return []
    ended = []
    for p in procs:
        try:
            p.kill()  # psutil checks the PID still names the process it saw (create time)
            ended.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return ended


def watch_raylet(raylet: psutil.Process, proc: subprocess.Popen, lost: threading.Event) -> None:
    """End harbor once this node's raylet is gone (see the module's docstring)."""
    while proc.poll() is None:
        try:
            gone = not raylet.is_running() or raylet.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # it ended between the two looks
            gone = True
        if gone:
            lost.set()
            pids = end_tree(proc)
            say(f"this host's raylet (PID {raylet.pid}) is gone: the cluster counts the node lost; "
                f"harbor and its processes ended (SIGKILL to PIDs {pids})")  # fmt: skip
            return
        lost.wait(RAYLET_POLL_SEC)


def wait_declared_dead(cluster: str, node_id: str, bound: float = LOST_WAIT_SEC) -> bool:
    """Wait until the cluster counts ``node_id`` dead (True) or ``bound`` seconds pass (False)."""
    from runner.schedule.fleet.cluster import Fleet

    deadline = time.monotonic() + bound
    fleet = None
    while time.monotonic() < deadline:
        try:
            fleet = fleet or Fleet.connect(cluster)
            node = fleet.nodes().get(node_id)
            if node is None or not node.alive:
                return True
        except Exception:  # noqa: BLE001 - the head does not answer this time: ask again
            pass
        time.sleep(2.0)
    return False


def run(out: Path, task: str, arm: str, stamp: str) -> int:
    from runner.ops.docker_pool import wait_for_gate

    say("job process started")
    cfg = resolve(out, {}, resume=True)
    if gateway_on(cfg):  # as the runner does: only this host's gateway gets the key; docker load,
        hold_key(key_var_of(cfg))  # tag and builds, the cleanup and harbor never inherit it
    spec = {s.name: s for s in cfg.arm_specs()}[arm]
    sdir = jobs_dir(cfg.out, task, arm, stamp)
    rec = this_host(*ray_node())
    write_host(sdir, rec)
    say(f"attempt {task}/{arm}/{stamp} on {rec.host} (Ray node {rec.node_id[:12]}, engine {rec.engine_id})")
    image = read_attempt_image(sdir)
    if image is not None:  # the task's image built once for the run: this host must hold exactly it
        try:
            how, sec = ensure_here(image, archive_path(cfg.out, image))
        except ImageError as exc:
            say(f"no attempt on this host: the task image is not here: {exc}")
            return RC_NO_IMAGE
        say(f"task image {image.tag} {how} in {sec} s, verified by id {image.image_id}")
    if cfg.env == "docker":
        v = wait_for_gate(
            1, out=cfg.out, cap=cfg.net_cap, margin=cfg.net_margin, poll_sec=2.0,
            on_wait=lambda v, reclaimed: say(f"gate waits: {v.reason}; reclaimed {len(reclaimed)}"),
            min_free_gb=cfg.min_free_gb, on_disk_wait=lambda reason: say(f"gate waits: {reason}"),
        )  # fmt: skip
        say(f"gate open: {v.reason}")
    mounts, env = arm_mounts(cfg, spec), job_env()
    wiring = None
    if gateway_on(cfg):  # this host's gateway, with this host's key (runner.schedule.gateway)
        env.pop(key_var_of(cfg), None)
        st, started = ensure_gateway(cfg.out, settings_for(cfg, rec.node_id), by=f"job {task}/{arm}/{stamp}")
        say(f"gateway {'started' if started else 'serving'}: PID {st.pid}, upstream {st.upstream}")
        wiring = wire_attempt(cfg, task, spec, stamp, host=rec.node_id)
        if wiring is not None:
            mounts, env = wiring.mounts(mounts), wiring.env(env)
    argv = harbor_argv(cfg, task, spec, sdir, mounts,
                       task_dir=Path(image.task_dir) if image is not None else None)  # fmt: skip
    argv += wiring.agent_kwargs() if wiring else []
    screen_all(("harbor argv", a) for a in argv)
    deaths = watch_deaths() if cfg.env == "docker" else None
    with open(sdir / HARBOR_LOG, "ab") as logfh:  # held until registered (runner.ops.held)
        held = start_held(argv, stdout=logfh, stderr=subprocess.STDOUT, cwd=str(cfg.out), env=env,
                          start_new_session=False)  # fmt: skip
    proc = held.proc
    say(f"harbor run PID {proc.pid}")
    # In the tree's process registry under this host's node: `marathon kill` of a cluster run stops
    # it from a task pinned to this host (PIDs mean something on their own host only).
    registry = Registry(cfg.out)
    try:
        registry.register(proc.pid, ROLE_HARBOR, argv, task=task, arm=arm, node=rec.node_id)
    except ProcessLookupError:
        pass  # the gate was signalled already: nothing to stop
    except BaseException:
        held.abort()
        proc.wait()
        raise
    if wiring is not None:
        set_harbor(cfg.out, wiring.attempt_id, proc.pid)
    held.release()

    def forward(signum, _frame):  # Ray's stop: harbor cancels and tears its environment down
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    ended = threading.Event()
    if wiring is not None:
        keeper = (cfg.out, settings_for(cfg, rec.node_id), wiring.attempt_id, proc, ended)
        threading.Thread(target=keep_gateway, args=keeper, daemon=True).start()
    raylet, lost = own_raylet(), threading.Event()
    if raylet is None:
        say("no raylet among this job's ancestors: a lost node will not end harbor from here")
    else:
        threading.Thread(target=watch_raylet, args=(raylet, proc, lost), daemon=True).start()
    rc = proc.wait()
    ended.set()
    say(f"harbor exited with {rc}")
    if wiring is not None:
        end_attempt(cfg.out, task, arm, stamp, f"harbor exited with {rc}")
    registry.unregister(proc.pid, node=rec.node_id)
    trials = {t.name for t in iter_trial_dirs(job_dir(cfg.out, task, arm, stamp))}
    if cfg.env == "docker":  # our_projects finds the trials in the voided attempts too
        cleanup_here(cfg.out, trials)
    if deaths is not None:
        record_deaths(deaths, sdir, trials)
    if not lost.is_set():
        return rc
    declared = wait_declared_dead(cfg.cluster or "auto", rec.node_id)
    say(
        "the cluster counts this node dead"
        if declared
        else f"the cluster still counts this node alive after {LOST_WAIT_SEC:.0f} s"
    )
    return RC_NODE_LOST


def keep_gateway(
    out: Path, s: GatewaySettings, attempt_id: str, proc: subprocess.Popen, ended: threading.Event,
    every: float = GATEWAY_CHECK_SEC,
) -> None:  # fmt: skip
    """While this job's harbor runs, this host's gateway serves: each job keeps its host's gateway as
    the runner keeps its own on one host (``restart_if_failed``: one killed or crashed is restarted
    at once, the outage recorded, so its live attempts are voided and rerun; one stopped on purpose
    stays stopped). Without it a gateway that died mid-attempt was found only by the next job to
    start on this host, and the attempts it failed ran on against a dead socket until then."""
    from runner.errors import UserError
    from runner.ops.gateway.attempts import LIVE, read_record
    from runner.ops.gateway.process import restart_if_failed

    while not ended.wait(every):
        rec = read_record(out, attempt_id)
        if proc.poll() is not None or rec is None or rec.state != LIVE or rec.gone():
            return
        try:
            new = restart_if_failed(out, s, by=f"job of attempt {attempt_id}")
        except UserError as exc:
            say(f"gateway: this host's could not be restarted: {exc}")
            continue
        if new is not None:
            say(f"gateway restarted: PID {new.pid} (this host's was found dead, the outage recorded)")


def watch_deaths():
    """Follow this host's engine for container deaths while harbor runs (the runner watches only its
    own engine): a trial container killed under harbor's verifier is then voided, not scored."""
    from runner.ops.death_watch import DeathWatch

    watch = DeathWatch().start()
    if not watch.connected.is_set():
        say("container deaths: this host's engine did not answer; none will be recorded")
    return watch


def record_deaths(watch, stamp_dir: Path, trials: set[str]) -> None:
    """What the watch saw of this attempt's main containers, into ``container-deaths.json``
    (``runner.results.deaths``), once harbor's teardown and the cleanup are done: a stop request
    of harbor's ``compose down`` has reached the watch by then."""
    from runner.ops.dockerapi import docker_host
    from runner.results.deaths import write_deaths

    try:
        if watch.connected.is_set():
            seen = watch.deaths_of({compose_project(t) for t in trials})
            write_deaths(stamp_dir, seen, docker_host())
            say(
                f"container deaths recorded: {len(seen)} ({sum(not d.stopped for d in seen)} without a stop request)"
            )
    finally:
        watch.stop()


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
