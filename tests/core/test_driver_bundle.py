"""The in-sandbox driver's package: stdlib only (harbor is not installed in a sandbox), and the
host's handling of what comes back from it (hostile input: the agent can write into /logs/agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agents.sandbox_driver import read_credentials
from agents.sandbox_host import bundle_dir, import_evidence


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
    copied = import_evidence(src, dest)
    assert sorted(copied) == ["appserver.stdout.jsonl", "sessions/rollout-1.jsonl"]
    assert not (dest / "link.txt").exists() and not (dest / "fifo").exists()
    assert not (dest / "goal_receipt.json").exists()
