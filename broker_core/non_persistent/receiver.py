"""The ``Receiver`` protocol: how a consumer or reader is connected to a non-persistent topic.

The topic dispatches with its lock held, so it cannot wait for a slow consumer or call back into the
client classes: a receiver only takes or refuses a message at once, and a refused message is
dropped (as Pulsar drops a non-persistent message for a consumer without permits).
"""

from __future__ import annotations

from typing import Protocol

from broker_core.message import Message


class Receiver(Protocol):
    """A connected consumer or reader, as the dispatcher sees it."""

    def offer(self, message: Message) -> bool:
        """Take ``message`` (a copy of its own) into the receiver queue without blocking.

        Returns False when the queue is full or the receiver is closing: the message is dropped.
        Called with the topic's lock held, so it must not call back into the topic.
        """
        ...


__all__ = ["Receiver"]
