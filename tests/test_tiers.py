"""The docker marker is enforced: in the fast tier an unmarked test that needs Docker fails, clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).parent / "data" / "tier_guard_cases.py"


def test_fast_tier_fails_unmarked_docker_tests_and_hides_the_engine():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            "-m",
            "not docker",
            str(CASES),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "ERROR tests/data/tier_guard_cases.py::test_uses_the_engine_fixture_but_is_unmarked" in out
    assert "needs Docker (its fixtures use docker_engine) but is not marked `pytest.mark.docker`" in out
    assert "FAILED tests/data/tier_guard_cases.py::test_talks_to_docker_but_is_unmarked" in out
    assert "If this test needs the Docker engine, mark it `pytest.mark.docker`." in out
    assert "PASSED tests/data/tier_guard_cases.py::test_plain" in out
    assert "1 deselected" in out  # the marked one
