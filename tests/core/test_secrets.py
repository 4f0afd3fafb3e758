"""Credentials travel by name only: what is refused, what passes, and that nothing echoes the value.

Both sides are tested: credential-shaped values (URL userinfo, known key formats, long random
tokens) are refused or redacted; legitimate values the product itself handles (paths, model names,
digests, UUIDs, URLs without a user part, class names) pass untouched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import string
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from runner import secrets
from runner.errors import UserError
from runner.ops.procs import Registry
from runner.schedule.config import resolve, write_driver_env
from runner.schedule.harbor_run import harbor_argv
from runner.schedule.prebuild import build_proxy

REPO = Path(__file__).resolve().parents[2]
DEMO_TASKS = REPO / "runner" / "demo" / "tasks"
_R = random.Random(20261201)  # seeded: the same tokens every run


def _alnum(n: int) -> str:
    return "".join(_R.choice(string.ascii_letters + string.digits) for _ in range(n))


def _bytes(n: int) -> bytes:
    return bytes(_R.getrandbits(8) for _ in range(n))


# Realistic shapes; none of these is a real credential.
CREDENTIALS = {
    "url userinfo": "https://alice:hunter2pw@proxy.example.com:3128",
    "url token user": "https://x-access-token@github.com/org/repo.git",
    "url userinfo in json": '[{"url": "http://u:p@10.0.0.1/v1"}]',
    "url userinfo, scheme with +": "git+https://deploy:tok3n@git.example/r.git",
    "url userinfo after a word": "proxy=http://u:p@10.0.0.1:3128 (set by hand)",
    "url userinfo after dots": "see ...https://alice:s3cret@host/x",
    "url userinfo after a number": "1.https://alice:s3cret@host/x",
    "url userinfo with a tab": "http://user:" + hashlib.sha256(b"t").hexdigest()[:32] + "\t@127.0.0.1:1/v1",
    "url userinfo with a quote": "provider_base_url=http://user:"
    + hashlib.sha256(b"q").hexdigest()[:32]
    + "'@h/v1",
    "openai": "sk-" + _alnum(48),
    "openai project": "sk-proj-" + _alnum(40) + "_" + _alnum(20),
    "anthropic": "sk-ant-api03-" + _alnum(40),
    "stripe": "sk_live_" + _alnum(24),
    "github classic": "ghp_" + _alnum(36),
    "github oauth": "gho_" + _alnum(36),
    "github fine-grained": "github_pat_11" + _alnum(20) + "_" + _alnum(59),
    "slack": "xoxb-1234567890-1234567890123-" + _alnum(24),
    "aws": "AKIA" + "".join(_R.choice(string.ascii_uppercase + string.digits) for _ in range(16)),
    "google": "AIza" + _alnum(35),
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpM",
    "private key": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "alnum 32": _alnum(32),
    "alnum 40 in a kwarg": "token=" + _alnum(40),
    "base64url 32 bytes": base64.urlsafe_b64encode(_bytes(32)).decode().rstrip("="),
    "base64 32 bytes": base64.b64encode(_bytes(32)).decode(),
    "random after a path": "/tmp/x/" + _alnum(30),
}

LEGIT = [
    "openai/gpt-5.5",
    "scripted/loopx",
    "anthropic/claude-sonnet-4-5-20250929",
    "meta-llama/Llama-3.3-70B-Instruct-Turbo",
    "Qwen/Qwen2.5-Coder-32B-Instruct",
    "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
    "/tmp/pytest-of-root/pytest-12/test_prebuild_proxy_only_at_build_and0/out",
    "/root/.cache/marathon/loopx/2.1.1+node22.23.5",
    "/var/lib/docker/overlay2/" + hashlib.sha256(b"x").hexdigest() + "/merged",
    "sha256:" + hashlib.sha256(b"layer").hexdigest(),
    hashlib.sha1(b"commit").hexdigest(),
    uuid.UUID(int=_R.getrandbits(128), version=4).hex,  # a uuid4 hex id, seeded: collection is stable
    str(uuid.UUID(int=_R.getrandbits(128))),
    "https://api.example.com/v1",
    "http://127.0.0.1:18080/v1",
    "https://proxy.example.com:3128",
    "agents.codex_goal_agent:CodexGoalAgent",
    "slow=tests.runner.runner_agents:SlowVerifierPartialAgentWithLongName",
    "api_key_var=MARATHON_DEMO_MODEL_KEY",
    "goal_timeout_sec=5340",
    "20261129T091551Z-b163a1",
    f"/tmp/runs/run-{uuid.UUID(int=_R.getrandbits(128))}/out",
    f"job_{hashlib.sha256(b'j').hexdigest()}-attempt-2",
    "2026-11-29__08-19-07",
    "calc-partial__AbCdE12",
    "task-sk-learn-regression",
    "disk-usage-reporter",
    "sk-learn-pipeline",
    "HTTPServerErrorResponse404Handler",
    "ubuntu2204jammyjellyfish",
    json.dumps([{"type": "bind", "source": "/root/.cache/marathon/codex/0.171.0", "target": "/opt/codex"}]),
    "${OPENAI_API_KEY}",
    'see "https://example.com" or mail ops@example.org',
    "https://example.com/a@b",
    '{"registry":"https://r.example","image":"base@sha256:' + hashlib.sha256(b"i").hexdigest() + '"}',
    "OPENAI_API_KEY",
]


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_credential_shapes_are_found_and_refused_without_echo(kind):
    value = CREDENTIALS[kind]
    assert secrets.findings(value), kind
    with pytest.raises(UserError) as exc:
        secrets.screen("--ak provider_base_url", value)
    msg = str(exc.value)
    assert msg.startswith("--ak provider_base_url: ") and "\n" not in msg
    for f in secrets.findings(value):
        assert value[f.start : f.end] not in msg


@pytest.mark.parametrize("value", LEGIT)
def test_legitimate_values_pass(value):
    assert secrets.findings(value) == []
    secrets.screen("--x", value)
    assert secrets.redact(value) == value


def test_random_tokens_are_caught_at_a_high_rate_and_hex_never():
    """The entropy rule on 500 seeded tokens of each shape: the numbers the docs state."""
    r = random.Random(5)
    alnum = ["".join(r.choice(string.ascii_letters + string.digits) for _ in range(32)) for _ in range(500)]
    b64url = [base64.urlsafe_b64encode(r.randbytes(32)).decode().rstrip("=") for _ in range(500)]
    hexes = [r.randbytes(32).hex() for _ in range(500)]
    assert sum(bool(secrets.findings(t)) for t in alnum) >= 480
    assert sum(bool(secrets.findings(t)) for t in b64url) >= 480
    assert sum(bool(secrets.findings(t)) for t in hexes) == 0  # digests: the product records them


def test_redact_replaces_only_the_credential():
    key = CREDENTIALS["openai"]
    argv = [
        "marathon",
        "run",
        "out",
        "--ak",
        "provider_base_url=https://bob:pw123@h.example/v1",
        "--ak",
        f"x={key}",
    ]
    red = secrets.redact_argv(argv)
    assert red[:4] == argv[:4]
    assert red[4] == "provider_base_url=https://***@h.example/v1"
    assert red[6] == "x=***"
    assert "pw123" not in json.dumps(red) and key not in json.dumps(red)


# --- --ae and --ae-literal ------------------------------------------------------------------------


def test_ae_accepts_pure_references_only():
    assert secrets.agent_env_ref("OPENAI_API_KEY") == "OPENAI_API_KEY=${OPENAI_API_KEY}"
    assert secrets.agent_env_ref("OPENAI_API_KEY=${MY_KEY}") == "OPENAI_API_KEY=${MY_KEY}"
    assert secrets.ref_name("OPENAI_API_KEY=${MY_KEY}") == "MY_KEY"


@pytest.mark.parametrize(
    "item",
    [
        "FOO=plainvalue",  # a literal, whatever the key is called
        "GOAL_TIMEOUT_SEC=600",  # even a known knob: that is what --ae-literal is for
        "OPENAI_API_KEY=${OPENAI_API_KEY:-sk-defaultvalue123}",  # the default is a literal
        "X=${A}${B}",
        "X=prefix${A}",
        "X=",
    ],
)
def test_ae_refuses_literals_and_defaults_without_echo(item):
    with pytest.raises(UserError) as exc:
        secrets.agent_env_ref(item)
    msg = str(exc.value)
    val = item.partition("=")[2]
    assert msg.startswith("--ae ") and (not val or val not in msg) and "--ae-literal" in msg


def test_ae_bad_key_never_echoes_the_item():
    key = CREDENTIALS["openai"]
    with pytest.raises(UserError) as exc:
        secrets.agent_env_ref(key)
    assert key not in str(exc.value)


def test_ae_literal_allow_list_and_value_shapes():
    assert secrets.agent_env_literal("GOAL_TIMEOUT_SEC=600") == "GOAL_TIMEOUT_SEC=600"
    assert secrets.agent_env_literal("WEN_MODE=heartbeat") == "WEN_MODE=heartbeat"
    refused = [
        "OPENAI_API_KEY=abc",
        "FOO=bar",
        "GOAL_TIMEOUT_SEC=" + CREDENTIALS["openai"],
        "GOAL_TIMEOUT_SEC=-1",
        "WEN_MODE=plain",
        "GOAL_TIMEOUT_SEC",
    ]
    for item in refused:
        with pytest.raises(UserError) as exc:
            secrets.agent_env_literal(item)
        val = item.partition("=")[2]
        assert str(exc.value).startswith("--ae-literal") and (not val or val not in str(exc.value)), item


# --- the configuration: every value screened before anything is written ---------------------------


def _flags(**kw):
    return {"tasks_dir": str(DEMO_TASKS), "arms": ["oracle"], **kw}


def test_resolve_screens_kwargs_model_and_mounts(tmp_path):
    key = CREDENTIALS["github classic"]
    cases = {
        "--ak provider_base_url": _flags(agent_kwargs=["provider_base_url=https://u:pw@api.example/v1"]),
        "--ak": _flags(agent_kwargs=[key]),
        "--model": _flags(model=key),
        "--mounts": _flags(mounts=json.dumps([{"source": "/x", "target": f"/{key}"}])),
    }
    for label, flags in cases.items():
        with pytest.raises(UserError) as exc:
            resolve(tmp_path / "out", flags, environ={})
        assert str(exc.value).startswith(label + ": "), str(exc.value)
        assert key not in str(exc.value) and "pw" not in str(exc.value).split(":", 1)[0]
    assert not (tmp_path / "out").exists()


def test_resolve_screens_env_vars_and_refuses_env_literals(tmp_path):
    with pytest.raises(UserError, match="^--ae FOO=...: "):
        resolve(tmp_path / "out", _flags(), environ={"MARATHON_AGENT_ENV": '["FOO=bar"]'})
    key = CREDENTIALS["slack"]
    with pytest.raises(UserError) as exc:
        resolve(tmp_path / "out", _flags(), environ={"MARATHON_AGENT_KWARGS": json.dumps([f"t={key}"])})
    assert key not in str(exc.value)
    with pytest.raises(UserError) as exc:  # not JSON: the message does not echo the text
        resolve(tmp_path / "out", _flags(), environ={"MARATHON_AGENT_KWARGS": key})
    assert key not in str(exc.value)


def test_resolve_refuses_a_key_given_twice(tmp_path):
    with pytest.raises(UserError, match="given twice.*GOAL_TIMEOUT_SEC"):
        resolve(
            tmp_path / "out",
            _flags(agent_env=["GOAL_TIMEOUT_SEC"], agent_env_literal=["GOAL_TIMEOUT_SEC=5"]),
            environ={},
        )


def test_a_tampered_driver_env_is_refused_on_resume(tmp_path):
    out = tmp_path / "out"
    cfg = resolve(out, _flags(agent_env_literal=["GOAL_TIMEOUT_SEC=600"]), environ={})
    write_driver_env(cfg)
    assert resolve(out, {}, resume=True, environ={}).agent_env_literal == ("GOAL_TIMEOUT_SEC=600",)
    p = out / ".driver_env"
    lines = [ln for ln in p.read_text().splitlines() if not ln.startswith("MARATHON_AGENT_ENV=")]
    p.write_text("\n".join([*lines, """MARATHON_AGENT_ENV='["X=lit"]'"""]) + "\n")
    with pytest.raises(UserError, match="^--ae X=...: "):
        resolve(out, {}, resume=True, environ={})


def test_literals_reach_harbor_as_ae_and_references_stay_references(tmp_path):
    cfg = resolve(
        tmp_path / "out",
        _flags(agent_env=["OPENAI_API_KEY"], agent_env_literal=["GOAL_TIMEOUT_SEC=600"]),
        environ={},
    )
    (arm,) = cfg.arm_specs()
    argv = harbor_argv(cfg, "calc-partial", arm, tmp_path / "j")
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--ae"]
    assert pairs == ["OPENAI_API_KEY=${OPENAI_API_KEY}", "GOAL_TIMEOUT_SEC=600"]


# --- the registry stores argv redacted ----------------------------------------------------------------


def test_registry_stores_argv_redacted(tmp_path):
    key = CREDENTIALS["openai"]
    argv = ["marathon", "run", "--ak", "provider_base_url=https://u:s3cretpw@h/v1", "--ak", f"k={key}"]
    Registry(tmp_path).register(os.getpid(), "runner", argv)
    text = (tmp_path / ".runner" / "registry.json").read_text()
    assert "s3cretpw" not in text and key not in text
    (entry,) = Registry(tmp_path).entries()
    assert entry.argv[:3] == argv[:3] and entry.argv[5] == "k=***"


# --- the commands: exit 2, one line, nothing written, value never shown ------------------------------


def _marathon(*args: str, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", *args],
        cwd=REPO,
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--ak", "provider_base_url=https://u:pw-in-url-77@api.example/v1"],
        ["--ak", "x=" + CREDENTIALS["anthropic"]],
        ["--ae", "FOO=literal-value-77"],
        ["--ae", "OPENAI_API_KEY=${OPENAI_API_KEY:-sk-default-value-77}"],
        ["--ae-literal", "FOO=literal-value-77"],
        ["--model", CREDENTIALS["google"]],
    ],
)
@pytest.mark.parametrize("command", ["run", "canary"])
def test_commands_refuse_before_anything_is_written(tmp_path, command, extra):
    out = tmp_path / "out"
    r = _marathon(command, str(out), "--tasks-dir", str(DEMO_TASKS), "--arms", "oracle", *extra)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("marathon: ") and r.stderr.count("\n") == 1, r.stderr
    value = extra[1].partition("=")[2] or extra[1]
    for f in secrets.findings(value) or [secrets.Finding("", 0, len(value))]:
        assert value[f.start : f.end] not in r.stdout + r.stderr
    assert "77" not in r.stdout + r.stderr
    assert not out.exists()


def test_prebuild_refuses_a_proxy_with_credentials_on_the_command_line(tmp_path):
    r = _marathon("prebuild", "--tasks-dir", str(DEMO_TASKS), "--proxy", "http://u:pw-proxy-77@127.0.0.1:9")
    assert r.returncode == 2 and "pw-proxy-77" not in r.stdout + r.stderr
    assert r.stderr.startswith("marathon: --proxy: ") and r.stderr.count("\n") == 1
    r = _marathon("prebuild", "--tasks-dir", str(DEMO_TASKS), "--proxy-env", "MARATHON_NO_SUCH_PROXY_VAR")
    assert r.returncode == 2 and "not set" in r.stderr


def test_build_proxy_comes_from_the_environment():
    cred = "http://u:pw@10.0.0.1:3128"
    assert build_proxy(None, None, {"HTTPS_PROXY": cred, "HTTP_PROXY": "http://o:9"}) == (
        cred,
        "$HTTPS_PROXY",
    )
    assert build_proxy(None, None, {"http_proxy": cred}) == (cred, "$http_proxy")
    assert build_proxy(None, "CORP_PROXY", {"CORP_PROXY": cred, "HTTPS_PROXY": "x"}) == (cred, "$CORP_PROXY")
    assert build_proxy("http://10.0.0.1:3128", None, {"HTTPS_PROXY": cred}) == (
        "http://10.0.0.1:3128",
        "--proxy",
    )
    assert build_proxy(None, None, {}) == (None, "")
    with pytest.raises(UserError, match="^--proxy: "):
        build_proxy(cred, None, {})
    with pytest.raises(UserError, match="^--proxy-env: "):
        build_proxy(None, "not a name", {})


def test_a_child_that_needs_no_credential_gets_none_of_the_shells():
    """``without_secrets``: what the viewer and the gateway's helpers start with."""
    from runner.secrets import without_secrets

    env = {
        "PATH": "/usr/local/bin:/usr/bin",
        "HOME": "/root",
        "DOCKER_HOST": "unix:///var/run/docker.sock",
        "PYTHONPATH": "/work/main",
        "XDG_RUNTIME_DIR": "/run/user/0",
        "OPENAI_API_KEY": "sk-" + _alnum(48),
        "MARATHON_DEMO_MODEL_KEY": "marathon-demo-key",
        "AZURE_OPENAI_KEY": hashlib.sha256(b"a").hexdigest()[:32],
        "GITHUB_TOKEN": "ghp_" + _alnum(36),
        "DB_PASSWORD": "hunter2",
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "HTTPS_PROXY": "http://u:p@proxy.example:3128",
        "SOMETHING": "sk-ant-api03-" + _alnum(40),
    }
    assert without_secrets(env) == {
        k: env[k] for k in ("PATH", "HOME", "DOCKER_HOST", "PYTHONPATH", "XDG_RUNTIME_DIR")
    }
    assert without_secrets(env, keep=["GITHUB_TOKEN"])["GITHUB_TOKEN"] == env["GITHUB_TOKEN"]


def test_a_task_image_build_inherits_no_credential(monkeypatch):
    """``marathon prebuild`` and a fleet host's image build ran ``docker compose build`` with the
    whole environment: a task's compose file passing ``${OPENAI_API_KEY}`` as a build arg would
    have put the key into the image, and so into every sandbox of the task."""
    from runner.schedule.prebuild import build_command

    key = "sk-" + _alnum(48)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("MY_BUILD_SECRET", "hunter2")
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    task = next(p for p in sorted(DEMO_TASKS.iterdir()) if (p / "environment").is_dir())
    argv, env = build_command(task, None, "http://10.0.0.1:3128", "localhost")
    assert "OPENAI_API_KEY" not in env and "MY_BUILD_SECRET" not in env
    assert key not in " ".join([*argv, *env.values()])
    assert (
        env["DOCKER_HOST"] == "unix:///var/run/docker.sock" and env["HTTPS_PROXY"] == "http://10.0.0.1:3128"
    )
    # an engine over ssh keeps its address and the agent socket it needs (a review: dropped as secrets)
    monkeypatch.setenv("DOCKER_HOST", "ssh://alice@build-host")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1")
    _argv, env = build_command(task, None, None, "localhost")
    assert env["DOCKER_HOST"] == "ssh://alice@build-host" and env["SSH_AUTH_SOCK"] == "/tmp/ssh-x/agent.1"


def test_the_gateways_upstream_url_is_refused_without_being_echoed():
    """A base URL that slipped past the command line's screen (a space in its user part, a hex
    password, a key in its query) was echoed whole into the refusal: the screen and gateway.log."""
    from runner.ops.gateway.server import Gateway, Upstream

    pw = hashlib.sha256(b"pw").hexdigest()
    for url in (
        f"https://us er:{pw}@127.0.0.1:9/v1",
        f"https://api.example/v1?key={pw}",
        f"ftp://{pw}.example/v1",
    ):
        with pytest.raises(ValueError) as got:
            Upstream.parse(url)
        assert pw not in str(got.value) and str(got.value).startswith("model base URL must")
    assert Upstream.parse("https://api.example/v1/").base == "https://api.example/v1"
    key = "sk-" + _alnum(48)
    assert key not in repr(Gateway(Path("/tmp/nowhere"), key, Upstream.parse("https://api.example/v1")))
