"""A trial container that dies under the agent is infrastructure, never the arm's failure.

Found by the chaos run: ``docker kill`` of a trial container while a LoopX arm installed its
profile ended the trial with ``ArmFailure: LoopX profile install: exit 137`` (exit 255 when the
engine restarted), which the runner scored as the arm's error. The transport now says whether the
container is still up, the arm raises ``EnvironmentLost`` when it is not, and the one classifier
voids it.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from agents.transport import DockerExecTransport, EnvironmentLost, find_main_container
from runner.ops.void import classify_trial

pytestmark = [pytest.mark.docker]
BASE_IMAGE = "marathon-base:bookworm"


@pytest.fixture
def container(docker_engine):
    project = f"envlost-{uuid.uuid4().hex[:8]}"
    cid = subprocess.run(
        ["docker", "run", "-d", "--label", f"com.docker.compose.project={project}",
         "--label", "com.docker.compose.service=main", BASE_IMAGE, "sleep", "infinity"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    yield project, cid
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True)  # ours, by its exact id


def test_transport_says_when_its_container_is_gone(container):
    project, cid = container
    t = DockerExecTransport(find_main_container(project), "/", None)
    assert t.lost(settle_sec=1) is None
    assert t.run(["true"]).returncode == 0
    subprocess.run(["docker", "kill", cid], capture_output=True, check=True)
    assert t.run(["true"]).returncode != 0
    assert t.lost() == f"container {cid[:12]} is exited (exit code 137)"
    with pytest.raises(EnvironmentLost, match="^trial environment lost: no running container"):
        find_main_container(project)
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=True)
    assert t.lost().startswith(f"container {cid[:12]}: ")


def test_the_classifier_voids_a_lost_environment(tmp_path):
    exc = EnvironmentLost("container 0123456789ab is exited (exit code 137); the step failed with "
                          "ArmFailure: LoopX profile: LoopX profile install: exit 137: ")  # fmt: skip
    trial = tmp_path / "calc-partial__abcdefg"
    trial.mkdir()
    result = {
        "agent_execution": {"started_at": "2026-01-01T00:00:00Z"},
        "exception_info": {"exception_type": "EnvironmentLost", "exception_message": str(exc)},
    }
    (trial / "result.json").write_text(json.dumps(result))
    v = classify_trial(trial)
    assert v.kind == "infra", v
    assert v.rule == "environment_lost", v
    # the same failure without the container check was scored against the arm
    result["exception_info"] = {"exception_type": "ArmFailure",
                                "exception_message": "LoopX profile: LoopX profile install: exit 137: "}  # fmt: skip
    (trial / "result.json").write_text(json.dumps(result))
    assert classify_trial(trial).kind == "errored"
