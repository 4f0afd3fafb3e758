"""The one typed boundary for a value read from an output tree: a number in its field's range, or why not.

The agents under test write ``agent/`` and ``verifier/`` (and through them the rewards harbor
records), so every value read from a tree is adversarial input. A number that reaches a mean must
be finite and in its field's range: ``1e999``, ``10**400`` (which ``float()`` cannot even convert),
``NaN``, a reward of 100, a partial of -1 or a string ``"1"`` each once crashed a command for the
whole tree, printed ``Infinity`` as JSON or moved a mean. So every reader passes each number
through ``number`` with the field's ``Range``; anything else is a ``Bad`` that names the field and
says why, and the reader makes its record unreadable with it (never an exception, never a
silently dropped value).

Stdlib only, no IO: the in-sandbox driver bundle and the results layer both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Counts (tokens, tests, continuations) at most this: far above any real run, below 2**53, so
#: every count is exact as a float and no sum of a tree's counts can overflow.
COUNT_CAP = 10**15
#: Dollars at most this per record (a run costs dollars to thousands of dollars).
USD_CAP = 1e9
#: Seconds at most this (a century): budgets, timeouts, durations.
SECONDS_CAP = 3.2e9


@dataclass(frozen=True, slots=True)
class Range:
    """A field's kind of number: closed ``[lo, hi]``; ``integer``: a whole number (``5.0`` counts)."""

    lo: float
    hi: float
    integer: bool = False

    def __str__(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"{kind} in [{_num_text(self.lo)}, {_num_text(self.hi)}]"


#: reward, partial score, pass rate: harbor's and the task verifiers' convention
SCORE = Range(0.0, 1.0)
COUNT = Range(0, COUNT_CAP, integer=True)
USD = Range(0.0, USD_CAP)
SECONDS = Range(0.0, SECONDS_CAP)


@dataclass(frozen=True, slots=True)
class Bad:
    """A value that is present but cannot be used: which field, and why (for the reader's note)."""

    field: str
    why: str

    def __str__(self) -> str:
        return f"{self.field}: {self.why}"


def _num_text(v: float | int) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return str(v)


def shown(v: Any, cap: int = 40) -> str:
    """A short, single-line, printable picture of a bad value (never its whole text)."""
    if isinstance(v, bool) or v is None:
        return "true" if v is True else "false" if v is False else "null"
    if isinstance(v, int):
        if -(10**15) < v < 10**15:
            return str(v)
        return f"a {'negative ' if v < 0 else ''}number of {len(str(abs(v)))} digits"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        text = v if len(v) <= cap else v[:cap] + "…"
        return '"' + "".join(ch if ch.isprintable() else "?" for ch in text) + '"'
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if isinstance(v, dict):
        return f"an object of {len(v)} keys"
    return type(v).__name__


def number(v: Any, rng: Range, field: str) -> float | int | None | Bad:
    """``v`` as the field's number: None when absent (JSON null or no value), the number when it is
    a finite JSON number of the field's kind within ``rng``, else ``Bad``.

    A count comes back as ``int``, everything else as ``float``. JSON ``true``/``false`` are not
    numbers. Hot path (every trial of a 10,000-trial tree): exact ``type`` checks first.
    """
    t = type(v)
    if t is float:
        if v != v or v in (_INF, _NINF):
            return Bad(field, f"not a finite number ({shown(v)})")
        if rng.integer:
            if not v.is_integer():
                return Bad(field, f"not a whole number ({shown(v)})")
            if not rng.lo <= v <= rng.hi:
                return Bad(field, f"out of range ({shown(v)}; expected {rng})")
            return int(v)
        if not rng.lo <= v <= rng.hi:
            return Bad(field, f"out of range ({shown(v)}; expected {rng})")
        return v
    if t is int:  # an int of any size compares exactly with the bounds: no float() of 10**400
        if not rng.lo <= v <= rng.hi:
            return Bad(field, f"out of range ({shown(v)}; expected {rng})")
        return v if rng.integer else float(v)
    if v is None:
        return None
    return Bad(field, f"not a number ({shown(v)})")


def text(v: Any, field: str) -> str | None | Bad:
    """``v`` as a string field: None when absent, the string, else ``Bad`` (sanitizing for output is
    ``modes.safetext``'s, at the output)."""
    if v is None:
        return None
    if type(v) is str:
        return v
    return Bad(field, f"not a string ({shown(v)})")


def flag(v: Any, field: str) -> bool | None | Bad:
    """``v`` as a JSON boolean: None when absent, else ``Bad``."""
    if v is None or type(v) is bool:
        return v
    return Bad(field, f"not true or false ({shown(v)})")


def depth_within(v: Any, cap: int) -> bool:
    """Is ``v`` nested at most ``cap`` lists/objects deep? Iterative: never a RecursionError."""
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            if d > cap:
                return False
            stack.extend((y, d + 1) for y in x.values())
        elif isinstance(x, list):
            if d > cap:
                return False
            stack.extend((y, d + 1) for y in x)
    return True


_INF = float("inf")
_NINF = float("-inf")
