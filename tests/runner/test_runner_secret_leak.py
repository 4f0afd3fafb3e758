"""A canary secret, given to ``marathon run`` only by name, appears nowhere: not in the output tree
(every file, binary too: events, logs, ``.driver_env``, ``registry.json``, receipts, rollouts), not
on the console, not in ``docker inspect`` of any trial container or its exec instances, not in any
process command line on the machine, sampled every 0.5 s while the five arms run (LoopX arms too):
the shared five-arm run of tests/runner/five_arm_run.py.

The first test proves the search can fail: it plants the canary in each place and each encoding
and checks that every scanner finds it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from urllib.parse import quote

import pytest
from five_arm_run import TASK
from five_arm_run import canary as new_canary
from leak_search import CmdlineScan, DockerScan, needles, scan_tree
from runner_support import done_jobs, run_marathon

from modes.profiles import DEFAULT_ARMS

pytestmark = [pytest.mark.docker]


def test_the_search_finds_a_planted_canary(tmp_path, docker_engine):
    canary = new_canary()
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


@pytest.mark.slow
def test_a_canary_key_given_by_name_leaks_nowhere(five_arm_run):
    """The shared five-arm run (tests/runner/five_arm_run.py) got the canary by name only; the
    samplers ran while its arms did."""
    run = five_arm_run
    out_tree, found, cmdlines, docker = run.out, run.found, run.cmdlines, run.docker
    registry = out_tree / ".runner" / "registry.json"
    assert run.rc == 0, run.console[-3000:]
    status = run_marathon("status", str(out_tree))
    report = run_marathon("report", str(out_tree))
    screen = run.console.encode() + (status.stdout + status.stderr + report.stdout + report.stderr).encode()
    leaks = (
        scan_tree(out_tree.parent, found)  # the output tree, its voided sibling, the runner's console log
        + [f"console/status/report: {k}" for k, n in found.items() if n in screen]
        + [h for s in run.samplers for h in s.hits]
    )
    assert leaks == [], leaks
    assert not [e for s in run.samplers for e in s.errors], [s.errors for s in run.samplers]

    # ... and the run really went through the places searched, with every arm
    done = done_jobs(out_tree)
    assert {a for (t, a) in done if t == TASK} == set(DEFAULT_ARMS), run.console[-3000:]
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
    assert run.samplers[0].samples > 20 and all(cmdlines.seen[k] > 0 for k in cmdlines.watch), cmdlines.seen
    assert len(docker.containers) >= len(DEFAULT_ARMS), docker.containers
    assert docker.execs, "no exec instance was inspected while the arms ran"
    assert run.var in (out_tree / ".driver_env").read_text()  # the name is recorded, the value is not
