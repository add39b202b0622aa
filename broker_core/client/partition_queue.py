"""One partition's queue of a producer: its pending messages, its batches in flight, counters and
registration.

Its own module because both halves of a producer use it: registration (``producer_connection``)
and the send path (``producer_queue``, ``producer_sender``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.client.builder import PendingMessage
    from broker_core.producer.registry import ProducerRegistry
    from broker_core.topic.appends import PreparedAppend
    from broker_core.topic.topic_log import TopicLog


@dataclass(slots=True, eq=False)
class InFlight:
    """One batch taken from a partition's queue, from its upload until it is resolved.

    ``floors`` are the dedup floors its segment is written against: the highest sequence id of the
    batches ahead of it (they will commit first).
    """

    messages: list[PendingMessage]  # as taken, in send order
    ordered: list[PendingMessage]  # in commit order (``plan_entries``)
    layout: list[int]
    max_sequence_id: int
    dedup: bool
    floors: dict[str, int] | None
    partial: bool  # cut by the publish delay, not by a size limit or a flush
    prepared: PreparedAppend | None = None
    error: BaseException | None = None
    stage: int = 0  # UPLOADING, UPLOADED (``prepared`` or ``error`` set), COMMITTING, DONE (to resolve)


UPLOADING, UPLOADED, COMMITTING, DONE = range(4)


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


__all__ = ["COMMITTING", "DONE", "UPLOADED", "UPLOADING", "InFlight", "PartitionQueue"]
