"""A canary secret, given to ``marathon run`` only by name, appears nowhere: not in the output tree
(every file, binary too: events, logs, ``.driver_env``, ``registry.json``, receipts, rollouts), not
on the console, not in ``docker inspect`` of any trial container or its exec instances, not in any
process command line on the machine, sampled every 0.5 s while the five arms run (LoopX arms too).

The first test proves the search can fail: it plants the canary in each place and each encoding
and checks that every scanner finds it.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
import uuid
from urllib.parse import quote

import pytest
from leak_search import CmdlineScan, DockerScan, Sampler, needles, scan_tree
from runner_support import DEMO_TASKS, done_jobs, run_marathon, start_marathon, trial_names

from modes.naming import compose_project
from modes.profiles import DEFAULT_ARMS

pytestmark = [pytest.mark.docker]
PROJECT_LABEL = "com.docker.compose.project"
TASK = "calc-partial"


def _canary() -> str:
    """Unique per test, and changed by URL-encoding ('+', '/', ':')."""
    return f"mcanary{secrets.token_hex(8)}+{secrets.token_urlsafe(12)}/{secrets.token_hex(4)}:z"


def test_the_search_finds_a_planted_canary(tmp_path, docker_engine):
    canary = _canary()
    found = needles(canary)
    tree = tmp_path / "tree"
    (tree / ".hidden" / "deep").mkdir(parents=True)
    (tree / "raw.log").write_text(f"a line with {canary} in it\n")
    (tree / ".hidden" / "deep" / "blob.bin").write_bytes(
        b"\x00\xff" + base64.b64encode(b"xy" + canary.encode())
    )
    (tree / "url.bin").write_bytes(b"\x89PNG" + quote(canary, safe="").encode() + b"\x00")
    (tree / "urlsafe.txt").write_bytes(base64.urlsafe_b64encode(b"k" + canary.encode()))
    hits = scan_tree(tree, found)
    assert any("raw.log: raw" in h for h in hits)
    assert any("blob.bin: b64@2" in h for h in hits)
    assert any("url.bin: urlencoded" in h for h in hits)
    assert any("urlsafe.txt: b64url@1" in h for h in hits)

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", canary])
    label_value = f"leakcheck-{uuid.uuid4().hex[:12]}"
    cid = subprocess.run(
        ["docker", "run", "-d", "--network", "none", "--label", f"marathon.test={label_value}",
         "-e", f"PLANTED={canary}", "marathon-base:bookworm", "sleep", "60"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    try:
        cmd_hits = CmdlineScan(found, {})()
        assert any(f"pid {proc.pid} cmdline: raw" == h for h in cmd_hits), cmd_hits
        docker = DockerScan(found, "marathon.test", lambda: {label_value})
        assert any(h.endswith(": raw") for h in docker()) and docker.containers == {cid}
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def staged_real_arms():
    """What the five real arms need: staged codex and LoopX, the demo image with the scripted model."""
    from agents.loopx_staging import stage_loopx
    from agents.scripted_model.image import ensure_demo_image
    from agents.staging import stage_codex

    stage_codex()
    stage_loopx()
    ensure_demo_image()


@pytest.mark.slow
@pytest.mark.timeout(3600)  # five real arms, two at a time, maybe a second pass: 15-30 min at load 50-70
def test_a_canary_key_given_by_name_leaks_nowhere(out_tree, docker_engine, staged_real_arms):
    canary = _canary()
    var = f"MARATHON_CANARY_KEY_{secrets.token_hex(3).upper()}"
    found = needles(canary)
    base = out_tree.parent  # the output tree and its voided sibling
    cmdlines = CmdlineScan(
        found,
        {
            "harbor": b"harbor\x00run",
            "app-server": b"app-server",
            "loopx": b"loopx",
            "heartbeat": b"heartbeat",
        },
    )
    docker = DockerScan(found, PROJECT_LABEL, lambda: {compose_project(t) for t in trial_names(out_tree)})
    registry = out_tree / ".runner" / "registry.json"

    def registry_now() -> list[str]:
        try:
            data = registry.read_bytes()
        except OSError:
            return []
        return [f"registry.json (live): {k}" for k, n in found.items() if n in data]

    samplers = [Sampler(cmdlines), Sampler(docker), Sampler(registry_now)]
    for s in samplers:
        s.start()
    log = base / "runner.console.log"
    try:
        proc = start_marathon(
            "run", str(out_tree), "--tasks-dir", str(DEMO_TASKS), "--tasks", TASK,
            "--arms", ",".join(DEFAULT_ARMS), "--model", "scripted/loopx",
            "--ak", f"api_key_var={var}", "--ae", var,  # by name only: the arm reads it, harbor resolves it
            # two at a time: three LoopX installs at once overran their 300 s budget on a loaded machine;
            # a second pass is the runner's own answer to an errored pair
            "--concurrency", "2", "--max-passes", "2", "--agent-timeout-mult", "3",
            "--plain", log=log, **{var: canary},
        )  # fmt: skip
        rc = proc.wait(timeout=3300)
    finally:
        for s in samplers:
            s.stop()
    console = log.read_text(errors="replace")
    assert rc == 0, console[-3000:]
    status = run_marathon("status", str(out_tree))
    report = run_marathon("report", str(out_tree))
    screen = console.encode() + (status.stdout + status.stderr + report.stdout + report.stderr).encode()
    leaks = (
        scan_tree(base, found)
        + [f"console/status/report: {k}" for k, n in found.items() if n in screen]
        + [h for s in samplers for h in s.hits]
    )
    assert leaks == [], leaks
    assert not [e for s in samplers for e in s.errors], [s.errors for s in samplers]

    # ... and the run really went through the places searched, with every arm
    done = done_jobs(out_tree)
    assert {a for (t, a) in done if t == TASK} == set(DEFAULT_ARMS), console[-3000:]
    assert (out_tree / ".driver_env").is_file() and registry.is_file()
    assert (out_tree / ".runner" / "events.jsonl").is_file()
    receipts = {p.relative_to(out_tree).parts[1] for p in (out_tree / TASK).rglob("agent/goal_receipt.json")}
    assert receipts == set(DEFAULT_ARMS), receipts
    # every arm went through the in-sandbox driver, so the search above covered its credentials
    # file (uploaded 0600, read and deleted by the driver): never in the tree, an exec or a cmdline
    kinds = {
        json.loads(p.read_text())["transport"]["kind"]
        for p in (out_tree / TASK).rglob("agent/goal_receipt.json")
    }
    assert kinds == {"sandbox-driver"}, kinds
    assert samplers[0].samples > 20 and all(cmdlines.seen[k] > 0 for k in cmdlines.watch), cmdlines.seen
    assert len(docker.containers) >= len(DEFAULT_ARMS), docker.containers
    assert docker.execs, "no exec instance was inspected while the arms ran"
    assert var in (out_tree / ".driver_env").read_text()  # the name is recorded, the value is not
