"""A producer's sender thread: it turns the partition queues into uploads and commits.

``send_async`` only queues; one daemon sender thread per producer decides what happens next, and
pool workers do the storage work (``producer_pipeline``).  With batching, a batch is taken when it
reaches ``batching_max_messages`` or ``batching_max_allowed_size_in_bytes``, when its oldest message
is ``batching_max_publish_delay_ms`` old, or on ``flush()``/``send()``; without batching, everything
queued for a partition is taken together as separate entries.  A batch is taken only while the
partition's messages in flight stay within ``max_pending_messages`` (one batch always may go).
Each taken batch uploads at once; whenever a partition has no commit in flight, its uploaded
batches at the head of the line commit together (each waits for the backlog quota first).
Callbacks run on this thread after the commit, in send order per partition, so a callback means
the message is durable.  A commit that fails resolves every message of its batches with the error;
a deleted topic or a fencing fails the producer for good.

``MessageId``s are worked out only for batches in which somebody waits for one (``send``, or
``send_async`` with a callback): a plain ``send_async`` has nobody to hand its id to.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from broker_core.client import telemetry
from broker_core.client.builder import QueuedBatch
from broker_core.client.partition_queue import COMMITTING, DONE, UPLOADED, InFlight, PartitionQueue, delay_cut_s
from broker_core.client.producer_pipeline import ProducerPipeline
from broker_core.errors import DirectoryGone, PulsarException, TopicDeleted

if TYPE_CHECKING:
    import threading

    from broker_core.naming import TopicName


class ProducerSender(ProducerPipeline):
    """The sender-thread half of a producer; ``Producer.__init__`` sets the attributes below and
    starts ``_run`` on a thread."""

    _batch_delay_s: float
    _partition_names: list[TopicName]
    _done_cond: threading.Condition
    _last_sequence_id: int
    _in_flight_total: int
    _telemetry: dict[str, Any]  # the producer's metric attributes (``telemetry``)

    def _room(self, q: PartitionQueue) -> int:
        """How many messages of ``q`` may go in flight now: ``max_pending_messages`` per partition and
        ``max_pending_messages_across_partitions`` in all (when nothing is in flight, a whole batch)."""
        room = 1 << 62 if not q.in_flight_messages else self._max_pending - q.in_flight_messages
        if self._max_pending_total > 0 and self._in_flight_total:
            room = min(room, self._max_pending_total - self._in_flight_total)
        return room

    def _ready(self, q: PartitionQueue, now: float) -> bool:
        if not q.queued:
            return False
        if self._room(q) < min(q.queued, self._batch_max_messages if self._batching else 10_000):
            return False  # the pipeline is full: wait for a commit to resolve
        if not self._batching or self._closed or q.taken < q.flush_target:
            return True
        if q.queued >= self._batch_max_messages or q.bytes >= self._batch_max_bytes:
            return True
        if now - q.batches[0].enqueued_s < self._batch_delay_s:
            return False
        cut_s = delay_cut_s(q, now)  # when the partition's next group commit is reachable (D79)
        return cut_s is not None and cut_s <= now

    @staticmethod
    def _take(q: PartitionQueue) -> QueuedBatch | None:
        """The first batch of ``q``'s queue: the send path cut its batches at the limits (D103)."""
        if not q.batches:
            return None
        batch = q.batches.popleft()
        if batch is q.open:
            q.open = None
        q.queued -= len(batch)
        q.bytes -= batch.bytes
        q.taken += len(batch)
        return batch

    def _launch(self, q: PartitionQueue, batch: QueuedBatch, dedup: bool) -> InFlight:
        """Put a taken batch in flight behind the others of its partition (under the lock; its entries
        are planned by the upload, off the lock the send path takes for every message)."""
        floors = None
        if dedup and q.in_flight:  # the batches ahead will commit first: their sequence ids are taken
            floors = {self._name: max(item.max_sequence_id for item in q.in_flight)}
        partial = self._batching and len(batch) < self._batch_max_messages and batch.bytes < self._batch_max_bytes
        top_sequence_id = int(np.frombuffer(batch.sequence_ids, dtype=np.int64).max())  # (no Python per message)
        item = InFlight(batch, None, [], top_sequence_id, dedup, floors, partial, launched_s=time.monotonic())
        q.in_flight.append(item)
        q.in_flight_messages += len(batch)
        self._in_flight_total += len(batch)
        return item

    @staticmethod
    def _next_group(q: PartitionQueue) -> list[InFlight]:
        """The uploaded batches at the head of ``q``'s line, to commit together (under the lock)."""
        if q.committing:
            return []
        group: list[InFlight] = []
        for item in q.in_flight:
            if item.stage == DONE:
                continue  # committed, waiting to be resolved
            if item.stage != UPLOADED:
                break
            group.append(item)
        for item in group:
            item.stage = COMMITTING
        q.committing = bool(group)
        if group:
            q.commit_started_s = time.monotonic()
        return group

    @staticmethod
    def _resolvable(q: PartitionQueue) -> list[InFlight]:
        """Pop the resolved-to-be batches from the head of ``q``'s line (under the lock)."""
        out: list[InFlight] = []
        while q.in_flight and q.in_flight[0].stage == DONE:
            out.append(q.in_flight.popleft())
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    ready = [q for q in self._queues if self._ready(q, now)]
                    groups = [(q, g) for q in self._queues if (g := self._next_group(q))]
                    done = [(q, d) for q in self._queues if (d := self._resolvable(q))]
                    if ready or groups or done:
                        break
                    if self._closed and not any(q.queued or q.in_flight for q in self._queues):
                        self._pool.shutdown()
                        return
                    # a batch's delay runs out only where the pipeline has room; elsewhere a commit
                    # resolving wakes this thread
                    # (a batch held for an upload is woken when that upload ends)
                    cuts = [delay_cut_s(q, max(now, q.batches[0].enqueued_s + self._batch_delay_s))
                            for q in self._queues
                            if q.queued and self._room(q) >= min(q.queued, self._batch_max_messages)]
                    waits = [cut_s - now for cut_s in cuts if cut_s is not None]
                    timeout = min([*waits, self._lease_ms / 3000])
                    self._cond.wait(timeout=max(timeout, 0.0005))
                    self._renew_leases()
                # the policies as of now (no I/O on object stores; a cheap local re-read once a second)
                dedup = self._dedup if ready else False
                launched = [(q, self._launch(q, batch, dedup)) for q in ready if (batch := self._take(q))]
                self._pending_total -= sum(len(item.batch) for _, item in launched)
                self._cond.notify_all()
            for q, item in launched:
                self._pool.submit(lambda q=q, item=item: self._upload(q, item))  # type: ignore[misc]
            for q, group in groups:
                self._pool.submit(lambda q=q, group=group: self._commit_group(q, group))  # type: ignore[misc]
            for q, finished in done:
                self._resolve_batches(q, finished)
            self._renew_leases()

    def _resolve_batches(self, q: PartitionQueue, batches: list[InFlight]) -> None:
        """Settle committed (or failed) batches in order: errors, the sequence id, waiters, callbacks."""
        for item in batches:
            exc = item.error
            if exc is not None:
                error = exc if isinstance(exc, PulsarException) else PulsarException(f"commit failed: {exc!r}")
                if isinstance(exc, TopicDeleted | DirectoryGone):  # disconnected for good, as in Pulsar
                    self._failure = error = self._failure or self._disconnected(exc)
                elif isinstance(exc, PulsarException) and type(exc).__name__ == "ProducerFenced":
                    self._failure = exc
                for msg in item.batch.extras.values():
                    msg.error = error
            with self._cond:
                if exc is None:
                    self._last_sequence_id = max(self._last_sequence_id, item.max_sequence_id)
                q.in_flight_messages -= len(item.batch)
                self._in_flight_total -= len(item.batch)
                self._cond.notify_all()
            telemetry.record_sent(self._telemetry, item.batch.publish_ms, item.batch.bytes, ok=exc is None,
                                  rpc_s=time.monotonic() - item.launched_s)
            self._resolve(q, item.batch)

    def _resolve(self, q: PartitionQueue, batch: QueuedBatch) -> None:
        """Mark a committed (or failed) batch done, wake waiters, then run the callbacks in order."""
        pending = list(batch.extras.values())  # in send order (a plain send has nothing to settle)
        with self._done_cond:
            for msg in pending:
                msg.done = True
            q.committed += len(batch)
            self._done_cond.notify_all()
        for msg in pending:
            if msg.callback is not None:
                msg.callback(msg)


__all__ = ["ProducerSender"]
