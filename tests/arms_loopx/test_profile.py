"""LoopX profile install, gates and bodies in a real offline container (no model involved)."""

from __future__ import annotations

import asyncio
import difflib
from pathlib import Path

import pytest
from container_exec import docker_exec

from agents.loopx_body import bind_registry, placeholder_tokens, render_body
from agents.loopx_gates import gate_doctor, gate_skills, required_skill_ids
from agents.loopx_profile import ProfileError, install_profile, profile_paths, setup_goal
from modes.profiles import ARMS

LOOPX_ARMS = [a for a, m in ARMS.items() if m.loopx]


def test_profile_layout_is_loopx_own_profile_paths(tmp_path):
    from loopx.capabilities.benchmark_toolkit.native_codex_profile import _profile_paths

    ours = profile_paths(str(tmp_path / "lxprofile"))
    theirs = _profile_paths(tmp_path / "lxprofile", "native-goal-profile")
    assert ours.loopx_keys() == {k: str(v) for k, v in theirs.items()}


def test_placeholder_is_replaced_and_checked_gone():
    token = placeholder_tokens()[0]
    text, replaced = bind_registry(f"run loopx --registry {token} status", "/app/.loopx/registry.json")
    assert replaced == (token,)
    assert token not in text and "/app/.loopx/registry.json" in text


@pytest.mark.docker
def test_offline_install_passes_skills_and_doctor_gates(installed_container):
    cid, run, profile = installed_container
    assert profile.python_version.startswith("3.11")
    assert profile.node_version >= "v22.22.3"
    assert "2.1.1" in profile.loopx_version
    required = asyncio.run(required_skill_ids(run, profile))
    from loopx.capabilities.benchmark_toolkit.native_codex_profile import (
        NATIVE_CODEX_PROFILE_REQUIRED_SKILL_IDS,
    )

    assert required == tuple(NATIVE_CODEX_PROFILE_REQUIRED_SKILL_IDS)  # same pinned loopx on both sides
    assert asyncio.run(gate_skills(run, profile, required)).ok
    for arm in LOOPX_ARMS:
        verdict = asyncio.run(gate_doctor(run, profile, ARMS[arm].doctor_agent_type))
        assert verdict.ok, verdict.detail
        assert verdict.data["skill_delivery"] == "ready"
    # non-editable: no *.egg-info anywhere in the profile
    r = asyncio.run(run(f"find {profile.paths.root} -name '*.egg-info'", None, None, 60))
    assert r.return_code == 0 and r.stdout.strip() == ""


@pytest.mark.docker
def test_bash_env_keeps_profile_path_in_codex_login_shell(installed_container):
    _, run, profile = installed_container
    r = asyncio.run(
        run("bash -lc 'command -v node; command -v loopx; echo $CODEX_HOME'", profile.env, None, 60)
    )
    lines = r.stdout.split()
    assert lines[0].startswith("/opt/marathon-loopx/node/bin/")
    assert lines[1] == profile.paths.cli_bin
    assert lines[2] == profile.paths.codex_home


@pytest.mark.docker
def test_bodies_ssh_goal_and_codex_cli_differ_only_in_the_guard_line(installed_container):
    _, run, profile = installed_container
    goal = asyncio.run(
        setup_goal(run, profile, "/app", "marathon-goal", "marathon-agent", "Finish the task.")
    )
    bodies = {
        arm: asyncio.run(render_body(run, profile, ARMS[arm], goal, turn_instance_id="tick-1"))
        for arm in LOOPX_ARMS
    }
    a, b = bodies["ssh-goal"].text.splitlines(), bodies["codex-cli"].text.splitlines()
    changed = [
        ln
        for ln in difflib.unified_diff(a, b, lineterm="", n=0)
        if ln[:1] in "+-" and ln[:3] not in ("+++", "---")
    ]
    assert len(changed) == 2, changed
    assert changed[0].startswith("-") and "--runtime-profile codex_app_ssh_goal --begin-turn" in changed[0]
    assert changed[1].startswith("+") and changed[1].rstrip("`").endswith("--runtime-profile codex_cli")
    assert (
        "update_goal" in bodies["ssh-goal"].text and "status=blocked" in bodies["ssh-goal"].text
    )  # self-lock
    hb = bodies["heartbeat"]
    assert "LOOPX_TURN=tick-1" in hb.text and "--runtime-profile generic_cli" in hb.guard_command
    assert "/goal" not in hb.text
    for body in bodies.values():
        assert body.chars == len(body.text) and len(body.sha256) == 64
        assert all(t not in body.text for t in placeholder_tokens())
        assert goal.registry in body.guard_command


@pytest.mark.docker
def test_missing_skill_fails_the_skills_gate(container_factory, staged_loopx):
    cid = container_factory(hint="noskill")
    run = docker_exec(cid)
    profile = asyncio.run(install_profile(run, staged_loopx.container_paths()))
    required = asyncio.run(required_skill_ids(run, profile))
    asyncio.run(run(f"rm -rf {profile.paths.skills_dir}/loopx-benchmark", None, "root", 60))
    verdict = asyncio.run(gate_skills(run, profile, required))
    assert not verdict.ok and verdict.data["missing"] == ["loopx-benchmark"]
    doctor = asyncio.run(gate_doctor(run, profile, "codex-app-ssh"))
    assert not doctor.ok and "skill_delivery" in doctor.detail


@pytest.mark.docker
def test_missing_node_fails_the_install_and_doctor_names_the_runtime(
    container_factory, parts_without_node: Path, installed_container
):
    cid = container_factory(parts_without_node, hint="nonode")
    run = docker_exec(cid)
    from agents.loopx_staging import CONTAINER_PARTS_ROOT

    parts = {
        "root": CONTAINER_PARTS_ROOT,
        "loopx_wheel": f"{CONTAINER_PARTS_ROOT}/wheels/loopx-2.1.1-py3-none-any.whl",
        "pip_wheel": f"{CONTAINER_PARTS_ROOT}/wheels/"
        + next(p.name for p in (parts_without_node / "wheels").glob("pip-*.whl")),
        "node_bin_dir": f"{CONTAINER_PARTS_ROOT}/node/bin",
    }
    with pytest.raises(ProfileError, match="node missing"):
        asyncio.run(install_profile(run, parts))
    # and on an installed profile, doctor without node on PATH is a failed gate, not a warning
    _, run2, profile = installed_container
    # stop the already-running Effect runtime first: doctor reuses a live one without asking for node
    stop = asyncio.run(
        run2(f"{profile.paths.cli_bin} doctor --installation-only --restart-runtime", profile.env, None, 120)
    )
    assert stop.return_code == 0, stop.stderr
    env = {k: v for k, v in profile.env.items() if k != "BASH_ENV"}  # BASH_ENV would restore node
    env["PATH"] = f"{profile.paths.bin_dir}:/usr/bin:/bin"
    r = asyncio.run(
        run2(f"{profile.paths.cli_bin} --format json doctor --agent-type codex-app-ssh", env, None, 120)
    )
    import json

    from agents.loopx_gates import doctor_verdict

    verdict = doctor_verdict(json.loads(r.stdout), "codex-app-ssh")
    assert not verdict.ok and "typescript_effect_runtime_ready" in verdict.detail


def test_mounts_for_arm_gives_loopx_arms_the_parts_and_every_arm_codex(staged_loopx):
    from agents.loopx_staging import mounts_for_arm
    from agents.staging import stage_codex

    stage_codex()
    targets = {arm: [m["target"] for m in mounts_for_arm(arm)] for arm in ARMS}
    assert targets["plain"] == targets["goal"] == ["/opt/codex"]
    for arm in LOOPX_ARMS:
        assert targets[arm] == ["/opt/codex", "/opt/marathon-loopx"]
    assert all(m["read_only"] for m in mounts_for_arm("heartbeat"))
    assert mounts_for_arm("oracle") == []
