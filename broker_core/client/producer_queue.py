"""A producer's queue for one partition: what is waiting, and how far it has got.

The counters only grow, so a flush can name the point it waits for (``flush_target``) and see it
passed (``committed``) without holding the queue.  The registration epoch and the topic's identity
live here too, because every commit to the partition carries them.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.client.builder import PendingMessage
    from broker_core.producer_registry import ProducerRegistry
    from broker_core.topic_log import TopicLog


class PartitionQueue:
    """One partition's pending messages and counters; guarded by the producer's lock."""

    __slots__ = (
        "bytes", "committed", "enqueued", "epoch", "flush_target", "log", "messages", "registry", "taken", "topic_id",
    )

    def __init__(self, log: TopicLog, registry: ProducerRegistry) -> None:
        self.log = log
        self.registry = registry
        self.messages: deque[PendingMessage] = deque()
        self.bytes = 0
        self.enqueued = 0
        self.taken = 0
        self.committed = 0
        self.flush_target = 0
        self.epoch = 0
        self.topic_id: str | None = None  # the metaData id of the topic registered on (see ``_register``)


__all__ = ["PartitionQueue"]
