"""``marathon view`` as a real process on loopback over a recorded tree: the token, the read-only
guard in front of harbor's app, the registry, and an end that leaves nothing. No Docker."""

from __future__ import annotations

import json
import os
import shutil
import signal

import psutil
import pytest
from viewer_support import REPO, Viewer, descendants, marathon, port_open, request

from runner.ops import viewer as viewer_ops
from runner.ops.procs import Registry, alive, identity_of
from runner.ops.viewer import ROLE_VIEWER, Guard

NAMES = sorted(
    f"{t}__{a}__attempt-1"
    for t in ("build-gate", "calc-partial", "two-stage", "words-passrate")
    for a in ("nop", "oracle")
)


@pytest.fixture(scope="module")
def served(mini_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    v = Viewer(out)
    yield out, v
    v.stop()


def test_no_token_no_answer(served):
    _, v = served
    for path in ("/", "/api/jobs", "/api/jobs/calc-partial__nop__attempt-1", "/assets/x.js", "/favicon.ico"):
        r = v.get(path)
        assert r.status == 401, (path, r.status)
        assert b"calc-partial" not in r.body
    assert v.get(f"/?token={v.token[:-1]}x").status == 401
    assert (
        v.get("/api/jobs", Cookie="marathon_view_000000000000=" + v.token).status == 401
    )  # another viewer's name
    assert v.get("/api/jobs", Authorization="Bearer nope").status == 401


def test_the_printed_address_sets_a_cookie_and_leaves_the_address_bar(served):
    _, v = served
    r = v.get(f"/?token={v.token}")
    assert r.status == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    name_value = cookie.split(";")[0]
    assert v.get("/jobs/x?token=" + v.token + "&q=1").headers["location"] == "/jobs/x?q=1"
    jobs = v.get("/api/jobs", Cookie=f"other=1; {name_value}")
    assert jobs.status == 200
    assert sorted(j["name"] for j in jobs.json()["items"]) == NAMES
    page = v.get("/", Cookie=name_value)
    assert page.status == 200 and b"<script" in page.body
    csp = page.headers["content-security-policy"]
    assert "connect-src 'self'" in csp and "'sha256-" in csp and "unsafe-eval" not in csp
    assert "sandbox" in v.get("/api/jobs", **v.auth()).headers["content-security-policy"]


def test_harbor_reads_the_run(served):
    _, v = served
    name = "calc-partial__nop__attempt-1"
    job = v.get(f"/api/jobs/{name}", **v.auth())
    assert job.status == 200 and job.json()["n_total_trials"] == 1
    (trial,) = v.get(f"/api/jobs/{name}/trials", **v.auth()).json()["items"]
    assert trial["reward"] == 0.0
    files = v.get(f"/api/jobs/{name}/trials/{trial['name']}/files", **v.auth()).json()
    assert "result.json" in {f["path"] for f in files}
    assert v.get(f"/api/jobs/{name}/trials/{trial['name']}/verifier-output", **v.auth()).status == 200


WRITES = [
    ("POST", "/api/run", b'{"tasks": [{"path": "/tmp"}]}'),
    ("POST", "/api/run/config.yaml", b"{}"),
    ("POST", "/api/run/pick-directory", b""),
    ("DELETE", "/api/run/x", b""),
    ("DELETE", "/api/jobs/calc-partial__nop__attempt-1", b""),
    ("POST", "/api/jobs/calc-partial__nop__attempt-1/summarize", b"{}"),
    ("POST", "/api/jobs/calc-partial__nop__attempt-1/upload", b"{}"),
    ("POST", "/api/jobs/calc-partial__nop__attempt-1/trials/t/stream", b""),
    ("POST", "/api/auth/logout", b""),
    ("PUT", "/api/jobs", b""),
]
NOT_READS = [
    "/api/run/options",
    "/api/run/history",
    "/api/run/models",
    "/api/run/x/status",
    "/api/auth/status",
    "/api/auth/login-url",
    "/auth/callback?code=x",
    "/api/jobs/calc-partial__nop__attempt-1/upload",
    # globs for an id from the agent's bridge-trajectory.json and reads the match whole: ../ left the
    # jobs folder (a review, 2026-12-07)
    "/api/jobs/calc-partial__nop__attempt-1/trials/t/interaction",
    "/api/jobs/calc-partial__nop__attempt-1/trials/t/stream",
    "/docs",
    "/openapi.json",
]


@pytest.mark.parametrize("method,path,body", WRITES)
def test_nothing_that_writes_or_executes_passes(served, method, path, body):
    out, v = served
    before = descendants(v.pid)
    r = request(
        v.port,
        method,
        path,
        {**v.auth(), "Content-Type": "application/json", "Origin": f"http://127.0.0.1:{v.port}"},
        body,
    )
    assert r.status == 403, (method, path, r.status, r.body)
    assert b"read-only" in r.body
    assert descendants(v.pid) == before == []  # no `harbor run` (nor anything) was started
    assert (out / ".marathon" / "view" / "jobs" / "calc-partial__nop__attempt-1").is_dir()


@pytest.mark.parametrize("path", NOT_READS)
def test_only_the_routes_that_read_the_run_pass(served, path):
    _, v = served
    r = v.get(path, **v.auth())
    assert r.status == 403, (path, r.status, r.body)


def test_a_foreign_host_name_is_refused(served):
    _, v = served
    r = request(v.port, "GET", "/api/jobs", {**v.auth(), "Host": "attacker.example:80"})
    assert r.status == 421
    assert request(v.port, "GET", "/api/jobs", {**v.auth(), "Host": f"localhost:{v.port}"}).status == 200


def test_registered_and_shown_to_a_second_start(served):
    out, v = served
    (entry,) = [e for e in Registry(out).entries() if e.role == ROLE_VIEWER]
    assert entry.pid == v.pid and entry.is_live()
    access = out / ".marathon" / "view" / "access.json"
    assert os.stat(access).st_mode & 0o777 == 0o600
    assert os.stat(out / ".marathon" / "view").st_mode & 0o777 == 0o700
    line = viewer_ops.status_line(out)  # what `marathon health` prints (its run is in the Docker test)
    assert line.startswith(f"serving 127.0.0.1:{v.port} (PID {v.pid}") and v.token not in line
    again = marathon("view", str(out), "--port", "0")
    assert again.returncode == 4 and "already running" in again.stderr and v.url in again.stderr


def test_the_guard_decides_without_harbor():
    """The guard's rules alone, on an app with no routes: what a refusal looks like."""

    class NoRoutes:
        class router:  # noqa: N801 - the attribute harbor's FastAPI app has
            routes: list = []

    g = Guard(NoRoutes(), "tok", [])

    def scope(method="GET", path="/", query=b"", **headers):
        headers = {"host": "127.0.0.1:1", **headers}
        hs = [(k.encode(), v.encode()) for k, v in headers.items()]
        return {"type": "http", "method": method, "path": path, "query_string": query, "headers": hs}

    assert g.decide(scope()).status == 401
    assert g.decide(scope(query=b"token=tok")).status == 303
    assert g.decide(scope("POST", query=b"token=tok")).status == 401  # a token in a POST's URL is no session
    assert g.decide(scope("POST", authorization="Bearer tok")).status == 403
    assert g.decide(scope(authorization="Bearer tok")).status == 403  # no harbor route: nothing passes
    assert g.decide(scope(host="[::1]:8", authorization="Bearer tok")).status == 403
    assert g.decide(scope(host="127.0.0.1.nip.io", authorization="Bearer tok")).status == 421
    # the redirect keeps the page, drops the token, and never leaves the site ("//evil" is another host)
    away = g.decide(scope(path="//evil.example/x y", query=b"token=tok&q=1"))
    assert dict(away.headers)[b"location"] == b"/evil.example/x%20y?q=1"


def test_detached_start_show_and_stop(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    first = marathon("view", str(out), "--detach")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("started ") and "ssh -N -L" in first.stdout
    acc = viewer_ops.running(out)
    assert acc is not None and acc.url in first.stdout
    proc = psutil.Process(acc.pid)
    assert proc.ppid() != os.getpid() and proc.pid not in descendants(os.getpid())  # nobody's child
    assert os.getsid(acc.pid) == acc.pid  # its own session: a hang-up of ours cannot reach it
    log = (out / ".marathon" / "view" / "viewer.log").read_text()
    assert acc.token not in log and "open:" in log  # the log has the address, never the token
    shown = marathon("view", str(out), "--detach")
    assert shown.stdout.startswith("already running: ") and acc.url in shown.stdout
    assert request(acc.port, "GET", "/api/jobs", {"Authorization": f"Bearer {acc.token}"}).status == 200
    stopped = marathon("view", str(out), "--stop")
    assert stopped.returncode == 0 and f"PID {acc.pid}" in stopped.stdout
    ident = identity_of(acc.pid)
    assert ident is None or not alive(ident)
    assert viewer_ops.running(out) is None and not port_open(acc.port)
    assert [e for e in Registry(out).entries() if e.role == ROLE_VIEWER] == []
    assert marathon("view", str(out), "--stop").stdout.startswith("no viewer")


def test_a_detached_viewer_holds_no_credential_of_the_shell(mini_tree, tmp_path, monkeypatch):
    """A viewer serves for as long as the operator leaves it: a probe found the run's key in its
    environment. Variables named for a credential, or shaped like one, stay out of it."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    canary = "sk-viewtest-" + os.urandom(16).hex()
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    monkeypatch.setenv("SOME_SETTING", f"http://user:{os.urandom(8).hex()}@127.0.0.1:1/v1")
    monkeypatch.setenv("DEPLOY_TOKEN", "plainword")
    try:
        assert marathon("view", str(out), "--detach").returncode == 0
        acc = viewer_ops.running(out)
        assert acc is not None
        raw = open(f"/proc/{acc.pid}/environ", "rb").read()
        env = dict(line.split(b"=", 1) for line in raw.split(b"\0") if b"=" in line)
        assert canary.encode() not in raw and b"PYTHONPATH" in env
        assert not {b"OPENAI_API_KEY", b"SOME_SETTING", b"DEPLOY_TOKEN"} & set(env)
    finally:
        marathon("view", str(out), "--stop")


def test_bad_input_is_one_line(tmp_path):
    r = marathon("view", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such directory" in r.stderr
    r = marathon("view", str(tmp_path), "--port", "70000")
    assert r.returncode == 2 and "--port" in r.stderr


def test_sigterm_ends_it_and_leaves_nothing(mini_tree, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    v = Viewer(out)
    assert v.get("/api/jobs", **v.auth()).status == 200
    assert descendants(v.pid) == []
    assert v.stop(signal.SIGTERM) == 0, v.output
    assert "viewer stopped" in v.output
    assert not port_open(v.port)
    assert not psutil.pid_exists(v.pid) or psutil.Process(v.pid).status() == psutil.STATUS_ZOMBIE
    assert [e for e in Registry(out).entries() if e.role == ROLE_VIEWER] == []
    view = out / ".marathon" / "view"
    assert not (view / "access.json").exists() and not (view / "jobs").exists()
    assert json.loads((out / ".runner" / "registry.json").read_text())["processes"] == []


def test_a_harbor_whose_viewer_cannot_be_served_fails_clearly(tmp_path):
    """The installed harbor (the lock's) passes the check; a viewer without the routes its pages
    need, or with another factory, is refused with one line naming the version."""
    from fastapi import FastAPI

    from runner.errors import Unavailable

    hv = viewer_ops.load_harbor_viewer()
    assert hv.version == viewer_ops.VERIFIED_HARBOR and len(hv.index_script_hashes()) >= 1
    viewer_ops.build_app(hv, tmp_path)  # the real one: every needed route is there
    bare = viewer_ops.HarborViewer("9.9.9", lambda folder, mode, static_dir: FastAPI(), hv.static_dir)
    with pytest.raises(Unavailable, match=r"harbor 9\.9\.9's viewer lacks /api/jobs, .*cannot be served"):
        viewer_ops.build_app(bare, tmp_path)
    other = viewer_ops.HarborViewer("9.9.9", lambda folder: FastAPI(), hv.static_dir)
    with pytest.raises(Unavailable, match=r"harbor 9\.9\.9's create_app differs from 0\.25\.0's"):
        viewer_ops.build_app(other, tmp_path)


@pytest.mark.parametrize("spoil", ["registry", "access"])
def test_an_access_file_or_registry_others_can_write_decides_no_signal(tmp_path, spoil):
    """What names the viewer to stop (access.json, the registry) decides a signal only when it is
    the runner's user's and writable by nobody else (``modes.safeio.untrusted``): else no viewer is
    taken to run, and ``--stop`` signals nothing."""
    import subprocess
    import sys
    import time

    from runner.ops.procs import boot_id
    from runner.results.tree import view_dir

    out = (tmp_path / "out").resolve()
    out.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ident = identity_of(child.pid)
        assert ident is not None
        Registry(out).register(child.pid, ROLE_VIEWER, [sys.executable, "view"])
        vdir = view_dir(out)
        vdir.mkdir(parents=True, mode=0o700)
        acc = viewer_ops.Access(
            str(out), child.pid, ident.start_ticks, boot_id(), 1, "tok", time.time(), False, "x"
        )
        path = viewer_ops.access_path(out)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(acc.__dict__, fh)
        assert viewer_ops.running(out) == acc
        if spoil == "registry":
            os.chmod(out / ".runner", 0o777)
        else:
            os.chmod(path, 0o666)
        assert viewer_ops.running(out) is None
        said = viewer_ops.stop(out, wait_sec=1.0)
        assert "left alone" in said or "no viewer" in said, said
        assert child.poll() is None  # never signalled
    finally:
        child.kill()  # our own child, by its handle
        child.wait()


def test_a_viewer_building_its_folder_is_registered_and_a_stop_ends_it_before_it_serves(mini_tree, tmp_path):
    """A probe: the viewer registered itself only once its jobs folder was built (which a hostile
    tree stretched to 38 s), so `kill` and `view --stop` found nothing meanwhile and it served
    after the kill. It registers first now, and a stop during the build ends it unserved."""
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    for result in sorted(out.glob("*/*/*/*__*/result.json")):  # files an agent may write, many
        agent = result.parent / "agent"
        agent.mkdir(exist_ok=True)
        for i in range(3000):
            (agent / f"f{i}").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "marathon.cli", "view", str(out)], cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not [e for e in Registry(out).entries() if e.role == ROLE_VIEWER]:
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stdout.read() if proc.stdout else ""
            )
            time.sleep(0.01)
        said = viewer_ops.stop(out, wait_sec=60)  # what `view --stop` does, found by the registry
        assert said == f"stopped the viewer of {out.resolve()} (PID {proc.pid})", said
        printed, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "open:" not in printed and "viewer stopped" in printed, printed
    assert [e for e in Registry(out).entries() if e.role == ROLE_VIEWER] == []
    assert not (out / ".marathon" / "view" / "jobs").exists()


def test_a_registry_the_viewer_cannot_use_is_one_line_before_any_build(mini_tree, tmp_path):
    """A probe: a registry writable by others let `view --detach` start a viewer nothing could stop
    (it was refused as the registry of a running viewer), and ``.runner`` as a file was an
    internal error after the whole build."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    (out / ".runner").mkdir(exist_ok=True)
    os.chmod(out / ".runner", 0o777)
    r = marathon("view", str(out), "--detach")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "could not be stopped" in r.stderr, r.stderr
    assert not (out / ".marathon" / "view" / "jobs").exists()
    shutil.rmtree(out / ".runner")
    (out / ".runner").write_text("")
    r = marathon("view", str(out))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "(Not a directory)" in r.stderr, r.stderr


def test_no_cross_origin_read_is_granted_whatever_the_environment_says(mini_tree, tmp_path, monkeypatch):
    """A probe: harbor's app grants the origins of ``HARBOR_VIEWER_DEV_ORIGINS`` cross-origin reads
    with credentials, so a page there (same site as ``localhost``) could read the whole run. The
    viewer drops the setting, and the guard any ``access-control-*`` header."""
    out = tmp_path / "out"
    shutil.copytree(mini_tree, out, symlinks=True)
    origin = "http://localhost:5173"
    monkeypatch.setenv(viewer_ops.DEV_ORIGINS_VAR, origin)
    v = Viewer(out)
    try:
        for method, extra in (("GET", {}), ("OPTIONS", {"Access-Control-Request-Method": "GET"})):
            r = request(v.port, method, "/api/jobs", {"Origin": origin, **extra, **v.auth()})
            assert not [k for k in r.headers if k.startswith("access-control-")], (
                method,
                r.status,
                r.headers,
            )
    finally:
        v.stop()
