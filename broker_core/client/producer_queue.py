"""A producer's queues, one per partition, and the send path that fills them.

``send_async`` and ``send`` end in ``_enqueue``, which runs once per message, so it is tuned: a
plain send skips the argument checks (they cost more than the rest of the send), the lock is
entered directly (``Condition.__enter__`` is Python), the sender thread is woken only when it has
something new to decide, a plain send (no callback, waiter, key, properties or times) is held as
entries in its batch's columns alone, with no object of its own for the garbage collector to track
(``QueuedBatch``, D103), and a ``PendingMessage`` asks for its ``MessageId`` only when somebody waits
for it.  Keep it that way: no extra calls or lookups per message.

A message bigger than ``maxMessageSize`` is queued as its chunks when chunking is on.  A full queue
blocks or raises ``ProducerQueueIsFull`` (``block_if_queue_full``).  The counters of a queue only
grow, so a flush can name the point it waits for (``flush_target``) and see it passed
(``committed``) without holding the queue.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import TYPE_CHECKING, Any

from broker_core.client.args import check_send_arguments
from broker_core.client.builder import PendingMessage, QueuedBatch
from broker_core.client.partition_queue import PartitionQueue
from broker_core.client.producer_connection import ProducerConnection
from broker_core.clock import SystemClock
from broker_core.errors import AlreadyClosed, InvalidConfiguration, MessageTooBig, ProducerQueueIsFull
from broker_core.log.segment_bounds import metadata_size
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.producer.routing import CustomRouter, RoundRobinRouter
from broker_core.storage.fork import created_before_fork

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from broker_core.crypto import MessageEncryptor
    from broker_core.message import Schema
    from broker_core.producer.routing import MessageRouter
    from broker_core.schema.avro_encode import RecordEncoder


class ProducerQueueing(ProducerConnection):
    """The send path of a producer, up to its queues; ``Producer.__init__`` sets the attributes below."""

    _schema: Schema
    _encode: Callable[[Any], Any]  # the schema's per-send encoder (``Client.create_producer`` picks it)
    _bulk: RecordEncoder | None = None  # encodes the deferred payloads of a batch (D91)
    _schema_version: bytes | None = None  # the registry version every row is written under (set on creation)
    _key_from_value: bool = False  # KeyValue SEPARATED: the key's encoding is the message key
    _chunking: bool
    _partitioned: bool
    _router: MessageRouter | None
    _lock: threading.RLock
    _cond: threading.Condition
    _closed: bool
    _created_before_fork = False  # set in a forked child (``client_core``)
    _block: bool
    _max_pending: int
    _max_pending_total: int
    _pending_total: int
    _next_sequence_id: int
    _batch_max_messages: int
    _batch_max_bytes: int
    _take_max_messages: int  # what one batch taken holds at most: the batch limits, or without batching
    _take_max_bytes: int  # (each message its own entry) 10,000 messages and 16 MiB
    _encryptor: MessageEncryptor | None = None  # set by create_producer(encryption_key=...)

    def _enqueue(
        self,
        content: Any,
        properties: Any,
        partition_key: Any,
        ordering_key: Any,
        sequence_id: Any,
        replication_clusters: Any,
        disable_replication: Any,
        event_timestamp: Any,
        deliver_at: Any,
        deliver_after: Any,
        *,
        flush: bool,
        callback: Callable[[PendingMessage], None] | None = None,
    ) -> PendingMessage | None:
        if self._closed:
            if self._created_before_fork:
                raise created_before_fork(f"producer {self._name!r} on {self._topic}")
            raise AlreadyClosed(f"producer {self._name!r} on {self._topic} is closed")
        if self._failure is not None:
            raise self._failure
        if self._key_from_value and content is not None:  # KeyValue SEPARATED: the key is the message key
            partition_key, data = self._schema.encode_separated(content)
        else:
            data = None if content is None else self._encode(content)  # bytes, or deferred (a tuple, D91)
        props = None
        if not (
            properties is None
            and (partition_key is None or (type(partition_key) is str and partition_key.isascii()))
            and ordering_key is None
            and sequence_id is None
            and replication_clusters is None
            and disable_replication is False
            and event_timestamp is None
            and deliver_at is None
            and deliver_after is None
        ):  # a plain send (or one with an ASCII key alone) skips the argument checks: they cost more
            # than the rest of the send
            props = check_send_arguments(
                properties,
                partition_key,
                ordering_key,
                sequence_id,
                replication_clusters,
                disable_replication,
                event_timestamp,
                deliver_at,
                deliver_after,
            )
        if self._encryptor is not None and data is not None:  # end-to-end encryption: broker_core/crypto.py
            data, props = self._encryptor.seal(data, props)
        clock = self._clock
        publish_ms = time.time_ns() // 1_000_000 if type(clock) is SystemClock else clock.now_ms()
        deliver_ms = deliver_at
        if deliver_after is not None:
            deliver_ms = publish_ms + int(deliver_after.total_seconds() * 1000)
        size = 0 if data is None else data[-1] if type(data) is tuple else len(data)  # a tuple: deferred, its bound
        policies = self._policy_cache  # (``_effective()`` re-reads them once a second)
        now = time.monotonic()
        max_size = (
            policies.max_message_size
            if policies is not None and now < self._policy_expires
            else self._max_message_size
        )
        # the key, ordering key and properties count too (D126); a plain send has none
        meta = 0 if props is None and partition_key is None and ordering_key is None else metadata_size(
            partition_key, ordering_key, props)
        if size + meta > max_size and type(data) is tuple:  # only a bound: the exact size decides
            data = self._schema.encode(content)
            size = len(data)
        if size + meta > max_size and (not self._chunking or meta >= max_size):
            raise _too_big(size, meta, max_size, str(self._topic), chunking=self._chunking)
        partition = 0
        if self._partitioned:
            if self._router is None:
                raise InvalidConfiguration("partitioned producer without a router")
            routed: object = content
            if type(self._router) is not RoundRobinRouter and isinstance(self._router, CustomRouter):
                # the official client hands a custom router the Message being sent
                routed = Message(
                    _data=data,
                    _key=partition_key,
                    _ordering_key=ordering_key.encode() if ordering_key else None,
                    _properties=dict(props or {}),
                    _producer_name=self._name,
                    _sequence_id=sequence_id,
                    _publish_time_ms=publish_ms,
                    _event_time_ms=event_timestamp or 0,
                    _deliver_at_ms=deliver_ms,
                    _schema_version=None,
                    _message_id=MessageId(),
                    _topic=str(self._topic),
                    _schema=self._schema,
                )
            partition = self._router.choose(partition_key, routed)
        ordering = ordering_key.encode("utf-8") if ordering_key else None
        pending = None
        if not (
            callback is None and not flush and props is None and partition_key is None and ordering is None
            and event_timestamp is None and deliver_ms is None
        ):  # a plain send is its batch's columns alone; anything more is held in a PendingMessage (D103)
            pending = PendingMessage(
                partition_key, ordering, props, event_timestamp, deliver_ms, callback, flush or callback is not None
            )
        lock = self._lock
        lock.acquire()  # (not ``with``: its method lookups cost about as much again as the lock)
        try:
            if sequence_id is None:
                seq = self._next_sequence_id
                self._next_sequence_id += 1
            else:
                seq = sequence_id
            q = self._queues[partition]
            was_empty = not q.queued
            if data is None or size + meta <= max_size:
                queued, total = q.queued, self._pending_total
                if (queued >= self._max_pending and queued > 0) or (
                    0 < self._max_pending_total <= total and total > 0
                ):  # (``_full(partition, 1)`` inline: a call per message costs more than the test)
                    self._wait_for_space(partition, 1)
                batch = q.open
                if batch is None:
                    batch = q.open = QueuedBatch(now)
                    q.batches.append(batch)
                if pending is not None:
                    batch.extras[len(batch.values)] = pending
                batch.values.append(data)  # (``QueuedBatch.append`` inline)
                batch.sequence_ids.append(seq)
                batch.publish_ms.append(publish_ms)
                batch.bytes += size
                q.bytes += size
                q.queued += 1
                q.enqueued += 1
                self._pending_total += 1
            else:
                batch = self._enqueue_chunks(
                    q, partition, pending or PendingMessage(None, None, None, None, None, wants_id=False),
                    data, size, seq, publish_ms, now, max_size - meta,  # each chunk carries the key and properties
                )
                pending = batch.extras[len(batch) - 1]
            if flush:
                q.flush_target = q.enqueued
            # Wake the sender only when it has something new to decide: a first message (its batch delay
            # starts), a flush, or a batch just full.  Past that it needs no more wake-ups: it looks at
            # every queue again after each commit.
            full = len(batch.values) >= self._take_max_messages or batch.bytes >= self._take_max_bytes
            if full:
                q.open = None  # the next message starts the next batch
            if was_empty or flush or full:
                self._cond.notify_all()
        finally:
            lock.release()
        return pending

    def _enqueue_chunks(
        self, q: PartitionQueue, partition: int, whole: PendingMessage, data: bytes, size: int, seq: int,
        publish_ms: int, now: float, max_size: int,
    ) -> QueuedBatch:
        """Queue a message too big for one entry as its chunks, in one batch (the last chunk carries the
        callback); returns that batch."""
        assert isinstance(data, bytes)  # a chunking producer never defers encoding (D91)
        pieces = self._split(data, size, max_size, seq)
        self._wait_for_space(partition, len(pieces))
        batch = q.open
        if batch is None:
            batch = q.open = QueuedBatch(now)
            q.batches.append(batch)
        for index, (chunk, chunk_fields) in enumerate(pieces):
            extra = dataclasses.replace(
                whole, callback=whole.callback if index == len(pieces) - 1 else None, **chunk_fields
            )
            batch.append(chunk, len(chunk), seq, publish_ms, extra)
            q.bytes += len(chunk)
        q.queued += len(pieces)
        q.enqueued += len(pieces)
        self._pending_total += len(pieces)
        return batch

    def _split(self, data: bytes, size: int, chunk_size: int, seq: int) -> list[tuple[bytes, dict[str, Any]]]:
        count = (size + chunk_size - 1) // chunk_size
        chunk_uuid = f"{self._name}-{seq}-{uuid.uuid4().hex[:8]}"
        return [
            (
                data[i * chunk_size : (i + 1) * chunk_size],
                {"chunk_uuid": chunk_uuid, "chunk_id": i, "num_chunks": count, "chunk_total_size_bytes": size},
            )
            for i in range(count)
        ]

    def _full(self, partition: int, needed: int) -> bool:
        queued = self._queues[partition].queued
        total = self._pending_total
        return (queued + needed > self._max_pending and queued > 0) or (
            self._max_pending_total > 0 and total + needed > self._max_pending_total and total > 0
        )

    def _wait_for_space(self, partition: int, needed: int) -> None:
        while self._full(partition, needed):
            if not self._block:
                raise ProducerQueueIsFull(
                    f"producer {self._name!r} has {self._max_pending} pending messages on {self._topic}; "
                    "wait for callbacks, call flush(), or create it with block_if_queue_full=True",
                    topic=str(self._topic),
                )
            self._cond.wait(timeout=0.1)
            if self._closed:
                raise AlreadyClosed(f"producer {self._name!r} was closed while waiting for queue space")


def _too_big(size: int, meta: int, max_size: int, topic: str, *, chunking: bool) -> MessageTooBig:
    """The refusal of a message above ``maxMessageSize`` (payload and key, ordering key, properties)."""
    counted = f"message of {size + meta} bytes ({size} payload, {meta} key, ordering key and properties)"
    if chunking:
        fix = ("its key and properties alone reach the limit, and every chunk carries them: send smaller "
               "properties or key, or raise maxMessageSize")
    else:
        fix = "enable chunking (chunking_enabled=True, batching off) or send smaller messages"
    return MessageTooBig(f"{counted} exceeds maxMessageSize={max_size} on {topic}; {fix}", topic=topic,
                         size=size + meta, max_message_size=max_size)


__all__ = ["PartitionQueue", "ProducerQueueing"]
