"""Every scoring and voiding rule lives in ``runner/results/rules.py``: nothing else in the runner or
the console may restate one. Two copies of the done rule drifted apart in the field; this test
fails when a rule's literal shows up anywhere else.

``runner/results/records.py`` is the one reader of harbor's and the verifier's files, so it may
name their fields (it hands the values to the rules); the demo tasks' verifiers are data.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ALLOWED = {"runner/results/rules.py", "runner/results/records.py"}
#: rule literal (regex) -> the rule to call instead
RULE_LITERALS = {
    r"n_errored_trials|n_completed_trials|\bn_errors\b": "done: rules.is_done / rules.done_of_counts",
    r"[\"']partial_score[\"']": "the partial score: rules.partial_score",
    r"[\"'](phase|initialized|starting)[\"']": "a verifier still running: rules.metrics_is_score",
    r"==\s*[\"']build_failed[\"']|BUILD_FAILED_PHASE": "a build failure: rules.build_failed",
    r"[\"']rewards[\"']|[\"']reward_stats[\"']": "harbor's reward: rules.reward_of / rules.reward_of_stats",
    r"0(\.0)?\s+if\s+\S*build_failed|build_failed\s+and\s+\w+\s+in\b": "a build failure counts 0: rules.scored_measure",
    r"[\"'](sandbox_failed|harbor_failed)[\"']": "voiding: rules.VOIDING",
    r"address pools have been fully subnetted|cannot connect to the docker daemon": "voiding: rules.VOIDING",
}


def _code_lines(path: Path):
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.lstrip().startswith("#"):
            yield no, line


def test_no_rule_is_restated_outside_rules_py():
    found = []
    for top in ("runner", "console"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel in ALLOWED or rel.startswith("runner/demo/"):
                continue
            for no, line in _code_lines(path):
                for pattern, rule in RULE_LITERALS.items():
                    if re.search(pattern, line, re.IGNORECASE):
                        found.append(f"{rel}:{no}: {line.strip()}  -> use {rule}")
    assert not found, "rule literals outside runner/results/rules.py:\n" + "\n".join(found)


def test_the_check_sees_a_restated_rule(tmp_path):
    """The patterns match the copies this project once had (so the test above can fail)."""
    copies = [
        'if v is None and c.build_failed and field in ("partial", "pass_rate"):',
        'errored = stats.get("n_errored_trials", 0)',
        'if metrics.get("phase") == "build_failed":',
        'reward = d["verifier_result"]["rewards"]["reward"]',
    ]
    for text in copies:
        assert any(re.search(p, text, re.IGNORECASE) for p in RULE_LITERALS), text
