"""The ``marathon`` command: parse, call ``runner``/``console`` operations, print.

Each subcommand lives in ``marathon/commands/<name>.py`` and exposes ``HELP`` (one line),
``configure(parser)`` and ``run(args) -> int``. Heavy imports (docker, harbor, textual) happen
inside ``run`` so that ``marathon --help`` and ``marathon status`` start fast.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import shutil
import sys
from collections.abc import Sequence

from modes import safetext
from runner.errors import EXIT_FAILED, EXIT_NO_SPACE, EXIT_USAGE, UserError

# name -> module under marathon.commands (dashes become underscores)
COMMANDS: tuple[str, ...] = (
    "demo",
    "run",
    "status",
    "report",
    "plan-size",
    "health",
    "net",
    "cleanup",
    "stop",
    "kill",
    "void",
    "console",
    "view",
    "gateway",
    "canary",
    "prebuild",
    "stage",
    "verify-envs",
)


def _module(name: str):
    return importlib.import_module(f"marathon.commands.{name.replace('-', '_')}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or (``only``) just one subcommand: `marathon status` then imports only
    what status needs (every command's ``configure`` may import its own modules)."""
    parser = argparse.ArgumentParser(
        prog="marathon",
        description="Run, watch, repair and report a harness comparison of coding agents with harbor.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        try:
            mod = _module(name)
        except ModuleNotFoundError as exc:
            if exc.name != f"marathon.commands.{name.replace('-', '_')}":
                raise
            continue  # not built yet
        p = sub.add_parser(name, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.configure(p)
        p.set_defaults(_run=mod.run)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by ``argv`` when it is unambiguous (the first word, after --debug)."""
    words = [a for a in argv if a != "--debug"]
    return words[0] if words and words[0] in COMMANDS else None


def flag_values(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Every text a command was given, labelled by its flag (``--repo``, ``OUT``...): what
    ``runner.secrets.screen_all`` checks before the command does anything at all."""
    out = []
    for name, v in vars(args).items():
        if name.startswith("_") or name in ("command", "debug"):
            continue
        label = f"--{name.replace('_', '-')}"
        for one in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(one, (str, os.PathLike)):
                out.append((label, os.fspath(one)))
    return out


def error_text(exc: BaseException, whole: bool = False) -> str:
    """An error for the terminal: credentials redacted (``runner.secrets.redact``: a URL's
    ``user:key@`` never reaches the screen) and cleaned (``modes.safetext``: no control byte). An
    unexpected error is its first line, cut; a ``UserError`` (``whole``) is whole, on one line
    unless it is written a line per item (``multiline``: the preflight lists one problem a line)."""
    from modes import safetext
    from runner.secrets import redact

    text = str(exc) if str(exc).strip() else type(exc).__name__
    if whole:
        return safetext.clean(redact(text), 20_000, newlines=getattr(exc, "multiline", False))
    return safetext.clean(redact(text.splitlines()[0]), 400)


def no_space_text(exc: OSError) -> str:
    """The one line for a write that failed for a full disk or quota (a probe's full disk ended a run
    with ``internal error: OSError: [Errno 28]``, no path, no way on): where, what is free there,
    and what to do. Nothing written is lost: every file marathon keeps is written whole or not at
    all, and a run goes on from its tree (``--resume``)."""
    where = os.fsdecode(exc.filename) if isinstance(exc.filename, (str, bytes)) else None
    free = ""
    probe = where
    while probe:
        try:
            free = f", {shutil.disk_usage(probe).free / 1e9:.1f} GB free there now"
            break
        except OSError:
            parent = os.path.dirname(probe.rstrip("/"))
            probe = parent if parent != probe else None
    what = (
        f"the disk of {safetext.clean(where, None)}"
        if where
        else "the disk it was writing to (the output, or a file of the tree)"
    )
    return (
        f"no space left on {what} ({errno.errorcode.get(exc.errno, exc.errno)}{free}): free some, then go on "
        "(a run: `marathon run OUT --resume`; its attempts still running are left to it)"
    )


def _plain_terminal() -> None:
    """A terminal or pipe that is not UTF-8 (``LC_ALL=C``, ``PYTHONIOENCODING=ascii``) shows what
    it cannot encode (the tables' marks, an agent's names) as ``?``: every command that printed one
    ended in an internal error."""
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if stream is not None and enc not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # (a stream that cannot be reconfigured is left as it is)
                pass
            if stream is sys.stdout:
                safetext.ASCII_JSON = True  # JSON whole, its names \u-escaped, never "?"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv))
    for a in argv:
        if a == "--":
            break  # what follows is operands
        long_dd = a.startswith("--") and a.partition("=")[1] and a.partition("=")[2] == "--"  # --opt=--
        short_dd = len(a) == 4 and a[0] == "-" and a[1] != "-" and a[2:] == "--"  # -n--
        if long_dd or short_dd:
            # Python 3.12's argparse hands such an option [] without its type or choices check (a
            # review: plan-size --diff=-- and report --format=-- ended in an internal error)
            parser.error(f"{a}: '--' is not a value for the option")
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _plain_terminal()
    try:
        try:
            os.getcwd()  # paths given relative to it are resolved against it, deep in any command
        except FileNotFoundError:
            raise UserError("the current directory no longer exists (removed): cd to one that does") from None
        from runner.secrets import screen_all

        screen_all(flag_values(args))  # before anything runs: a key in a flag is never used or shown
        from modes.safeio import cap_env_problem

        if problem := cap_env_problem():
            raise UserError(problem)
        return int(args._run(args) or 0)
    except UserError as exc:
        if args.debug:  # the traceback too, and the same exit code (re-raised, every code was 1)
            import traceback

            traceback.print_exc()
        print(f"marathon: {error_text(exc, whole=True)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("marathon: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed (e.g. piped into head): not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - no traceback without --debug, ever
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            if args.debug:  # the traceback too, and the same exit code
                import traceback

                traceback.print_exc()
            print(f"marathon: {no_space_text(exc)}", file=sys.stderr)
            return EXIT_NO_SPACE
        if args.debug:
            raise
        print(
            f"marathon: internal error: {type(exc).__name__}: {error_text(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
