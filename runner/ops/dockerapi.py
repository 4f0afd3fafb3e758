"""Connecting to the Docker engine with docker-py, with one clear line when that fails.

Why: every safety operation (pool accounting, cleanup, the gate) talks to the engine. When the
socket is missing or not ours to use, the user must see which socket and what to do -- not a
urllib3 traceback. The client is injectable (``client=`` / ``base_url=`` / ``DOCKER_HOST``) so tests
can aim at a private dockerd instead of the shared one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from modes import safetext
from runner.errors import Unavailable

if TYPE_CHECKING:
    import docker

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
COMPOSE_PROJECT = "com.docker.compose.project"


def docker_host(base_url: str | None = None) -> str:
    """The engine address that will be used: explicit, else $DOCKER_HOST, else the default socket."""
    return base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        for arg in getattr(exc, "args", ()):
            if isinstance(arg, BaseException):
                yield from _chain(arg)
        exc = exc.__cause__ or exc.__context__


def unavailable(exc: BaseException, host: str) -> Unavailable:
    """Turn a connection failure into the one line the user sees."""
    text = " ".join(str(e) for e in _chain(exc))
    kinds = {type(e) for e in _chain(exc)}
    if PermissionError in kinds or "Permission denied" in text:
        return Unavailable(
            f"permission denied on the Docker socket {host}: add your user to the 'docker' group "
            "and log in again (or run as root), or point DOCKER_HOST at a socket you may use"
        )
    if FileNotFoundError in kinds or "No such file" in text:
        return Unavailable(
            f"no Docker engine at {host}: the socket does not exist; start the engine "
            "(sudo systemctl start docker) or set DOCKER_HOST"
        )
    if ConnectionRefusedError in kinds or "Connection refused" in text:
        return Unavailable(
            f"Docker engine at {host} refused the connection: start it (sudo systemctl start docker) "
            "or set DOCKER_HOST"
        )
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return Unavailable(f"cannot reach the Docker engine at {host}: {first}")


def connect(base_url: str | None = None, *, timeout: int = 60) -> docker.DockerClient:
    """A client that has answered a ping; raises ``Unavailable`` with one clear line otherwise."""
    import docker
    import docker.errors
    import requests

    host = docker_host(base_url)
    try:
        client = docker.DockerClient(base_url=host, timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise unavailable(exc, host) from None
    except ValueError as exc:  # docker-py's URL parsing (``tcp://[``: "Invalid IPv6 URL")
        raise Unavailable(
            f"DOCKER_HOST {safetext.clean(host, None)} is not an engine address: {exc}"
        ) from None
    return client


def engine_error(exc: BaseException, client: docker.DockerClient | None = None) -> Unavailable:
    """A mid-operation connection loss, as the same one-line error."""
    host = getattr(getattr(client, "api", None), "base_url", None) or docker_host()
    return unavailable(exc, str(host).replace("http+docker://localhost", docker_host()))


# --- listing that tolerates other people's objects vanishing mid-listing --------------------
# docker-py's high-level list(greedy=True) / images.list() inspect each object after listing and
# fail on the first one removed in between -- on a shared daemon that happens all the time.


def list_containers(client: docker.DockerClient, filters: dict | None = None) -> list[dict]:
    """Container summaries (Id, Names, Labels, State, Status): one call, no per-object inspect."""
    return client.api.containers(all=True, filters=filters)


def list_images(client: docker.DockerClient, filters: dict | None = None) -> list[dict]:
    """Image summaries (Id, RepoTags, Labels, Size): one call, no per-object inspect."""
    return client.api.images(filters=filters)


def list_networks(client: docker.DockerClient, filters: dict | None = None) -> list[dict]:
    """Networks with their attached containers (an inspect each); one removed meanwhile is skipped."""
    import docker.errors

    out = []
    for summary in client.api.networks(filters=filters):
        try:
            out.append(client.api.inspect_network(summary["Id"]))
        except docker.errors.NotFound:
            continue
    return out


def call_engine(client: docker.DockerClient, fn, *args, **kw):
    """Run one engine call; a lost connection becomes the one-line ``Unavailable``."""
    import docker.errors
    import requests

    try:
        return fn(client, *args, **kw)
    except docker.errors.APIError as exc:
        raise Unavailable(f"Docker engine ({docker_host()}) refused: {exc.explanation or exc}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise engine_error(exc, client) from None
