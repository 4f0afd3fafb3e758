"""The files of a harbor trial dir that marathon reads or writes, named once.

harbor 0.25.0's ``harbor.models.trial.paths.TrialPaths`` names its part of a trial dir (result,
exception, verifier files); marathon's arms add the receipt and the trajectory under ``agent/``.
Every reader and writer takes the names from here, relative to the trial dir, so a harbor upgrade
that moves a file is one edit (``tests/test_trial_files.py`` compares them with harbor's own
``TrialPaths``). Not imported from harbor at run time: importing harbor costs a command like
``marathon status`` more than its whole scan.
"""

from __future__ import annotations

from typing import Final


class TrialFiles:
    """Paths relative to a trial dir (``<out>/<task>/<arm>/<stamp>/<arm>/<trial>``)."""

    RESULT: Final = "result.json"  # harbor's TrialResult, written last
    CONFIG: Final = "config.json"
    EXCEPTION: Final = "exception.txt"
    AGENT_DIR: Final = "agent"  # the container's /logs/agent (the agent writes here)
    VERIFIER_DIR: Final = "verifier"  # the container's /logs/verifier (so may the agent)
    METRICS: Final = "verifier/metrics.json"  # the task's verifier convention: partial score, tests
    REWARD_TXT: Final = "verifier/reward.txt"
    REWARD_JSON: Final = "verifier/reward.json"
    TEST_STDOUT: Final = "verifier/test-stdout.txt"
    RECEIPT: Final = "agent/goal_receipt.json"  # written by marathon's codex arms
    TRAJECTORY: Final = "agent/trajectory.json"
    APPSERVER_STDOUT: Final = "agent/appserver.stdout.jsonl"


#: every trial file whose content or times feed a figure (the tamper rule reads the reward files'
#: times); the scan index validates exactly these
SCORED_INPUTS: Final = (
    TrialFiles.RESULT,
    TrialFiles.METRICS,
    TrialFiles.REWARD_TXT,
    TrialFiles.REWARD_JSON,
    TrialFiles.RECEIPT,
)
#: verifier files whose change after the verifier finished means someone else wrote them (harbor
#: removes both reward files before it verifies: either dates the verifier's start)
VERIFIER_WRITTEN: Final = (TrialFiles.METRICS, TrialFiles.REWARD_TXT, TrialFiles.REWARD_JSON)
