"""The operator's purse: spend caps for a run and for each arm, read from the gateway's ledger.

``marathon run --max-spend USD`` caps the whole run, ``--max-spend-arm USD`` each arm. They are not
the agents' budget (that is the time budget, the same for every arm); they are what the operator
agreed to pay. When one is reached no new attempt starts (of the run, or of that arm), and the
attempts running then either finish (``--on-cap finish``, the default: their spend past the cap is
the price of not throwing work away) or are stopped and voided (``--on-cap stop``: the cap is
hard). ``marathon run --resume --max-spend N`` with a higher cap goes on.

``--max-spend-attempt USD`` is different in kind: a budget like the time budget, the same for every
arm. An attempt that has spent it is cut like one whose deadline passed: its gateway refuses its next
call (``spend_cap_attempt``, whatever ``--on-cap`` says), writes the attempt's cut record, and the
agent's host side (``agents.sandbox_host``), which watches that record, ends the agent phase as at
the deadline; the verifier scores what exists and the receipt names the cap. Nothing is voided.

Three parties read the same figures here, so they never disagree:

- the gateway (``runner.ops.gateway.server``) refuses a call over a cap (``402``, on the ledger),
  so no harness can spend past it whatever the runner is doing: under ``stop`` every call of the
  capped scope, under ``finish`` the calls of attempts that had not called the model yet;
- the runner (``runner.schedule.driver``) stops starting, pauses the run (``run_paused`` with
  cause ``spend``) and, under ``stop``, stops the running attempts and records them as cut
  (``cuts.jsonl``), which the voiding table's ``spend_cap_stopped`` row voids;
- ``marathon status`` and the console show the cap and the time to it.

Spend is the ledger's tokens priced by ``runner.results.prices`` (LiteLLM's map or ``--price``).
A cap on a model without a price cannot be kept, so the preflight refuses it (``require_priced``).

    <out>/.runner/gateway/caps.json    run_usd, arm_usd, on_cap, prices, model (written by the runner)
    <out>/.runner/gateway/cuts.jsonl   one line per cap that stopped attempts: the attempts it cut
    <out>/.runner/gateway/attempts/<id>.cut.json   an attempt its own spend cap ended (the gateway)
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from modes import safeio, safetext
from modes.values import depth_within
from runner.results.ledger import (
    SPEND_CAP_ARM,
    SPEND_CAP_ATTEMPT,
    SPEND_CAP_RUN,
    AttemptUsage,
    Key,
    Ledger,
    LedgerReader,
    call_from_dict,
)
from runner.results.prices import Pricer, pricer_of
from runner.results.tree import gateway_dir

CAPS_FILE = "caps.json"
CUTS_FILE = "cuts.jsonl"
FINISH, STOP = "finish", "stop"
ON_CAP = (FINISH, STOP)
#: the scopes of a cap, and the gateway's refusal code for each (the ledger's ``refused``)
RUN, ARM, ATTEMPT = "run", "arm", "attempt"
CODE = {RUN: SPEND_CAP_RUN, ARM: SPEND_CAP_ARM, ATTEMPT: SPEND_CAP_ATTEMPT}


def caps_path(out: Path) -> Path:
    return gateway_dir(out) / CAPS_FILE


def cuts_path(out: Path) -> Path:
    return gateway_dir(out) / CUTS_FILE


@dataclass(frozen=True)
class Caps:
    """The run's caps in USD (None: none) and what happens to running attempts at one."""

    run_usd: float | None = None
    arm_usd: float | None = None
    on_cap: str = FINISH
    prices: tuple[str, ...] = ()  # the run's ``--price`` items: the gateway prices as the runner does
    model: str | None = None  # the run's ``--model``: the price of a call that names none
    attempt_usd: float | None = None  # each attempt's budget in USD (cut like a deadline, not voided)

    @property
    def any(self) -> bool:
        return self.purse or self.attempt_usd is not None

    @property
    def purse(self) -> bool:
        """A run or arm cap: the operator's purse (the runner pauses at it)."""
        return self.run_usd is not None or self.arm_usd is not None

    def pricer(self) -> Pricer:
        return pricer_of(self.prices, (), self.model)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "prices": list(self.prices)}


def _usd(v: Any) -> float | None:
    return (
        float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        else None
    )


def caps_from_dict(d: Any) -> Caps:
    """The caps a record says; no caps for anything that is not one (never a zero cap)."""
    if not isinstance(d, dict):
        return Caps()
    prices = d.get("prices")
    return Caps(
        run_usd=_usd(d.get("run_usd")),
        arm_usd=_usd(d.get("arm_usd")),
        on_cap=STOP if d.get("on_cap") == STOP else FINISH,
        prices=tuple(str(p) for p in prices if isinstance(p, str)) if isinstance(prices, list) else (),
        model=d.get("model") if isinstance(d.get("model"), str) else None,
        attempt_usd=_usd(d.get("attempt_usd")),
    )


def write_caps(out: Path, caps: Caps) -> None:
    """The runner's record of its caps, read by every host's gateway (a resume with other caps
    rewrites it, and the gateways take the new ones within a poll)."""
    gateway_dir(out).mkdir(parents=True, exist_ok=True)
    safeio.write_atomic(caps_path(out), safetext.dumps(caps.to_json(), pretty=True) + "\n")


def read_caps(out: Path) -> Caps:
    d = safeio.load_own_json(caps_path(out))
    return Caps() if isinstance(d, safeio.Refused) else caps_from_dict(d)


def require_priced(caps: Caps) -> str | None:
    """Why these caps cannot be kept (one line), or None: a cap needs a price for the run's model."""
    if not caps.any:
        return None
    if not caps.model:
        return "--max-spend/--max-spend-arm/--max-spend-attempt need the run's --model, to price its calls"
    r = caps.pricer().rates(caps.model)
    if isinstance(r, str):
        return f"--max-spend/--max-spend-arm/--max-spend-attempt cannot be kept: no price for {r}"
    return None


@dataclass(frozen=True)
class Reached:
    """A cap reached: its scope, the arm (scope ``arm``), what was spent and the cap."""

    scope: str
    arm: str | None
    spent: float
    cap: float

    @property
    def code(self) -> str:
        return CODE[self.scope]

    def text(self) -> str:
        who = {RUN: "the run", ATTEMPT: "the attempt"}.get(self.scope, f"arm {self.arm}")
        return f"spend cap of {who} reached: ${self.spent:.2f} spent, cap ${self.cap:.2f}"


@dataclass
class Tally:
    """The run's spend so far, per arm and per attempt, kept up to date from the ledger incrementally
    (``update``: only the lines appended since the last look are read)."""

    out: Path
    pricer: Pricer
    ledger: Ledger = field(default_factory=Ledger)
    cost: dict[Key, float] = field(default_factory=dict)  # priced attempts' USD
    #: calls the gateway holding this tally answered and has not read back from the ledger yet
    #: (request id -> (attempt, USD)): counted from the moment their usage was seen
    noted: dict[str, tuple[Key, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reader = LedgerReader(self.out)

    def update(self) -> None:
        touched = self.ledger.add_rows(self._read_back(self.reader.iter_new()))  # streamed
        if self.reader.restarted:  # a ledger replaced under us: count it again from its start
            self.ledger, self.cost = Ledger(), {}
            self.reader = LedgerReader(self.out)
            touched = self.ledger.add_rows(self._read_back(self.reader.iter_new()))
        for key in touched:
            # what could be priced counts: one call under a model the prices lack made the attempt's
            # whole cost unknown and took it out of every cap's sum (found by a probe)
            c = self.pricer.cost(self.ledger.usage(*key))
            if c is not None:
                self.cost[key] = c.for_caps

    def _read_back(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """The rows, each call read back from the ledger leaving ``noted`` (it is counted there now)."""
        for row in rows:
            if isinstance(rid := row.get("request_id"), str):
                self.noted.pop(rid, None)
            yield row

    def note(self, row: dict[str, Any]) -> None:
        """A call's ledger line as soon as its usage is known, before the answer's last bytes reach the
        client: the gateway counts it before that client can send its next call (one gateway's own
        calls are then never a response late; another host's are, until its ledger line is read).
        A call that ended without its usage counts at its estimate (``usage_estimate``)."""
        c = call_from_dict(row)
        if c is None or c.key is None or (c.usage is None and c.estimate is None) or not c.request_id:
            return
        one = AttemptUsage()
        one.add(c)
        cost = self.pricer.cost(one)
        if cost is not None:
            self.noted[c.request_id] = (c.key, cost.for_caps)

    def arm(self, arm: str) -> float:
        return math.fsum([v for k, v in self.cost.items() if k[1] == arm]
                         + [v for k, v in self.noted.values() if k[1] == arm])  # fmt: skip

    def attempt(self, key: Key) -> float:
        return math.fsum([self.cost.get(key, 0.0), *(v for k, v in self.noted.values() if k == key)])

    @property
    def run(self) -> float:
        return math.fsum([*self.cost.values(), *(v for _k, v in self.noted.values())])

    def reached(self, caps: Caps, arms: Iterable[str]) -> list[Reached]:
        """Every cap reached now: the run's, then each arm's."""
        found = []
        if caps.run_usd is not None and self.run >= caps.run_usd:
            found.append(Reached(RUN, None, self.run, caps.run_usd))
        if caps.arm_usd is not None:
            for a in arms:
                spent = self.arm(a)
                if spent >= caps.arm_usd:
                    found.append(Reached(ARM, a, spent, caps.arm_usd))
        return found

    def attempt_reached(self, caps: Caps, key: Key) -> Reached | None:
        """The attempt's own spend cap, when this attempt has spent it."""
        if caps.attempt_usd is None:
            return None
        spent = self.attempt(key)
        return Reached(ATTEMPT, key[1], spent, caps.attempt_usd) if spent >= caps.attempt_usd else None

    def purse_reached(self, caps: Caps, arm: str) -> str | None:
        """The refusal code of the run's cap, else the arm's, when it is reached; None otherwise."""
        if not caps.purse:
            return None
        if caps.run_usd is not None and self.run >= caps.run_usd:
            return CODE[RUN]
        if caps.arm_usd is not None and self.arm(arm) >= caps.arm_usd:
            return CODE[ARM]
        return None

    def refusal(self, caps: Caps, key: Key, started: bool) -> str | None:
        """The gateway's refusal code for a call of attempt ``key``, or None: every call past the
        attempt's own cap; past the run's or the arm's, under ``stop`` every call, under ``finish``
        the calls of an attempt that had not started when the cap was reached (``started``: the
        gateway's judgement, ``Gateway._cap_refusal``)."""
        if self.attempt_reached(caps, key) is not None:
            return CODE[ATTEMPT]
        if started and caps.on_cap == FINISH:
            return None
        return self.purse_reached(caps, key[1])


# --------------------------------------------------------------------------------------- cuts


def write_cut(out: Path, reached: Reached, attempts: Iterable[tuple[str, str, str]]) -> None:
    """Record the attempts a cap stopped (``--on-cap stop``), before they are stopped: the voiding
    table reads this (``cut_of``) whenever the attempt is classified, by the runner or later."""
    row = {
        "at": time.time(),
        "scope": reached.scope,
        "arm": reached.arm,
        "spent_usd": round(reached.spent, 6),
        "cap_usd": reached.cap,
        "attempts": [{"task": t, "arm": a, "stamp": s} for t, a, s in attempts],
    }
    gateway_dir(out).mkdir(parents=True, exist_ok=True)
    safeio.append_line(cuts_path(out), (safetext.dumps(row) + "\n").encode())


def read_cuts(out: Path) -> list[Mapping[str, Any]]:
    raw = safeio.read_own(cuts_path(Path(out)))
    if isinstance(raw, safeio.Refused):
        return []
    rows = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(d, dict) and depth_within(d, safeio.OWN_DEPTH):
            rows.append(d)
    return rows


def cut_of(out: Path, task: str, arm: str, stamp: str) -> str:
    """Why a cap stopped this attempt ("" when none did), in the reader's words."""
    for d in read_cuts(out):
        for a in d.get("attempts") or []:
            if isinstance(a, dict) and (a.get("task"), a.get("arm"), a.get("stamp")) == (task, arm, stamp):
                spent, cap = _usd(d.get("spent_usd")) or 0.0, _usd(d.get("cap_usd")) or 0.0
                scope = "the run" if d.get("scope") == RUN else f"arm {safetext.clean(str(d.get('arm')), 40)}"
                return (
                    f"stopped at the spend cap of {scope} (${spent:.2f} spent, cap ${cap:.2f}; --on-cap stop)"
                )
    return ""


# ------------------------------------------------------------------------------ an attempt's own cap

ATTEMPT_CUTS_DIR = "attempt_cuts"


def attempt_cut_path(out: Path, attempt_id: str) -> Path:
    """The gateway's record that attempt ``attempt_id`` has spent its own cap (host-side only: no
    sandbox mounts ``.runner``); its harbor process is told the path (``modes.gateway.CUT_VAR``)."""
    return gateway_dir(out) / ATTEMPT_CUTS_DIR / f"{attempt_id}.json"


def write_attempt_cut(out: Path, attempt_id: str, key: Key, reached: Reached) -> None:
    """Record (once, atomically) that this attempt has spent its own cap: its agent's host side ends
    the phase at this file, and the report names the cut from it. A record already there stays (a
    restarted gateway refusing the attempt again does not move the moment of the cut)."""
    path = attempt_cut_path(out, attempt_id)
    if os.path.lexists(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {
        "at": time.time(),
        "attempt": attempt_id,
        "task": key[0],
        "arm": key[1],
        "stamp": key[2],
        "scope": ATTEMPT,
        "spent_usd": round(reached.spent, 6),
        "cap_usd": reached.cap,
        "text": reached.text(),
    }
    safeio.write_atomic(path, safetext.dumps(row) + "\n")


def attempt_cuts(out: Path) -> dict[Key, Mapping[str, Any]]:
    """Every attempt its own spend cap ended, by (task, arm, stamp): the gateway's records."""
    d = gateway_dir(Path(out)) / ATTEMPT_CUTS_DIR
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return {}
    found: dict[Key, Mapping[str, Any]] = {}
    for n in names:
        if not n.endswith(".json") or n.startswith("."):
            continue
        row = safeio.load_own_json(d / n)
        if isinstance(row, dict) and all(isinstance(row.get(k), str) for k in ("task", "arm", "stamp")):
            found[(row["task"], row["arm"], row["stamp"])] = row
    return found
