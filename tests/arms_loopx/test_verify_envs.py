"""`marathon verify-envs`: passes on a good setup, names the failing check on a broken one."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.docker


def _verify(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", "verify-envs", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_verify_envs_passes_on_good_setup_and_names_the_failing_check(
    docker_engine, staged_loopx, parts_variants
):
    with ThreadPoolExecutor(2) as pool:
        good_f = pool.submit(_verify, "--arms", "goal,codex-cli")
        bad_f = pool.submit(_verify, "--arms", "heartbeat", "--loopx-parts", str(parts_variants["old-node"]))
        good, bad = good_f.result(), bad_f.result()
    assert good.returncode == 0, good.stdout + good.stderr
    lines = good.stdout.splitlines()
    for arm, check in [
        ("goal", "app-server"),
        ("codex-cli", "gate:skills"),
        ("codex-cli", "gate:doctor"),
        ("codex-cli", "gate:skills/list"),
        ("codex-cli", "loopx-profile"),
        ("codex-cli", "app-server"),
    ]:
        assert any(ln.split()[:3] == [arm, check, "ok"] for ln in lines), (arm, check, good.stdout)
    assert not any(ln.split()[0] == "plain" for ln in lines)  # --arms is honoured
    assert bad.returncode == 1, bad.stdout + bad.stderr
    failing = [ln for ln in bad.stdout.splitlines() if ln.split()[2:3] == ["FAIL"]]
    assert len(failing) == 1 and failing[0].split()[:2] == ["heartbeat", "gate:doctor"], bad.stdout
    assert "typescript_effect_runtime_ready" in failing[0]
    assert not any(ln.split()[1] == "app-server" for ln in bad.stdout.splitlines())  # stopped at the gate


def test_verify_envs_rejects_an_unknown_arm():
    r = _verify("--arms", "plain,nosuch")
    assert r.returncode == 2 and "unknown arm(s): nosuch" in r.stderr
