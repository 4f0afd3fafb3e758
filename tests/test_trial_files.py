"""marathon's names for a trial's files are harbor's (harbor.models.trial.paths.TrialPaths)."""

from __future__ import annotations

from pathlib import Path

from harbor.models.trial.paths import TrialPaths

from modes.trial_files import TrialFiles


def test_the_trial_files_are_where_harbor_puts_them(tmp_path):
    p = TrialPaths(trial_dir=tmp_path)

    def rel(path: Path) -> str:
        return path.relative_to(tmp_path).as_posix()

    assert rel(p.result_path) == TrialFiles.RESULT
    assert rel(p.config_path) == TrialFiles.CONFIG
    assert rel(p.exception_message_path) == TrialFiles.EXCEPTION
    assert rel(p.agent_dir) == TrialFiles.AGENT_DIR
    assert rel(p.verifier_dir) == TrialFiles.VERIFIER_DIR
    assert rel(p.reward_text_path) == TrialFiles.REWARD_TXT
    assert rel(p.reward_json_path) == TrialFiles.REWARD_JSON
    assert rel(p.test_stdout_path) == TrialFiles.TEST_STDOUT
    for mine in (TrialFiles.METRICS, TrialFiles.RECEIPT, TrialFiles.TRAJECTORY):
        assert mine.split("/")[0] in (rel(p.verifier_dir), rel(p.agent_dir))
