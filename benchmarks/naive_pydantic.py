"""The obvious script a user would write instead of marathon: every job and trial result.json
through harbor's own pydantic models, plus each metrics.json. The baseline of bench_model.py and
bench_scan.py (run as a script, it imports nothing of marathon's).

    python benchmarks/naive_pydantic.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def naive(out: Path) -> int:
    """What a user would otherwise write: harbor's pydantic models over every result.json."""
    from harbor.models.job.result import JobResult
    from harbor.models.trial.result import TrialResult

    n = 0
    for p in out.glob("*/*/*/*/result.json"):
        JobResult.model_validate_json(p.read_bytes())
        n += 1
    for p in out.glob("*/*/*/*/*/result.json"):
        TrialResult.model_validate_json(p.read_bytes())
        m = p.parent / "verifier" / "metrics.json"
        if m.exists():
            json.loads(m.read_bytes())
        n += 1
    return n


if __name__ == "__main__":
    print(naive(Path(sys.argv[1])))
