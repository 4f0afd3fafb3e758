"""The `marathon` command itself: every subcommand answers --help, bad input is one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.cli import COMMANDS, build_parser


def _marathon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_top_level_help_lists_every_built_subcommand():
    r = _marathon("--help")
    assert r.returncode == 0
    built = [name for name in COMMANDS if name in build_parser()._subparsers._group_actions[0].choices]
    assert built, "no subcommand is built"
    for name in built:
        assert name in r.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_has_help(name):
    choices = build_parser()._subparsers._group_actions[0].choices
    if name not in choices:
        pytest.fail(f"subcommand {name} is listed in runner.cli.COMMANDS but has no module")
    r = _marathon(name, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: marathon " + name in r.stdout


def test_no_subcommand_prints_usage_and_exits_2():
    r = _marathon()
    assert r.returncode == 2
    assert "usage: marathon" in r.stdout
