"""Messages that workers post to the App ("messages up"). Each carries one frozen record from
``console.feeds`` (or plain text), never a widget and never an untyped mapping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from console.feeds import PoolView, RunEvent, RunnerInfo, TreeSnapshot

if TYPE_CHECKING:
    from runner.schedule.fleet.cluster import NodeState


@dataclass
class TreeData(Message):
    """New cell values from the watcher."""

    snapshot: TreeSnapshot
    changed_at: float | None = None  # monotonic time of the file batch that triggered it (benchmarks)


@dataclass
class Heartbeat(Message):
    """The watcher looked and found nothing new: the data on screen is current as of ``at``."""

    at: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Heartbeat)


@dataclass
class RunnerData(Message):
    """The runner as its registry, configuration, claims and events describe it."""

    info: RunnerInfo

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunnerData)


@dataclass
class EventsData(Message):
    """New lines at the end of ``.runner/events.jsonl``."""

    events: tuple[RunEvent, ...]


@dataclass
class PoolData(Message):
    """Docker address-pool accounting (or why it is unavailable)."""

    status: PoolView | None
    error: str | None = None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PoolData)


@dataclass
class ActionDone(Message):
    """A destructive or starting action finished: what it did, as text for the operator."""

    title: str
    text: str
    ok: bool = True


@dataclass
class NodesData(Message):
    """The cluster's Docker hosts as its head reports them (or why it does not answer)."""

    nodes: tuple[NodeState, ...] | None
    error: str | None = None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodesData)
