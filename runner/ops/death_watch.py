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
                for ev in self._stream:
                    self._record(ev)
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - the stream broke (engine restart): reconnect and replay
                pass
            finally:
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
