"""``marathon view``: harbor's own web viewer over the whole run, served to the operator only.

Why in-process, behind our own guard, rather than ``harbor view``: harbor 0.25.0's ``harbor view``
binds a port of 8080-8089 and answers anyone who reaches it, with no authentication. Besides
reading the tree it launches ``harbor run`` as the viewer's user (``POST /api/run``), deletes jobs,
uploads them to Harbor Hub, signs in (writing credentials) and opens an editor tunnel. On a shared
server 127.0.0.1 is reachable by every local user, so spawning it would hand all of that to each
of them. Its app, though, is a FastAPI factory (``harbor.viewer.create_app(folder, mode,
static_dir)``), so marathon builds that app in its own process and puts ``Guard`` (plain ASGI) in
front of it. Harbor's code serves the pages; the guard decides which requests reach it:

- bound to 127.0.0.1 on a free port; the ``Host`` header must name loopback (DNS rebinding);
- every request carries the random token printed once (``?token=`` once per browser, turned into
  an HttpOnly SameSite=Strict cookie and dropped from the address bar; or ``Authorization:
  Bearer``), compared in constant time;
- only GET/HEAD, and only the routes that read the jobs folder (``READ_ROUTES``); the launcher,
  deletes, uploads, sign-in, summaries (which run agents) and the editor tunnel are refused, and so
  is any route a later harbor adds until it is reviewed here;
- a Content-Security-Policy: the page runs only harbor's own scripts (the inline ones by hash) and
  talks only to its own origin; API answers (agent-written files among them) are sandboxed.

The viewer reads only the jobs folder ``runner.ops.viewjobs`` keeps (regular files and dirs,
hostile shapes left out). Its process registers in the tree's PID registry as ``viewer`` (so
``marathon kill`` stops it and ``health`` shows it) and writes how to reach it to
``<out>/.marathon/view/access.json`` (mode 0600, the operator's alone) for the console's key.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import getpass
import hashlib
import hmac
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from modes import safeio, safetext
from runner.errors import Busy, Unavailable, UserError
from runner.ops.procs import Registry, alive, boot_id, identity_from, identity_of, terminate
from runner.results.tree import view_dir

ROLE_VIEWER = "viewer"
ACCESS_FILE = "access.json"
LOCK_FILE = "lock"
LOG_FILE = "viewer.log"
#: the harbor whose viewer these routes were read from (the lock's); another is checked, not trusted
VERIFIED_HARBOR = "0.25.0"
HOST = "127.0.0.1"
#: how long a detached start waits for the viewer to serve (harbor's import alone takes seconds)
START_WAIT_SEC = 60.0

#: harbor 0.25.0's routes that only read the jobs folder (or the installed pages): nothing else passes.
#: Not ``.../interaction``: it globs for an id read from the agent's bridge-trajectory.json, unchecked,
#: and reads the first match whole, so ``../`` and wildcards reached files outside the jobs folder (a
#: symlink to a private file, a FIFO that held a worker, /dev/zero; a review). The codex arms write no
#: such file, and the trial page shows the trajectory without it.
READ_ROUTES = frozenset(
    {
        "/api/health",
        "/api/config",
        "/api/pricing",  # LiteLLM's cost map, read locally (LITELLM_LOCAL_MODEL_COST_MAP)
        "/api/jobs/filters",
        "/api/jobs",
        "/api/jobs/{job_name}",
        "/api/jobs/{job_name}/analysis",
        "/api/compare",
        "/api/jobs/{job_name}/config",
        "/api/jobs/{job_name}/tasks/filters",
        "/api/jobs/{job_name}/tasks",
        "/api/jobs/{job_name}/trials/{trial_name}/navigation",
        "/api/jobs/{job_name}/chart-trials",
        "/api/jobs/{job_name}/trials",
        "/api/jobs/{job_name}/trials/{trial_name}",
        "/api/jobs/{job_name}/trials/{trial_name}/trajectory",
        "/api/jobs/{job_name}/trials/{trial_name}/verifier-output",
        "/api/jobs/{job_name}/trials/{trial_name}/files",
        "/api/jobs/{job_name}/trials/{trial_name}/recording",
        "/api/jobs/{job_name}/trials/{trial_name}/recording/file",
        "/api/jobs/{job_name}/trials/{trial_name}/files/{file_path:path}",
        "/api/jobs/{job_name}/trials/{trial_name}/artifacts",
        "/api/jobs/{job_name}/trials/{trial_name}/agent-logs",
        "/assets",
        "/fonts",
        "/favicon.ico",
        "/favicon.svg",
        "/{path:path}",  # the single-page app's index.html for every page address
    }
)
#: without these the pages cannot show a run: a harbor lacking one cannot be served this way
NEEDED_ROUTES = (
    "/api/jobs",
    "/api/jobs/{job_name}",
    "/api/jobs/{job_name}/trials",
    "/api/jobs/{job_name}/trials/{trial_name}",
    "/api/jobs/{job_name}/trials/{trial_name}/trajectory",
    "/{path:path}",
)
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_INLINE_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.S | re.I)


# ------------------------------------------------------------------------------- harbor's app


@dataclass(frozen=True)
class HarborViewer:
    version: str
    create_app: Callable[..., Any]
    static_dir: Path

    def index_script_hashes(self) -> list[str]:
        """CSP hashes of the inline scripts of harbor's index.html (its own, as installed)."""
        html = (self.static_dir / "index.html").read_text(encoding="utf-8")
        out = []
        for m in _INLINE_SCRIPT.finditer(html):
            if "src=" in m.group("attrs").lower():
                continue
            digest = hashlib.sha256(m.group("body").encode("utf-8")).digest()
            out.append(f"'sha256-{base64.b64encode(digest).decode()}'")
        return out


def load_harbor_viewer() -> HarborViewer:
    """harbor's viewer as installed, or ``Unavailable`` saying why it cannot be served this way."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the cost map
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("harbor")
    except PackageNotFoundError:
        raise Unavailable("harbor is not installed: `uv sync --frozen` installs the locked harbor") from None
    try:
        from harbor.viewer import create_app
    except ImportError as exc:
        raise Unavailable(
            f"harbor {ver} has no web viewer to serve ({exc}); marathon view needs harbor {VERIFIED_HARBOR}"
        ) from None
    try:
        from harbor.cli.view import STATIC_DIR
    except ImportError:
        STATIC_DIR = Path(sys.modules["harbor.viewer"].__file__).parent / "static"  # noqa: N806
    static = Path(STATIC_DIR)
    if not (static / "index.html").is_file():
        raise Unavailable(
            f"harbor {ver}'s viewer pages are not built ({static}/index.html is missing); "
            f"marathon view serves the pages harbor {VERIFIED_HARBOR} ships, it never builds them"
        )
    return HarborViewer(ver, create_app, static)


#: harbor's development setting: origins its app grants cross-origin reads with credentials
DEV_ORIGINS_VAR = "HARBOR_VIEWER_DEV_ORIGINS"


def build_app(hv: HarborViewer, folder: Path) -> Any:
    """harbor's app over ``folder``; ``Unavailable`` when it lacks a route its pages need."""
    os.environ.pop(DEV_ORIGINS_VAR, None)  # harbor would let pages of those origins read the run
    try:
        app = hv.create_app(folder, mode="jobs", static_dir=hv.static_dir)
    except TypeError as exc:
        raise Unavailable(
            f"harbor {hv.version}'s create_app differs from {VERIFIED_HARBOR}'s ({exc})"
        ) from None
    have = {getattr(r, "path", None) for r in getattr(app, "routes", ())}
    missing = [r for r in NEEDED_ROUTES if r not in have]
    if missing:
        raise Unavailable(
            f"harbor {hv.version}'s viewer lacks {', '.join(missing)}: it cannot be served by marathon view "
            f"(checked against harbor {VERIFIED_HARBOR}; install the locked harbor with `uv sync --frozen`)"
        )
    return app


# ----------------------------------------------------------------------------------- the guard


def _header(scope: dict, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _cookie(header: str | None, name: str) -> str | None:
    """One cookie's value (``http.cookies`` gives up on a whole header for one odd cookie of
    another localhost app)."""
    for part in (header or "").split(";"):
        k, sep, v = part.strip().partition("=")
        if sep and k == name:
            return v
    return None


def _host_is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else ""
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.lower() in _LOOPBACK


@dataclass(frozen=True)
class Verdict:
    """The guard's own answer to a request harbor never sees: a refusal, or the token's redirect."""

    status: int
    detail: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


class Guard:
    """ASGI middleware in front of harbor's app: loopback Host, the token, read-only routes, CSP."""

    def __init__(self, app: Any, token: str, script_hashes: list[str]) -> None:
        self.app = app
        self._token = token.encode()
        #: per server: two viewers on one host (ports differ, cookies do not) never mix
        self.cookie = "marathon_view_" + hashlib.sha256(self._token).hexdigest()[:12]
        scripts = " ".join(["'self'", *script_hashes])
        self.page_csp = (
            f"default-src 'self'; script-src {scripts}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; media-src 'self' blob:; font-src 'self' data:; "
            "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        self.api_csp = (
            "default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'; sandbox"
        )

    @property
    def token(self) -> str:
        return self._token.decode()

    def _ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self._token)

    def decide(self, scope: dict) -> Verdict | None:
        """None: pass the request to harbor; else what to answer instead."""
        if not _host_is_loopback(_header(scope, b"host")):
            return Verdict(421, "refused: the Host header must name 127.0.0.1 or localhost")
        method = scope.get("method", "GET")
        query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"), keep_blank_values=True)
        given = next((v for k, v in query if k == "token"), None)
        auth = _header(scope, b"authorization") or ""
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        cookie = _cookie(_header(scope, b"cookie"), self.cookie)
        if given is not None and method in ("GET", "HEAD"):
            if not self._ok(given):
                return Verdict(401, "refused: wrong token (use the address `marathon view` printed)")
            # the same page without the token; never "//host" (a redirect to another site)
            rest = [(k, v) for k, v in query if k != "token"]
            path = "/" + quote(scope.get("path", "/").lstrip("/"), safe="/:@!$&'()*+,;=-._~")
            location = path + (f"?{urlencode(rest)}" if rest else "")
            set_cookie = f"{self.cookie}={given}; Path=/; HttpOnly; SameSite=Strict"
            return Verdict(
                303, "see other", ((b"set-cookie", set_cookie.encode()), (b"location", location.encode()))
            )
        if not (self._ok(cookie) or self._ok(bearer)):
            return Verdict(
                401, "refused: this viewer needs its token (open the address `marathon view` printed)"
            )
        if method not in ("GET", "HEAD"):
            return Verdict(403, f"refused: marathon view is read-only ({method} is never passed to harbor)")
        template = self._route_of(scope)
        if template not in READ_ROUTES:
            return Verdict(
                403,
                f"refused: marathon view serves only what reads the run ({template or scope.get('path')})",
            )
        return None

    def _route_of(self, scope: dict) -> str | None:
        from starlette.routing import Match

        for route in self.app.router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return getattr(route, "path", None)
        return None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        verdict = self.decide(scope)
        api = scope.get("path", "").startswith("/api/")
        extra = [
            (b"content-security-policy", (self.api_csp if api else self.page_csp).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"x-frame-options", b"DENY"),
            (b"cache-control", b"no-store"),
        ]
        if verdict is not None:
            headers = [(b"content-type", b"application/json"), *extra, *verdict.headers]
            body = safetext.dumps({"detail": verdict.detail}).encode()
            await send({"type": "http.response.start", "status": verdict.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return

        async def guarded_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                drop = {k for k, _ in extra}
                # and no cross-origin grant: harbor's app allows origins named in its environment
                # (HARBOR_VIEWER_DEV_ORIGINS, with credentials: a page there could read the run)
                headers = [
                    (k, v)
                    for k, v in message.get("headers", ())
                    if k.lower() not in drop and not k.lower().startswith(b"access-control-")
                ]
                message = {**message, "headers": headers + extra}
            await send(message)

        await self.app(scope, receive, guarded_send)


# ------------------------------------------------------------------------------- how to reach


@dataclass(frozen=True)
class Access:
    """How to reach one running viewer; ``<out>/.marathon/view/access.json`` (0600)."""

    out: str
    pid: int
    start_ticks: int
    boot_id: str
    port: int
    token: str
    started: float
    all_attempts: bool
    harbor: str

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def ssh_line(self, user: str | None = None, host: str | None = None) -> str:
        user = user or getpass.getuser()
        host = host or socket.gethostname()
        return f"ssh -N -L {self.port}:{HOST}:{self.port} {user}@{host}"

    def render(self, token: bool = True) -> str:
        what = (
            "every attempt, voided ones named so"
            if self.all_attempts
            else "the attempt each pair's cell shows"
        )
        open_at = (
            self.url if token else f"http://{HOST}:{self.port}/?token=<in {access_path(Path(self.out))}>"
        )
        since = time.strftime("%H:%M:%S", time.localtime(self.started))
        return "\n".join(
            [
                f"harbor {self.harbor}'s viewer of {self.out} ({what}), PID {self.pid}, since {since}",
                f"  open:        {open_at}",
                f"  from a laptop: {self.ssh_line()}",
                "                 then open the same address there (the token is asked once per browser)",
                f"  stop:        Ctrl+C where it runs, or `marathon view {self.out} --stop`",
            ]
        )


def access_path(out: Path) -> Path:
    return view_dir(Path(out)) / ACCESS_FILE


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


#: the types of access.json's fields (it decides a signal: ``stop``)
_ACCESS_TYPES = {
    "out": str, "pid": int, "start_ticks": int, "boot_id": str, "port": int, "token": str,
    "started": (int, float), "all_attempts": bool, "harbor": str,
}  # fmt: skip


def _read_access(out: Path) -> Access | None:
    """The viewer's access file, read by the rules of the runner's own files (``modes.safeio``:
    a regular file, no symlink at the name, capped, the runner's user's and writable by nobody
    else, its fields of their types); None for anything else."""
    path = access_path(out)
    if safeio.untrusted(path) or safeio.untrusted(path.parent):
        return None
    d = safeio.load_own_json(path, cap=64 << 10, depth=2)
    if not isinstance(d, dict) or set(d) != set(_ACCESS_TYPES):
        return None
    for k, types in _ACCESS_TYPES.items():
        v = d[k]
        if not isinstance(v, types) or (types is int and isinstance(v, bool)):
            return None
    return Access(**d)


def running(out: Path) -> Access | None:
    """The tree's live viewer (registered as ``viewer``, its identity verified), or None."""
    out = Path(out).resolve()
    acc = _read_access(out)
    if acc is None:
        return None
    ident = identity_from(asdict(acc))
    if not alive(ident):
        return None
    registry = Registry(out)
    if registry.untrusted():  # what anyone else could write never names a process to signal
        return None
    for e in registry.entries():
        if e.role == ROLE_VIEWER and e.node is None and e.ident == ident:
            return acc
    return None


def status_line(out: Path) -> str | None:
    """For ``health``: where the tree's viewer serves, without its token; None when none runs."""
    acc = running(out)
    if acc is None:
        return None
    return f"serving {HOST}:{acc.port} (PID {acc.pid}, harbor {acc.harbor}; `marathon view {acc.out}` shows how to reach it)"


# ------------------------------------------------------------------------------------ serving


def _prepare_dir(out: Path) -> Path:
    d = view_dir(out)
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
        st = os.lstat(d)
    except OSError as exc:
        raise UserError(
            f"cannot make {d} ({exc.strerror or exc}): marathon view keeps its jobs folder there"
        ) from None
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.getuid():
        raise UserError(f"{d}: not a directory of yours; remove it and try again")
    os.chmod(d, 0o700)  # the jobs folder and the access file are the operator's alone
    return d


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise UserError(
            f"cannot listen on {HOST}:{port} ({exc.strerror or exc}); --port 0 picks a free one"
        ) from None
    sock.set_inheritable(False)
    sock.listen(128)  # from the moment the address is printed, a connection waits for the server
    return sock


class _Stop:
    """SIGINT, SIGTERM and SIGHUP end the viewer: before the server runs (the folder may take a
    while on a big tree) and while it does (a second Ctrl+C forces it)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.server: Any = None
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def _on(self, _sig: int, _frame: Any) -> None:
        # a request cancelled by the shutdown is no error worth a traceback on the operator's screen
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
        if self.server is not None:
            self.server.force_exit = self.server.should_exit
            self.server.should_exit = True
        self.event.set()

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _registry_usable(out: Path) -> None:
    """The viewer registers itself so `kill`, `view --stop` and `health` see it: a registry they
    would refuse (writable by others) or one that cannot be written (``.runner`` a file) is said
    now, in one line, never after the jobs folder is built with a viewer left that nothing can stop."""
    why = Registry(out).untrusted()
    if why:
        raise UserError(
            f"registry {safetext.clean(why, None)}: a viewer registered there could not be stopped"
        )


def serve(
    out: Path,
    *,
    all_attempts: bool = False,
    port: int = 0,
    say: Callable[[str], None] = print,
    show_token: bool = True,
    poll: bool = False,
) -> int:
    """Serve harbor's viewer over ``out`` until SIGINT, SIGTERM or SIGHUP; leave nothing behind.

    ``show_token``: print the address with its token (a detached viewer's log gets it without;
    its starter reads ``access.json``). ``poll``: follow the tree by polling (NFS)."""
    out = Path(out).resolve()
    _registry_usable(out)
    stop = _Stop()
    try:
        hv = load_harbor_viewer()
        vdir = _prepare_dir(out)
        with open(vdir / LOCK_FILE, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                acc = running(out)
                where = f"\n{acc.render(token=show_token)}" if acc else ""
                raise Busy(f"a viewer of {out} is already running{where}") from None
            _serve_locked(out, hv, all_attempts, port, say, show_token, poll, stop)
        say("viewer stopped")
        return 0
    finally:
        stop.restore()


def _serve_locked(
    out: Path,
    hv: HarborViewer,
    all_attempts: bool,
    port: int,
    say: Callable[[str], None],
    show_token: bool,
    poll: bool,
    stop: _Stop,
) -> None:
    """``serve`` holding the tree's viewer lock: every step is undone on the way out."""
    import uvicorn

    from runner.ops.viewjobs import LiveJobsFolder

    if hv.version != VERIFIED_HARBOR:
        say(f"note: harbor {hv.version} is installed; marathon view was checked against {VERIFIED_HARBOR}")
    live = LiveJobsFolder(out, all_attempts)
    keeper: threading.Thread | None = None
    registry = Registry(out)
    registered = False
    try:
        # registered first: `kill` sees the viewer while it builds its folder (which a big or hostile
        # tree can make last a minute), and a stop meanwhile ends it before it serves
        try:
            registry.register(os.getpid(), ROLE_VIEWER, list(sys.argv))
        except OSError as exc:
            raise UserError(
                f"cannot register the viewer in {registry.path} ({exc.strerror or exc})"
            ) from None
        registered = True
        rep = live.sync_all(stop.event)
        if stop.event.is_set():
            return
        app = Guard(build_app(hv, live.root), secrets.token_urlsafe(32), hv.index_script_hashes())
        with _bind(port) as sock:
            me = identity_of(os.getpid())
            assert me is not None
            acc = Access(
                str(out), me.pid, me.start_ticks, boot_id(), sock.getsockname()[1], app.token, time.time(),
                all_attempts, hv.version,
            )  # fmt: skip
            _write_private(access_path(out), safetext.dumps(asdict(acc)))
            left = f", {len(rep.left_out) + rep.left_out_more:,} file(s) left out (see MARATHON-VIEW.txt in their trials)"
            say(f"{rep.entries} job(s) in {live.root}{left if rep.left_out else ''}")
            say(acc.render(token=show_token))
            if stop.event.is_set():
                return
            keeper = threading.Thread(
                target=live.follow,
                args=(stop.event,),
                kwargs={"say": say, "poll": poll},
                name="jobs folder",
                daemon=True,
            )
            keeper.start()

            class _Server(uvicorn.Server):
                @contextlib.contextmanager
                def capture_signals(self):  # ours (_Stop): uvicorn's would re-raise them after the cleanup
                    yield

            config = uvicorn.Config(
                app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=3,
                server_header=False,
            )  # fmt: skip
            stop.server = _Server(config)
            if not stop.event.is_set():
                stop.server.run(sockets=[sock])
    finally:
        stop.event.set()
        if keeper is not None:
            keeper.join(10)
        if registered:
            with contextlib.suppress(Exception):
                registry.unregister(os.getpid())
        mine = _read_access(out)
        if mine is not None and mine.pid == os.getpid():
            access_path(out).unlink(missing_ok=True)
        live.folder.remove()


# -------------------------------------------------------------------- start, show, stop


def _project_env() -> dict[str, str]:
    """The detached viewer's environment: this one's, without a credential (it needs none, and it
    serves for as long as the operator leaves it; a probe found the run's key in it)."""
    from runner.secrets import without_secrets

    root = str(Path(__file__).resolve().parents[2])  # the checkout the detached viewer imports
    paths = [root, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return without_secrets(os.environ) | {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def viewer_argv(out: Path, all_attempts: bool = False, port: int = 0, poll: bool = False) -> list[str]:
    """What a detached viewer runs (its log gets the address without the token)."""
    argv = [sys.executable, "-m", "marathon.cli", "view", str(Path(out).resolve()), "--serve-detached"]
    return argv + ["--port", str(port)] * bool(port) + ["--all-attempts"] * all_attempts + ["--poll"] * poll


def start_detached(
    out: Path,
    *,
    all_attempts: bool = False,
    port: int = 0,
    poll: bool = False,
    wait_sec: float = START_WAIT_SEC,
) -> Access:
    """Start the tree's viewer in a session of its own, never the caller's child (a short-lived
    launcher starts it and exits, as ``runner.schedule.start`` does for the runner); return how
    to reach it once it serves. Its output goes to ``<out>/.marathon/view/viewer.log`` (no token)."""
    out = Path(out).resolve()
    _prepare_dir(out)
    launched = subprocess.run(
        [sys.executable, "-m", "runner.ops.viewer", *viewer_argv(out, all_attempts, port, poll)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_project_env(), timeout=60,
    )  # fmt: skip
    word = (launched.stdout or "").strip()
    if launched.returncode != 0 or not word.isdigit():
        tail = " | ".join(((launched.stdout or "") + (launched.stderr or "")).strip().splitlines()[-3:])
        raise UserError(f"the viewer did not start (launcher exit {launched.returncode}): {tail}")
    ident = identity_of(int(word))
    log = view_dir(out) / LOG_FILE
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        acc = running(out)
        if acc is not None and ident is not None and acc.pid == ident.pid:
            return acc
        if not alive(ident):
            try:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            except OSError:
                tail = []
            raise UserError(f"the viewer exited at once: {' | '.join(tail) or 'no output'}")
        time.sleep(0.1)
    # still building its folder (a big tree, a slow disk): left to finish, it is registered, so
    # `view --stop`, `kill` and `health` see it (ended here, a big tree's viewer could never start)
    raise UserError(
        f"the viewer (PID {word}) does not serve yet after {wait_sec:.0f} s: it is still building its "
        f"jobs folder; `marathon view {out}` shows it once it serves, `--stop` ends it; see {log}"
    )


def start_or_show(out: Path, **how: Any) -> tuple[Access, bool]:
    """The tree's viewer: the running one, or one started now (``start_detached(out, **how)``).
    Returns (how to reach it, started now)."""
    acc = running(out)
    if acc is not None:
        return acc, False
    return start_detached(out, **how), True


def stop(out: Path, wait_sec: float = 10.0) -> str:
    """SIGTERM to the tree's viewer (by its registered identity); what happened, one line."""
    out = Path(out).resolve()
    why = Registry(out).untrusted()
    if why:
        return f"left alone: registry {safetext.clean(why, None)}: nothing is signalled from it"
    acc = running(out)
    ident = identity_from(asdict(acc)) if acc is not None else None
    if acc is None and not os.path.lexists(access_path(out)):
        # one still building its folder: registered, not yet serving (its access file comes after)
        ident = next(
            (
                e.ident
                for e in Registry(out).entries()
                if e.role == ROLE_VIEWER and e.node is None and alive(e.ident)
            ),
            None,
        )
    if ident is None:
        return f"no viewer of {out} is running"
    return terminate(ident, f"viewer of {out}", wait_sec)


def _launch(argv: list[str]) -> int:
    """The launcher's one job: start the viewer (``viewer_argv``) in its own session, print its PID, exit."""
    out = Path(argv[4])
    with open(view_dir(out) / LOG_FILE, "ab") as fh:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=_project_env(),
        )  # fmt: skip
    print(proc.pid, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1:]))
