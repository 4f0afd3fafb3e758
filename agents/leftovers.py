"""Processes the agent left running end with its phase, before the verifier runs.

harbor runs the verifier in the same container the agent had root in. A process the agent started
and left behind (``setsid``, a daemon, a loop) is still there while the verifier writes
``/logs/verifier/``: it can rewrite the score after the verifier wrote it and before harbor records
the verifier as finished, which no file-time rule can tell from the verifier's own write. So every
arm, by the same rule, ends the agent phase by killing each process of the sandbox that did not
exist when the arm began (identity: PID and kernel start time, so a reused PID is never spared or
hit by mistake). Processes the environment started before the agent (PID 1, a task's services) are
spared. The count is recorded in the receipt (``left_running``).

The scripts are POSIX ``sh`` with builtins only (no ``ps``, ``awk`` or python in the image needed);
they read ``/proc/<pid>/stat`` of the sandbox's own PID namespace and never run on the host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable

#: One ``pid:starttime`` per line for every process of the sandbox except the script's own shell.
#: starttime is field 22 of /proc/<pid>/stat; after stripping "pid (comm) " it is the 20th field.
_LIST = r"""
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  read -r line < "$d/stat" 2>/dev/null || continue
  rest=${line##*) }
  set -- $rest
  [ "$1" = Z ] && continue
  echo "$p:${20}"
done
"""

#: Kill (SIGKILL) every process not named in $BEFORE (space-separated ``pid:starttime``) and not
#: PID 1, in rounds (a process may fork while a round runs); prints the count killed per round.
_SWEEP = r"""
round=0
while [ $round -lt 5 ]; do
  round=$((round + 1)); n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] || [ "$p" = 1 ] && continue
    read -r line < "$d/stat" 2>/dev/null || continue
    rest=${line##*) }
    set -- $rest
    [ "$1" = Z ] && continue
    [ "$2" = "$$" ] && continue
    case " $BEFORE " in *" $p:${20} "*) continue ;; esac
    kill -KILL "$p" 2>/dev/null && n=$((n + 1))
  done
  echo "killed $n"
  [ $n -eq 0 ] && break
done
"""

#: The rule as the receipt states it (the same for every arm).
RULE = "SIGKILL every sandbox process started after the arm began, before the verifier"

#: The record when the sandbox's processes could not be listed as the arm began (no sweep).
UNLISTED = {
    "rule": RULE,
    "ended": 0,
    "incomplete": "the sandbox's processes could not be listed as the arm began",
}

_IDENTITY = re.compile(r"^\d+:\d+$")

#: ``(command, env, user, timeout_sec) -> ExecResult`` (agents.loopx_profile.ContainerExec)
Exec = Callable[..., Awaitable]


def list_command() -> str:
    return _LIST


def sweep_command(before: frozenset[str]) -> str:
    return f"BEFORE={shlex.quote(' '.join(sorted(before)))}\n{_SWEEP}"


def parse_listing(stdout: str) -> frozenset[str]:
    """The identities a listing printed (lines that are not ``pid:starttime`` are ignored)."""
    return frozenset(ln.strip() for ln in stdout.splitlines() if _IDENTITY.match(ln.strip()))


def parse_sweep(stdout: str) -> tuple[int, int]:
    """(processes killed, processes still found in the last round) from a sweep's output."""
    counts = [int(m.group(1)) for m in re.finditer(r"^killed (\d+)$", stdout, re.M)]
    return sum(counts), (counts[-1] if counts else 0)


async def snapshot(run: Exec) -> frozenset[str] | None:
    """The sandbox's processes as the arm begins; None when they cannot be listed (then no sweep)."""
    r = await run(_LIST, None, "root", 60)
    if r.return_code != 0:
        return None
    found = parse_listing(r.stdout)
    return found or None


async def end_leftovers(run: Exec, before: frozenset[str]) -> dict:
    """Kill what the agent phase left running; the receipt's ``left_running`` record."""
    r = await run(sweep_command(before), None, "root", 60)
    return sweep_record(r.return_code, r.stdout)


def sweep_record(return_code: int, stdout: str) -> dict:
    """The receipt's ``left_running`` record of one sweep's exit code and output."""
    killed, last = parse_sweep(stdout)
    rec: dict = {"rule": RULE, "ended": killed}
    if return_code != 0 or last:
        rec["incomplete"] = f"exit {return_code}; {last} still killed in the last round"
    return rec


def record(receipt, rec: dict) -> None:
    """Put a sweep's record in the receipt; an incomplete sweep is also a warning."""
    receipt.extra["left_running"] = rec
    if rec.get("incomplete"):
        receipt.warnings.append(f"processes left by the agent may still run: {rec['incomplete']}")
