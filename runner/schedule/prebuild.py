"""``marathon prebuild``: build the task images once, with a proxy only at build time.

Why: task Dockerfiles often need the network to build (apt-get). A proxy in
``~/.docker/config.json`` would also be injected into every running container and open an egress
path for no-network tasks (runbook, "prebuild_images"). Here the proxy is given only to the build:
as build args (taken from this process's environment, so it is never in a command line) and with
the host network for the build. The proxy itself comes from the environment too (``build_proxy``),
so its credentials are never on marathon's command line either. The later build that harbor does for each trial then hits the
layer cache: BuildKit keeps the predefined proxy args out of its cache key, and the runner gives
harbor's build the same host network (``--build-network host``, the network mode IS in the key).

The build mirrors harbor 0.25.0's (environments/docker/docker.py ``start``): ``docker compose
--project-directory <task>/environment -f <harbor's docker-compose-build.yaml> [-f the task's
docker-compose.yaml] build`` with ``CONTEXT_DIR`` set; our overlay adds ``build.network: host``.

Each image built is recorded by digest: the engine's image id (read from BuildKit's own "writing
image sha256:..." line, so a concurrent build of the same task elsewhere cannot swap it under us),
its content digest (what the receipts' ``image_digest`` records) and a tag named for both,
``marathon-task-<task>:<first 12 hex of the id>``. ``marathon run`` gives harbor exactly that image
(``runner.schedule.task_images``): a cached rebuild of an unchanged task is the same image, byte
for byte, so a prebuild ahead of a run is the image the run uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runner.errors import Unavailable, UserError
from runner.secrets import without_secrets

PROXY_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY_ARGS = ("NO_PROXY", "no_proxy")
DEFAULT_NO_PROXY = "localhost,127.0.0.1,::1"
PROJECT_PREFIX = "marathon-prebuild-"


#: the tags of the images built once per task: ``marathon-task-<task>:<id12>`` (``task_tag``)
TASK_IMAGE_PREFIX = "marathon-task-"
_WRITING_IMAGE = re.compile(r"^#\d+ writing image (sha256:[0-9a-f]{64})", re.M)


@dataclass
class BuildResult:
    task: str
    image: str
    ok: bool
    seconds: float
    steps: int = 0
    cached: int = 0
    error: str = ""
    #: the engine's id of the image built (``sha256:<64 hex>``), kept by ``docker save | docker load``
    image_id: str = ""
    #: the image's content digest (``modes.image_digest``): what receipts record
    content_sha256: str = ""
    #: ``marathon-task-<task>:<id12>``: the tag that keeps it and names it
    tag: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def harbor_build_file() -> Path:
    import harbor.environments.docker as hd

    return Path(hd.__file__).parent / "docker-compose-build.yaml"


def project_name(task: str) -> str:
    """Compose project of a prebuild (image ``<project>-main``); sanitised like harbor's names."""
    name = (PROJECT_PREFIX + task).lower()
    return re.sub(r"[^a-z0-9_-]", "-", name)


def task_tag(task: str, image_id: str) -> str:
    """The tag of a task's image built once: ``marathon-task-<task>:<first 12 hex of its id>``,
    the task name sanitised as a repository name. Named for its content: two builds of different
    bytes never share it, and re-tagging it with the same image changes nothing."""
    repo = re.sub(r"[^a-z0-9_.-]", "-", (TASK_IMAGE_PREFIX + task).lower())
    return f"{repo}:{image_id.removeprefix('sha256:')[:12]}"


def redact(url: str) -> str:
    """A proxy URL without its user:password part, for printing."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit((parts.scheme, "***@" + host, parts.path, parts.query, parts.fragment))
    return url


#: where the build's proxy is taken from when no variable is named: the usual proxy variables
ENV_PROXY_NAMES = ("MARATHON_BUILD_PROXY", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


def build_proxy(
    cli_proxy: str | None, proxy_env: str | None, environ: Mapping[str, str]
) -> tuple[str | None, str]:
    """The build's proxy URL and where it came from. Why from the environment: a proxy URL often
    carries ``user:password@``, and a command line is visible to every user and kept in shell
    history. ``--proxy URL`` still works for a URL without credentials; ``--proxy-env NAME`` names
    the variable to read; else the first set of ``ENV_PROXY_NAMES``; else no proxy."""
    from runner.secrets import NAME, url_userinfo

    if cli_proxy:
        if url_userinfo(cli_proxy):
            raise UserError(
                "--proxy: the URL carries credentials (user:password@); put it in HTTP_PROXY/HTTPS_PROXY "
                "or in a variable named by --proxy-env NAME instead of the command line"
            )
        return cli_proxy, "--proxy"
    if proxy_env:
        if not NAME.match(proxy_env):
            raise UserError("--proxy-env: expected the NAME of an environment variable")
        if not environ.get(proxy_env):
            raise UserError(f"--proxy-env {proxy_env}: the variable is not set; export it first")
        return environ[proxy_env], f"${proxy_env}"
    for name in ENV_PROXY_NAMES:
        if environ.get(name):
            return environ[name], f"${name}"
    return None, ""


def docker_config_proxies() -> dict | None:
    """The ``proxies`` section of ~/.docker/config.json, if any (it leaks into running containers)."""
    cfg = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        return json.loads(cfg.read_text()).get("proxies") or None
    except (OSError, ValueError):
        return None


#: what reaches the engine, kept whatever they look like: ``DOCKER_HOST=ssh://user@host`` reads as a
#: credential-bearing URL and ``SSH_AUTH_SOCK`` is named like one (a review: builds went to the local
#: engine); none is a secret a build could bake into an image
ENGINE_VARS = (
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "SSH_AUTH_SOCK",
)


def build_command(
    task_dir: Path, overlay: Path | None, proxy: str | None, no_proxy: str
) -> tuple[list[str], dict[str, str]]:
    """argv and env of one task's build. Build-arg VALUES travel in the env, never in argv."""
    env_dir = (task_dir / "environment").resolve()
    argv = [
        "docker",
        "compose",
        "--project-name",
        project_name(task_dir.name),
        "--project-directory",
        str(env_dir),
    ]
    argv += ["-f", str(harbor_build_file())]
    if (env_dir / "docker-compose.yaml").is_file():
        argv += ["-f", str(env_dir / "docker-compose.yaml")]
    if overlay is not None:
        argv += ["-f", str(overlay)]
    argv += ["build"]
    # no credential of the operator's shell or of a fleet host's worker (the model key among them):
    # a task's compose file could pass any variable to its build (``args: {K: ${OPENAI_API_KEY}}``),
    # and the image goes into every sandbox of the task (and, on a fleet, into the shared tree)
    env = without_secrets(os.environ, keep=ENGINE_VARS)
    env["CONTEXT_DIR"] = str(env_dir)
    for k in PROXY_ARGS + NO_PROXY_ARGS:
        env.pop(k, None)
    if proxy:
        for k in PROXY_ARGS:
            env[k] = proxy
            argv += ["--build-arg", k]
        for k in NO_PROXY_ARGS:
            env[k] = no_proxy
            argv += ["--build-arg", k]
    return argv, env


def prebuild(
    tasks_dir: Path,
    tasks: list[str] | None = None,
    *,
    proxy: str | None = None,
    no_proxy: str = DEFAULT_NO_PROXY,
    build_network: str = "host",
    on_result=None,
    started: Callable[[subprocess.Popen], None] | None = None,
) -> list[BuildResult]:
    """Build each task's image (tasks with a Dockerfile and no prebuilt ``docker_image``)."""
    from runner.schedule.config import chosen_tasks
    from runner.schedule.harbor_run import BUILD_OVERLAY_TEXT, builds_from_dockerfile

    tasks_dir = Path(tasks_dir).resolve()
    names = chosen_tasks(tasks_dir, list(tasks or ()))
    try:
        subprocess.run(["docker", "compose", "version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        raise Unavailable("`docker compose` is not available: install the Compose v2 plugin") from None
    results = []
    with tempfile.TemporaryDirectory(prefix="marathon-prebuild-") as tmp:
        overlay = None
        if build_network == "host":
            overlay = Path(tmp) / "build-network-host.yaml"
            overlay.write_text(BUILD_OVERLAY_TEXT)
        for t in names:
            if not builds_from_dockerfile(tasks_dir / t):
                continue
            r = build_task(tasks_dir / t, overlay, proxy, no_proxy, cwd=Path(tmp), started=started)
            results.append(r)
            if on_result:
                on_result(r)
    return results


def build_task(
    task_dir: Path,
    overlay: Path | None,
    proxy: str | None,
    no_proxy: str,
    *,
    cwd: Path,
    started: Callable[[subprocess.Popen], None] | None = None,
) -> BuildResult:
    """Build one task's image and record it by digest (``BuildResult.image_id``, ``content_sha256``,
    ``tag``). ``started`` is given the build's process (a runner that stops ends it)."""
    from modes.image_digest import image_content

    t = task_dir.name
    argv, env = build_command(task_dir, overlay, proxy, no_proxy)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace")  # fmt: skip
    if started is not None:
        started(proc)
    text, _ = proc.communicate()
    step_ids = set(re.findall(r"^#(\d+) \[main\s+\d+/\d+\]", text, re.M))
    cached_ids = set(re.findall(r"^#(\d+) CACHED", text, re.M)) & step_ids
    r = BuildResult(
        task=t,
        image=project_name(t) + "-main",
        ok=proc.returncode == 0,
        seconds=round(time.monotonic() - t0, 1),
        steps=len(step_ids),
        cached=len(cached_ids),
        error="" if proc.returncode == 0 else "\n".join(text.strip().splitlines()[-8:]),
    )
    if not r.ok:
        return r
    written = _WRITING_IMAGE.findall(text)
    facts = image_content(written[-1] if written else r.image)  # the id BuildKit wrote, else the name's
    if facts is None:
        r.ok, r.error = False, f"the image built ({written[-1] if written else r.image}) is not on the engine"
        return r
    r.image_id, r.content_sha256, r.tag = facts["id"], facts["content_sha256"], task_tag(t, facts["id"])
    tagged = subprocess.run(["docker", "tag", r.image_id, r.tag], capture_output=True, text=True, timeout=60)
    if tagged.returncode != 0:
        r.ok, r.error = False, f"docker tag {r.tag}: {tagged.stderr.strip()[-300:]}"
    return r
