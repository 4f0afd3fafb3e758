"""The fairness audit on what the arms record: the codex binary's sha256, the config.toml hash with the
declared differences masked, the image digest. A copy of the hand-made tree (real harbor trial files,
receipts written by modes.receipt, configs written by agents.codex_config and hashed by
modes.config_digest, as the arms do) is altered one trial at a time."""

from __future__ import annotations

import shutil

import pytest
from handmade_tree import arm_config, write_receipts

from modes.config_digest import config_digests
from modes.profiles import ARMS, GOAL_FLAG, masked_config_keys
from runner.results.model import RunModel
from runner.results.report import build_report, render

CONFIG_LABEL = "config.toml sha256 (declared differences masked)"


@pytest.fixture
def tree(handmade, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(handmade, out, symlinks=True)
    return out


def _audit(out):
    return build_report(RunModel.load(out))["audit"]


def test_every_arm_declares_its_masked_differences_as_data():
    for arm, mode in ARMS.items():
        assert mode.masked, arm
        assert mode.as_dict()["masked"] == [m.as_dict() for m in mode.masked]
    assert GOAL_FLAG in masked_config_keys()
    # LoopX arms declare the profile; the codex arms do not
    assert {a for a, m in ARMS.items() if any(d.what == "the LoopX profile" for d in m.masked)} == {
        a for a, m in ARMS.items() if m.loopx
    }


def test_the_normalised_hash_ignores_exactly_the_masked_keys():
    base = config_digests(arm_config())
    masked = config_digests(arm_config(**{GOAL_FLAG: True}))
    other = config_digests(arm_config(**{"model_providers.marathon.request_max_retries": 9}))
    assert masked["sha256"] != base["sha256"] and masked["normalized_sha256"] == base["normalized_sha256"]
    assert masked["masked_values"] == {GOAL_FLAG: True} and base["masked_values"] == {}
    assert other["normalized_sha256"] != base["normalized_sha256"]


def test_a_trial_whose_config_hash_differs_is_a_red_line(tree):
    write_receipts(tree, **{"heartbeat/t05": {"config_toml": {"normalized_sha256": "0" * 64}}})
    au = _audit(tree)
    (d,) = au["differences"]
    assert (d["fact"], d["task"]) == ("config_toml_sha256", "t05")
    assert au["lines"] == [f"arms differ in: {CONFIG_LABEL} (plain, goal \u2260 heartbeat; task t05)"]
    assert au["arms_differing"] == ["heartbeat"]
    assert f"- **ALARM** arms differ in: {CONFIG_LABEL}" in render(build_report(RunModel.load(tree)), "md")


def test_a_config_that_differs_in_an_undeclared_key_is_a_red_line(tree):
    changed = arm_config(**{"model_providers.marathon.stream_max_retries": 0})
    write_receipts(tree, configs={"goal/t02": changed})
    assert _audit(tree)["lines"] == [
        f"arms differ in: {CONFIG_LABEL} (plain, heartbeat \u2260 goal; task t02)"
    ]


def test_a_config_that_differs_only_in_a_masked_key_is_clean(tree):
    write_receipts(tree, configs={"goal/t02": arm_config(**{GOAL_FLAG: True})})
    au = _audit(tree)
    assert au["lines"] == [] and au["differences"] == []
    assert "config_toml_sha256" in au["compared"]["goal"]
    rep = build_report(RunModel.load(tree))
    text = render(rep, "md")
    # the masked differences are disclosed, with the keys the hash leaves out
    assert f"config.toml keys masked for every arm before its hash is compared: {GOAL_FLAG}" in text
    assert "- goal (by design, not compared): the native goal:" in text
    assert rep["masked"]["heartbeat"] == [m.as_dict() for m in ARMS["heartbeat"].masked]
    assert "heartbeat (by design, not compared): no native goal" in render(rep, "html")


@pytest.mark.parametrize(
    ("change", "label"),
    [
        ({"codex_sha256": "6" * 64}, "codex sha256"),
        ({"image_digest": "sha256:" + "2" * 64}, "image digest"),
        ({"extra": {"harbor_agent_timeout_sec": 480.0}}, "harbor agent timeout"),
    ],
)
def test_another_binary_image_or_harbor_timeout_is_a_red_line(tree, change, label):
    write_receipts(tree, **{"plain/t09": change})
    assert _audit(tree)["lines"] == [f"arms differ in: {label} (goal, heartbeat \u2260 plain; task t09)"]


def test_a_change_of_the_runs_conditions_between_tasks_is_a_red_line(tree):
    """Found by a probe: a resume with another ``--model`` (or ``--goal-timeout-sec``) ran the rest of
    the run under it, every arm alike, and the audit (arms against arms, task by task) was clean
    while the means mixed the two. A run-wide fact that differs between scored attempts is a line."""
    from handmade_tree import COST, TASKS

    later = TASKS[5:]
    write_receipts(tree, **{f"{a}/{t}": {"model": "scripted/other", "goal_timeout_sec": 300.0}
                            for t in later for a in COST})  # fmt: skip
    au = _audit(tree)
    assert [d for d in au["differences"]] == []  # arms against arms: nothing, task by task
    assert [c["fact"] for c in au["run_conditions"]] == ["model", "goal_timeout_sec"]
    (model,) = [c for c in au["run_conditions"] if c["fact"] == "model"]
    assert {v: len(n) for v, n in model["values"].items()} == {
        "scripted/solve": 5 * len(COST),
        "scripted/other": len(later) * len(COST),
    }
    assert au["lines"][0].startswith("the run's conditions changed: model (")
    assert "the run's conditions changed: GOAL_TIMEOUT_SEC deadline" in render(
        build_report(RunModel.load(tree)), "md"
    )


def test_tasks_with_their_own_agent_user_are_not_a_changed_run(tree):
    """Found by a review: harbor runs the agent as the task's own ``[agent].user``, so a task run as
    root in every arm while the others run as ``agent`` read as "the run's conditions changed: user"
    (an ALARM in the report and the console). The user is compared arm against arm, per task."""
    from handmade_tree import COST, TASKS

    tr = {"kind": "docker-exec", "container": "0123456789ab", "workdir": "/srv", "user": "root"}
    write_receipts(tree, **{f"{a}/{TASKS[0]}": {"transport": tr} for a in COST})
    au = _audit(tree)
    assert (au["differences"], au["run_conditions"], au["lines"]) == ([], [], [])
    write_receipts(tree, **{f"{a}/{TASKS[0]}": {"transport": tr} for a in COST if a != "goal"})
    assert _audit(tree)["lines"] == [
        f"arms differ in: {fact} (plain, heartbeat \u2260 goal; task {TASKS[0]})"
        for fact in ("user", "workdir")
    ]


def test_a_loopx_version_that_differs_is_one_line_not_two(tree):
    """The LoopX and node versions a LoopX arm installed are compared too (an upgrade that bumps LoopX
    changes three arms). One arm's one task: the arms-against-arms line, not a run-wide one besides."""
    profile = {"loopx": {"profile": {"loopx": "loopx 2.1.1", "node": "v22.11.0"}}}
    changes = {f"{a}/{t}": {"extra": profile} for t in ("t01", "t02") for a in ("goal", "heartbeat")}
    changes["heartbeat/t02"] = {"extra": {"loopx": {"profile": {"loopx": "loopx 2.2.0", "node": "v22.11.0"}}}}
    write_receipts(tree, **changes)
    assert _audit(tree)["lines"] == ["arms differ in: LoopX version (goal \u2260 heartbeat; task t02)"]
