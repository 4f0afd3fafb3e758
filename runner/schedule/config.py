"""The runner's effective configuration: flags > (on --resume) ``<out>/.driver_env`` > env vars > defaults.

Why: a day-long run is restarted by hand, by ``health --fix`` and by the console; every restart
must use exactly the configuration the run started with. The effective values are written to
``<out>/.driver_env`` as shell-style ``NAME=value`` lines (the runbook's knob names, so the file
can be read by eye or ``source``d) and read back from there.

Secrets never land here: ``--ae`` values are pure references (``KEY=${NAME}``) that harbor resolves
from its environment, literals go through ``--ae-literal`` for a few known non-secret knobs, and every
value is screened for credentials before anything is written (``runner.secrets``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from modes import safeio, safetext
from modes.budget import agent_timeout_multiplier
from modes.gateway import tls_address
from modes.profiles import DEFAULT_ARMS, mode_for
from runner import secrets
from runner.errors import UserError
from runner.results.prices import parse_prices
from runner.results.tree import MAX_REPEATS, driver_env_path

#: the checkout marathon runs from: harbor's job processes and a detached runner import our agents
#: and modules from it, whatever their working directory
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: the bundled mini-benchmark (``marathon demo``, ``canary``, ``verify-envs``)
DEMO_TASKS = PROJECT_ROOT / "runner" / "demo" / "tasks"


def project_pythonpath(env: Mapping[str, str]) -> str:
    """``env``'s PYTHONPATH with the project first (once), for the processes the runner starts."""
    paths = [str(PROJECT_ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return os.pathsep.join(dict.fromkeys(paths))


def list_tasks(tasks_dir: Path) -> list[str]:
    """The task names of a dataset dir (subdirs holding a task.toml), sorted; [] when unreadable."""
    try:
        return sorted(p.name for p in tasks_dir.iterdir() if (p / "task.toml").is_file())
    except OSError:
        return []


def unknown_tasks(tasks_dir: Path, names: Sequence[str]) -> list[str]:
    """The names ``--tasks`` gave that are no task of the dataset dir (``list_tasks``)."""
    available = set(list_tasks(tasks_dir))
    return [t for t in names if t not in available]


def unknown_tasks_text(tasks_dir: Path, unknown: Sequence[str]) -> str:
    return f"unknown task(s) in {tasks_dir}: {', '.join(unknown)}"


def chosen_tasks(tasks_dir: Path, names: Sequence[str]) -> list[str]:
    """The tasks a run, a prebuild or the demo takes: those named (all of the dir's when none);
    UserError naming any the dir does not hold."""
    if not names:
        return list_tasks(tasks_dir)
    unknown = unknown_tasks(tasks_dir, names)
    if unknown:
        raise UserError(unknown_tasks_text(tasks_dir, unknown))
    return list(names)


HARBOR_BUILTIN_STANDINS = ("oracle", "nop")
_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$")


@dataclass(frozen=True)
class Knob:
    attr: str
    env: str
    flag: str
    default: Any
    kind: str  # int, float, str, bool, list, json
    help: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        "tasks_dir",
        "MARATHON_TASKS_DIR",
        "--tasks-dir",
        None,
        "str",
        "harbor dataset dir holding the task dirs",
    ),
    Knob("tasks", "MARATHON_TASKS", "--tasks", (), "list", "comma list of task dir names (default: all)"),
    Knob(
        "dataset",
        "MARATHON_DATASET",
        "--dataset",
        None,
        "str",
        "harbor dataset NAME@VERSION the tasks dir was fetched from (with --registry-path or --repo)",
    ),
    Knob("arms", "MARATHON_ARMS", "--arms", DEFAULT_ARMS, "list", "comma list of arms, in order"),
    Knob(
        "repeats",
        "MARATHON_REPEATS",
        "--repeats",
        1,
        "int",
        f"independent attempts per (task, arm) pair, each done once (1 to {MAX_REPEATS})",
    ),
    Knob("concurrency", "MARATHON_CONCURRENCY", "--concurrency", 4, "int", "(task, arm) jobs at once"),
    Knob("goal_timeout_sec", "GOAL_TIMEOUT_SEC", "--goal-timeout-sec", 5340, "int", "the arms' own deadline"),
    Knob(
        "agent_timeout_mult",
        "MARATHON_AGENT_TIMEOUT_MULT",
        "--agent-timeout-mult",
        1.0,
        "float",
        "harbor agent timeout = task budget x this",
    ),
    Knob(
        "verifier_mult",
        "MARATHON_VERIFIER_MULT",
        "--verifier-mult",
        4.0,
        "float",
        "verifier timeout multiplier",
    ),
    Knob("arm_major", "MARATHON_ARM_MAJOR", "--arm-major", False, "bool", "1 = order by arm, 0 = by task"),
    Knob("net_cap", "MARATHON_NET_CAP", "--net-cap", None, "int", "networks in use allowed at most"),
    Knob(
        "net_margin", "MARATHON_NET_MARGIN", "--net-margin", None, "int", "networks kept free below the cap"
    ),
    Knob(
        "min_free_gb",
        "MARATHON_MIN_FREE_GB",
        "--min-free-gb",
        5,
        "int",
        "start no new attempt while the tree's or the Docker engine's disk has less free, in GB (0 = no check)",
    ),
    Knob("max_passes", "MARATHON_MAX_PASSES", "--max-passes", 3, "int", "sweeps over pairs not done"),
    Knob(
        "breaker_k",
        "MARATHON_BREAKER_K",
        "--breaker-k",
        3,
        "int",
        "pause after this many consecutive attempts fail the same way (0 = never)",
    ),
    Knob("model", "MARATHON_MODEL", "--model", None, "str", "harbor -m for every arm"),
    Knob(
        "gateway",
        "MARATHON_GATEWAY",
        "--gateway",
        True,
        "bool",
        "route the codex arms' model calls through the run's gateway (per-attempt tokens, the ledger)",
    ),
    Knob(
        "model_base_url",
        "MARATHON_MODEL_BASE_URL",
        "--model-base-url",
        None,
        "str",
        "the provider the gateway forwards to (default OpenAI's; `scripted`: the stand-in, the default for scripted/ models)",
    ),
    Knob(
        "gateway_url",
        "MARATHON_GATEWAY_URL",
        "--gateway-url",
        None,
        "str",
        "remote sandboxes: the gateway's TLS URL as they reach it (https://HOST:PORT/v1); default: the local socket route",
    ),
    Knob(
        "gateway_tls_listen",
        "MARATHON_GATEWAY_TLS_LISTEN",
        "--gateway-tls-listen",
        None,
        "str",
        "HOST:PORT the gateway serves remote sandboxes on (with --gateway-tls-cert and --gateway-tls-key)",
    ),
    Knob(
        "gateway_tls_cert",
        "MARATHON_GATEWAY_TLS_CERT",
        "--gateway-tls-cert",
        None,
        "str",
        "the operator's certificate (PEM)",
    ),
    Knob(
        "gateway_tls_key",
        "MARATHON_GATEWAY_TLS_KEY",
        "--gateway-tls-key",
        None,
        "str",
        "its private key (PEM path)",
    ),
    Knob(
        "gateway_ca",
        "MARATHON_GATEWAY_CA",
        "--gateway-ca",
        None,
        "str",
        "the CA (PEM) the remote sandboxes are given to trust the gateway's certificate (a private CA)",
    ),
    Knob(
        "model_key_var",
        "MARATHON_MODEL_KEY_VAR",
        "--model-key-var",
        None,
        "str",
        "NAME of the variable with the real model key, read by the gateway alone (default --ak api_key_var, else OPENAI_API_KEY)",
    ),
    Knob("env", "MARATHON_ENV", "--env", "docker", "str", "harbor environment type (-e)"),
    Knob(
        "cluster",
        "MARATHON_CLUSTER",
        "--cluster",
        None,
        "str",
        "run the pairs as Ray jobs on a cluster of Docker hosts: ray://HEAD:PORT (job API) or auto",
    ),
    Knob(
        "build_network",
        "MARATHON_BUILD_NETWORK",
        "--build-network",
        "host",
        "str",
        "network of image builds (host|default); must match prebuild",
    ),
    Knob("agent_env", "MARATHON_AGENT_ENV", "--ae", (), "json", "agent env KEY=${VAR} (references only)"),
    Knob(
        "agent_env_literal",
        "MARATHON_AGENT_ENV_LITERAL",
        "--ae-literal",
        (),
        "json",
        "agent env NAME=VALUE for known non-secret knobs",
    ),
    Knob("agent_kwargs", "MARATHON_AGENT_KWARGS", "--ak", (), "json", "agent kwargs key=value"),
    Knob(
        "prices",
        "MARATHON_PRICES",
        "--price",
        (),
        "json",
        "price MODEL=in,cached,out in USD per million tokens, over LiteLLM's map (repeatable)",
    ),
    Knob(
        "max_spend",
        "MARATHON_MAX_SPEND",
        "--max-spend",
        None,
        "float",
        "the run's spend cap in USD (the ledger priced): at it no new attempt starts and the run pauses",
    ),
    Knob(
        "max_spend_arm",
        "MARATHON_MAX_SPEND_ARM",
        "--max-spend-arm",
        None,
        "float",
        "each arm's spend cap in USD: at it no new attempt of that arm starts",
    ),
    Knob(
        "max_spend_attempt",
        "MARATHON_MAX_SPEND_ATTEMPT",
        "--max-spend-attempt",
        None,
        "float",
        "each attempt's budget in USD, the same for every arm: at it the attempt ends as at its deadline (scored)",
    ),
    Knob(
        "on_cap",
        "MARATHON_ON_CAP",
        "--on-cap",
        "finish",
        "str",
        "at a spend cap the running attempts: finish (scored) or stop (stopped and voided)",
    ),
    Knob(
        "mounts", "MARATHON_MOUNTS", "--mounts", None, "str", "harbor --mounts JSON (e.g. the staged codex)"
    ),
    Knob(
        "allow_modified", "MARATHON_ALLOW_MODIFIED", "--allow-modified", False, "bool", "run modified tasks"
    ),
    Knob(
        "modified_tasks",
        "MARATHON_MODIFIED_TASKS",
        "",
        (),
        "list",
        "(recorded) tasks that differ from dataset.toml",
    ),
)
KNOB_BY_ATTR = {k.attr: k for k in KNOBS}


@dataclass(frozen=True)
class RunConfig:
    out: Path
    tasks_dir: Path | None = None
    tasks: tuple[str, ...] = ()
    dataset: str | None = None  # NAME@VERSION the tasks dir was fetched from (--dataset), else None
    arms: tuple[str, ...] = DEFAULT_ARMS
    repeats: int = 1  # attempts per (task, arm): each repeat claimed, run and done on its own
    concurrency: int = 4
    goal_timeout_sec: int = 5340
    agent_timeout_mult: float = 1.0
    verifier_mult: float = 4.0
    arm_major: bool = False
    net_cap: int | None = None
    net_margin: int | None = None
    min_free_gb: int = 5  # runner.ops.disk: new attempts wait while a disk of the run has less free
    max_passes: int = 3
    breaker_k: int = 3
    model: str | None = None
    gateway: bool = True
    model_base_url: str | None = None
    gateway_url: str | None = None
    gateway_tls_listen: str | None = None
    gateway_tls_cert: str | None = None
    gateway_tls_key: str | None = None
    gateway_ca: str | None = None
    model_key_var: str | None = None
    env: str = "docker"
    cluster: str | None = None
    build_network: str = "host"
    agent_env: tuple[str, ...] = ()
    agent_env_literal: tuple[str, ...] = ()
    agent_kwargs: tuple[str, ...] = ()
    prices: tuple[str, ...] = ()  # ``--price`` items (``runner.results.prices``), recorded for the report
    max_spend: float | None = None  # USD: the run's spend cap (runner.results.caps)
    max_spend_arm: float | None = None  # USD: each arm's spend cap
    max_spend_attempt: float | None = None  # USD: each attempt's budget (cut like a deadline, scored)
    on_cap: str = "finish"  # finish | stop: the running attempts at a cap
    mounts: str | None = None
    allow_modified: bool = False
    modified_tasks: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    def arm_specs(self) -> list[ArmSpec]:
        return [parse_arm(a) for a in self.arms]


@dataclass(frozen=True)
class ArmSpec:
    """An arm: its name (the job name and output dir) and the harbor agent that plays it."""

    name: str
    agent: str  # harbor -a value: builtin name or module:Class
    builtin: bool  # a harbor built-in stand-in (oracle, nop): takes no marathon kwargs
    real: bool  # one of the five arms of modes.profiles


_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: names the status table and the console already give a row of their own (all arms together)
RESERVED_ARM_NAMES = frozenset({"total"})


def parse_arm(text: str) -> ArmSpec:
    """``plain`` (a real arm), ``oracle``/``nop`` (harbor stand-ins) or ``name=module:Class``."""
    text = text.strip()
    name, sep, agent = text.partition("=")
    if not _ARM_NAME.match(name):
        raise UserError(f"bad arm name {name!r}: use letters, digits, '.', '_' and '-'")
    if name.lower() in RESERVED_ARM_NAMES:
        raise UserError(f"bad arm name {name!r}: the row of all arms together has that name")
    if sep:
        if ":" not in agent and agent not in HARBOR_BUILTIN_STANDINS:
            raise UserError(
                f"arm {text!r}: the agent must be module:Class or a harbor stand-in (oracle, nop)"
            )
        return ArmSpec(name, agent, agent in HARBOR_BUILTIN_STANDINS, False)
    mode = mode_for(name)
    if mode is not None:
        return ArmSpec(name, mode.agent_import_path, False, True)
    if name in HARBOR_BUILTIN_STANDINS:
        return ArmSpec(name, name, True, False)
    raise UserError(
        f"unknown arm {name!r}: use one of {', '.join(DEFAULT_ARMS)}, a stand-in "
        f"({', '.join(HARBOR_BUILTIN_STANDINS)}) or name=module:Class"
    )


def _task_toml(tasks_dir: Path, task: str) -> dict | None:
    """The task's task.toml as a table; None when unreadable (harbor says why when it runs it)."""
    try:
        return tomllib.loads((tasks_dir / task / "task.toml").read_text())
    except (OSError, ValueError):
        return None


def task_is_multi_step(tasks_dir: Path, task: str) -> bool:
    """A task of harbor's multi-step kind (``steps`` in its task.toml, harbor's ``Task.has_steps``):
    harbor runs the agent once per step, each with its own instruction, verifier and
    ``steps/<name>/`` dir, where marathon's budgets, receipts and readers hold one agent run and one
    verifier per trial."""
    t = _task_toml(tasks_dir, task)
    return bool(t and t.get("steps"))


def task_agent_timeout_sec(tasks_dir: Path, task: str) -> float | None:
    """The task's own ``[agent] timeout_sec`` (task.toml); None when it sets none or is unreadable."""
    t = _task_toml(tasks_dir, task)
    if t is None:
        return None
    v = (t.get("agent") or {}).get("timeout_sec")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def agent_timeout_mult(cfg: RunConfig, task: str, arm: ArmSpec) -> float:
    """harbor's ``--agent-timeout-multiplier`` for one (task, arm) job.

    The five arms get the same multiplier per task, raised where needed so that harbor's agent
    timeout holds ``GOAL_TIMEOUT_SEC`` of model time plus the preparation allowance and the
    wind-down margin (modes.budget); stand-ins (oracle, nop, test agents) keep the knob as given.
    """
    if not arm.real or cfg.tasks_dir is None:
        return cfg.agent_timeout_mult
    task_sec = task_agent_timeout_sec(cfg.tasks_dir, task)
    return agent_timeout_multiplier(cfg.goal_timeout_sec, task_sec, cfg.agent_timeout_mult)


def check_agent_env(items: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Normalise ``--ae`` items: ``KEY`` means ``KEY=${KEY}``; every value must be a pure reference."""
    return tuple(secrets.agent_env_ref(item) for item in items)


def screened_values(out: Path, values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every text value of a configuration, labelled by its flag, as it reaches harbor's argv,
    ``.driver_env``, events and the console (``runner.secrets.screen_all`` checks them)."""
    items = [("OUT", str(out))]
    for k in KNOBS:
        v = values.get(k.attr)
        for one in v if isinstance(v, (list, tuple)) else [v]:
            if one is None or isinstance(one, (bool, int, float)):
                continue
            label = secrets.kwarg_label(str(one)) if k.attr == "agent_kwargs" else (k.flag or k.env)
            items.append((label, str(one)))
    return items


def missing_env_refs(items: tuple[str, ...], environ: Mapping[str, str] | None = None) -> list[str]:
    """Names referenced by ``--ae`` values (``${VAR}`` without default) that are unset or empty in
    ``environ`` (default: this process's environment)."""
    environ = os.environ if environ is None else environ
    missing = []
    for item in items:
        val = item.partition("=")[2]
        m = _REF.match(val)
        if m and not m.group(1):
            name = val[2:-1]
            if not environ.get(name):
                missing.append(name)
    return missing


# --- conversion -------------------------------------------------------------------------------


def _convert(knob: Knob, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    if knob.kind in ("int", "float") and isinstance(raw, str) and raw.strip() == "":
        return None  # an unset optional knob, as _serialise writes it to .driver_env
    try:
        if knob.kind == "int":
            v = int(raw)
            if v < 0:
                raise ValueError
            return v
        if knob.kind == "float":
            v = float(raw)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError
            return v
        if knob.kind == "bool":
            if isinstance(raw, bool):
                return raw
            s = str(raw).strip().lower()
            if s in ("1", "true", "yes", "on"):
                return True
            if s in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if knob.kind == "list":
            if isinstance(raw, (list, tuple)):
                return tuple(str(x).strip() for x in raw if str(x).strip())
            return tuple(x.strip() for x in str(raw).split(",") if x.strip())
        if knob.kind == "json":
            if isinstance(raw, (list, tuple)):
                return tuple(str(x) for x in raw)
            v = json.loads(raw) if str(raw).strip() else []
            if not isinstance(v, list):
                raise ValueError
            return tuple(str(x) for x in v)
        return str(raw) if str(raw) != "" else None
    except (TypeError, ValueError):
        # text may hold a secret: only a number's or a flag's value is shown, cut and cleaned
        shown = f"={safetext.clean(repr(raw), 40)}" if knob.kind in ("int", "float", "bool") else ""
        raise UserError(f"{source}{shown} is not a valid {knob.kind} for {knob.flag or knob.env}") from None


def _serialise(knob: Knob, value: Any) -> str:
    if value is None:
        return ""
    if knob.kind == "bool":
        return "1" if value else "0"
    if knob.kind == "list":
        return ",".join(value)
    if knob.kind == "json":
        return json.dumps(list(value))
    return str(value)


def write_driver_env(cfg: RunConfig) -> Path:
    path = driver_env_path(cfg.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# marathon runner: effective configuration (read by `marathon run --resume` and `marathon health --fix`)",
        f"MARATHON_OUT={shlex.quote(str(cfg.out))}",
    ]
    for k in KNOBS:
        lines.append(f"{k.env}={shlex.quote(_serialise(k, getattr(cfg, k.attr)))}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


#: .driver_env is a few KB
DRIVER_ENV_CAP = 1 << 20


def read_driver_env(out: Path) -> dict[str, str]:
    """The raw ``NAME=value`` pairs of ``<out>/.driver_env`` ({} when absent), read by the rules of
    the runner's own files (``modes.safeio.read_own``); a one-line ``UserError`` when it is not a
    regular file, too large, not UTF-8 or not ``NAME=value`` lines."""
    path = driver_env_path(out)
    raw = safeio.read_own(path, DRIVER_ENV_CAP)
    if isinstance(raw, safeio.Refused):
        if raw.missing:
            return {}
        raise UserError(f"{safetext.clean(path)}: cannot read it ({raw.reason})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{safetext.clean(path)}: not UTF-8 text (byte {exc.start})") from None
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            raise UserError(
                f"{safetext.clean(path)}: cannot parse line {safetext.clean(line, 120)!r}"
            ) from None
        values[name.strip()] = parts[0] if parts else ""
    return values


#: the numbers a run is bounded to (attr, flag, lowest, highest): outside them a value is a typo
#: (a deadline of 0 s, 10^20 jobs at once), refused before anything starts rather than met mid-run
BOUNDS = (
    ("concurrency", "--concurrency", 1, 4096),
    ("max_passes", "--max-passes", 1, 1000),
    ("goal_timeout_sec", "--goal-timeout-sec", 1, 30 * 24 * 3600),
    # (unset: None, not bounded) a probe's --min-free-gb 10^20 would have held every attempt forever
    ("net_cap", "--net-cap", 0, 1_000_000),
    ("net_margin", "--net-margin", 0, 1_000_000),
    ("min_free_gb", "--min-free-gb", 0, 1_000_000),
    ("breaker_k", "--breaker-k", 0, 1_000_000),
    ("agent_timeout_mult", "--agent-timeout-mult", 0, 1000),
    ("verifier_mult", "--verifier-mult", 0, 1000),
    ("max_spend", "--max-spend", 0, 1_000_000_000),
    ("max_spend_arm", "--max-spend-arm", 0, 1_000_000_000),
    ("max_spend_attempt", "--max-spend-attempt", 0, 1_000_000_000),
)


def resolve(
    out: Path,
    flags: Mapping[str, Any],
    *,
    resume: bool = False,
    environ: Mapping[str, str] | None = None,
) -> RunConfig:
    """The effective configuration. ``flags`` maps knob attrs to values given on the command line
    (None = not given). Precedence: flag > .driver_env (resume only) > environment > default."""
    environ = os.environ if environ is None else environ
    out = Path(out).resolve()
    stored = read_driver_env(out) if resume else {}
    if resume and not stored:
        raise UserError(
            f"nothing to resume: {driver_env_path(out)} does not exist (start with `marathon run`)"
        )
    values: dict[str, Any] = {}
    for k in KNOBS:
        v = flags.get(k.attr)
        if v is not None and v != () and v is not False:
            values[k.attr] = _convert(k, v, k.flag)
        elif k.env in stored:
            values[k.attr] = _convert(k, stored[k.env], f"{driver_env_path(out)}:{k.env}")
        elif k.env in environ and k.attr != "modified_tasks":
            values[k.attr] = _convert(k, environ[k.env], k.env)
        else:
            values[k.attr] = k.default
        if values[k.attr] is None and k.kind in ("list", "json"):
            values[k.attr] = ()
    if values["tasks_dir"] is None:
        raise UserError("no tasks dir: pass --tasks-dir DIR (or set MARATHON_TASKS_DIR)")
    values["tasks_dir"] = Path(values["tasks_dir"]).resolve()
    for attr, flag, lo, hi in BOUNDS:
        if values[attr] is not None and not lo <= values[attr] <= hi:
            raise UserError(f"{flag} must be from {lo} to {hi} (got {values[attr]:g})")
    if not values["arms"]:
        raise UserError("--arms names no arm")
    if not values["env"]:  # ``--env ''`` (or MARATHON_ENV=): an internal error later (a probe)
        raise UserError("--env names no harbor environment: docker, or a module:Class")
    twice_tasks = sorted({t for t in values["tasks"] if values["tasks"].count(t) > 1})
    if twice_tasks:
        raise UserError(f"task given twice in --tasks: {', '.join(twice_tasks)}")
    if not 1 <= values["repeats"] <= MAX_REPEATS:
        raise UserError(f"--repeats must be from 1 to {MAX_REPEATS}")
    if values["build_network"] not in ("host", "default"):
        raise UserError("--build-network must be host or default")
    url = values["gateway_url"]
    if url is not None:
        try:
            tls_address(url)  # what the sandboxes' relays connect to (agents.relay)
        except ValueError as exc:
            raise UserError(
                f"--gateway-url: {exc} (the gateway's URL as the remote sandboxes reach it)"
            ) from None
    if values["gateway_tls_listen"] and not (values["gateway_tls_cert"] and values["gateway_tls_key"]):
        raise UserError(
            "--gateway-tls-listen needs --gateway-tls-cert and --gateway-tls-key (the operator's certificate)"
        )
    if values["model_key_var"] is not None and not secrets.NAME.match(values["model_key_var"]):
        raise UserError("--model-key-var: expected the NAME of an environment variable (the key stays in it)")
    try:
        values["prices"] = tuple(o.text() for o in parse_prices(values["prices"]))
        if resume and flags.get("prices") and "MARATHON_PRICES" in stored:
            # a resume's --price adds to the run's (and wins for its model): replacing them left the
            # run's other models unpriced, for the reports and the gateway's caps (found by a probe)
            given = {p.partition("=")[0] for p in values["prices"]}
            kept = _convert(KNOB_BY_ATTR["prices"], stored["MARATHON_PRICES"], "MARATHON_PRICES")
            kept = tuple(o.text() for o in parse_prices(kept) if o.text().partition("=")[0] not in given)
            values["prices"] = kept + values["prices"]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if values["on_cap"] not in ("finish", "stop"):
        raise UserError("--on-cap must be finish or stop")
    values["agent_env"] = check_agent_env(values["agent_env"])
    values["agent_env_literal"] = tuple(secrets.agent_env_literal(i) for i in values["agent_env_literal"])
    twice = secrets.duplicate_env_keys(values["agent_env"] + values["agent_env_literal"])
    if twice:
        raise UserError(f"agent env given twice (--ae/--ae-literal): {', '.join(twice)}")
    secrets.screen_all(screened_values(out, values))
    if values["mounts"]:
        try:
            if not isinstance(json.loads(values["mounts"]), list):
                raise ValueError
        except ValueError:
            raise UserError(
                '--mounts must be a JSON array, e.g. [{"type":"bind","source":"/abs","target":"/opt/x"}]'
            ) from None
    cfg = RunConfig(out=out, **values)
    names = [s.name for s in cfg.arm_specs()]
    if len(set(names)) != len(names):
        raise UserError(f"duplicate arm in --arms: {','.join(names)}")
    return cfg


def stored_config(out: Path) -> RunConfig | None:
    """The configuration the tree's run recorded (``.driver_env``, as ``--resume`` reads it, and
    nothing of this process's environment), or None when there is none or it no longer resolves."""
    if not read_driver_env(out):
        return None
    try:
        return resolve(out, {}, resume=True, environ={})
    except UserError:
        return None


def with_changes(cfg: RunConfig, **changes: Any) -> RunConfig:
    return replace(cfg, **changes)


def as_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain data for the ``runner_start`` event (no secrets: --ae holds references only)."""
    d: dict[str, Any] = {}
    for f in fields(cfg):
        if f.name == "extra":
            continue
        v = getattr(cfg, f.name)
        d[f.name] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
    return d
