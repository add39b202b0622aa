"""A producer's pipeline: segments of the next batches upload while a commit is in flight.

On an object store a commit is two round trips (the conditional PUT of the commit JSON, then the
deleted-topic check), and a batch's segment one more.  Done one batch after another, that is all a
partition could do; but segment uploads are independent of log versions, only the commit JSON is
ordered.  So each batch taken from a partition's queue becomes an ``InFlight``: its segment uploads
on a pool worker at once (``TopicLog.prepare``), and whenever the partition has no commit in flight,
the uploaded batches at the head of its line are committed together, in order, each keeping its own
entries (``TopicLog.commit_prepared``): a group commit.

What stays as it was: batches of a partition commit in the order they were taken (an upload that
finishes early waits for those ahead of it), callbacks run on the sender thread in send order,
dedup is checked against the state each commit lands on, a failed commit fails exactly its own
batches, and a segment that is never committed (a failure, a producer killed mid-flight) is never
visible: it is deleted, or left as an orphan for vacuum.  ``max_pending_messages`` (and its
across-partitions twin) bounds the messages in flight per partition, as it bounds the queue, so a
throughput user raises it to deepen the pipeline (``docs/CLIENT.md``).

These are the worker-side tasks; ``producer_sender`` decides what runs when.
"""

from __future__ import annotations

import time
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from broker_core.client.builder import plan_entries, rows_for
from broker_core.client.partition_queue import DONE, UPLOADED, InFlight, PartitionQueue
from broker_core.client.producer_queue import ProducerQueueing
from broker_core.message_id import MessageId

if TYPE_CHECKING:
    import threading

    from broker_core.client.daemon_pool import DaemonPool
    from broker_core.jobs.backlog_guard import BacklogQuotaGuard
    from broker_core.log.segment import CompressionType
    from broker_core.naming import TopicName


_WANTS_ID = attrgetter("wants_id")


class ProducerPipeline(ProducerQueueing):
    """The tasks a producer's pool workers run; ``Producer.__init__`` sets the attributes below."""

    _compression: CompressionType
    _batching: bool
    _key_based: bool
    _quota: BacklogQuotaGuard
    _partition_names: list[TopicName]
    _send_timeout_s: float | None
    _pool: DaemonPool
    _done_cond: threading.Condition

    def _upload(self, q: PartitionQueue, item: InFlight) -> None:
        """Wait for the backlog quota, build the batch's rows and write its segment (a pool task)."""
        started_s = time.monotonic()
        try:
            if self._failure is not None:
                raise self._failure
            self._quota.admit(
                self._partition_names[self._queues.index(q)],
                deadline_s=self._deadline(item.batch.enqueued_s),
                closed=lambda: self._client._closed,
                policy_source=self._effective,
            )
            item.order, item.layout = plan_entries(item.batch, batching=self._batching, key_based=self._key_based)
            table = rows_for(item.batch, item.order, self._name, schema_version=self._schema_version,
                             encoder=self._bulk)
            item.prepared = q.log.prepare(table, layout=item.layout, compression=self._compression,
                                          dedup=item.dedup, floors=item.floors)
        except BaseException as exc:  # resolved with the batch, in order, by the sender thread
            item.error = exc
        with self._cond:
            item.stage = UPLOADED
            if item.error is None:
                q.upload_s = time.monotonic() - started_s
            self._cond.notify_all()

    def _commit_group(self, q: PartitionQueue, group: list[InFlight]) -> None:
        """Commit the uploaded batches of ``group`` in one commit and work out their ids (a pool task);
        the sender thread resolves them."""
        ready = [item for item in group if item.error is None and item.prepared is not None]
        prepared = [item.prepared for item in ready if item.prepared is not None]
        try:
            if self._failure is not None:
                q.log.discard_prepared(prepared)
                raise self._failure
            if ready:
                started_s = time.monotonic()
                results = q.log.commit_prepared(prepared, producer_epoch=q.epoch, topic_id=q.topic_id)
                q.commit_s = time.monotonic() - started_s  # read by the sender thread: a float, atomic
                partition = self._queues.index(q) if self._partitioned else -1
                for item, result in zip(ready, results, strict=True):
                    if any(map(_WANTS_ID, item.batch.extras.values())):  # a plain send_async has nobody
                        self._assign_ids(q, partition, item, result.kept, result.segment)  # to hand it to
        except BaseException as exc:
            for item in ready:
                item.error = exc
        with self._cond:
            for item in group:
                item.stage = DONE
            q.committing = False
            self._cond.notify_all()

    def _assign_ids(self, q: PartitionQueue, partition: int, item: InFlight, kept: np.ndarray, segment: Any) -> None:
        """Set the ``MessageId`` of each committed message that has a ``PendingMessage`` (-1s for a
        duplicate dropped by dedup); ``kept`` is in commit order."""
        ledger = q.log.log.cached_snapshot().ledger_id
        extras = item.batch.extras
        pending = list(extras.values())
        positions = np.fromiter(extras.keys(), dtype=np.int64, count=len(extras))  # in the batch, send order
        if item.order is not None:  # where each went in commit order (the inverse permutation)
            positions = np.argsort(np.asarray(item.order, dtype=np.int64))[positions]
        by_position = np.argsort(positions, kind="stable")
        positions = positions[by_position]
        was_kept = kept[positions]
        entry_list: list[int] = []
        batch_list: list[int] = []
        if segment is not None and was_kept.any():
            offsets = segment.base_offset + (np.cumsum(kept) - 1)[positions[was_kept]]
            entries, batches = q.log.ids_for_offsets(offsets)
            entry_list, batch_list = entries.tolist(), batches.tolist()
        i = 0
        for index, keep in zip(by_position.tolist(), was_kept.tolist(), strict=True):
            if keep:
                pending[index].result = MessageId._trusted(partition, ledger, entry_list[i], batch_list[i])
                i += 1
            else:
                pending[index].result = MessageId._trusted(partition, -1, -1, -1)

    def _deadline(self, since_s: float) -> float | None:
        """When a send begun at ``since_s`` (monotonic) times out; None without a send timeout."""
        return None if self._send_timeout_s is None else since_s + self._send_timeout_s


__all__ = ["ProducerPipeline"]
