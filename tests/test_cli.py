"""The `marathon` command itself: every subcommand is listed and answers --help with its own
words, bad input is one line with exit 2, and --debug shows the traceback instead.

The entry point runs as a real process where the process is what is tested (the top-level help,
the exit codes, stderr); the per-subcommand help goes through the same ``marathon.cli.main``
in-process (13 interpreter starts were most of this module's time).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from marathon.cli import COMMANDS, main


def _marathon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **env} if env else None,
    )  # fmt: skip


def _module(name: str):
    return importlib.import_module(f"marathon.commands.{name.replace('-', '_')}")


def _words(text: str, n: int = 5) -> str:
    """The first words of a help text, as argparse prints them (on one line)."""
    return " ".join(text.split()[:n])


def test_top_level_help_lists_every_subcommand_with_its_line():
    r = _marathon("--help")
    assert r.returncode == 0, r.stderr
    listed = " ".join(r.stdout.split())  # argparse wraps the one-liners
    for name in COMMANDS:
        assert f"{name} " in listed and _words(_module(name).HELP, 3) in listed, name


@pytest.mark.parametrize("name", COMMANDS)
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    assert out.startswith("usage: marathon " + name), out
    mod = _module(name)
    assert _words(getattr(mod, "DESCRIPTION", mod.HELP)) in " ".join(out.split())


def test_no_subcommand_prints_usage_and_exits_2():
    r = _marathon()
    assert r.returncode == 2
    assert "usage: marathon" in r.stdout


def test_an_unknown_subcommand_is_refused_by_name():
    r = _marathon("nosuch")
    assert r.returncode == 2 and "invalid choice: 'nosuch'" in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["kill", "cleanup", "console", "health"])
def test_a_missing_output_tree_is_one_line_and_exit_2(name, tmp_path):
    missing = tmp_path / "no-such-tree"
    r = _marathon(name, str(missing))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == f"marathon: {missing} is not a directory (expected a marathon output tree)\n"
    assert not missing.exists()


@pytest.mark.parametrize("name", ["status", "health"])
@pytest.mark.parametrize("shape", ["files", "job-shaped dirs", "job-shaped with a symlinked result.json"])
def test_a_dir_that_is_not_an_output_tree_is_one_line_and_exit_2(name, shape, tmp_path):
    """A probe found ``health`` on a typo'd dir (files, no run) saying "OK: nothing to fix", exit 0;
    another `marathon status /usr` printing arms gdb and llvm with pairs running: dirs in the shape
    task/arm/stamp/arm, without a result.json of harbor's, are no tree."""
    d = tmp_path / "not-a-tree"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x.txt").write_text("x")
    if shape != "files":
        (d / "lib" / "gdb" / "auto-load" / "gdb" / "python").mkdir(parents=True)
    if shape.endswith("result.json"):
        (d / "lib" / "gdb" / "auto-load" / "gdb" / "result.json").symlink_to("/etc/hostname")
    before = sorted(p.name for p in d.rglob("*"))
    r = _marathon(name, str(d))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert (
        r.stderr
        == f"marathon: {d}: not a marathon output tree (expected <task>/<arm>/<stamp>/<arm>/result.json or .runner/)\n"
    )
    assert sorted(p.name for p in d.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(
    "scope, said",
    [
        (("--arm", "nosuch"), "--arm 'nosuch': no such arm in"),
        (("--task", "nosuch"), "--task 'nosuch': no such task in"),
        (("--task", "../.."), "--task '../..': no such task in"),
        (("--task", "calc-partial", "--arm", "nosuch"), "no such arm in"),
        (("--trial", "nosuch"), "--trial 'nosuch': no such trial in"),
        (("--trial", "../x"), "--trial '../x': no such trial in"),
    ],
)
def test_cleanup_of_a_task_or_arm_the_tree_lacks_is_one_line_and_exit_2(mini_tree, scope, said):
    """A typo printed an empty plan and exited 0 (a probe); the README says an unknown arm is 2."""
    r = _marathon("cleanup", str(mini_tree), *scope)
    assert r.returncode == 2 and r.stderr.startswith("marathon: ") and said in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e6", " "])
def test_a_json_cap_that_is_not_a_positive_integer_is_one_line_and_exit_2(mini_tree, value):
    """``MARATHON_MAX_JSON_BYTES=abc`` fell back to 4 MiB without a word (a probe)."""
    r = _marathon("status", str(mini_tree), env={"MARATHON_MAX_JSON_BYTES": value})
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"marathon: MARATHON_MAX_JSON_BYTES={value!r}: expected a positive number of bytes\n"


@pytest.mark.parametrize("grace", ["nan", "inf", "1e309", "1e300", "86401", "-1", "abc"])
def test_kill_takes_only_a_finite_grace(grace, tmp_path):
    """``--grace nan`` (or inf) was taken: the kill's wait for TERM never ended and its KILL never
    came (a probe); ``--rescan`` of the console the same."""
    (tmp_path / ".runner").mkdir()
    for args in (("kill", str(tmp_path), "--grace", grace), ("console", str(tmp_path), "--rescan", grace)):
        r = _marathon(*args)
        last = r.stderr.strip().splitlines()[-1]  # argparse's usage, then its one-line error
        assert r.returncode == 2 and f"error: argument {args[2]}" in last, r.stderr


@pytest.mark.parametrize("name", ["status", "report", "kill"])
def test_a_path_with_a_newline_is_still_one_line(name, tmp_path, capsys):
    """A path given with a newline in it (a pasted one) is shown escaped: the error stays one line."""
    missing = tmp_path / "no\nsuch"
    assert main([name, str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing).replace("\n", "\\x0a") in err, err


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path):
    """--debug adds the traceback; the exit code stays the command's (a review found every refusal
    exiting 1 under --debug, where the README's table says 2, 3, 4)."""
    r = _marathon("--debug", "kill", str(tmp_path / "no-such-tree"))
    assert r.returncode == 2 and "Traceback (most recent call last)" in r.stderr
    assert "NotAnOutputTree" in r.stderr and r.stderr.rstrip().splitlines()[-1].startswith("marathon: ")


def test_a_full_disk_is_one_line_with_where_and_what_to_do_and_exit_6(mini_tree):
    """Found by a probe: a full disk ended a run with ``internal error: OSError: [Errno 28] No
    space left on device``, no path and no way on. A write the kernel refuses for space (here the
    report printed to /dev/full, which does that to every write) is one line, exit 6."""
    import errno
    from pathlib import Path

    from marathon.cli import no_space_text

    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "marathon.cli", "report", str(mini_tree), "--format", "json",
                            "--pretty"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert r.returncode == 6, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("marathon: no space left on the disk it was writing to") and "--resume" in line
    with open("/dev/full", "wb") as full:  # --debug: the traceback too, the same exit code
        r = subprocess.run([sys.executable, "-m", "marathon.cli", "--debug", "report", str(mini_tree), "--format",
                            "json", "--pretty"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert r.returncode == 6 and "Traceback" in r.stderr and r.stderr.splitlines()[-1] == line, r.stderr
    text = no_space_text(OSError(errno.EDQUOT, "Disk quota exceeded", str(mini_tree / "a" / "b")))
    assert f"the disk of {mini_tree}/a/b (EDQUOT, " in text and " GB free there now)" in text


@pytest.mark.parametrize(
    "argv",
    [
        ("demo", "--headless", "--tasks", "calc-partial, nope"),
        ("run", "{out}", "--tasks-dir", "{tasks}", "--tasks", "calc-partial, nope", "--arms", "oracle"),
        ("prebuild", "--tasks-dir", "{tasks}", "--tasks", "calc-partial,nope"),
    ],
    ids=lambda a: a[0],
)
def test_an_unknown_task_is_named_in_one_line_before_anything_runs(argv, tmp_path):
    """One rule (``config.chosen_tasks``) for the tasks a run, a prebuild and the demo take: a name
    the dataset dir does not hold is refused by name, exit 2, nothing written (the demo before it
    stages anything)."""
    from runner.schedule.config import DEMO_TASKS

    out = tmp_path / "out"
    args = [a.format(out=out, tasks=DEMO_TASKS) for a in argv]
    if argv[0] == "demo":
        args += ["--out", str(out)]
    r = _marathon(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"unknown task(s) in {DEMO_TASKS}: nope" in r.stderr, r.stderr
    assert "staging" not in r.stdout and not out.exists(), r.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["plan-size", "--diff=--"],
        ["plan-size", "--measure=--"],
        ["plan-size", "--repeats=--"],
        ["report", "--format=--"],
        ["status", "--run=--"],
        ["net", "-n--"],  # a short option with '--' attached (a review)
    ],
)
def test_an_option_given_a_double_dash_as_its_value_is_a_usage_error(argv, tmp_path, capsys):
    """Found by a review: Python 3.12's argparse gives ``--opt=--`` the value [] without its type or
    choices check: plan-size and report ended in "internal error: TypeError", and --repeats=--
    printed a plan without its columns."""
    with pytest.raises(SystemExit) as exc:
        main([argv[0], str(tmp_path), *argv[1:]])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "'--' is not a value for the option" in err and "internal error" not in err


def test_a_value_that_only_ends_in_a_double_dash_is_still_a_value(capsys):
    """The guard above refused `--ae-literal=SEP=--` (a KEY=VALUE whose value is '--'), which the
    spaced spelling took (a review)."""
    for spelling in (["--ae-literal=SEP=--"], ["--ae-literal", "SEP=--"]):
        with pytest.raises(SystemExit) as exc:
            main(["run", *spelling, "--help"])
        assert exc.value.code == 0, (spelling, capsys.readouterr().err)


def test_a_terminal_that_is_not_utf8_gets_its_output_and_a_removed_cwd_one_line(mini_tree, tmp_path):
    """Found by a probe: ``LC_ALL=C`` (``PYTHONIOENCODING=ascii``) ended `marathon status` in an
    internal error at the table's first mark, and a command run from a removed directory in one at
    the first relative path."""
    r = _marathon(
        "status", str(mini_tree), env={**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONUTF8": "0"}
    )
    assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert "nop" in r.stdout and "?" in r.stdout  # what ascii cannot show, shown as ?
    # and JSON keeps every name whole, \u-escaped (a review found calc-? for calc-é)
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(mini_tree, tree, symlinks=True)
    (tree / "calc-partial").rename(tree / "calc-é")
    r = _marathon(
        "report",
        str(tree),
        "--format",
        "json",
        env={**os.environ, "PYTHONIOENCODING": "ascii", "PYTHONUTF8": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.isascii() and "calc-é" in json.loads(r.stdout)["tasks"]
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); from marathon.cli import main; "
        "sys.exit(main(['status', sys.argv[2]]))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(gone), str(mini_tree)], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert (
        r.returncode == 2
        and r.stderr == "marathon: the current directory no longer exists (removed): cd to one that does\n"
    )


def test_a_tree_whose_results_were_all_cut_short_is_still_a_tree(tmp_path):
    """A review: results-only trees whose every result.json was cut short (a crash, a full disk) were
    "not an output tree"; such a file is harbor's, unreadable, and said so."""
    d = tmp_path / "out"
    trial = d / "calc" / "plain" / "2026-12-01__08-00-00" / "plain" / "calc__abcdefg"
    trial.mkdir(parents=True)
    (trial.parent / "result.json").write_text('{"id": ')
    (trial / "result.json").write_text('{"task_name": "calc", ')
    r = _marathon("status", str(d))
    assert r.returncode == 0, r.stderr
    assert "unreadable:" in r.stdout


def test_a_stage_version_is_a_version_never_a_path(tmp_path):
    """A probe: ``stage codex --version /../../x`` named the cache's lock file, and made (or
    truncated) ``/x.lock``; ``../../x`` was an internal error."""
    target = tmp_path / "pwned"
    for version in (f"/../../../../../..{target}", "../../x", "0.171.0/../../x", ""):
        r = _marathon("stage", "codex", "--version", version)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "expected a version" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


def test_prebuild_refuses_a_tasks_dir_that_is_not_a_directory(tmp_path):
    """A probe: a missing tasks dir printed "prebuilding" and exited 0, a file printed ``[]``."""
    for tasks in (tmp_path / "missing", "/etc/passwd"):
        r = _marathon("prebuild", "--tasks-dir", str(tasks), "--json")
        assert r.returncode == 2 and r.stdout == "" and "no such directory" in r.stderr, (r.stdout, r.stderr)
