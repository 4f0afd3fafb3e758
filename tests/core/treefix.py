"""Editing a copied real trial the way harbor's order of writes would have left it."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path


def verifier_wrote(path: Path) -> None:
    """Make a verifier file a test just wrote look written by the verifier itself.

    harbor writes a trial's result.json after the verifier finished, so a verifier file written
    later is flagged tampered (runner.results.records.tampered). A test that edits a verifier file of a
    copied trial to stand for another verifier outcome sets the file's mtime back to before the
    verifier finished and rewrites result.json after it, as harbor would.
    """
    trial = path.parent.parent
    res = trial / "result.json"
    fin = json.loads(res.read_text())["verifier"]["finished_at"]
    t = datetime.fromisoformat(fin.replace("Z", "+00:00")).timestamp() - 0.5
    os.utime(path, (t, t))
    res.write_bytes(res.read_bytes())
