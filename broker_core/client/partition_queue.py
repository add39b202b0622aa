"""One partition's queue of a producer: its pending messages, counters and registration.

Its own module because both halves of a producer use it: registration (``producer_connection``)
and the send path (``producer_queue``, ``producer_sender``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.client.builder import PendingMessage
    from broker_core.client.producer_pipeline import InFlight
    from broker_core.producer.registry import ProducerRegistry
    from broker_core.topic.topic_log import TopicLog


class PartitionQueue:
    """One partition's pending messages, its batches in flight and counters; guarded by the producer's lock.

    The registration epoch and the topic's identity live here too: every commit to the partition
    carries them.
    """

    __slots__ = (
        "bytes", "committed", "committing", "enqueued", "epoch", "flush_target", "in_flight", "in_flight_messages",
        "log", "messages", "registry", "taken", "topic_id",
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
        # the pipeline (``producer_pipeline``): batches taken and not yet resolved, in order, how many
        # messages they hold, and whether one of their commits is in flight (one at a time, in order)
        self.in_flight: deque[InFlight] = deque()
        self.in_flight_messages = 0
        self.committing = False
        self.epoch = 0
        self.topic_id: str | None = None  # the metaData id of the topic registered on (see ``_register``)


__all__ = ["PartitionQueue"]
