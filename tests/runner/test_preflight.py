"""The preflight: a runner never starts (run --resume, health --fix, the console's start) when it
cannot work, and says, one line per problem, what to do.

Real things throughout: the staged codex cache, a child interpreter importing the arms, the
Docker engine (and a socket path where there is none), the marathon CLI as a process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from runner_support import DEMO_TASKS, events, run_marathon

from runner.errors import UserError
from runner.results.tree import driver_env_path, runner_dir
from runner.schedule import preflight
from runner.schedule.config import read_driver_env, resolve, task_is_multi_step, write_driver_env
from runner.schedule.lock import lock_holder

KEY = "MARATHON_PREFLIGHT_TEST_KEY"


def _cfg(out: Path, **flags):
    base = {"tasks_dir": str(DEMO_TASKS), "arms": ["plain", "goal"], "model": "scripted/solve"}
    return resolve(out, base | flags, environ={})


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (KEY, "OPENAI_API_KEY")}
    return env | extra


@pytest.mark.docker
def test_resume_health_fix_and_console_start_without_the_credential_start_nothing(tmp_path, docker_engine):
    """The field's failure: a run restarted from a shell that lacks the key. Refused before any
    runner exists, with the variable's name and what to do; only one event is written."""
    out = tmp_path / "out"
    write_driver_env(_cfg(out, agent_kwargs=[f"api_key_var={KEY}"]))
    before = driver_env_path(out).read_bytes()
    secret = "sk-preflight-test-value-never-shown"
    assert KEY not in os.environ

    r = run_marathon("run", str(out), "--resume", "--plain", timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert lines[0] == f"marathon: cannot start the runner of {out}: 1 problem(s), nothing was started"
    assert lines[1:] == [  # the gateway (on by default) is what reads the key
        f"  the model key {KEY} (read by the gateway) is not set in this shell: export {KEY} in "
        f"this shell, then `marathon run {out} --resume`"
    ]

    h = run_marathon("health", str(out), "--fix", timeout=300)
    assert h.returncode == 2 and f"then `marathon health {out} --fix`" in h.stderr, h.stderr + h.stdout
    assert "FIXED" not in h.stdout

    from console.actions import START, plan_action

    planned = plan_action(START, out)
    assert not planned.possible and f"export {KEY} in this shell, then start it again (R)" in planned.text

    # nothing started, nothing written but the events
    assert lock_holder(out) is None and driver_env_path(out).read_bytes() == before
    assert sorted(p.name for p in runner_dir(out).iterdir()) == ["events.jsonl"]
    assert sorted(p.name for p in out.iterdir()) == [".driver_env", ".runner"]
    refused = events(out, "preflight_failed")
    assert [e["event"] for e in events(out)] == ["preflight_failed"] * 3
    assert refused[0]["problems"][0]["check"] == "credentials"

    # with the key exported the same start is possible; its value is nowhere in what is shown
    os.environ[KEY] = secret
    try:
        planned = plan_action(START, out)
    finally:
        del os.environ[KEY]
    assert planned.possible, planned.text
    assert secret not in planned.text and secret not in (runner_dir(out) / "events.jsonl").read_text()


@pytest.mark.docker
def test_every_problem_is_one_line_with_what_to_do(tmp_path, docker_engine):
    out = tmp_path / "out"
    flags = dict(
        arms=["plain", "missing=no_such_module:Agent", "typo=agents.base_codex:NoSuchAgent", "nop"],
        model="openai/gpt-5",
        agent_kwargs=["codex_version=0.0.1"],
        agent_env=["EXTRA_TOKEN=${MARATHON_PREFLIGHT_UNSET}"],
    )
    # with the gateway (the default) a real model goes to the provider's default URL, and the key
    # is the gateway's to read
    gw = preflight.check(_cfg(out, **flags), _env(DOCKER_HOST=f"unix://{tmp_path}/no.sock"))
    assert [q.what for q in gw if q.check == "model"] == []
    assert [q.what for q in gw if q.check == "credentials"] == [
        "--ae refers to MARATHON_PREFLIGHT_UNSET, which is not set in this shell",
        "the model key OPENAI_API_KEY (read by the gateway) is not set in this shell",
    ]
    # without it (--no-gateway) the arms need a provider and the key themselves
    cfg = _cfg(out, gateway="0", **flags)
    probs = preflight.check(cfg, _env(DOCKER_HOST=f"unix://{tmp_path}/no.sock"))
    by = {p.check: [q.what for q in probs if q.check == p.check] for p in probs}
    assert all(p.blocking for p in probs)
    assert any("no_such_module:Agent does not import (ModuleNotFoundError" in w for w in by["arms"])
    assert any("NoSuchAgent does not import (AttributeError" in w for w in by["arms"])
    assert any("codex 0.0.1 is not staged" in w for w in by["staging"])
    assert by["model"] == ["model openai/gpt-5 is not the scripted stand-in but no provider is configured"]
    assert by["credentials"] == [
        "--ae refers to MARATHON_PREFLIGHT_UNSET, which is not set in this shell",
        "credential OPENAI_API_KEY (the arms' default api_key_var) is not set in this shell",
    ]
    assert any("no Docker engine" in w for w in by["docker"])
    text = preflight.render(probs, "RETRY", out)
    assert text.count("\n") == len(probs) and text.count(", then RETRY") == len(probs)
    # a newline inside a problem (a path's) does not read as another problem
    odd = [preflight.Problem("tasks", "no tasks dir /tmp/a\nb", "pass --tasks-dir")]
    assert preflight.render(odd, "RETRY", out).splitlines()[1:] == [
        "  no tasks dir /tmp/a\\x0ab: pass --tasks-dir, then RETRY"
    ]

    # the same tree, set up right: nothing blocks; a pool without room is a note (the gate waits)
    good = _cfg(out, agent_kwargs=[f"api_key_var={KEY}"], net_cap=0, net_margin=0)
    probs = preflight.check(good, _env(**{KEY: "x"}))
    assert [(p.check, p.blocking) for p in probs] == [("pool", False)], probs
    assert "will wait at the network gate" in preflight.render(probs)


#: an environment that is not the local Docker engine (so no engine check) and needs no credential
NO_ENGINE_ENV = "tests.envs.remote_like:RemoteLikeEnvironment"


def test_modified_tasks_are_refused_unless_allowed(tmp_path):
    import shutil

    tasks = tmp_path / "tasks"
    shutil.copytree(DEMO_TASKS, tasks)
    with open(tasks / "two-stage" / "instruction.md", "a") as fh:
        fh.write("\nchanged\n")
    cfg = resolve(
        tmp_path / "out", {"tasks_dir": str(tasks), "arms": ["nop"], "env": NO_ENGINE_ENV}, environ={}
    )
    (p,) = preflight.check(cfg, {})
    assert p.blocking and "two-stage" in p.what and "--allow-modified" in p.todo
    allowed = resolve(
        tmp_path / "out", {"tasks_dir": str(tasks), "arms": ["nop"], "env": NO_ENGINE_ENV, "allow_modified": True},
        environ={},
    )  # fmt: skip
    (note,) = preflight.check(allowed, {})
    assert not note.blocking and preflight.modified_tasks(allowed, preflight.check_tasks(allowed)[1]) == [
        "two-stage"
    ]


def test_the_demo_key_is_a_declared_literal_recorded_for_a_restart(tmp_path):
    from marathon.commands.demo import DEMO_KEY_VAR
    from runner.secrets import DECLARED_NON_SECRETS

    placeholder = DECLARED_NON_SECRETS[DEMO_KEY_VAR]
    cfg = _cfg(
        tmp_path / "out",
        agent_kwargs=[f"api_key_var={DEMO_KEY_VAR}"],
        agent_env_literal=[f"{DEMO_KEY_VAR}={placeholder}"],
    )
    write_driver_env(cfg)
    again = resolve(tmp_path / "out", {}, resume=True, environ={})
    assert f"{DEMO_KEY_VAR}={placeholder}" in json.loads(
        read_driver_env(tmp_path / "out")["MARATHON_AGENT_ENV_LITERAL"]
    )
    assert preflight.check_credentials(again, {}) == []  # no shell variable needed to restart it
    # any other literal for a sensitive name is still refused
    with pytest.raises(UserError, match="pure reference"):
        _cfg(tmp_path / "o2", agent_env=[f"{DEMO_KEY_VAR}=sk-real-looking-value"])
    with pytest.raises(UserError, match="placeholder"):
        _cfg(tmp_path / "o3", agent_env_literal=[f"{DEMO_KEY_VAR}=sk-real-looking-value"])


def test_docker_exec_with_the_gateway_is_refused_before_any_attempt(tmp_path):
    """A review found `--ak transport=docker-exec` (the README's debug route) accepted with the
    gateway on: the run started and every attempt failed as its arm's own error (exit 0). It is a
    preflight problem now, with what to do."""
    cfg = _cfg(tmp_path / "out", agent_kwargs=["transport=docker-exec"])
    problems = preflight.check_credentials(cfg, {"OPENAI_API_KEY": "x" * 40})
    (p,) = [p for p in problems if "docker-exec" in p.what]
    assert p.blocking and "--no-gateway" in p.todo
    off = _cfg(tmp_path / "o2", agent_kwargs=["transport=docker-exec"], gateway="0")
    assert not any(
        "docker-exec" in p.what for p in preflight.check_credentials(off, {"OPENAI_API_KEY": "x" * 40})
    )


def test_a_cloud_environment_without_its_credential_starts_and_writes_nothing(tmp_path, monkeypatch):
    """``--env e2b`` without E2B_API_KEY: harbor's own preflight of that environment says what is
    missing, before the tree exists; the same check refuses ``verify-envs --env e2b`` before any
    image is built (the fast tier hides the Docker engine: a build would fail otherwise)."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    out = tmp_path / "out"
    r = run_marathon("run", str(out), "--tasks-dir", str(DEMO_TASKS), "--arms", "oracle", "--env", "e2b",
                     timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "--env e2b: E2B requires E2B_API_KEY to be set" in r.stderr and "nothing was started" in r.stderr
    assert not out.exists()

    v = run_marathon("verify-envs", "--env", "e2b", timeout=300)
    assert v.returncode == 1, v.stdout + v.stderr
    assert v.stdout.splitlines() == [
        "*          environment       FAIL  --env e2b: E2B requires E2B_API_KEY to be set. Please set this "
        "environment variable: set what it names in this shell"
    ]


def test_an_unknown_environment_or_import_path_is_refused_naming_it(tmp_path):
    cfg = _cfg(tmp_path / "a", env="nosuch", arms=["oracle"])
    (p,) = preflight.check_environment(cfg, _env())
    assert p.check == "environment" and p.what == "--env nosuch is not a harbor environment"
    assert "docker, " in p.todo and "daytona" in p.todo and p.todo.endswith("or an import path module:Class")
    (p,) = preflight.check_environment(_cfg(tmp_path / "b", env="nosuchmod:Env", arms=["oracle"]), _env())
    assert "cannot be loaded" in p.what and "nosuchmod" in p.what
    # an import path that loads and has no credential to check passes: the tests' remote-like sandbox
    ok = _cfg(tmp_path / "c", env=NO_ENGINE_ENV, arms=["oracle"])
    assert preflight.check_environment(ok, _env()) == []
    assert (
        preflight.check_environment(_cfg(tmp_path / "d", arms=["oracle"]), _env()) == []
    )  # docker: the engine check


def test_a_multi_step_task_is_refused_by_name_as_harbor_reads_it(tmp_path):
    """harbor runs a task with ``steps`` once per step (its own instruction, verifier and
    ``steps/<name>/`` dir); marathon's budgets, receipts and readers hold one agent run and one
    verifier per trial, so such a task would be scored from files that are not there. Refused
    before anything starts, by name; the other tasks are not."""
    import shutil

    from harbor.models.task.config import TaskConfig

    tasks = tmp_path / "tasks"
    shutil.copytree(DEMO_TASKS, tasks)
    toml = tasks / "two-stage" / "task.toml"
    toml.write_text(toml.read_text() + '\n[[steps]]\nname = "first"\n\n[[steps]]\nname = "second"\n')
    for t in ("two-stage", "calc-partial"):  # marathon's reading is harbor's own
        assert task_is_multi_step(tasks, t) is bool(
            TaskConfig.model_validate_toml((tasks / t / "task.toml").read_text()).steps
        )
    cfg = resolve(
        tmp_path / "out", {"tasks_dir": str(tasks), "arms": ["nop"], "env": NO_ENGINE_ENV}, environ={}
    )
    (p,) = preflight.check(cfg, {})
    assert p.blocking and p.what.startswith("multi-step task(s)") and ": two-stage --" in p.what, p.what
    assert "--tasks" in p.todo
    assert (
        "two-stage" not in preflight.check_tasks(cfg)[1] and "calc-partial" in preflight.check_tasks(cfg)[1]
    )


def test_a_detached_runner_is_registered_before_its_preflight(tmp_path):
    """Found by a probe: ``run --detach`` then ``kill --yes`` at once found no runner (it registers
    itself after its preflight and the lock), said "exited: none", and the run went on. The launcher
    registers the runner it starts before that runner runs a line; here the runner's preflight
    refuses it (the key is not set), and it was registered all the same, a dead entry once it left."""
    import subprocess
    import sys

    import psutil

    from runner.ops.procs import ROLE_RUNNER, Registry

    out = tmp_path / "out"
    write_driver_env(_cfg(out, env=NO_ENGINE_ENV, arms=["plain"], agent_kwargs=[f"api_key_var={KEY}"]))
    (out / ".runner").mkdir(exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "runner.schedule.start", str(out)], env=_env(),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    pid = int(r.stdout.strip())
    proc = psutil.Process(pid)
    (entry,) = [e for e in Registry(out).entries() if e.pid == pid]
    assert entry.role == ROLE_RUNNER and entry.argv[-3:] == [str(out.resolve()), "--resume", "--plain"]
    proc.wait(120)
    assert lock_holder(out) is None and Registry(out).runner_entry() is None  # refused by its own preflight
    assert "nothing was started" in (out / ".runner" / "runner.log").read_text()


def test_a_start_that_loses_the_tree_to_another_says_busy(tmp_path, monkeypatch):
    """Found by a probe: two ``health --fix`` at once start one runner; the other's runner exits,
    and it said "the runner exited at once" (exit 2) with the winner's lines in the log tail. When
    another runner holds the tree by then, it is Busy (exit 4), naming that runner."""
    import subprocess
    from dataclasses import asdict

    from runner.errors import Busy
    from runner.schedule import start
    from runner.schedule.lock import create_exclusive, holder_for, lock_path

    out = tmp_path / "out"
    write_driver_env(_cfg(out, env=NO_ENGINE_ENV, arms=["plain"], agent_kwargs=[f"api_key_var={KEY}"]))
    winner = subprocess.Popen(["sleep", "120"])
    looks: list[object] = []

    def first_free(o):  # the start's first look finds the tree free; the other wins it then
        looks.append(o)
        return None if len(looks) == 1 else lock_holder(o)

    try:
        monkeypatch.setattr(start, "lock_holder", first_free)
        assert create_exclusive(lock_path(out), asdict(holder_for(winner.pid, "winner")))
        with pytest.raises(Busy, match=f"already has a runner: PID {winner.pid}"):
            start.start_detached(out, wait_sec=120)
        assert len(looks) > 1  # it launched a runner, which left
    finally:
        winner.kill()
        winner.wait()


def test_a_resumes_price_adds_to_the_runs_and_wins_for_its_model(tmp_path):
    """Found by a probe: `run --resume --price B=...` replaced the run's recorded prices, so model A's
    attempts read unpriced in every report and at the gateway's caps. The resume's items add to the
    run's and win for their own model."""
    cfg = _cfg(tmp_path / "out", prices=["scripted/a=5,0.5,30", "scripted/b=1,0.1,2"])
    write_driver_env(cfg)
    again = resolve(tmp_path / "out", {"prices": ["scripted/b=50,5,300"]}, resume=True, environ={})
    assert [p.partition("=")[0] for p in again.prices] == ["scripted/a", "scripted/b"]
    assert again.prices[1].startswith("scripted/b=50")
    same = resolve(tmp_path / "out", {}, resume=True, environ={})
    assert same.prices == cfg.prices
