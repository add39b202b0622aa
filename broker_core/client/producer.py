"""The producer's public API: ``Producer`` (``send``, ``send_async``, ``send_table``, ``flush``,
``close``) and ``BatchingType``.

``send_async`` only queues; one daemon sender thread per producer commits, and a callback runs
after the commit, so a callback means the message is durable.  A producer whose topic is deleted
fails for good with ``TopicDeleted``, as Pulsar disconnects the producers of a deleted topic: its
pending and later sends raise it, and it writes nothing more (``docs/DECISIONS.md`` D39).

``Producer`` is one object made of a chain of bases, one concept a module, so each reads alone
while the per-message path keeps its direct attribute lookups (no delegation, no extra calls):
``producer_connection`` (registration, leases, fencing, topic deletion, policies) <-
``producer_queue`` (the partition queues and the tuned send path into them) <-
``producer_sender`` (the sender thread: batching, commits, ``MessageId`` assignment) <- here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.client import telemetry, telemetry_gauges
from broker_core.client.args import check_type
from broker_core.client.builder import PendingMessage
from broker_core.client.context import HandleOwner
from broker_core.client.daemon_pool import DaemonPool
from broker_core.client.partition_queue import PartitionQueue
from broker_core.client.producer_sender import ProducerSender
from broker_core.errors import (
    DirectoryGone,
    InvalidConfiguration,
    InvalidMessage,
    OperationNotSupported,
    ProducerQueueIsFull,
    PulsarException,
    Timeout,
    TopicDeleted,
    result_for,
)
from broker_core.jobs.backlog_guard import BacklogQuotaGuard
from broker_core.log.segment import CompressionType
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.producer.bulk import PartitionAppend, to_segment_rows
from broker_core.producer.registry import ProducerAccessMode, ProducerRegistry
from broker_core.producer.routing import MessageRouter
from broker_core.storage.fork import created_before_fork
from broker_core.topic.policies import EffectivePolicies

if TYPE_CHECKING:
    from broker_core.message import Schema


class BatchingType:
    """The official batching types: ``Default`` batches in order, ``KeyBased`` one batch per key."""

    Default = 0
    KeyBased = 1


class Producer(ProducerSender):
    """Publishes messages to one topic (all its partitions). Create with ``Client.create_producer``."""

    def __init__(
        self,
        client: HandleOwner,
        topic: TopicName,
        partitions: list[TopicName],
        *,
        producer_name: str,
        schema: Schema,
        initial_sequence_id: int | None,
        send_timeout_millis: int,
        compression_type: CompressionType,
        max_pending_messages: int,
        max_pending_messages_across_partitions: int,
        block_if_queue_full: bool,
        batching_enabled: bool,
        batching_max_messages: int,
        batching_max_allowed_size_in_bytes: int,
        batching_max_publish_delay_ms: int,
        chunking_enabled: bool,
        router: MessageRouter | None,
        batching_type: int,
        access_mode: ProducerAccessMode,
        properties: dict[str, str] | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._partitioned = len(partitions) > 1 or partitions[0] != topic
        self._name = producer_name
        self._schema = schema
        self._encode = schema.encode
        self._send_timeout_s = send_timeout_millis / 1000 if send_timeout_millis > 0 else None
        self._compression = compression_type
        self._max_pending = max_pending_messages
        self._max_pending_total = max_pending_messages_across_partitions
        self._block = block_if_queue_full
        self._batching = batching_enabled
        self._batch_max_messages = batching_max_messages
        self._batch_max_bytes = batching_max_allowed_size_in_bytes
        self._take_max_messages = batching_max_messages if batching_enabled else 10_000
        self._take_max_bytes = batching_max_allowed_size_in_bytes if batching_enabled else 16 << 20
        self._batch_delay_s = batching_max_publish_delay_ms / 1000
        self._chunking = chunking_enabled
        self._router = router
        self._key_based = batching_type == BatchingType.KeyBased
        self._access_mode = access_mode
        self._properties = dict(properties or {})
        config = client._broker.config
        self._policies = client._broker.policies
        self._policy_expires = 0.0
        self._policy_cache: EffectivePolicies | None = None
        # backlog quota: checked before every commit (policies and status each cached <= 1 s)
        self._quota = BacklogQuotaGuard(client._broker, topic, clock=client._clock)
        self._partition_names = list(partitions)
        self._lease_ms = config.producer_lease_written_ms
        self._clock = client._clock
        self._lock = threading.RLock()  # the send path enters it directly: Condition's __enter__ is Python
        self._cond = threading.Condition(self._lock)
        self._done_cond = threading.Condition()
        self._pending_total = 0
        self._in_flight_total = 0
        # uploads and commits (producer_pipeline): a commit per partition at a time, and the uploads
        # that keep them busy; threads start on demand
        self._pool = DaemonPool(f"pubsub-producer-{producer_name}", max_workers=min(32, 4 + 3 * len(partitions)))
        self._closed = False
        self._failure: PulsarException | None = None
        self._queues = [
            PartitionQueue(client._lookup_log(p), ProducerRegistry(client._broker.io, client._topic_dir(p)))
            for p in partitions
        ]
        self._register()
        last = -1
        if initial_sequence_id is not None:
            last = initial_sequence_id
        elif self._dedup:  # resume the sequence where this producer name left off
            for q in self._queues:
                prior = q.log.snapshot().txn_version(self._name)
                if prior is not None:
                    last = max(last, prior)
        self._last_sequence_id = last
        self._next_sequence_id = last + 1
        self._last_renew_s = time.monotonic()
        self._telemetry = telemetry.topic_attributes(topic)
        self._thread = threading.Thread(target=self._run, name=f"pubsub-producer-{self._name}", daemon=True)
        self._thread.start()
        telemetry.PRODUCER_OPENED.add(1, self._telemetry)
        telemetry_gauges.track_producer(self)

    # -- public API ---------------------------------------------------------------------------------

    def topic(self) -> str:
        return str(self._topic)

    def producer_name(self) -> str:
        return self._name

    def last_sequence_id(self) -> int:
        """The highest sequence id this producer had acknowledged (-1 if none)."""
        return self._last_sequence_id

    def is_connected(self) -> bool:
        return not self._closed and self._failure is None

    def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish a message and block until it is durable; return its ``MessageId``."""
        pending = self._enqueue(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
            flush=True,
        )
        assert pending is not None  # a send that waits always has its PendingMessage
        with self._done_cond:
            if not self._done_cond.wait_for(lambda: pending.done, timeout=self._send_timeout_s):
                held = self._quota.held_error()
                if held is not None:  # the hold's own give-up is late (a busy machine): its error all the same
                    raise held
                raise Timeout(f"send to {self._topic} did not complete within the send timeout", topic=str(self._topic))
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def send_async(
        self,
        content: Any,
        callback: Callable[[Any, MessageId | None], None] | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; ``callback(result, message_id)`` runs once it is durable (or failed).

        Callbacks run on the producer's sender thread, in send order per partition.
        """
        if callback is not None and not callable(callback):
            raise InvalidConfiguration(f"argument 'callback' must be callable, got {callback!r}")
        notify = None
        if callback is not None:

            def notify(msg: PendingMessage) -> None:
                callback(result_for(msg.error), msg.result)

        try:
            self._enqueue(
                content,
                properties,
                partition_key,
                ordering_key,
                sequence_id,
                replication_clusters,
                disable_replication,
                event_timestamp,
                deliver_at,
                deliver_after,
                flush=False,
                callback=notify,
            )
        except ProducerQueueIsFull as exc:
            if callback is None:
                raise
            callback(result_for(exc), None)

    def send_table(self, table: pa.Table) -> list[PartitionAppend]:
        """Bulk path: append a whole Arrow table of messages, one commit (one entry) per partition.

        Columns as in ``broker_core.producer.bulk.INPUT_COLUMNS`` (``value`` required).  Rows without a
        ``sequence_id`` get the producer's next ones; routing follows the producer's mode.  Queued
        messages are flushed first so order is kept.
        """
        check_type(pa.Table, table, "table")
        if self._encryptor is not None:
            raise OperationNotSupported(
                f"send_table does not encrypt; producer {self._name!r} has an encryption_key: use send/send_async"
            )
        self.flush()
        rows, explicit = to_segment_rows(
            table,
            publish_time_ms=self._clock.now_ms(),
            max_message_size=self._max_message_size,
            default_producer=self._name,
        )
        rows = rows.set_column(
            rows.schema.get_field_index("producer_name"),
            "producer_name",
            pa.array([self._name] * rows.num_rows, pa.string()),
        )
        if "sequence_id" not in table.column_names:
            with self._cond:
                start = self._next_sequence_id
                self._next_sequence_id += rows.num_rows
            rows = rows.set_column(
                rows.schema.get_field_index("sequence_id"),
                "sequence_id",
                pa.array(np.arange(start, start + rows.num_rows, dtype=np.int64)),
            )
        if self._partitioned and self._router is not None:
            chosen = self._router.choose_many(rows.column("key"))
            if explicit is not None:
                chosen = np.where(explicit >= 0, explicit, chosen).astype(np.int32)
        else:
            chosen = np.zeros(rows.num_rows, dtype=np.int32)
        bad = (chosen < 0) | (chosen >= len(self._queues))
        if bad.any():
            raise InvalidMessage(
                f"column 'partition' holds {int(chosen[bad][0])}, outside [0, {len(self._queues)}) for {self._topic}",
                column="partition",
            )
        out: list[PartitionAppend] = []
        for index, q in enumerate(self._queues):
            take = np.nonzero(chosen == index)[0]
            if not len(take):
                continue
            part_rows = rows if len(take) == rows.num_rows else rows.take(pa.array(take))
            layout = [len(take)] if self._batching else [-len(take)]
            self._quota.admit(
                self._partition_names[index],
                deadline_s=self._deadline(time.monotonic()),
                closed=lambda: self._client._closed,
            )
            try:
                result = q.log.append(part_rows, layout=layout, compression=self._compression, dedup=self._dedup,
                                      producer_epoch=q.epoch, topic_id=q.topic_id)
            except (TopicDeleted, DirectoryGone) as exc:
                self._failure = self._failure or self._disconnected(exc)
                raise self._failure from exc
            out.append(PartitionAppend(partition=index, rows=len(take), result=result))
        if rows.num_rows:
            seq_max = pc.max(rows.column("sequence_id")).as_py()
            with self._cond:
                self._last_sequence_id = max(self._last_sequence_id, seq_max)
        return out

    def flush(self) -> None:
        """Commit everything queued so far and wait until it is durable."""
        if self._created_before_fork:  # before any lock: one held at a fork stays held in the child
            raise created_before_fork(f"producer {self._name!r} on {self._topic}")
        with self._cond:
            targets = [q.enqueued for q in self._queues]
            for q in self._queues:
                q.flush_target = q.enqueued
            self._cond.notify_all()
        with self._done_cond:
            self._done_cond.wait_for(lambda: all(q.committed >= t for q, t in zip(self._queues, targets, strict=True)))
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        """Flush pending messages, stop the sender thread and give up the registration."""
        if self._closed:
            return
        with contextlib.suppress(PulsarException):
            self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        telemetry.PRODUCER_CLOSED.add(1, self._telemetry)
        telemetry_gauges.untrack_producer(self)
        self._thread.join(timeout=30)
        for q in self._queues:
            with contextlib.suppress(Exception):
                q.registry.unregister(self._name)
        self._client._forget(self)


__all__ = ["BatchingType", "Producer"]
