"""A producer's sender thread: it turns the partition queues into commits.

``send_async`` only queues; one daemon sender thread per producer commits.  With batching, a batch
is flushed when it reaches ``batching_max_messages`` or ``batching_max_allowed_size_in_bytes``,
when its oldest message is ``batching_max_publish_delay_ms`` old, or on ``flush()``/``send()``;
without batching, everything queued for a partition is committed together as separate entries
(group commit).  Each commit first waits for the backlog quota.  Callbacks run on this thread after
the commit, so a callback means the message is durable.  A commit that fails resolves every message
of its batch with the error; a deleted topic or a fencing fails the producer for good.

``MessageId``s are worked out only for batches in which somebody waits for one (``send``, or
``send_async`` with a callback): a plain ``send_async`` has nobody to hand its id to.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from broker_core.client.builder import PendingMessage, plan_entries, rows_for
from broker_core.client.partition_queue import PartitionQueue
from broker_core.client.producer_queue import ProducerQueueing
from broker_core.errors import DirectoryGone, PulsarException, TopicDeleted
from broker_core.message_id import MessageId

if TYPE_CHECKING:
    import threading

    from broker_core.jobs.backlog_guard import BacklogQuotaGuard
    from broker_core.log.segment import CompressionType
    from broker_core.naming import TopicName


class ProducerSender(ProducerQueueing):
    """The sender-thread half of a producer; ``Producer.__init__`` sets the attributes below and
    starts ``_run`` on a thread."""

    _batching: bool
    _batch_delay_s: float
    _key_based: bool
    _compression: CompressionType
    _send_timeout_s: float | None
    _quota: BacklogQuotaGuard
    _partition_names: list[TopicName]
    _done_cond: threading.Condition
    _last_sequence_id: int

    def _ready(self, q: PartitionQueue, now: float) -> bool:
        if not q.messages:
            return False
        if not self._batching or self._closed or q.taken < q.flush_target:
            return True
        return (
            len(q.messages) >= self._batch_max_messages
            or q.bytes >= self._batch_max_bytes
            or now - q.messages[0].enqueued_s >= self._batch_delay_s
        )

    def _take(self, q: PartitionQueue) -> list[PendingMessage]:
        limit = self._batch_max_messages if self._batching else 10_000
        byte_limit = self._batch_max_bytes if self._batching else 16 << 20
        out: list[PendingMessage] = []
        size = 0
        while q.messages and (
            (len(out) < limit and size < byte_limit)
            or (out and out[-1].is_chunk and out[-1].chunk_id != (out[-1].num_chunks or 0) - 1)
        ):
            msg = q.messages.popleft()
            out.append(msg)
            size += msg.size_bytes
            q.bytes -= msg.size_bytes
        q.taken += len(out)
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready = [q for q in self._queues if self._ready(q, now)]
                    if ready:
                        break
                    if self._closed and not any(q.messages for q in self._queues):
                        return
                    waits = [self._batch_delay_s - (now - q.messages[0].enqueued_s) for q in self._queues if q.messages]
                    timeout = min([*waits, self._lease_ms / 3000])
                    self._cond.wait(timeout=max(timeout, 0.0005))
                    self._renew_leases()
                work = [(q, self._take(q)) for q in ready]
                self._pending_total -= sum(len(batch) for _, batch in work)
                self._cond.notify_all()
            for q, batch in work:
                if batch:
                    self._commit(q, batch)
            self._renew_leases()

    def _commit(self, q: PartitionQueue, batch: list[PendingMessage]) -> None:
        partition = self._queues.index(q) if self._partitioned else -1
        try:
            if self._failure is not None:
                raise self._failure
            self._quota.admit(
                self._partition_names[self._queues.index(q)],
                deadline_s=self._deadline(batch[0].enqueued_s),
                closed=lambda: self._client._closed,
            )
            ordered, layout = plan_entries(batch, batching=self._batching, key_based=self._key_based)
            table = rows_for(ordered, self._name, schema_version=self._schema_version)
            result = q.log.append(
                table, layout=layout, compression=self._compression, dedup=self._dedup, producer_epoch=q.epoch,
                topic_id=q.topic_id,
            )
        except BaseException as exc:  # resolve every waiter, whatever happened
            error = exc if isinstance(exc, PulsarException) else PulsarException(f"commit failed: {exc!r}")
            if isinstance(exc, TopicDeleted | DirectoryGone):  # disconnected for good, as in Pulsar
                self._failure = error = self._failure or self._disconnected(exc)
            elif isinstance(exc, PulsarException) and type(exc).__name__ == "ProducerFenced":
                self._failure = exc
            for msg in batch:
                msg.error = error
            self._resolve(q, batch)
            return
        if any(msg.wants_id for msg in ordered):  # a plain send_async has nobody to hand its id to
            self._assign_ids(q, partition, ordered, result.kept, result.segment)
        seq_max = max(msg.sequence_id for msg in batch)
        with self._cond:
            self._last_sequence_id = max(self._last_sequence_id, seq_max)
        self._resolve(q, batch)

    def _assign_ids(
        self, q: PartitionQueue, partition: int, ordered: list[PendingMessage], kept: np.ndarray, segment: Any
    ) -> None:
        """Set the ``MessageId`` of each committed message (-1s for a duplicate dropped by dedup)."""
        ledger = q.log.log.cached_snapshot().ledger_id
        entry_list: list[int] = []
        batch_list: list[int] = []
        if segment is not None:
            offsets = segment.base_offset + np.cumsum(kept) - 1
            entries, batches = q.log.ids_for_offsets(offsets[kept])
            entry_list, batch_list = entries.tolist(), batches.tolist()
        i = 0
        for was_kept, msg in zip(kept.tolist(), ordered, strict=True):
            if was_kept:
                msg.result = MessageId._trusted(partition, ledger, entry_list[i], batch_list[i])
                i += 1
            else:
                msg.result = MessageId._trusted(partition, -1, -1, -1)

    def _deadline(self, since_s: float) -> float | None:
        """When a send begun at ``since_s`` (monotonic) times out; None without a send timeout."""
        return None if self._send_timeout_s is None else since_s + self._send_timeout_s

    def _resolve(self, q: PartitionQueue, batch: list[PendingMessage]) -> None:
        """Mark a committed (or failed) batch done, wake waiters, then run the callbacks in order."""
        with self._done_cond:
            for msg in batch:
                msg.done = True
            q.committed += len(batch)
            self._done_cond.notify_all()
        for msg in batch:
            if msg.callback is not None:
                msg.callback(msg)


__all__ = ["ProducerSender"]
