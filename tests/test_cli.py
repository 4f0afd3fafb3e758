"""The `marathon` command itself: every subcommand answers --help, bad input is one line.

The entry point runs as a real process once per test below; the per-subcommand help goes through
the same ``marathon.cli.main`` in-process (13 interpreter starts were most of this module's time).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from marathon.cli import COMMANDS, build_parser, main


def _marathon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_top_level_help_lists_every_built_subcommand():
    r = _marathon("--help")
    assert r.returncode == 0
    built = [name for name in COMMANDS if name in build_parser()._subparsers._group_actions[0].choices]
    assert built, "no subcommand is built"
    for name in built:
        assert name in r.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_has_help(name, capsys):
    choices = build_parser()._subparsers._group_actions[0].choices
    if name not in choices:
        pytest.fail(f"subcommand {name} is listed in marathon.cli.COMMANDS but has no module")
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert "usage: marathon " + name in capsys.readouterr().out


def test_no_subcommand_prints_usage_and_exits_2():
    r = _marathon()
    assert r.returncode == 2
    assert "usage: marathon" in r.stdout
