"""Asking every host of a cluster run about its own engine and processes (``marathon net``,
``cleanup``, ``kill``, ``stage``, ``prebuild`` and ``verify-envs``; and the runner's shipping of
a task image to every host, ``runner.schedule.fleet.ship``).

Why: a host's address pool and its Docker objects are seen only from that host -- its engine is the
``DOCKER_HOST`` of its Ray node, its host routes are its own. The runner is only a client of the
head's job API (the address ``--cluster`` names; it never joins the cluster, and the Ray client
server's port is nothing ``--cluster`` records), so it submits one short Ray job,
``python -m runner.schedule.fleet.probe OP OUT PARAMS``. That job lists the cluster's nodes and runs
one task pinned to each alive node that declares ``docker_slots`` (``NodeAffinitySchedulingStrategy``
with ``soft=False``, ``num_cpus=0``, so a full host is still asked): the probe, the cleanup plan and
the removal run on that host, against that host's engine, by the runner's own functions. Each
stage's answers are one JSON line of the job's log, which the client reads back through the job
API -- the cleanup plan as soon as it is made, before anything is removed. A host whose node is dead
is answered as down, never left out. Nothing secret is in the entrypoint, the tasks' arguments or
the metadata: the tree's path, the scope and the gate's numbers.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.errors import UserError
from runner.schedule.fleet.cluster import Fleet, docker_slots, is_docker_host, module_command, tree_key

#: a stage's answers in the probe job's log: ``MARK STAGE JSON`` on one line
MARK = "marathon-hosts"
#: how long the probe job's tasks may take together (a host's engine that does not answer)
TASK_SEC = 120.0
#: how long one host may take to stage a part (a download and its checks)
STAGE_SEC = 600.0
#: how long one host may take to build the task images (``prebuild``)
BUILD_SEC = 4 * 3600.0
#: the probe job's operations
OPS = ("net", "cleanup", "kill", "stage", "prebuild", "images", "verify-envs", "gateway-stop")
#: how long one host may take to load a task image from the shared tree and check it
SHIP_SEC = 1800.0
#: how long the client waits for the probe job (its start, the tasks, a cleanup's removals)
JOB_SEC = 900.0
#: metadata key of a probe job: the tree it asked about (not ``META_OUT``: no attempt of the tree)
META_PROBE = "marathon_probe"


class ProbeFailed(UserError):
    """The cluster's probe job failed: a header line, then the last lines of its log."""

    multiline = True


@dataclass(frozen=True)
class HostAnswer:
    """One host's answer to one stage: its result (a JSON object), or why there is none."""

    host: str  # the host name its node reports
    ip: str
    node_id: str
    up: bool
    result: dict | None = None
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.host}/{self.ip}"

    @property
    def ok(self) -> bool:
        return self.up and self.result is not None and not self.error

    def to_json(self) -> dict:
        """What a command's ``--json`` shows of one host's answer."""
        return {"host": self.label, "up": self.up, "result": self.result, "error": self.error}

    @classmethod
    def from_json(cls, d: dict) -> HostAnswer:
        return cls(str(d["host"]), str(d["ip"]), str(d["node_id"]), bool(d["up"]), d.get("result"),
                   str(d.get("error") or ""))  # fmt: skip


def tree_cluster(out: Path | None, flag: str | None = None) -> str | None:
    """The cluster a command about ``out`` asks: ``--cluster``, else the one the tree's run recorded
    (``MARATHON_CLUSTER`` in its ``.driver_env``), else None (a single-host tree)."""
    if flag:
        return flag
    if out is None or not Path(out).is_dir():
        return None
    from runner.schedule.config import read_driver_env

    return read_driver_env(out).get("MARATHON_CLUSTER") or None


# --- the work on one host (a pinned task) -------------------------------------------------------


def net_here(out: str | None, n: int, cap: int | None, margin: int | None) -> dict:
    """This host's address pools and its gate's verdict (``marathon net`` on this host)."""
    from runner.ops.docker_pool import pool_status, verdict

    status = pool_status(Path(out) if out else None)
    return {"status": status.to_json(), "gate": verdict(status, n, cap=cap, margin=margin).to_json()}


def plan_here(out: str, scope: dict[str, str | None]) -> dict:
    """This host's cleanup plan for the tree (``runner.ops.cleanup.plan_cleanup`` on this host)."""
    from runner.ops.cleanup import plan_cleanup

    return plan_cleanup(Path(out), **scope).to_json()


def act_here(plan: dict) -> dict:
    """Act on this host's plan (``runner.ops.cleanup.act_cleanup``: labels re-read before each removal)."""
    from runner.ops.cleanup import CleanupPlan, act_cleanup

    return act_cleanup(CleanupPlan.from_json(plan)).to_json()


def stage_here(what: str, version: str | None, force: bool) -> dict:
    """Stage ``what`` into this host's own cache (``runner.schedule.parts_cache.stage``)."""
    from runner.schedule.parts_cache import stage

    return stage(what, version, force)


def prebuild_here(
    tasks_dir: str,
    tasks: list[str] | None,
    proxy_flag: str | None,
    proxy_env: str | None,
    no_proxy: str | None,
    build_network: str,
) -> dict:
    """Build the task images on this host's engine (``runner.schedule.prebuild.prebuild``); the
    proxy comes from this host's own environment (never through Ray), as on one host."""
    import os

    from runner.schedule.prebuild import DEFAULT_NO_PROXY, build_proxy, prebuild, redact

    proxy, source = build_proxy(proxy_flag, proxy_env, os.environ)
    no_proxy = no_proxy or os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or DEFAULT_NO_PROXY
    results = prebuild(Path(tasks_dir), tasks, proxy=proxy, no_proxy=no_proxy, build_network=build_network)
    via = f"proxy {redact(proxy)} from {source} (build only)" if proxy else "no proxy"
    return {"via": via, "results": [r.to_json() for r in results]}


def image_build_here(out: str, tasks_dir: str, task: str, recorded: dict | None, build_network: str) -> dict:
    """Build (or verify) a task's image on this host's engine and ``docker save`` it into the shared
    tree for the other hosts (``runner.schedule.fleet.ship``)."""
    import time

    from runner.schedule import task_images as ti

    old = ti.TaskImage.from_json(recorded) if recorded else None
    image = ti.build_or_verify(Path(tasks_dir), task, old, build_network=build_network)
    t0 = time.monotonic()
    saved = ti.save(image, ti.archive_path(Path(out), image))
    return {"image": image.to_json(), "saved": saved, "seconds": round(time.monotonic() - t0, 2)}


def image_load_here(out: str, image: dict) -> dict:
    """Load a task's image from the shared tree into this host's engine unless it holds it already,
    and check it by id and content digest (``runner.schedule.task_images.ensure_here``)."""
    from runner.schedule import task_images as ti

    img = ti.TaskImage.from_json(image)
    if img is None:
        raise ValueError("not an image record")
    how, sec = ti.ensure_here(img, ti.archive_path(Path(out), img))
    return {"how": how, "seconds": sec}


def verify_here(arms: list[str], task: str) -> dict:
    """``marathon verify-envs`` on this host (``runner.schedule.envcheck.checks_here``): its own
    staged parts and engine."""
    import os
    from dataclasses import asdict

    from runner.schedule.envcheck import checks_here

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return {"checks": [asdict(c) for c in checks_here(arms, Path(task))]}


def gateway_stop_here(out: str, node_id: str) -> dict:
    """Stop the tree's gateway on this host (the one its jobs started, by its registered identity):
    it was started detached from the job that needed it, so no job's end stops it."""
    from runner.ops.gateway.process import stop

    return {"result": stop(Path(out), node_id)}


def kill_plan_here(out: str, node_id: str) -> dict:
    """This host's kill plan (``runner.ops.kill.plan_kill``): the processes this host's jobs
    registered (and their descendants), then the tree's Docker objects on this host's engine."""
    from runner.ops.kill import plan_kill

    return plan_kill(Path(out), node=node_id).to_json()


def kill_act_here(plan: dict, grace_sec: float) -> dict:
    """Carry out this host's kill plan (``runner.ops.kill.act_kill``: identities re-checked, this
    task and its ancestors protected, TERM, the grace, KILL, then the removals)."""
    from runner.ops.kill import KillPlan, act_kill

    return act_kill(KillPlan.from_json(plan), grace_sec=grace_sec).to_json()


# --- the probe job, on the cluster -------------------------------------------------------------


def cluster_hosts() -> tuple[list[HostAnswer], list[HostAnswer]]:
    """(alive hosts, down hosts) of the cluster: every alive node declaring ``docker_slots``, and one
    entry per address whose node is dead with no alive node at that address (a restarted host's old
    node is not a host down)."""
    import ray

    alive, dead = [], {}
    for n in ray.nodes():
        slots = docker_slots(n.get("Resources"))
        h = HostAnswer(n.get("NodeManagerHostname", ""), n.get("NodeManagerAddress", ""), n["NodeID"],
                       bool(n.get("Alive")))  # fmt: skip
        if h.up and is_docker_host(slots):
            alive.append(h)
        elif not h.up and (is_docker_host(slots) or not n.get("Resources")):
            dead[h.ip] = h  # a dead node's resources may be gone from the record: still a host lost
    up_ips = {h.ip for h in alive}
    down = [h for ip, h in dead.items() if ip not in up_ips]
    return sorted(alive, key=lambda h: h.ip), sorted(down, key=lambda h: h.ip)


def on_each(
    hosts: list[HostAnswer],
    fn: Callable[..., dict],
    args: Callable[[HostAnswer], tuple],
    timeout: float = TASK_SEC,
) -> list[HostAnswer]:
    """``fn(*args(host))`` on every host, each in a task pinned to its node; every host answers
    (its result, or the error or silence that stood in for one, after ``timeout`` seconds)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not hosts:
        return []
    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = {
        h.node_id: task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(h.node_id, soft=False)
        ).remote(*args(h))
        for h in hosts
    }
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    answers = []
    for h in hosts:
        ref = refs[h.node_id]
        try:
            answers.append(HostAnswer(h.host, h.ip, h.node_id, True, ray.get(ref, timeout=0)))
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            answers.append(
                HostAnswer(h.host, h.ip, h.node_id, True, error=f"no answer within {timeout:.0f} s")
            )
        except Exception as exc:  # noqa: BLE001 - the host's own error is its answer
            first = (str(getattr(exc, "cause", None) or exc).strip().splitlines() or [type(exc).__name__])[-1]
            answers.append(HostAnswer(h.host, h.ip, h.node_id, True, error=first[:300]))
    return answers


def emit(stage: str, answers: list[HostAnswer]) -> None:
    print(f"{MARK} {stage} {json.dumps([asdict(a) for a in answers])}", flush=True)


def job_main(op: str, out: str, params: dict[str, Any]) -> int:
    """The probe job: ``net`` (each host's pools and gate), ``cleanup`` (each host's plan, then,
    with ``act``, the removals on the hosts whose plan is not empty) or ``kill`` (the same with
    each host's kill plan: its registered processes stopped, then its removals). With ``plans``
    (``runner.schedule.fleet.hostops``): no new plan, each host acts on the one it made before."""
    import runner.schedule.fleet.probe as here  # the tasks' functions by module name, not __main__
    from runner.schedule.fleet.hostinfo import join_here

    join_here()
    alive, down = cluster_hosts()
    if op == "net":
        emit(
            "net",
            on_each(alive, here.net_here, lambda h: (out, params["n"], params["cap"], params["margin"]))
            + down,
        )
        return 0
    if op == "stage":
        emit("stage", on_each(alive, here.stage_here, lambda h: (params["what"], params.get("version"),
                                                                  bool(params.get("force"))), STAGE_SEC) + down)  # fmt: skip
        return 0
    if op == "gateway-stop":  # the run has ended: each host's gateway, stopped on that host
        emit("stop", on_each(alive, here.gateway_stop_here, lambda h: (out, h.node_id)))
        return 0
    if op == "verify-envs":
        emit(
            "verify-envs",
            on_each(alive, here.verify_here, lambda h: (params["arms"], params["task"]), STAGE_SEC) + down,
        )
        return 0
    if op == "images":  # runner.schedule.fleet.ship: one host builds, every other one loads
        recorded = params.get("recorded") or {}
        had = set(recorded.get("hosts") or {})
        builder = next((h for h in alive if h.node_id in had), alive[0] if alive else None)
        if builder is None:
            emit("build", down)
            return 0
        built = on_each([builder], here.image_build_here, lambda h: (out, params["tasks_dir"], params["task"],
                        params.get("recorded"), params.get("build_network") or "host"), BUILD_SEC)  # fmt: skip
        emit("build", built)
        if not built[0].ok or built[0].result is None:
            return 0
        image = built[0].result["image"]
        others = [h for h in alive if h.node_id != builder.node_id]
        mine = HostAnswer(builder.host, builder.ip, builder.node_id, True,
                          {"how": image["how"], "seconds": built[0].result["seconds"]})  # fmt: skip
        emit("ship", [mine, *on_each(others, here.image_load_here, lambda h: (out, image), SHIP_SEC), *down])
        return 0
    if op == "prebuild":
        args = (params["tasks_dir"], params.get("tasks"), params.get("proxy"), params.get("proxy_env"),
                params.get("no_proxy"), params.get("build_network") or "host")  # fmt: skip
        emit("prebuild", on_each(alive, here.prebuild_here, lambda h: args, BUILD_SEC) + down)
        return 0
    if "plans" in params:  # act on exactly the plans the operator was shown, each on its own host
        frozen = {p["node_id"]: p for p in params["plans"]}
        if op == "kill":
            grace = float(params["grace"])
            fn, args, sec = (
                here.kill_act_here,
                (lambda h: (frozen[h.node_id]["plan"], grace)),
                TASK_SEC + grace,
            )
        else:
            fn, args, sec = here.act_here, (lambda h: (frozen[h.node_id]["plan"],)), TASK_SEC
        up = [h for h in alive if h.node_id in frozen]
        gone = [HostAnswer(p["host"], p["host"].rpartition("/")[2], node, False,
                           error="down since its plan was made: nothing done there")
                for node, p in frozen.items() if node not in {h.node_id for h in up}]  # fmt: skip
        emit("act", on_each(up, fn, args, sec) + gone)
        return 0
    if op == "kill":
        from runner.ops.kill import KillPlan

        plans = on_each(alive, here.kill_plan_here, lambda h: (out, h.node_id))
        emit("plan", plans + down)
        if params.get("act"):
            grace = float(params["grace"])
            todo = {a.node_id: a.result for a in plans if a.ok and not KillPlan.from_json(a.result).empty}
            hosts = [a for a in plans if a.node_id in todo]
            emit(
                "act",
                on_each(hosts, here.kill_act_here, lambda h: (todo[h.node_id], grace), TASK_SEC + grace),
            )
        return 0
    scope = {k: params.get(k) for k in ("task", "arm", "trial")}
    plans = on_each(alive, here.plan_here, lambda h: (out, scope))
    emit("plan", plans + down)
    if params.get("act"):
        todo = [a for a in plans if a.ok and any(a.result[k] for k in ("containers", "networks", "images"))]
        by_id = {a.node_id: a.result for a in todo}
        emit("act", on_each(todo, here.act_here, lambda h: (by_id[h.node_id],)))
    return 0


# --- the runner's side -------------------------------------------------------------------------


def ask_hosts(
    cluster: str,
    out: Path | None,
    op: str,
    params: dict[str, Any],
    on_stage: Callable[[str, list[HostAnswer]], None] | None = None,
    job_sec: float = JOB_SEC,
) -> dict[str, list[HostAnswer]]:
    """Run the probe job ``op`` on the cluster and return each stage's answers; ``on_stage`` sees
    each stage as soon as the job's log holds it (a cleanup's plan before its removals); the job
    is stopped after ``job_sec`` seconds."""
    fleet = Fleet.connect(cluster)
    tree = str(Path(out).resolve()) if out is not None else ""
    sid = f"marathon-{tree_key(Path(tree or '/'))}-{op}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
    fleet.client.submit_job(
        entrypoint=module_command("runner.schedule.fleet.probe", op, tree, json.dumps(params)),
        submission_id=sid,
        entrypoint_num_cpus=0,
        metadata={META_PROBE: tree, "op": op},
    )
    stages: dict[str, list[HostAnswer]] = {}
    deadline = time.monotonic() + job_sec
    try:
        while True:
            status = str(getattr(fleet.client.get_job_status(sid), "value", ""))
            logs = fleet.client.get_job_logs(sid)
            for stage, answers in _stages(logs).items():
                if stage not in stages:
                    stages[stage] = answers
                    if on_stage:
                        on_stage(stage, answers)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            if time.monotonic() > deadline:
                fleet.stop(sid)
                raise UserError(f"the cluster's probe job {sid} did not end within {job_sec:.0f} s")
            time.sleep(0.5)
        if status != "SUCCEEDED":
            tail = "\n".join(logs.splitlines()[-15:])
            raise ProbeFailed(f"the cluster's probe job {sid} ended {status}:\n{tail}")
    finally:
        try:
            fleet.client.delete_job(sid)  # a probe is no attempt: keep the cluster's job list to those
        except Exception:  # noqa: BLE001, S110 - still running (stopped above) or already gone
            pass
    return stages


def _stages(logs: str) -> dict[str, list[HostAnswer]]:
    got = {}
    for line in logs.splitlines():
        if line.startswith(MARK + " "):
            _, stage, raw = line.split(" ", 2)
            got[stage] = [HostAnswer.from_json(d) for d in json.loads(raw)]
    return got


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in OPS:
        print(
            "usage: python -m runner.schedule.fleet.probe net|cleanup|kill|stage|prebuild|images|verify-envs|gateway-stop "
            "OUT PARAMS_JSON",
            file=sys.stderr,
        )
        return 2
    return job_main(args[0], args[1], json.loads(args[2]))


if __name__ == "__main__":
    sys.exit(main())
