"""Errors a user can fix: one line saying what happened and what to do.

The CLI prints ``marathon: <message>`` and exits with the error's code; tracebacks never reach
the screen for these. Exit codes are documented in README ("Exit codes").
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran and reports a failure (a check failed, a trial errored)
EXIT_USAGE = 2  # bad input: a path that is not an output tree, a bad flag value
EXIT_UNAVAILABLE = 3  # a dependency is unreachable: Docker engine, staged codex, node
EXIT_BUSY = 4  # someone else holds what we need: the runner lock of an output tree
# (5 is the runner's own: it paused itself, ``runner.schedule.breaker.EXIT_PAUSED``)
EXIT_NO_SPACE = 6  # a write failed for a full disk (or quota): free space, then go on


class UserError(Exception):
    """A problem the user can fix; ``str(exc)`` is the whole one-line message (a newline in it, from
    a path or a value the user gave, is shown as ``\\n``: one error, one line)."""

    exit_code = EXIT_USAGE
    #: a message of one line per item (a header and its problems): shown with its line breaks
    multiline = False

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NotAnOutputTree(UserError):
    """The path given is not a marathon/harbor output tree."""


class Unavailable(UserError):
    """Something the command needs is not reachable (Docker socket, staged binaries)."""

    exit_code = EXIT_UNAVAILABLE


class Busy(UserError):
    """Another live process holds the resource (runner lock)."""

    exit_code = EXIT_BUSY
