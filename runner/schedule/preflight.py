"""Everything a runner needs, checked before a runner process exists.

Why: a runner restarted from a shell that lacks a credential (``health --fix``, ``run --resume``,
the console's start) used to start trial after trial that failed at once: a day of pairs turned
into errors the report then had to explain. So every path that starts a runner -- ``marathon run``
(fresh or ``--resume``, foreground or ``--detach``), ``marathon health --fix``, the console's start
action and ``marathon demo`` -- calls ``require`` first. It checks, in the environment the runner
will have:

- the tasks dir (exists, has the selected tasks, the output tree is not inside it) and its
  recorded digests (``runner.results.digest.check_dataset``, the one digest check);
- every agent each arm names imports (in a child interpreter with the harbor job's PYTHONPATH);
- the staged codex (of the configured ``codex_version``) and LoopX parts the arms mount exist;
- the model/provider settings are complete for a model that is not the scripted stand-in;
- every credential: each ``--ae`` ``${VAR}`` reference, and the variable ``api_key_var`` names;
- an environment other than Docker (``--env daytona``, an import path ``module:Class``) exists and
  has its credentials, by harbor's own preflight of that environment (in a child interpreter);
- the Docker engine answers; a full address pool is a note (the gate will wait), not a failure;
  so is a disk with less than ``--min-free-gb`` free (``runner.ops.disk``).

Any blocking problem: ``PreflightFailed`` (exit 2) with one line per problem saying what to do,
nothing started, and nothing written but one ``preflight_failed`` event (when the tree exists).
Messages carry variable names only, never values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from modes import safetext
from modes.gateway import SCRIPTED_UPSTREAM
from runner.errors import EXIT_USAGE, UserError
from runner.schedule.config import (
    RunConfig,
    list_tasks,
    missing_env_refs,
    project_pythonpath,
    task_is_multi_step,
    unknown_tasks,
    unknown_tasks_text,
)
from runner.secrets import DECLARED_NON_SECRETS, ref_name

#: where every codex arm's credential comes from unless ``--ak api_key_var=NAME`` says otherwise
DEFAULT_KEY_VAR = "OPENAI_API_KEY"  # agents.base_codex.DEFAULT_KEY_VAR (not imported: harbor is heavy)
IMPORT_TIMEOUT_SEC = 180.0


@dataclass(frozen=True)
class Problem:
    """One thing that stops (or, when not ``blocking``, slows) a runner, and what to do about it."""

    check: str  # tasks, dataset, arms, staging, model, credentials, docker, pool
    what: str
    todo: str = ""
    blocking: bool = True

    def line(self, retry: str = "") -> str:
        if not self.blocking:
            return f"note: {self.what}" + (f" ({self.todo})" if self.todo else "")
        text = f"{self.what}: {self.todo}" if self.todo else self.what
        return f"{text}, then {retry}" if retry else text


class PreflightFailed(UserError):
    """A runner must not start: ``str(exc)`` is the header and one line per problem."""

    exit_code = EXIT_USAGE
    multiline = True

    def __init__(self, message: str, problems: list[Problem]) -> None:
        super().__init__(message)
        self.problems = problems


# --- retry hints: what the operator runs once the problem is fixed ------------------------------


def retry_run(out: Path, resumed: bool) -> str:
    return f"`marathon run {out} --resume`" if resumed else "run the same `marathon run` command again"


def retry_health(out: Path) -> str:
    return f"`marathon health {out} --fix`"


RETRY_CONSOLE = "start it again (R)"
RETRY_DEMO = "run `marathon demo` again"


# --- the checks ----------------------------------------------------------------------------------


def agent_kwargs(cfg: RunConfig) -> dict[str, str]:
    """``--ak key=value`` items as a dict (the last one wins, as in harbor)."""
    return dict(item.partition("=")[::2] for item in cfg.agent_kwargs)


def _codex_arms(cfg: RunConfig) -> list[str]:
    """Arms played by marathon's codex agents (they need codex, a model and a credential)."""
    return [s.name for s in cfg.arm_specs() if s.real]


def check_tasks(cfg: RunConfig) -> tuple[list[Problem], list[str]]:
    """The tasks dir and the selected tasks; returns (problems, the tasks that will run)."""

    td = cfg.tasks_dir
    if td is None or not td.is_dir():
        return [Problem("tasks", f"tasks dir {td} does not exist", "pass --tasks-dir DIR")], []
    available = list_tasks(td)
    if not available:
        return [
            Problem("tasks", f"no harbor tasks (dirs with task.toml) in {td}", "pass --tasks-dir DIR")
        ], []
    problems = []
    tasks = list(cfg.tasks) or available
    unknown = unknown_tasks(td, tasks)
    if unknown:
        problems.append(Problem("tasks", unknown_tasks_text(td, unknown), "fix --tasks"))
        tasks = [t for t in tasks if t in available]
    multi = [t for t in tasks if task_is_multi_step(td, t)]
    if multi:
        problems.append(
            Problem(
                "tasks",
                f"multi-step task(s) (steps in task.toml) in {td}: {', '.join(multi)} -- marathon "
                "compares one agent run and one verifier per trial",
                "leave them out with --tasks",
            )
        )
        tasks = [t for t in tasks if t not in multi]
    try:
        if cfg.out.resolve().is_relative_to(td.resolve()):
            problems.append(
                Problem(
                    "tasks",
                    f"the output dir {cfg.out} is inside the tasks dir {td}",
                    "choose an output dir outside it (the runner never writes into the tasks dir)",
                )
            )
    except OSError:
        pass
    problems += _out_problems(cfg.out)
    return problems, tasks


def _out_problems(out: Path) -> list[Problem]:
    """The output dir as the runner will write it: a file there, or a dir (or its nearest existing
    parent) on a read-only filesystem or that this user cannot write, was an internal error after
    the preflight (a probe)."""
    if out.exists() and not out.is_dir():
        return [
            Problem("output", f"{out} is a file, not a directory", "give a directory for the output tree")
        ]
    near = out
    while not near.exists() and near.parent != near:
        near = near.parent
    if not near.is_dir():
        return []
    try:
        read_only = bool(os.statvfs(near).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return [
            Problem("output", f"{near} is on a read-only filesystem", "give an output dir on a writable one")
        ]
    if not os.access(near, os.W_OK | os.X_OK):
        return [
            Problem("output", f"{near} cannot be written by this user", "give an output dir you can write")
        ]
    return []


def modified_tasks(cfg: RunConfig, tasks: list[str]) -> list[str]:
    """The selected tasks whose digest differs from the tasks dir's ``dataset.toml`` ([] without one)."""
    from runner.results.digest import check_dataset, task_name

    td = cfg.tasks_dir
    if td is None or not (td / "dataset.toml").is_file():
        return []
    names = {task_name(td / t): t for t in tasks}
    return sorted(names[m.task] for m in check_dataset(td) if m.task in names)


def check_dataset(cfg: RunConfig, tasks: list[str]) -> list[Problem]:
    try:
        modified = modified_tasks(cfg, tasks)
    except (OSError, ValueError, KeyError) as exc:
        return [Problem("dataset", f"cannot read {cfg.tasks_dir}/dataset.toml: {exc}", "fix or remove it")]
    if not modified:
        return []
    what = f"task(s) differ from {cfg.tasks_dir}/dataset.toml: {', '.join(modified)}"
    if cfg.allow_modified:
        return [Problem("dataset", what, "--allow-modified: every report will say so", blocking=False)]
    return [
        Problem(
            "dataset",
            what + " -- this is no longer the benchmark",
            "restore the tasks, or pass --allow-modified to run anyway (every report will say so)",
        )
    ]


_IMPORT_PROBE = """
import importlib, json, sys
res = {}
for ref in json.loads(sys.argv[1]):
    mod, _, cls = ref.partition(":")
    try:
        obj = importlib.import_module(mod)
        if cls:
            getattr(obj, cls)
        res[ref] = None
    except BaseException as exc:
        res[ref] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
print(json.dumps(res))
"""


def _child_env(cfg: RunConfig, env: Mapping[str, str]) -> dict[str, str]:
    """A probe's environment: the runner's, without the model key when the gateway holds it (no
    process of the run but the gateway needs it)."""
    from runner.schedule.gateway import gateway_on, key_var_of

    drop = key_var_of(cfg) if gateway_on(cfg) else None
    return {k: v for k, v in env.items() if k != drop}


def check_arms(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """Every arm's agent imports, in a child interpreter with the harbor job's PYTHONPATH (a
    missing module found here costs seconds; found by harbor, it costs one errored trial per pair)."""
    refs = {s.name: s.agent for s in cfg.arm_specs() if not s.builtin}
    if not refs:
        return []
    child_env = _child_env(cfg, env) | {"PYTHONPATH": project_pythonpath(env)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, json.dumps(sorted(set(refs.values())))],
            env=child_env, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_SEC,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        results = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
        return [
            Problem("arms", f"could not check that the arms import: {exc}", "check the Python environment")
        ]
    problems = []
    for arm, ref in refs.items():
        err = results.get(ref)
        if err:
            problems.append(
                Problem(
                    "arms",
                    f"arm {arm}: agent {ref} does not import ({err})",
                    "fix the module or PYTHONPATH, or use stand-ins (--arms oracle,nop)",
                )
            )
    return problems


def check_staging(cfg: RunConfig) -> list[Problem]:
    """The staged codex of the configured version, and the LoopX parts for LoopX arms."""
    arms = _codex_arms(cfg)
    if not arms or cfg.mounts:
        return []  # no codex arm, or the operator mounts what the arms need (--mounts)
    from agents.staging import DEFAULT_CODEX_VERSION, StagingError
    from agents.staging import load_staged as load_codex
    from modes.profiles import mode_for

    problems = []
    version = agent_kwargs(cfg).get("codex_version") or DEFAULT_CODEX_VERSION
    try:
        load_codex(version)
    except StagingError as exc:
        problems.append(Problem("staging", f"arms {', '.join(arms)}: {exc}"))  # it names `marathon stage`
    loopx_arms = [a for a in arms if (m := mode_for(a)) is not None and m.loopx]
    if loopx_arms:
        from agents.loopx_staging import load_staged as load_loopx

        try:
            load_loopx()
        except StagingError as exc:
            problems.append(Problem("staging", f"arms {', '.join(loopx_arms)}: {exc}"))
    return problems


def check_model(cfg: RunConfig) -> list[Problem]:
    """A codex arm needs a model; one that is not the scripted stand-in needs a provider URL (the
    default URL is the stand-in's address inside the demo image, which a real task image lacks)."""
    arms = _codex_arms(cfg)
    if not arms:
        return []
    kw = agent_kwargs(cfg)
    model = kw.get("model") or cfg.model
    if not model:
        return [Problem("model", f"arms {', '.join(arms)} have no model", "pass --model NAME")]
    from runner.schedule.gateway import gateway_on, is_scripted, upstream_of

    if gateway_on(cfg) and cfg.env != "docker" and not cfg.gateway_url:
        return [Problem("model", f"the arms run in remote sandboxes (--env {cfg.env}), which the gateway's local socket cannot reach",
                        "pass --gateway-url https://HOST:PORT/v1 with --gateway-tls-listen, --gateway-tls-cert and "
                        "--gateway-tls-key (and --gateway-ca for a private CA): docs/gateway.md; or --no-gateway")]  # fmt: skip
    # what codex's TLS would refuse, and a CA file that would carry its key into sandboxes, before any attempt
    if gateway_on(cfg) and (cfg.gateway_tls_cert or cfg.gateway_ca):
        from runner.ops.gateway.certs import problems as cert_problems

        bad = cert_problems(cfg.gateway_tls_cert, cfg.gateway_url, cfg.gateway_ca)
        if bad:
            return [Problem("gateway", line, "docs/gateway.md: Remote sandboxes (TLS)") for line in bad]
    if gateway_on(cfg):  # the gateway forwards to --model-base-url (default: OpenAI's)
        if upstream_of(cfg) == SCRIPTED_UPSTREAM and not is_scripted(model):
            return [Problem("model", f"model {model} is not a scripted/ scenario, but the gateway's upstream is the scripted stand-in",
                            "pass --model-base-url URL (the provider) for a real model")]  # fmt: skip
        return []
    if is_scripted(model) or kw.get("provider_base_url"):
        return []
    return [
        Problem(
            "model",
            f"model {model} is not the scripted stand-in but no provider is configured",
            "pass --ak provider_base_url=URL (and --ak api_key_var=NAME if the key is not OPENAI_API_KEY)",
        )
    ]


def check_caps(cfg: RunConfig) -> list[Problem]:
    """A spend cap is kept from the gateway's ledger, priced: it needs the gateway and a price for
    the run's model (``runner.results.caps``)."""
    from runner.results.caps import require_priced
    from runner.schedule.gateway import caps_of, gateway_on

    caps = caps_of(cfg)
    if not caps.any:
        return []
    if not gateway_on(cfg):
        return [Problem("spend", "--max-spend/--max-spend-arm/--max-spend-attempt are kept from the gateway's ledger, and this run has no gateway",
                        "run the codex arms through the gateway (drop --no-gateway)")]  # fmt: skip
    why = require_priced(caps)
    return [Problem("spend", why, "pass --price MODEL=in,cached,out (USD per million tokens)")] if why else []


def check_credentials(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """Every ``--ae`` reference, and the variable ``api_key_var`` names, resolve in ``env``."""
    problems = []
    for name in missing_env_refs(cfg.agent_env, env):
        problems.append(
            Problem(
                "credentials",
                f"--ae refers to {name}, which is not set in this shell",
                f"export {name} in this shell",
            )
        )
    kw = agent_kwargs(cfg)
    from runner.schedule.gateway import gateway_on, key_var_of

    if gateway_on(cfg):  # the key is the gateway's alone: read from this shell, never the agents'
        var = key_var_of(cfg)
        for item in cfg.agent_env:
            if ref_name(item) == var:
                problems.append(Problem("credentials", f"--ae {item.partition('=')[0]} passes the model key {var} to the agents, "
                                        "but with the gateway only the gateway holds it (the arms get a per-attempt token)",
                                        f"drop --ae {item.partition('=')[0]} (or run without the gateway: --no-gateway)"))  # fmt: skip
        if not env.get(var) and var not in DECLARED_NON_SECRETS:
            problems.append(Problem("credentials", f"the model key {var} (read by the gateway) is not set in this shell",
                                    f"export {var} in this shell"))  # fmt: skip
        if kw.get("transport") == "docker-exec":  # every attempt would fail as its arm's own error
            problems.append(Problem("credentials", "--ak transport=docker-exec cannot reach the gateway (its relay "
                                    "runs in the in-sandbox driver)",
                                    "drop --ak transport=docker-exec, or run without the gateway: --no-gateway"))  # fmt: skip
        return problems
    if not _codex_arms(cfg) and "api_key_var" not in kw:
        return problems
    var = kw.get("api_key_var") or DEFAULT_KEY_VAR
    given = {item.partition("=")[0] for item in cfg.agent_env + cfg.agent_env_literal}
    if var in given:
        return problems  # forwarded: an --ae-literal knob, or an --ae reference checked above
    if not env.get(var):
        how = "named by --ak api_key_var" if "api_key_var" in kw else "the arms' default api_key_var"
        problems.append(
            Problem(
                "credentials",
                f"credential {var} ({how}) is not set in this shell",
                f"export {var} in this shell",
            )
        )
    return problems


#: harbor's own credential check of an environment (``EnvironmentFactory.run_preflight``, what
#: ``harbor run`` calls before it queues a trial), in a child with the runner's environment
_ENV_PROBE = """
import json, sys
name = sys.argv[1]
def out(**d):
    print(json.dumps(d))
try:
    from harbor.environments.factory import EnvironmentFactory
    from harbor.models.environment_type import EnvironmentType
    known = [e.value for e in EnvironmentType]
    if ":" not in name and name not in known:
        out(unknown=known)
    else:
        try:
            if ":" in name:
                EnvironmentFactory.run_preflight(None, import_path=name)
            else:
                EnvironmentFactory.run_preflight(EnvironmentType(name))
            out(ok=True)
        except SystemExit as exc:
            out(missing=str(exc.code if exc.code is not None else exc))
except BaseException as exc:
    out(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
"""


def check_environment(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """A harbor environment other than Docker (``--env daytona``, ``modal``, ... or an import path
    ``module:Class``) exists and has its credentials, by harbor's own check of it: a run that would
    fail at its first trial fails here, naming the variable, before anything starts."""
    if cfg.env == "docker":
        return []  # check_docker asks the engine itself
    child_env = _child_env(cfg, env) | {
        "PYTHONPATH": project_pythonpath(env),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _ENV_PROBE, cfg.env], env=child_env, capture_output=True, text=True,
            timeout=IMPORT_TIMEOUT_SEC, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
        return [
            Problem("environment", f"could not check --env {cfg.env}: {exc}", "check the Python environment")
        ]
    if "unknown" in got:
        return [
            Problem(
                "environment",
                f"--env {cfg.env} is not a harbor environment",
                f"use one of {', '.join(got['unknown'])}, or an import path module:Class",
            )
        ]
    if "missing" in got:
        why = got["missing"].strip().removesuffix(".").removesuffix(" and try again")
        return [Problem("environment", f"--env {cfg.env}: {why}", "set what it names in this shell")]
    if "error" in got:
        return [
            Problem(
                "environment",
                f"--env {cfg.env} cannot be loaded ({got['error']})",
                "install the environment's package, or fix the import path",
            )
        ]
    return []


def check_docker(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """The engine answers; a pool with no room now is a note: the gate waits, it does not fail."""
    if cfg.env != "docker":
        return []
    from runner.ops.docker_pool import pool_status, verdict
    from runner.ops.dockerapi import connect

    try:
        status = pool_status(None, connect(env.get("DOCKER_HOST") or None))
        v = verdict(status, 1, cap=cfg.net_cap, margin=cfg.net_margin)
    except UserError as exc:
        return [Problem("docker", str(exc))]  # the engine's one line says what to do
    if v.ok:
        return []
    return [
        Problem(
            "pool",
            f"the Docker address pool has no room now ({v.reason})",
            "the runner will wait at the network gate until networks free up",
            blocking=False,
        )
    ]


def check_disk(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """Too little free space is a note: the runner waits at its gate until there is room."""
    from runner.ops import disk

    v = disk.check(
        cfg.out, cfg.min_free_gb, engine=cfg.env == "docker", docker_host=env.get("DOCKER_HOST") or None
    )
    if v.ok:
        return []
    return [Problem("disk", v.reason, "until then the runner waits at its gate", blocking=False)]


def check(cfg: RunConfig, env: Mapping[str, str]) -> list[Problem]:
    """Every problem a runner of ``cfg`` would hit in ``env`` (the environment it will inherit).
    Reads only: the tasks dir, the staging cache, the Docker engine; starts one child interpreter."""
    problems, tasks = check_tasks(cfg)
    if tasks:
        problems += check_dataset(cfg, tasks)
    problems += check_arms(cfg, env)
    problems += check_staging(cfg)
    problems += check_model(cfg)
    problems += check_caps(cfg)
    problems += check_credentials(cfg, env)
    problems += check_environment(cfg, env)
    problems += check_docker(cfg, env)
    problems += check_disk(cfg, env)
    return problems


# --- rendering and the one entry point ------------------------------------------------------------


def render(problems: list[Problem], retry: str = "", out: Path | None = None) -> str:
    """One header line, then one line per problem (blocking first), each saying what to do (a
    newline inside one, from a path or a value, shown as ``\\n``: a line is a problem)."""
    blocking = [p for p in problems if p.blocking]
    notes = [p for p in problems if not p.blocking]
    where = f" of {out}" if out is not None else ""
    if blocking:
        head = f"cannot start the runner{where}: {len(blocking)} problem(s), nothing was started"
    else:
        head = f"preflight{where}: ok"
    return "\n".join(
        safetext.clean(t, None) for t in [head] + [f"  {p.line(retry)}" for p in blocking + notes]
    )


def require(cfg: RunConfig, env: Mapping[str, str] | None = None, *, retry: str = "") -> list[Problem]:
    """Run ``check``; raise ``PreflightFailed`` on any blocking problem (after one
    ``preflight_failed`` event, when the output tree exists). Returns the notes."""
    env = os.environ if env is None else env
    problems = check(cfg, env)
    blocking = [p for p in problems if p.blocking]
    if not blocking:
        return problems
    if cfg.out.is_dir():
        from runner.results.events import EventKind, append_event, utc_now

        append_event(
            cfg.out,
            {
                "ts": utc_now(),
                "event": EventKind.PREFLIGHT_FAILED,
                "problems": [asdict(p) for p in blocking],
                "pid": os.getpid(),
            },
        )
    raise PreflightFailed(render(problems, retry, cfg.out), problems)
