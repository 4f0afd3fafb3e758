"""The circuit breaker: a wall of identical failures pauses the run instead of eating it.

Why: a credential that stops working, an engine that refuses, an image that will not build -- each
fails every attempt the same way, within seconds, pass after pass (the field lost 1.5 h to 17,945
empty turns for lack of one forwarded credential). When ``k`` consecutive finished attempts fail
with the same failure class and message shape (numbers, ids and paths normalised out), the runner
stops starting pairs. If the streak spans two or more arms it is infrastructure, not any arm's
doing: those attempts are voided so that fixing the cause and resuming reruns them. If it hits one
arm only it is never voided silently: the pause names the arm as an arm-specific failure and the
attempts stay, as that arm's errors, for the bias alarm and the operator to see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: The runner's exit code once the breaker paused it (after its in-flight pairs finished).
EXIT_PAUSED = 5
SCOPE_INFRA = "infrastructure"
SCOPE_ARM = "arm"

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+-]+){2,}/?")
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b", re.I)
_NUM = re.compile(r"\d+(?:\.\d+)?")
_SPACE = re.compile(r"\s+")


def shape(message: str, names: tuple[str, ...] = ()) -> str:
    """A failure message with what differs between attempts normalised out: the attempt's own
    ``names`` (its trial, its task: harbor puts them in compose project names), paths, UUIDs, hex
    ids and numbers become placeholders; whitespace collapses; only the first 200 characters count."""
    s = message
    for name in sorted((n for n in names if n), key=len, reverse=True):
        s = re.sub(rf"(?<![A-Za-z0-9-]){re.escape(name)}(?![A-Za-z0-9-])", "<name>", s, flags=re.I)
    s = _PATH.sub("<path>", s)
    s = _UUID.sub("<id>", s)
    s = _HEX.sub("<id>", s)
    s = _NUM.sub("<n>", s)
    return _SPACE.sub(" ", s).strip()[:200]


#: harbor's causes (``models/trial/error_policy.py``) that are the agent's scored outcome: a timeout
#: or an exhausted budget on a hard task can hit several arms in a row and is a result, never a wall
OUTCOME_CAUSES = frozenset({"agent_exhausted_budget", "agent_refused_task", "verifier_failed"})


def is_outcome(failure_class: str) -> bool:
    """True for a failure that is a scored outcome (harbor grades it), not a loud failure: it
    ends a streak like a success does and never counts toward a pause."""
    try:
        from harbor.models.trial.error_policy import policy_for

        return str(policy_for(failure_class).cause.value) in OUTCOME_CAUSES
    except Exception:  # noqa: BLE001 - harbor missing or changed: count every failure
        return False


def signature(failure_class: str, message: str, names: tuple[str, ...] = ()) -> str:
    """The identity of a failure for the breaker: its class and its message shape."""
    return f"{failure_class}: {shape(message, names)}"


@dataclass(frozen=True)
class Attempt:
    """One finished attempt that failed: which pair, which attempt, and how."""

    task: str
    arm: str
    stamp: str
    signature: str
    message: str  # one line, as the runner reported it (names only, never values)


@dataclass
class Trip:
    """The breaker tripped: the failure, the attempts that make the streak, and the scope."""

    signature: str
    message: str
    attempts: list[Attempt]
    scope: str  # SCOPE_INFRA (two or more arms) or SCOPE_ARM (one arm only)

    @property
    def arms(self) -> list[str]:
        return sorted({a.arm for a in self.attempts})

    @property
    def pairs(self) -> list[str]:
        return [f"{a.task}/{a.arm}" for a in self.attempts]

    def reason(self) -> str:
        """The one line the console's banner and the event show."""
        n = len(self.attempts)
        if self.scope == SCOPE_ARM:
            return (
                f"arm {self.arms[0]} failed {n} attempts in a row with the same error: {self.message} "
                "-- fix the arm (or leave it out of --arms), then resume"
            )
        return (
            f"{n} attempts in a row across arms {', '.join(self.arms)} failed with the same error: "
            f"{self.message} -- fix the cause, then resume (the attempts were voided and rerun)"
        )


@dataclass
class Breaker:
    """Counts consecutive failed attempts with one signature; ``k`` of them trip it (0: never)."""

    k: int = 3
    streak: list[Attempt] = field(default_factory=list)
    tripped: Trip | None = None

    def success(self) -> None:
        """A done attempt ends any streak."""
        self.streak.clear()

    def failure(self, attempt: Attempt) -> Trip | None:
        """Record a failed attempt; the Trip the first time the streak reaches ``k``, else None.
        After a trip, attempts with the same signature join it (they are the same wall)."""
        if self.tripped is not None:
            if attempt.signature == self.tripped.signature:
                self.tripped.attempts.append(attempt)
            return None
        if self.streak and self.streak[-1].signature != attempt.signature:
            self.streak.clear()
        self.streak.append(attempt)
        if self.k <= 0 or len(self.streak) < self.k:
            return None
        arms = {a.arm for a in self.streak}
        scope = SCOPE_INFRA if len(arms) >= 2 else SCOPE_ARM
        self.tripped = Trip(attempt.signature, attempt.message, list(self.streak), scope)
        return self.tripped


def last_pause(out: Path) -> str | None:
    """The one-line reason the newest runner of ``out`` was paused for, or None (never paused, or a
    runner started since)."""
    from runner.results.events import read_events

    reason = None
    for ev in read_events(out):
        if ev.get("event") == "runner_start":
            reason = None
        elif ev.get("event") == "run_paused":
            reason = str(ev.get("reason") or "paused by the circuit breaker")
    return reason
