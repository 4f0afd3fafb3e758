"""Messages that workers post to the App ("messages up"). Each carries plain records, never widgets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class TreeData(Message):
    """New cell values from the watcher: all cells (``full``) or only the changed ones."""

    cells: dict[tuple[str, str], Any]
    full: bool
    tasks: list[str]
    arms: list[str]
    summary: dict[str, Any]
    alarm: str | None
    notes: list[str]
    scanned_at: float  # time.time() of the scan that produced these values
    history: dict[tuple[str, str], Any] = field(default_factory=dict)  # all-time cells, for drill-down
    changed_at: float | None = None  # monotonic time of the file batch that triggered it (benchmarks)


@dataclass
class Heartbeat(Message):
    """The watcher looked and found nothing new: the data on screen is current as of ``at``."""

    at: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Heartbeat)


@dataclass
class RunnerData(Message):
    """The runner as its registry, configuration and claims describe it."""

    info: Any

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunnerData)


@dataclass
class EventsData(Message):
    """New lines at the end of ``.runner/events.jsonl`` (already parsed)."""

    events: list[dict] = field(default_factory=list)


@dataclass
class PoolData(Message):
    """Docker address-pool accounting (or why it is unavailable)."""

    status: Any
    error: str | None = None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PoolData)


@dataclass
class ActionDone(Message):
    """A destructive or starting action finished: what it did, as text for the operator."""

    title: str
    text: str
    ok: bool = True
