"""The engine's own record of trial containers that died from outside, for the voiding table.

Why: a trial's container killed while harbor's verifier runs (``docker kill``, the OOM killer, a
crash of its init) fails the verifier with harbor's ``RewardFileNotFoundError``, which harbor files
as the verifier's failure, and nothing in the trial's files says the sandbox went away; the arm
would carry an infrastructure failure (the fresh-clone chaos run hit exactly this). Only the
engine knows, and the agent cannot forge what it says: so the runner follows the engine's
``die``/``stop``/``oom`` events of compose main containers while it runs, and a trial whose main
container died without a stop request before the trial ended is voided
(``runner.results.rules.VOIDING``, row ``container_died``). Harbor's own teardown always stops
(``docker compose down``: a ``stop`` event follows the ``die``), and only after the verifier
finished. The stop request tells them apart after the verifier (the engine reports a killed
container's ``die`` some milliseconds after its exec'd verifier has died and harbor has already
closed the verifier phase); before the verifier finished, any death is someone else's, a stop
too: an engine restart stops every container with the same ``kill``/``die``/``stop`` events as
harbor's teardown (the fresh-clone chaos run of 2026-12-05 scored such an attempt against its arm).

The runner watches its own engine (``--env docker`` without ``--cluster``); in a cluster run each
attempt's Ray job watches its host's engine and records what it saw (``runner.results.deaths``). A
connection loss (engine restart) reconnects and replays from the last event the engine kept.

An engine that goes away is itself the answer for a trial that failed as it went: a restart stops
every container (its events may come after harbor closed the verifier phase, or never, when the
stream closes first), and the runner may classify the trial before the engine is back. The fresh-clone
chaos run of 2026-12-07 scored such an attempt against its arm ("Failed to remove verifier reward
files (exit code 137)": the restart killed harbor's own command in the container). So the watch
keeps when its established stream was lost (``engine_lost_near``); no agent can make the host's
engine drop its API connections.
"""

from __future__ import annotations

import contextlib
import threading
import time

from runner.ops.dockerapi import COMPOSE_PROJECT, connect
from runner.results.deaths import Death, first_unstopped

COMPOSE_SERVICE = "com.docker.compose.service"
MAIN_SERVICE = "main"  # harbor's MAIN_SERVICE_NAME
#: deaths kept at most (oldest dropped): one per trial container is plenty for any run's window
MAX_KEPT = 20_000
#: an errored trial that ended this close to the engine's loss (before it, or while the engine was
#: away) failed with the engine: a restart stops containers for up to its shutdown timeout first
LOSS_WINDOW_SEC = 30.0
#: how long the classification of an errored trial waits for the watch to see the engine go (the
#: trial can end a moment before the stream breaks) when harbor's own command was killed (exit 137)
KILLED_WAIT_SEC = 15.0


class DeathWatch:
    """A daemon thread following the engine's container events; ``death_before`` answers the runner."""

    def __init__(self, base_url: str | None = None) -> None:
        self.base_url = base_url
        self._deaths: dict[str, list[Death]] = {}
        self._by_id: dict[str, Death] = {}
        self._oom: set[str] = set()  # the engine says "oom" before "die"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream = None
        self._since = time.time()
        self._up = False  # an established stream is open now
        self._lost: list[float] = []  # when an established stream broke (the engine went away)
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="container-deaths", daemon=True)

    def start(self, wait_sec: float = 10.0) -> DeathWatch:
        """Start following; waits (at most ``wait_sec``) for the first connection, so a container that
        dies right after the first start is seen."""
        self._thread.start()
        self.connected.wait(wait_sec)
        return self

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def death_before(self, project: str, end: float, under: float | None = None) -> Death | None:
        """The first death of ``project``'s main container before ``end`` that was no teardown of
        harbor's (``runner.results.deaths.first_unstopped``)."""
        with self._lock:
            return first_unstopped(list(self._deaths.get(project, ())), end, under)

    def engine_lost_near(self, end: float, killed: bool = False) -> str | None:
        """Why a trial that ended at ``end`` with an error failed with the engine, or None: the
        stream was lost within ``LOSS_WINDOW_SEC`` of its end, or the engine has been away since
        before it. With ``killed`` (harbor's own command in the container died by SIGKILL) wait up
        to ``KILLED_WAIT_SEC`` for the loss to show (the trial may end before the stream breaks)."""
        deadline = time.monotonic() + (KILLED_WAIT_SEC if killed else 0.0)
        while True:
            with self._lock:
                lost = [t for t in self._lost if end - LOSS_WINDOW_SEC <= t <= end + LOSS_WINDOW_SEC]
                # away since before the trial ended, however long: it ran without an engine
                if not lost and not self._up and self._lost and self._lost[-1] <= end:
                    lost = self._lost[-1:]
            if lost:
                t = lost[-1]
                when = time.strftime("%H:%M:%S", time.gmtime(t))
                return (
                    f"the engine went away at {when} UTC ({t - end:+.1f} s from the trial's end): its event "
                    "stream broke (an engine restart or crash stops every container)"
                )
            if time.monotonic() >= deadline or self._stop.is_set():
                return None
            self._stop.wait(0.25)

    def is_up(self) -> bool:
        """An event stream is open on the engine now."""
        with self._lock:
            return self._up

    def lost_times(self) -> list[float]:
        """When an established event stream broke (the engine went away), oldest first."""
        with self._lock:
            return list(self._lost)

    def deaths_of(self, projects: set[str]) -> list[Death]:
        """Every death seen of these projects' main containers (what a cluster job records)."""
        with self._lock:
            return [Death(**vars(d)) for p in sorted(projects) for d in self._deaths.get(p, ())]

    def deaths_at(self, project: str) -> list[float]:
        """When ``project``'s main container died, as the engine said (for the reader and tests)."""
        with self._lock:
            return [d.at for d in self._deaths.get(project, ())]

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                client = connect(self.base_url, timeout=30)
            except Exception:  # noqa: BLE001 - the engine away (restart): try again in a moment
                self._stop.wait(1.0)
                continue
            try:
                self._stream = client.events(
                    since=int(self._since),
                    decode=True,
                    filters={
                        "type": "container",
                        "event": ["die", "stop", "oom"],
                        "label": [COMPOSE_PROJECT],
                    },
                )
                self.connected.set()
                with self._lock:
                    self._up = True
                for ev in self._stream:
                    self._record(ev)
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - the stream broke (engine restart): reconnect and replay
                pass
            finally:
                with self._lock:
                    if self._up and not self._stop.is_set():
                        self._lost.append(time.time())
                    self._up = False
                self._stream = None
                with contextlib.suppress(Exception):
                    client.close()
            self._stop.wait(0.5)

    def _record(self, ev: dict) -> None:
        actor = ev.get("Actor") or {}
        attrs = actor.get("Attributes") or {}
        project, cid = attrs.get(COMPOSE_PROJECT), actor.get("ID") or ev.get("id") or ""
        if not project or attrs.get(COMPOSE_SERVICE) != MAIN_SERVICE or not cid:
            return
        at = (ev.get("timeNano") or 0) / 1e9 or float(ev.get("time") or 0)
        self._since = max(self._since, float(int(at)))
        action = ev.get("Action") or ev.get("status")
        with self._lock:
            if action == "die":
                if cid in self._by_id and abs(self._by_id[cid].at - at) < 1e-3:
                    return  # replayed after a reconnect
                d = Death(project, cid, at, str(attrs.get("exitCode", "?")), oom=cid in self._oom)
                self._oom.discard(cid)
                self._deaths.setdefault(project, []).append(d)
                self._by_id[cid] = d
                if len(self._by_id) > MAX_KEPT:
                    old = next(iter(self._by_id))
                    gone = self._by_id.pop(old)
                    self._deaths[gone.project] = [x for x in self._deaths[gone.project] if x is not gone]
            elif action == "oom":
                self._oom.add(cid)
            elif action == "stop" and cid in self._by_id:
                self._by_id[cid].stopped = True
