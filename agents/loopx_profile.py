"""The LoopX profile inside a trial container: layout, environment, offline install, goal setup.

Why this shape: LoopX's own checks (``inspect_native_codex_profile``, ``doctor``) look for the files
where its ``_profile_paths()`` puts them, so the layout copies that function exactly (a test compares
the two). ``install_native_codex_profile`` itself needs a source checkout with ``install-local.sh``,
which PyPI does not ship, so the install is the verified pip-only route: a venv on the image's own
``python3 --without-pip``, pip from a staged wheel, loopx from the staged wheel (non-editable, no
``*.egg-info`` anywhere), then ``loopx workflow-skills --install``. Every LoopX call -- the install,
the gates, the body, the agent's own ``bash -lc`` commands and any later inspection -- uses one
environment (``profile_env``): Node and the profile bin first on PATH, HOME, CODEX_HOME, LOOPX_PYTHON,
and BASH_ENV pointing at a file that restores them after ``/etc/profile`` resets PATH in a login shell.
Without it ``loopx status`` reports ``status_collection_failed`` and looks broken when it is not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)

DEFAULT_PROFILE_ROOT = "/opt/lxprofile"
#: LoopX's default release id for a native Codex profile (``install_native_codex_profile``).
DEFAULT_RELEASE_ID = "native-goal-profile"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: LoopX gives its Node control plane a fixed 15 s to start (``STARTUP_READY_TIMEOUT_SECONDS``); on a
#: loaded machine that can pass once. The call is retried on exactly this message, nothing else.
RUNTIME_STARTUP_TIMEOUT = "did not become ready before the startup deadline"
RUNTIME_STARTUP_RETRIES = 2
#: Marker the in-container scripts print before a failure message (parsed into ProfileError).
FAIL_MARK = "MARATHON_LOOPX_FAIL:"


class ProfileError(RuntimeError):
    """The LoopX profile could not be installed or set up; the message names the failing step."""


@dataclass(frozen=True)
class ExecResult:
    return_code: int
    stdout: str
    stderr: str


#: Runs one ``bash -c`` command in the trial container: (command, env, user, timeout_sec) -> result.
ContainerExec = Callable[[str, Mapping[str, str] | None, str | None, float | None], Awaitable[ExecResult]]


@dataclass(frozen=True)
class ProfilePaths:
    """``_profile_paths(root, release_id)`` of LoopX, plus where our install puts its extra pieces."""

    root: str
    home: str
    codex_home: str
    skills_dir: str
    bin_dir: str
    cli_bin: str
    release_root: str
    man_root: str
    shell_profile: str
    # ours, all under the profile root
    venv: str
    python: str
    runtime_root: str
    bash_env: str

    def loopx_keys(self) -> dict[str, str]:
        """Only the keys LoopX's ``_profile_paths`` defines (for comparison with it)."""
        d = asdict(self)
        return {k: d[k] for k in LOOPX_PROFILE_KEYS}


LOOPX_PROFILE_KEYS = (
    "root",
    "home",
    "codex_home",
    "skills_dir",
    "bin_dir",
    "cli_bin",
    "release_root",
    "man_root",
    "shell_profile",
)


def profile_paths(root: str = DEFAULT_PROFILE_ROOT, release_id: str = DEFAULT_RELEASE_ID) -> ProfilePaths:
    r = root.rstrip("/")
    release_root = f"{r}/releases/{release_id}"
    return ProfilePaths(
        root=r,
        home=f"{r}/home",
        codex_home=f"{r}/codex-home",
        skills_dir=f"{r}/codex-home/skills",
        bin_dir=f"{r}/bin",
        cli_bin=f"{r}/bin/loopx",
        release_root=release_root,
        man_root=f"{r}/man",
        shell_profile=f"{r}/home/.profile",
        venv=f"{release_root}/venv",
        python=f"{release_root}/venv/bin/python",
        runtime_root=f"{r}/runtime",
        bash_env=f"{r}/bash-env",
    )


def profile_env(paths: ProfilePaths, node_bin_dir: str) -> dict[str, str]:
    """The environment of every LoopX call (installer, gates, body, the agent's shell)."""
    return {
        "PATH": f"{node_bin_dir}:{paths.bin_dir}:{SYSTEM_PATH}",
        "HOME": paths.home,
        "TMPDIR": paths.home,
        "TMP": paths.home,
        "TEMP": paths.home,
        "CODEX_HOME": paths.codex_home,
        "LOOPX_PYTHON": paths.python,
        "BASH_ENV": paths.bash_env,
        "LOOPX_USAGE_PING": "0",
        "DO_NOT_TRACK": "1",
    }


def bash_env_text(env: Mapping[str, str]) -> str:
    """The BASH_ENV file: restores the profile env inside codex's ``bash -lc`` (after /etc/profile)."""
    lines = ["# written by marathon: LoopX profile environment for non-interactive bash"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    return "\n".join(lines) + "\n"


def _script_prelude() -> str:
    return f'set -eu\nfail() {{ echo "{FAIL_MARK} $*" >&2; exit 3; }}\n'


def install_script(
    paths: ProfilePaths,
    parts: Mapping[str, str],
    env: Mapping[str, str],
    owner: str | None = None,
) -> str:
    """Bash that installs the profile from staged parts (``parts`` = StagedLoopx.container_paths())."""
    q = shlex.quote
    node = f"{parts['node_bin_dir']}/node"
    lines = [
        _script_prelude(),
        # The image's python3 must be new enough for loopx (requires-python >= 3.11).
        "command -v python3 >/dev/null || fail 'python3 is not in the image (LoopX needs Python >= 3.11)'",
        "python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || "
        'fail "python3 in the image is $(python3 -V 2>&1); LoopX needs Python >= 3.11"',
        f"test -f {q(parts['loopx_wheel'])} || fail 'staged loopx wheel missing: {parts['loopx_wheel']}'",
        f"test -f {q(parts['pip_wheel'])} || fail 'staged pip wheel missing: {parts['pip_wheel']}'",
        f"test -x {q(node)} || fail 'node missing: {node} (LoopX control plane needs Node >= 22.22.3)'",
        f"{q(node)} --version >/dev/null 2>&1 || fail 'node does not run: {node}'",
        f"rm -rf {q(paths.root)}",
        "mkdir -p "
        + " ".join(
            q(p)
            for p in (
                paths.home,
                paths.skills_dir,
                paths.bin_dir,
                paths.man_root,
                paths.release_root,
                paths.runtime_root,
            )
        ),
        f"python3 -m venv --without-pip {q(paths.venv)} || fail 'python3 -m venv --without-pip failed'",
        f"{q(paths.python)} {q(parts['pip_wheel'])}/pip install -q --no-index --no-compile "
        f"--disable-pip-version-check {q(parts['pip_wheel'])} >&2 || fail 'pip bootstrap from wheel failed'",
        f"{q(paths.python)} -m pip install -q --no-index --no-compile --disable-pip-version-check "
        f"{q(parts['loopx_wheel'])} >&2 || fail 'pip install of the loopx wheel failed'",
        f"ln -sfn {q(paths.venv)}/bin/loopx {q(paths.cli_bin)}",
        f"cat > {q(paths.bash_env)} <<'MARATHON_BASH_ENV'\n{bash_env_text(env)}MARATHON_BASH_ENV",
        f"test -z \"$(find {q(paths.root)} -name '*.egg-info' -print -quit)\" || "
        "fail 'an *.egg-info is inside the profile (editable install?)'",
        f"{q(paths.cli_bin)} --format json workflow-skills --install --cli-bin {q(paths.cli_bin)} "
        "> /tmp/.marathon-loopx-skills.json || fail 'loopx workflow-skills --install failed'",
    ]
    if owner and owner != "root":
        lines.append(f"chown -R {q(owner)} {q(paths.root)}")
    lines.append(
        f'printf \'{{"python": "%s", "node": "%s", "loopx": "%s"}}\\n\' '
        f'"$(python3 -c \'import platform; print(platform.python_version())\')" "$({q(node)} --version)" '
        f'"$({q(paths.cli_bin)} --version 2>&1 | tr -d \'\\n\\"\')"'
    )
    return "\n".join(lines) + "\n"


def _failure(step: str, r: ExecResult) -> ProfileError:
    for line in (r.stderr + "\n" + r.stdout).splitlines():
        if line.startswith(FAIL_MARK):
            return ProfileError(f"{step}: {line[len(FAIL_MARK) :].strip()}")
    tail = " / ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
    return ProfileError(f"{step}: exit {r.return_code}: {tail}")


@dataclass(frozen=True)
class InstalledProfile:
    paths: ProfilePaths
    env: dict[str, str]
    python_version: str
    node_version: str
    loopx_version: str
    install_seconds: float


async def install_profile(
    run: ContainerExec,
    parts: Mapping[str, str],
    paths: ProfilePaths | None = None,
    owner: str | None = None,
    timeout_sec: float = 300,
) -> InstalledProfile:
    """Install the profile as root from the staged parts; ProfileError names the failing step."""
    import time

    paths = paths or profile_paths()
    env = profile_env(paths, parts["node_bin_dir"])
    t0 = time.monotonic()
    r = await run(install_script(paths, parts, env, owner), env, "root", timeout_sec)
    if r.return_code != 0:
        raise _failure("LoopX profile install", r)
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise ProfileError(f"LoopX profile install: unreadable summary {r.stdout[-200:]!r}") from exc
    return InstalledProfile(
        paths=paths,
        env=env,
        python_version=info["python"],
        node_version=info["node"],
        loopx_version=info["loopx"],
        install_seconds=round(time.monotonic() - t0, 2),
    )


def loopx_argv(paths: ProfilePaths, registry: str, *args: str) -> str:
    """A LoopX CLI call bound to this profile's registry and runtime root (no placeholders)."""
    base = [paths.cli_bin, "--registry", registry, "--runtime-root", paths.runtime_root, "--format", "json"]
    return shlex.join([*base, *args])


async def run_loopx_json(
    run: ContainerExec,
    profile: InstalledProfile,
    command: str,
    step: str,
    user: str | None = None,
    cwd: str | None = None,
    timeout_sec: float = 120,
) -> dict:
    """Run one LoopX CLI call in the profile env; its JSON answer, or ProfileError naming ``step``."""
    full = f"cd {shlex.quote(cwd)} && {command}" if cwd else command
    for attempt in range(1 + RUNTIME_STARTUP_RETRIES):
        r = await run(full, profile.env, user, timeout_sec)
        try:
            payload = json.loads(r.stdout)
        except json.JSONDecodeError:
            payload = None
        if r.return_code == 0 and isinstance(payload, dict):
            return payload
        if RUNTIME_STARTUP_TIMEOUT not in r.stdout + r.stderr or attempt == RUNTIME_STARTUP_RETRIES:
            break
        log.warning("%s: LoopX Effect runtime startup timed out (loaded machine); retrying", step)
    raise _failure(step, r)


@dataclass(frozen=True)
class GoalSetup:
    goal_id: str
    agent_id: str
    project: str
    registry: str
    state_file: str


def registry_path(workdir: str) -> str:
    """LoopX's project registry (``DEFAULT_PROJECT_REGISTRY``) in the task's working dir."""
    return f"{workdir.rstrip('/')}/.loopx/registry.json"


async def setup_goal(
    run: ContainerExec,
    profile: InstalledProfile,
    workdir: str,
    goal_id: str,
    agent_id: str,
    objective: str,
    user: str | None = None,
) -> GoalSetup:
    """``bootstrap --no-global-sync`` in the workdir, then register the agent with ``configure-goal``.

    (``register-agent`` needs a global registry, which ``--no-global-sync`` keeps out of the trial.)
    """
    registry = registry_path(workdir)
    boot = await run_loopx_json(
        run,
        profile,
        loopx_argv(
            profile.paths,
            registry,
            "bootstrap",
            "--project",
            workdir,
            "--goal-id",
            goal_id,
            "--objective",
            objective,
            "--no-global-sync",
        ),
        "loopx bootstrap",
        user=user,
        cwd=workdir,
    )
    if boot.get("ok") is not True:
        raise ProfileError(f"loopx bootstrap: not ok: {json.dumps(boot)[:300]}")
    conf = await run_loopx_json(
        run,
        profile,
        loopx_argv(
            profile.paths,
            registry,
            "configure-goal",
            "--goal-id",
            goal_id,
            "--registered-agent",
            agent_id,
            "--agent-work-mode",
            f"{agent_id}=active",
            "--execute",
        ),
        "loopx configure-goal",
        user=user,
        cwd=workdir,
    )
    if conf.get("ok") is not True:
        raise ProfileError(f"loopx configure-goal: not ok: {json.dumps(conf)[:300]}")
    return GoalSetup(
        goal_id=goal_id,
        agent_id=agent_id,
        project=workdir,
        registry=registry,
        state_file=f"{workdir.rstrip('/')}/.loopx/goals/{goal_id}/ACTIVE_GOAL_STATE.md",
    )


def transport_exec(transport) -> ContainerExec:
    """A ContainerExec over the codex arms' Transport (agents.transport): ``bash -c`` via docker exec."""

    async def run(command, env=None, user=None, timeout_sec=None) -> ExecResult:
        def call() -> ExecResult:
            r = transport.run(
                ["bash", "-c", command], env=dict(env or {}), user=user, timeout=timeout_sec or 300
            )
            return ExecResult(
                r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
            )

        return await asyncio.to_thread(call)

    return run
