"""Start a child held at a gate until its identity is on record.

Why: the runner starts each ``harbor run`` in its own session (it must outlive a runner restart and
be adopted), and records its PID and identity in the registry and the pair's claim only after the
fork. A runner killed in between (``kill -9`` right after a job finished, when the next one starts)
left a harbor nothing recorded: the restarted runner saw a stale claim, started a second harbor
for the pair, and both finished done (seen in CI under load). Now the child is a tiny gate that
waits on a pipe: the runner records it, then writes ``go`` and the gate ``exec``\\s the program,
which keeps the PID and the kernel start time, so the identity on record is the program's. If the
runner dies first, the pipe's write end closes, the gate reads EOF and exits 125: the program never
runs, and the claim's pair is simply started again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO

#: The gate: read the release word from the inherited fd, then become the program (PATH lookup in
#: the environment it was given). ``-I -S``: no user site, no site-packages import: a fast start.
_GATE = (
    "import os,sys\n"
    "fd=int(sys.argv[1])\n"
    "ok=os.read(fd,2)==b'go'\n"
    "os.close(fd)\n"
    "ok or os._exit(125)\n"
    "os.execv(sys.argv[2],sys.argv[3:])\n"
)
#: The gate's exit status when its starter died before releasing it.
NOT_RELEASED = 125


class HeldProcess:
    """A started child whose program has not begun: ``release()`` it once its PID is recorded, or
    ``abort()`` (it exits ``NOT_RELEASED`` without running the program)."""

    def __init__(self, proc: subprocess.Popen, release_fd: int) -> None:
        self.proc = proc
        self._fd: int | None = release_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            raise RuntimeError("already released or aborted")
        try:
            os.write(fd, b"go")
        except BrokenPipeError:
            pass  # the gate is gone already (signalled): its exit is the job's, seen by poll()
        finally:
            os.close(fd)

    def abort(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def start_held(
    argv: Sequence[str],
    *,
    stdout: IO | int | None,
    stderr: IO | int | None,
    cwd: str,
    env: Mapping[str, str],
    start_new_session: bool = True,
) -> HeldProcess:
    """``subprocess.Popen(argv, ...)`` (stdin from /dev/null) held at the gate.

    FileNotFoundError, as Popen would raise it, when ``argv[0]`` is not found on the env's PATH.
    """
    program = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else argv[0]
    if program is None or not os.access(program, os.X_OK):
        raise FileNotFoundError(f"no executable {argv[0]!r} on the job's PATH")
    r, w = os.pipe()  # both non-inheritable; pass_fds hands r to this child only
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GATE, str(r), program, *argv],
            pass_fds=(r,),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=start_new_session,
            cwd=cwd,
            env=dict(env),
        )
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return HeldProcess(proc, w)
