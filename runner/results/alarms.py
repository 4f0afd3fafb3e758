"""The infrastructure-bias alarms: is one arm hit more often than the others by failures the harness
or the provider made?

Why: in the field, TPM rate limits and an HTTP 400 of the provider hit only ``plain`` (runbook,
pitfall 1), and the result read as ``plain`` being the weaker harness. The rule of thumb there: when
one arm fails significantly more often than the others, suspect infrastructure before capability.

One rule, two readings, each arm against all the others by Fisher's exact test on *attempts* (one
attempt's calls are not independent of each other; its attempts are the arm's units):

- ``infrastructure``: errored and voided attempts, and holes only the harness could have made;
- ``provider_errors``: attempts the provider answered with an error at least once (the gateway's
  ledger: a 4xx or 5xx, or no answer), out of the attempts that made a forwarded call. codex retries
  most of them, so neither the trial's result nor its receipt shows them: only the wire does.

An alarm is a line in the report, the status and the console; it changes no figure.

Beside them, per attempt, ``provider_outages``: a scored attempt whose calls the provider failed for
``PROVIDER_DOWN_SEC`` or more (an outage, a quota or rate limit that outlasted codex's retries) lost
model time to the provider, not to its harness, whichever arm it was; too few such attempts for any
arm to stand out, they would still bend its mean. Each is a flagged line naming the attempt and the
`marathon void` that runs it again; what to do stays the operator's call.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any

from runner.results import stats
from runner.results.attempts import DONE
from runner.results.cells import Cell
from runner.results.ledger import Ledger
from runner.results.run_progress import long_duration

ALARM_P = 0.05
ALARM_TEXT = "suspect infrastructure before capability"
#: a scored attempt the provider failed this long is flagged (codex's own retries of one 429 or 503
#: take seconds; a minute is an outage, or a limit the retries did not outlast)
PROVIDER_DOWN_SEC = 60.0


@dataclass(frozen=True)
class ArmVsOthers:
    """One arm's bad units against the other arms' together."""

    arm: str
    bad: int
    n: int
    others_bad: int
    others_n: int
    p: float

    @property
    def rate(self) -> float | None:
        return self.bad / self.n if self.n else None

    @property
    def others_rate(self) -> float | None:
        return self.others_bad / self.others_n if self.others_n else None

    @property
    def alarm(self) -> bool:
        r, o = self.rate, self.others_rate
        return r is not None and o is not None and r > o and self.p < ALARM_P


def arm_vs_others(per: dict[str, tuple[int, int]], arms: list[str]) -> list[ArmVsOthers]:
    """``per``: arm -> (bad units, units). Each arm against the sum of the others (Fisher, two-sided)."""
    out = []
    for arm in arms:
        bad, n = per.get(arm, (0, 0))
        obad = sum(per.get(o, (0, 0))[0] for o in arms if o != arm)
        on = sum(per.get(o, (0, 0))[1] for o in arms if o != arm)
        p = stats.fisher_exact(bad, n - bad, obad, on - obad) if n and on else 1.0
        out.append(ArmVsOthers(arm, bad, n, obad, on, p))
    return out


def infrastructure(cells: dict[tuple[str, str], Cell], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm: errored + voided attempts (and holes only the harness could have made:
    ``Attempt.infrastructure``) vs the rest, against all other arms (``arm_vs_others``). A hole
    the agent could have made is the arm's failure (the hole rule), not infrastructure."""
    counts = {arm: [0, 0] for arm in arms}  # one pass over the cells (status asks too)
    for (_t, arm), c in cells.items():
        got = counts.get(arm)
        if got is not None:
            got[0] += sum(1 for a in c.attempts if a.infrastructure)
            got[1] += len(c.attempts)
    per = {arm: (bad, n) for arm, (bad, n) in counts.items()}
    return [
        {
            "arm": r.arm,
            "bad_attempts": r.bad,
            "attempts": r.n,
            "rate": _r(r.rate),
            "others_rate": _r(r.others_rate),
            "p_value": _r(r.p, 6),
            "alarm": r.alarm,
            "message": f"{r.arm}: error/void rate {r.bad}/{r.n} vs {r.others_bad}/{r.others_n} for the others "
            f"(Fisher p={r.p:.3g}): {ALARM_TEXT}"
            if r.alarm
            else "",
        }
        for r in arm_vs_others(per, arms)
    ]


def provider_errors(
    cells: dict[tuple[str, str], Cell], arms: list[str], ledger: Ledger
) -> list[dict[str, Any]]:
    """Per arm: the attempts the provider answered with an error at least once, against the other
    arms' (``[]`` without a ledger). ``statuses``: the error answers by HTTP status (502: the
    provider could not be reached)."""
    if not ledger.attempts:
        return []
    per: dict[str, list[int]] = {a: [0, 0, 0, 0] for a in arms}  # bad, attempts, error calls, calls
    statuses: dict[str, Counter[str]] = {a: Counter() for a in arms}
    for (_task, arm), c in cells.items():
        row = per.get(arm)
        if row is None:
            continue
        for att in c.attempts:
            u = ledger.usage(att.task, att.arm_dir, att.stamp)
            if u is None or not u.forwarded:
                continue
            row[1] += 1
            row[3] += u.forwarded
            if u.upstream_errors:
                row[0] += 1
                row[2] += sum(u.upstream_errors.values())
                statuses[arm].update(u.upstream_errors)
    out = []
    for r in arm_vs_others({a: (v[0], v[1]) for a, v in per.items()}, arms):
        seen = ", ".join(f"{s} x{k}" for s, k in sorted(statuses[r.arm].items()))
        out.append(
            {
                "arm": r.arm,
                "attempts_with_errors": r.bad,
                "attempts": r.n,
                "error_calls": per[r.arm][2],
                "calls": per[r.arm][3],
                "statuses": dict(sorted(statuses[r.arm].items())),
                "rate": _r(r.rate),
                "others_rate": _r(r.others_rate),
                "p_value": _r(r.p, 6),
                "alarm": r.alarm,
                "message": (
                    f"{r.arm}: the provider answered with an error in {r.bad}/{r.n} attempts vs "
                    f"{r.others_bad}/{r.others_n} for the others ({seen}; Fisher p={r.p:.3g}): {ALARM_TEXT}"
                )
                if r.alarm
                else "",
            }
        )
    return out


def provider_outages(
    cells: dict[tuple[str, str], Cell],
    arms: list[str],
    ledger: Ledger,
    out: str | os.PathLike[str],
    min_sec: float = PROVIDER_DOWN_SEC,
) -> list[dict[str, Any]]:
    """The scored attempts (each done repeat's) the provider failed for ``min_sec`` or more, longest
    first: the attempt, how long, the statuses, and the flag's text with the `marathon void` of the
    tree ``out`` that plans its rerun (``[]`` without a ledger)."""
    if not ledger.attempts:
        return []
    found = []
    for (task, arm), c in cells.items():
        if arm not in arms:
            continue
        for part in c.parts:
            if part.status != DONE or part.scored_by is None:
                continue
            att = next((a for a in part.attempts if a.stamp == part.scored_by), None)
            u = ledger.usage(task, att.arm_dir, att.stamp) if att is not None else None
            if u is None or (down := u.provider_down_sec) < min_sec:
                continue
            seen = ", ".join(f"{s} x{k}" for s, k in sorted(u.upstream_errors.items()))
            where = att.job_dir or os.path.join(out, task, att.arm_dir, att.stamp)
            void = f"marathon void {shlex.quote(str(where))} {shlex.quote(os.fspath(out))} --reason 'provider outage'"
            found.append(
                {
                    "task": task,
                    "arm": arm,
                    "stamp": att.stamp,
                    "down_sec": round(down, 1),
                    "statuses": dict(sorted(u.upstream_errors.items())),
                    "job_dir": att.job_dir,
                    "message": (
                        f"{task} × {arm} ({att.stamp}): the provider failed its calls for {long_duration(down)} "
                        f"({seen}): model time lost to the provider, not to the harness; "
                        f"`{void}` plans its rerun (--yes carries it out)"
                    ),
                }
            )
    return sorted(found, key=lambda r: (-r["down_sec"], r["task"], r["arm"]))


def _r(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)
