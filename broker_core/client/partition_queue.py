"""One partition's queue of a producer: its queued messages (in batches of columns, D103), its
batches in flight, counters and registration.

Its own module because both halves of a producer use it: registration (``producer_connection``)
and the send path (``producer_queue``, ``producer_sender``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker_core.client.builder import QueuedBatch
    from broker_core.producer.registry import ProducerRegistry
    from broker_core.topic.appends import PreparedAppend
    from broker_core.topic.topic_log import TopicLog


@dataclass(slots=True, eq=False)
class InFlight:
    """One batch taken from a partition's queue, from its upload until it is resolved.

    ``floors`` are the dedup floors its segment is written against: the highest sequence id of the
    batches ahead of it (they will commit first).
    """

    batch: QueuedBatch  # as taken, in send order
    order: list[int] | None  # its commit order (``plan_entries``, run by the upload; None: send order)
    layout: list[int]  # the entry layout in commit order (set with it by the upload)
    max_sequence_id: int
    dedup: bool
    floors: dict[str, int] | None
    partial: bool  # cut by the publish delay, not by a size limit or a flush
    prepared: PreparedAppend | None = None
    error: BaseException | None = None
    stage: int = 0  # UPLOADING, UPLOADED (``prepared`` or ``error`` set), COMMITTING, DONE (to resolve)
    launched_s: float = 0.0  # when it was taken (monotonic): its upload and commit time is a metric


UPLOADING, UPLOADED, COMMITTING, DONE = range(4)


class PartitionQueue:
    """One partition's queued messages, its batches in flight and counters; guarded by the producer's lock.

    Queued messages are held in ``QueuedBatch`` columns, each batch as the sender will take it: the
    send path appends to the ``open`` one (the last) until it reaches a batch limit, the number of
    messages or bytes (a chunked message's chunks stay together), so taking a batch is taking the
    first one.

    The registration epoch and the topic's identity live here too: every commit to the partition
    carries them.
    """

    __slots__ = (
        "batches", "bytes", "commit_s", "commit_started_s", "committed", "committing", "enqueued", "epoch",
        "flush_target", "in_flight", "in_flight_messages", "log", "open", "queued", "registry", "taken", "topic_id",
        "upload_s",
    )

    def __init__(self, log: TopicLog, registry: ProducerRegistry) -> None:
        self.log = log
        self.registry = registry
        self.batches: deque[QueuedBatch] = deque()
        self.open: QueuedBatch | None = None  # the last of ``batches`` while it takes more messages
        self.queued = 0  # messages in ``batches``
        self.bytes = 0  # their sizes
        self.enqueued = 0
        self.taken = 0
        self.committed = 0
        self.flush_target = 0
        # the pipeline (``producer_pipeline``): batches taken and not yet resolved, in order, how many
        # messages they hold, and whether one of their commits is in flight (one at a time, in order)
        self.in_flight: deque[InFlight] = deque()
        self.in_flight_messages = 0
        self.committing = False
        # how long the partition's last upload and last commit took, and when the commit in flight
        # began (monotonic seconds): whether a batch cut now can still ride the next group commit
        self.upload_s = 0.0
        self.commit_s = 0.0
        self.commit_started_s = 0.0
        self.epoch = 0
        self.topic_id: str | None = None  # the metaData id of the topic registered on (see ``_register``)


RIDE_MARGIN_FRACTION = 0.25  # of an upload's time: slack for a store's variance and the sender's wake-up
RIDE_MARGIN_MIN_S = 0.002


def delay_cut_s(q: PartitionQueue, due_s: float) -> float | None:
    """When a batch of ``q`` whose publish delay ran out at ``due_s`` is cut (monotonic seconds, at
    least ``due_s``), or None: it waits for the partition's uploading partial batch, whose end
    wakes the sender thread.

    Each upload is a request (billed, and CPU), and a batch cut by the delay commits only with the
    partition's next group commit.  While a commit is in flight, that group commit takes whatever
    has uploaded when the commit ends: a batch is cut at the last moment its upload (as long as
    the last one, with a margin) still ends before then (as long as the last commit), taking every
    message that arrives until that moment in one upload.  Past that moment the batch cannot ride
    that group commit, and, as when no commit is in flight, it waits while another partial batch
    uploads and goes with the messages that arrive meanwhile, since those could not commit much
    sooner on their own.  Before any commit was timed this is that last rule alone (D79).
    """
    if q.committing and q.commit_s > 0.0:
        margin_s = max(RIDE_MARGIN_MIN_S, RIDE_MARGIN_FRACTION * q.upload_s)
        ride_s = q.commit_started_s + q.commit_s - q.upload_s - margin_s
        if due_s <= ride_s + margin_s:
            return max(due_s, ride_s)
    if any(item.partial and item.stage == UPLOADING for item in q.in_flight):
        return None
    return due_s


__all__ = ["COMMITTING", "DONE", "UPLOADED", "UPLOADING", "InFlight", "PartitionQueue", "delay_cut_s"]
