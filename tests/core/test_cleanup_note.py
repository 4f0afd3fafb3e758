"""``marathon cleanup`` says what it cannot see: a tree whose run used another harbor environment
than local Docker keeps its sandboxes with that provider, not on this engine."""

from __future__ import annotations

from marathon.commands.cleanup import engine_note


def test_a_tree_of_another_environment_gets_the_local_engine_only_note(tmp_path):
    assert engine_note(tmp_path) is None  # no .driver_env: the default, local Docker
    (tmp_path / ".driver_env").write_text("MARATHON_ENV=docker\n")
    assert engine_note(tmp_path) is None
    (tmp_path / ".driver_env").write_text("MARATHON_ENV=daytona\n")
    note = engine_note(tmp_path)
    assert note is not None and "'daytona'" in note and "this host's Docker engine only" in note
