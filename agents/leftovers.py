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

#: Sets ``anc`` to the script's own shell and its ancestors in the sandbox (space-separated PIDs):
#: an environment's exec may wrap the command (``timeout``, ``sh -c``); neither script touches them.
_ANCESTORS = r"""
anc=" "; q=$$
while [ -n "$q" ] && [ "$q" != 0 ] && [ "$q" != 1 ]; do
  anc="$anc$q "
  read -r line < "/proc/$q/stat" 2>/dev/null || break
  rest=${line##*) }; set -- $rest; q=$2
done
"""

#: One ``pid:starttime`` per line for every process of the sandbox except the script's own shell and
#: its ancestors there (an environment's exec may wrap the command: ``timeout``, ``sh -c``).
#: starttime is field 22 of /proc/<pid>/stat; after stripping "pid (comm) " it is the 20th field.
_LIST = (
    _ANCESTORS
    + r"""for d in /proc/[0-9]*; do
  p=${d#/proc/}
  case "$anc" in *" $p "*) continue ;; esac
  read -r line < "$d/stat" 2>/dev/null || continue
  rest=${line##*) }
  set -- $rest
  [ "$1" = Z ] && continue
  echo "$p:${20}"
done
"""
)

#: Kill (SIGKILL) every process not named in $BEFORE (space-separated ``pid:starttime``) and not
#: PID 1, in rounds a tenth of a second apart until a round finds none: a process may fork while a
#: round runs, and a killed one stays listed until it has exited (it is killed again, not counted
#: again). The script's own shell, its ancestors in the sandbox and its children (``sleep``) are
#: never hit. Prints ``ended N`` (distinct processes killed), ``left M`` (still there after ~5 s)
#: and, when M > 0, ``names`` (the comm of up to five of them, for the receipt).
_SWEEP = (
    _ANCESTORS
    + r"""killed=" "; ended=0; round=0; found=1; names=""
while [ $found -gt 0 ] && [ $round -lt 50 ]; do
  round=$((round + 1)); found=0; names=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = 1 ] && continue
    case "$anc" in *" $p "*) continue ;; esac
    read -r line < "$d/stat" 2>/dev/null || continue
    rest=${line##*) }
    set -- $rest
    [ "$1" = Z ] && continue
    [ "$2" = "$$" ] && continue
    id="$p:${20}"
    case " $BEFORE " in *" $id "*) continue ;; esac
    kill -KILL "$p" 2>/dev/null || continue
    found=$((found + 1))
    [ $found -le 5 ] && { c=${line#*(}; names="$names ${c%)*}"; }
    case "$killed" in *" $id "*) ;; *) killed="$killed$id "; ended=$((ended + 1)) ;; esac
  done
  [ $found -gt 0 ] && { sleep 0.1 2>/dev/null || :; }
done
echo "ended $ended"
echo "left $found"
if [ $found -gt 0 ]; then echo "names$names"; fi
"""
)

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
    """(distinct processes killed, processes still found in the last round) from a sweep's output;
    (0, -1) when it printed neither line."""
    ended = re.search(r"^ended (\d+)$", stdout, re.M)
    left = re.search(r"^left (\d+)$", stdout, re.M)
    if ended is None or left is None:
        return 0, -1
    return int(ended.group(1)), int(left.group(1))


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
    killed, left = parse_sweep(stdout)
    rec: dict = {"rule": RULE, "ended": killed}
    if left < 0:
        rec["incomplete"] = f"the sweep did not finish (exit {return_code})"
    elif left:
        m = re.search(r"^names (.*)$", stdout, re.M)
        names = re.sub(r"[^\w .:+-]", "?", m.group(1))[:100] if m else ""
        rec["incomplete"] = f"{left} process(es) still there after 50 rounds ({names})"
    return rec


def record(receipt, rec: dict) -> None:
    """Put a sweep's record in the receipt; an incomplete sweep is also a warning."""
    receipt.extra["left_running"] = rec
    if rec.get("incomplete"):
        receipt.warnings.append(f"processes left by the agent may still run: {rec['incomplete']}")
