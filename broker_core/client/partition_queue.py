"""One partition's queue of a producer: its pending messages, counters and registration.

Its own module because both halves of a producer use it: registration (``producer_connection``)
and the send path (``producer_queue``, ``producer_sender``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.client.builder import PendingMessage
    from broker_core.producer.registry import ProducerRegistry
    from broker_core.topic.topic_log import TopicLog


class PartitionQueue:
    """One partition's pending messages and counters; guarded by the producer's lock.

    The registration epoch and the topic's identity live here too: every commit to the partition
    carries them.
    """

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
