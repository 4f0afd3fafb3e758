"""The in-sandbox driver's package: stdlib only (harbor is not installed in a sandbox), and the
host's handling of what comes back from it (hostile input: the agent can write into /logs/agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agents.sandbox_driver import read_credentials
from agents.sandbox_host import (
    ANSWER_MARK,
    LONG_POLL_SEC,
    SILENT_SEC,
    Watch,
    bundle_dir,
    import_evidence,
    status_command,
)


def test_the_uploaded_bundle_imports_with_the_standard_library_alone(tmp_path):
    root = bundle_dir(tmp_path / "bundle")
    code = (
        "import sys, agents.sandbox_driver, agents.drive, agents.conversation; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'harbor', 'tomli_w', 'loopx', 'psutil', 'pydantic'}); "
        "print(bad)"
    )
    # -S: no site-packages, -s: no user site; cwd is the bundle, as in the sandbox
    out = subprocess.run([sys.executable, "-S", "-s", "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_credentials_file_is_deleted_when_read(tmp_path):
    path = tmp_path / "cred.json"
    path.write_text(json.dumps({"OPENAI_API_KEY": "sk-x"}))
    assert read_credentials(str(path)) == {"OPENAI_API_KEY": "sk-x"}
    assert not path.exists()


def test_downloaded_evidence_keeps_regular_files_only(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "agent"
    (src / "sessions").mkdir(parents=True)
    dest.mkdir()
    (src / "sessions" / "rollout-1.jsonl").write_text("{}\n")
    (src / "appserver.stdout.jsonl").write_text("{}\n")
    os.symlink("/etc/passwd", src / "link.txt")
    os.mkfifo(src / "fifo")
    (src / "goal_receipt.json").write_text('{"forged": true}')  # the arm writes its own on the host
    (src / "driver-status.json").write_text('{"forged": true}')
    (dest / "driver-status.json").write_text('{"seq": 9}')  # the host's status mirror
    copied = import_evidence(src, dest)
    assert sorted(copied) == ["appserver.stdout.jsonl", "sessions/rollout-1.jsonl"]
    assert not (dest / "link.txt").exists() and not (dest / "fifo").exists()
    assert not (dest / "goal_receipt.json").exists()
    assert (dest / "driver-status.json").read_text() == '{"seq": 9}'  # never replaced by the sandbox's


def _status_answer(cmd: str, timeout: float) -> str:
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout).stdout
    assert out.rstrip().endswith(ANSWER_MARK), out
    return out.split(ANSWER_MARK)[0].strip()


def test_the_status_poll_waits_in_the_sandbox_until_the_driver_is_done(tmp_path):
    """The long poll (one host exec per ``LONG_POLL_SEC``, not per 2 s) ends as soon as the status
    says done, with that status; with nothing to wait for it answers at once."""
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"seq": 1, "done": False}) + "\n")
    assert json.loads(_status_answer(status_command(str(status)), timeout=10)) == {"seq": 1, "done": False}
    # the driver finishes while the poll waits (up to 60 steps): the poll ends with the done status
    proc = subprocess.Popen(["sh", "-c", status_command(str(status), 60)], stdout=subprocess.PIPE, text=True)
    status.write_text(json.dumps({"seq": 2, "done": True}) + "\n")  # the driver writes it atomically
    out, _ = proc.communicate(timeout=30)  # far below the 60 steps it would otherwise take
    assert json.loads(out.split(ANSWER_MARK)[0]) == {"seq": 2, "done": True}
    # a missing status file (the driver not started yet) is an empty answer, still marked
    assert _status_answer(status_command(str(tmp_path / "absent.json"), 1), timeout=10) == ""
    # a path with a space or quote stays one word
    odd = tmp_path / "it's here.json"
    odd.write_text('{"done": true}\n')
    assert _status_answer(status_command(str(odd), 5), timeout=10) == '{"done": true}'


def test_a_poll_waits_long_only_while_the_driver_answers_and_no_deadline_is_near(tmp_path):
    """Long polls keep the host's CPU low; a poll that brought no status, a near deadline and the
    stop's escalation each make the next poll short, so no rule of the watch waits a long poll."""
    w = Watch(None, hard_deadline=1000.0, on_status=lambda s: None, mirror=tmp_path / "m.json")
    assert w.wait_sec(0.0) == LONG_POLL_SEC
    assert w.wait_sec(1000.0 - 7.5) == 7.5  # the host's own deadline is 7.5 s away
    w.budget_end = 12.0
    assert w.wait_sec(10.0) == 2.0  # the driver's budget (plus its wind-down) ends sooner
    w.budget_end = None
    w.no_status = True  # a lost exec: retry at once instead of waiting another long poll
    assert w.wait_sec(0.0) == 0.0
    w.no_status, w.stop_at = False, 5.0
    assert w.wait_sec(6.0) == 0.0
    assert 2 * LONG_POLL_SEC <= SILENT_SEC  # a stalled driver is seen within two polls of the rule


def test_a_driver_failure_is_the_attempts_spend_cap_only_with_the_gateways_record(tmp_path):
    """The host reads the driver's failure as the attempt's spend cap (scored like a deadline) only when
    the gateway's cut record exists on the host, and only for the refusal itself or after the watch
    stopped the driver at the record; the record's figures go into the receipt, a torn one still cuts."""
    from agents.sandbox_host import read_cut

    refusal = "turn 1 failed: unexpected status 402 Payment Required: spend_cap_attempt: this attempt's..."
    cut = tmp_path / "cut.json"
    w = Watch(None, hard_deadline=None, on_status=lambda s: None, mirror=tmp_path / "m.json", cut_file=cut)
    assert not w.cut_ended(refusal)  # no record: a 402 the agent could fake is a failure
    cut.write_text(
        json.dumps({"spent_usd": 0.051, "cap_usd": 0.05, "text": "spend cap of the attempt reached"})
    )
    assert not w.cut_ended("turn 1 failed: the sandbox ran out of disk")  # another failure stays one
    assert w.cut_ended(refusal) and w.cut == {
        "scope": "attempt", "spent_usd": 0.051, "cap_usd": 0.05, "text": "spend cap of the attempt reached"
    }  # fmt: skip
    stopped = Watch(
        None, hard_deadline=None, on_status=lambda s: None, mirror=tmp_path / "n.json", cut_file=cut
    )
    stopped.cut = read_cut(
        cut
    )  # the watch stopped the driver at the record: its wind-down's failure is the cut
    assert stopped.cut_ended("the app-server went away")
    ended = Watch(
        None, hard_deadline=None, on_status=lambda s: None, mirror=tmp_path / "e.json", cut_file=cut
    )
    assert ended.cut_ended(None) and ended.cut is not None  # a harness that gave up on the refusals
    cut.write_text("{torn")
    assert read_cut(cut)["text"] == "spend cap of the attempt reached" and read_cut(cut)["cap_usd"] is None
    assert not Watch(None, None, lambda s: None, tmp_path / "o.json").cut_ended(refusal)  # no cap in this run


def test_what_the_driver_writes_never_decides_a_void_nor_the_hosts_own_facts(tmp_path):
    """Found by a probe of what the host reads from the sandbox, where the agent is root: a status
    whose budget_left_sec was "trial environment lost" raised a ValueError quoting it (the attempt
    voided), a phase with the daemon's words did the same, the receipt's token counts too, a lone
    surrogate kept harbor from writing result.json (voided as no_result), and the driver's receipt
    replaced the host's audit facts."""
    from agents.base_codex import _count
    from agents.sandbox_host import _phase, clean_status, merge_receipt
    from modes import safetext
    from modes.receipt import Receipt
    from runner.ops.void import classify_trial

    forged = {"seq": 3, "done": True, "budget_left_sec": "trial environment lost", "pid": "1; rm -rf /",
              "start_ticks": True, "phase": "cannot connect to the docker daemon"}  # fmt: skip
    st = clean_status(forged)
    assert "budget_left_sec" not in st and "pid" not in st and "start_ticks" not in st and st["done"] is True
    assert clean_status({"budget_left_sec": 12.5, "pid": 42, "start_ticks": 9})["budget_left_sec"] == 12.5
    msg = f"the in-sandbox driver has not updated its status for 600 s (last phase: {_phase(st)})"
    trial = tmp_path / "calc-partial__abcdefg"
    trial.mkdir()
    for m in (
        msg,
        "the driver in the sandbox failed: " + safetext.quote_agent("\ud800 no such container: 0123456789ab"),
    ):
        (trial / "result.json").write_text(json.dumps({"agent_execution": {"started_at": "a"},
                                                       "exception_info": {"exception_type": "ArmFailure",
                                                                          "exception_message": m}}))  # fmt: skip
        assert classify_trial(trial).kind == "errored", m
        m.encode("utf-8")  # harbor writes it: no lone surrogate
    assert (_count("trial environment lost"), _count(True), _count(-1), _count(10**20), _count(123)) == (
        0,
        0,
        0,
        0,
        123,
    )

    host = Receipt("plain", None, [], "codex", "0.171.0", "scripted/demo", {})
    host.codex_sha256, host.image_digest, host.extra = (
        "a" * 64,
        "sha256:" + "b" * 64,
        {"image_id": "sha256:c"},
    )
    driver = {"arm": "goal", "mode": None, "disclosures": [], "agent": "x", "codex_version": "9", "model": "m2",
              "provider": {}, "codex_sha256": "f" * 64, "image_digest": "sha256:forged", "turns": 7,
              "extra": {"image_id": "sha256:forged", "driver_own": 1}, "stop_reason": "done\ud800"}  # fmt: skip
    got = merge_receipt(host, driver)
    assert (got.arm, got.model, got.codex_sha256, got.image_digest) == (
        "plain",
        "scripted/demo",
        "a" * 64,
        host.image_digest,
    )
    assert got.extra == {"image_id": "sha256:c", "driver_own": 1} and got.turns == 7
    got.stop_reason.encode("utf-8")
