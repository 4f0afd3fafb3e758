"""prebuild: the proxy comes from the environment (never a command line: it carries credentials) and
reaches the build only; running containers have no proxy variables; harbor's own build in a later
trial reuses the prebuilt layers (same /stamp written by a RUN step)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from runner_support import done_jobs, run_marathon

pytestmark = [pytest.mark.docker]
PROXY = "http://user:secretpw@127.0.0.1:9"  # nothing listens there: the Dockerfile needs no network


def _task(root, name):
    t = root / name
    (t / "environment").mkdir(parents=True)
    (t / "solution").mkdir()
    (t / "tests").mkdir()
    (t / "task.toml").write_text(
        f'schema_version = "1.4"\n[task]\nname = "marathon-test/{name}"\n[agent]\ntimeout_sec = 120.0\n'
        "[verifier]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 300.0\n"
    )
    (t / "instruction.md").write_text("Nothing to do.\n")
    (t / "environment" / "Dockerfile").write_text(
        "FROM marathon-base:bookworm\n"
        'RUN date +%s%N > /stamp && echo "[$HTTP_PROXY]" > /proxy-at-build\n'
        "WORKDIR /app\n"
    )
    (t / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho stamp=$(cat /stamp)\nenv | grep -i _proxy || echo no-proxy-env\n"
    )
    (t / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return t


def _docker(*args) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_prebuild_proxy_only_at_build_and_harbor_reuses_layers(docker_engine, out_tree, tmp_path):
    name = f"probe-{uuid.uuid4().hex[:6]}"
    tasks = tmp_path / "tasks"
    _task(tasks, name)
    image = f"marathon-prebuild-{name}-main"
    try:
        pb = run_marathon(
            "prebuild", "--tasks-dir", str(tasks), "--proxy-env", "MARATHON_TEST_PROXY", timeout=600,
            MARATHON_TEST_PROXY=PROXY,
        )  # fmt: skip
        assert pb.returncode == 0, pb.stdout + pb.stderr
        assert "secretpw" not in pb.stdout + pb.stderr and image in pb.stdout
        assert "from $MARATHON_TEST_PROXY" in pb.stdout
        # the proxy was there during the build ...
        assert _docker("run", "--rm", image, "cat", "/proxy-at-build").strip() == f"[{PROXY}]"
        # ... and is nowhere in the image's config or a running container's environment
        cfg_env = json.loads(_docker("image", "inspect", image))[0]["Config"]["Env"] or []
        assert not [e for e in cfg_env if "proxy" in e.lower()]
        assert "proxy" not in _docker("run", "--rm", image, "env").lower()
        stamp = _docker("run", "--rm", image, "cat", "/stamp").strip()

        r = run_marathon("run", str(out_tree), "--tasks-dir", str(tasks), "--arms", "oracle", "--plain")
        assert r.returncode == 0, r.stdout + r.stderr
        (job,) = done_jobs(out_tree)[(name, "oracle")]
        (trial,) = [p for p in job.iterdir() if p.is_dir()]
        said = (trial / "agent" / "oracle.txt").read_text()
        assert f"stamp={stamp}" in said  # harbor's build took the RUN layer from the prebuild's cache
        assert "no-proxy-env" in said  # the trial's running container has no proxy variables
    finally:
        subprocess.run(["docker", "image", "rm", image], capture_output=True)
