"""What a producer, consumer, reader or table view needs from the ``Client`` that created it.

``Client`` builds every handle, and every handle calls back into its client: to reach the process's
``Broker`` of the root, to read the time, to leave the client's handle set when it closes.  Typing
those calls against ``Client`` itself would make each handle module import ``client.py``, which
imports them all, an import circle.  The handles depend on this small interface instead (and a
handle that needs more declares it beside itself, e.g. ``dead_letters.LetterClient``); ``Client``
satisfies it, which mypy checks wherever ``Client`` passes itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker_core.broker.broker import Broker
    from broker_core.clock import Clock
    from broker_core.naming import TopicName
    from broker_core.topic.topic_log import TopicLog


class HandleOwner(Protocol):
    """The client as its handles see it (members are the client's own, read-only here)."""

    @property
    def _broker(self) -> Broker:
        """The process's shared state of the storage root."""

    @property
    def _clock(self) -> Clock:
        """The client's time source (tests inject a manual clock)."""

    @property
    def _poll_ms(self) -> int:
        """How often a drained reader polls storage for other processes' commits."""

    @property
    def _closed(self) -> bool:
        """Whether the client was closed."""

    @property
    def _lock(self) -> threading.Lock:
        """Guards the handle set."""

    @property
    def _handles(self) -> weakref.WeakSet[Any]:
        """The open handles ``Client.close`` closes."""

    def _forget(self, handle: Any) -> None:
        """Remove a closed handle from the handle set."""

    def _topic_dir(self, topic: TopicName) -> str:
        """An internal topic's directory relative to the root."""

    def _lookup_partitions(self, topic: TopicName) -> list[TopicName]:
        """A topic's internal topics (the broker's ``partitions``, timed as a lookup)."""

    def _lookup_log(self, topic: TopicName) -> TopicLog:
        """An internal topic's shared log (the broker's ``topic_log``, timed as a lookup)."""


__all__ = ["HandleOwner"]
