"""``NonPersistentProducer``: publishes to a non-persistent topic, delivering before ``send`` returns.

There is nothing to queue, batch or wait for: a send hands the message to the topic, which
dispatches it at once to the consumers and readers connected then.  Arguments are checked as the
persistent ``Producer`` checks them, and what needs storage (delayed delivery, chunking) is
refused rather than silently ignored.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from broker_core.client.args import check_send_arguments
from broker_core.client.context import HandleOwner
from broker_core.client.non_persistent.handles import registry_of, track
from broker_core.client.non_persistent.refusals import unsupported
from broker_core.errors import (
    AlreadyClosed,
    InvalidConfiguration,
    MessageTooBig,
    PulsarException,
    result_for,
)
from broker_core.hashing.keys import HashingScheme
from broker_core.log.segment_bounds import metadata_size
from broker_core.message import Message, Schema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.non_persistent import ProducerToken
from broker_core.producer.registry import ProducerAccessMode
from broker_core.producer.routing import CustomRouter, MessageRouter, PartitionsRoutingMode, router_for

_LOG = logging.getLogger(__name__)
_NAME_COUNTER = itertools.count()


class NonPersistentProducer:
    """Publishes to a non-persistent topic. Create with ``Client.create_producer``.

    Access modes apply among the producers of this process, which are all the producers the topic
    has: Shared, Exclusive, WaitForExclusive and ExclusiveWithFencing behave as in Pulsar.
    """

    def __init__(
        self,
        client: HandleOwner,
        topic: TopicName,
        partitions: list[TopicName],
        *,
        producer_name: str,
        schema: Schema,
        initial_sequence_id: int | None,
        router: MessageRouter | None,
        access_mode: ProducerAccessMode,
        properties: dict[str, str] | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._partitioned = len(partitions) > 1 or partitions[0] != topic
        self._name = producer_name
        self._schema = schema
        self._router = router
        self._properties = dict(properties or {})
        self._max_message_size = client._broker.config.max_message_size
        self._clock = client._clock
        self._lock = threading.Lock()
        self._closed = False
        registry = registry_of(client)
        self._topics = [registry.topic(p) for p in partitions]
        self._tokens: list[ProducerToken] = []
        try:
            for np_topic in self._topics:
                self._tokens.append(
                    np_topic.add_producer(producer_name, access_mode, keep_waiting=lambda: not client._closed)
                )
        except BaseException:
            for np_topic, token in zip(self._topics, self._tokens, strict=False):
                np_topic.remove_producer(token)
            raise
        self._last_sequence_id = -1 if initial_sequence_id is None else initial_sequence_id
        self._next_sequence_id = self._last_sequence_id + 1

    def topic(self) -> str:
        return str(self._topic)

    def producer_name(self) -> str:
        return self._name

    def last_sequence_id(self) -> int:
        """The highest sequence id this producer has published (-1 if none)."""
        return self._last_sequence_id

    def is_connected(self) -> bool:
        return not self._closed and not any(token.fenced for token in self._tokens)

    def send(self, content: Any, properties: dict[str, str] | None = None, partition_key: str | None = None,
             ordering_key: str | None = None, sequence_id: int | None = None,
             replication_clusters: list[str] | None = None, disable_replication: bool = False,
             event_timestamp: int | None = None, deliver_at: int | None = None,
             deliver_after: timedelta | None = None) -> MessageId:
        """Deliver a message to the consumers and readers connected now; return its ``MessageId``."""
        publish = self._prepare(content, properties, partition_key, ordering_key, sequence_id,
                                replication_clusters, disable_replication, event_timestamp, deliver_at,
                                deliver_after)
        return publish()

    def send_async(self, content: Any, callback: Callable[[Any, MessageId | None], None] | None,
                   properties: dict[str, str] | None = None, partition_key: str | None = None,
                   ordering_key: str | None = None, sequence_id: int | None = None,
                   replication_clusters: list[str] | None = None, disable_replication: bool = False,
                   event_timestamp: int | None = None, deliver_at: int | None = None,
                   deliver_after: timedelta | None = None) -> None:
        """Deliver a message now and run ``callback(result, message_id)`` before returning.

        Bad arguments raise here, as with ``send``; a failed delivery (a fenced producer) is
        reported to the callback.  An exception raised by the callback is logged, not propagated.
        """
        if callback is not None and not callable(callback):
            raise InvalidConfiguration(f"argument 'callback' must be callable, got {callback!r}")
        publish = self._prepare(content, properties, partition_key, ordering_key, sequence_id,
                                replication_clusters, disable_replication, event_timestamp, deliver_at,
                                deliver_after)
        try:
            msg_id: MessageId | None = publish()
            error: PulsarException | None = None
        except PulsarException as exc:
            msg_id, error = None, exc
        if callback is not None:
            try:
                callback(result_for(error), msg_id)
            except Exception:
                _LOG.exception("send_async callback of producer %s on %s raised", self._name, self._topic)

    def flush(self) -> None:
        """Nothing is ever pending: every send is delivered before it returns."""

    def close(self) -> None:
        """Disconnect from the topic (a WaitForExclusive producer waiting for it may now connect)."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
        for np_topic, token in zip(self._topics, self._tokens, strict=True):
            np_topic.remove_producer(token)
        self._client._forget(self)

    def _prepare(self, content: Any, properties: Any, partition_key: Any, ordering_key: Any, sequence_id: Any,
                 replication_clusters: Any, disable_replication: Any, event_timestamp: Any, deliver_at: Any,
                 deliver_after: Any) -> Callable[[], MessageId]:
        """Validate a send; return the call that delivers it."""
        if self._closed:
            raise AlreadyClosed(f"producer {self._name!r} on {self._topic} is closed")
        data = None if content is None else self._schema.encode(content)
        props = check_send_arguments(properties, partition_key, ordering_key, sequence_id, replication_clusters,
                                     disable_replication, event_timestamp, deliver_at, deliver_after)
        if deliver_at is not None or deliver_after is not None:
            raise unsupported(
                f"delayed delivery (deliver_at / deliver_after) needs a stored message; {self._topic} is "
                "non-persistent and delivers at once",
                topic=str(self._topic),
            )
        # the key, ordering key and properties count too (D126)
        size = (0 if data is None else len(data)) + metadata_size(partition_key, ordering_key, props)
        if size > self._max_message_size:
            raise MessageTooBig(
                f"message of {size} bytes (payload, key, ordering key and properties) exceeds maxMessageSize="
                f"{self._max_message_size} on {self._topic}; "
                "non-persistent topics cannot chunk, send smaller messages",
                topic=str(self._topic),
            )
        publish_ms = self._clock.now_ms()
        ordering = ordering_key.encode("utf-8") if ordering_key else None
        partition = 0
        if self._partitioned:
            assert self._router is not None
            routed: object = content
            if isinstance(self._router, CustomRouter):
                routed = Message(
                    _data=data, _key=partition_key, _ordering_key=ordering, _properties=dict(props or {}),
                    _producer_name=self._name, _sequence_id=sequence_id, _publish_time_ms=publish_ms,
                    _event_time_ms=event_timestamp or 0, _deliver_at_ms=None, _schema_version=None,
                    _message_id=MessageId(), _topic=str(self._topic), _schema=self._schema,
                )
            partition = self._router.choose(partition_key, routed)

        def publish() -> MessageId:
            with self._lock:
                if self._closed:
                    raise AlreadyClosed(f"producer {self._name!r} on {self._topic} is closed")
                seq = self._next_sequence_id if sequence_id is None else sequence_id
                msg_id = self._topics[partition].publish(
                    self._tokens[partition], value=data, key=partition_key, ordering_key=ordering,
                    properties=props, sequence_id=seq, publish_time_ms=publish_ms,
                    event_time_ms=event_timestamp,
                )
                if sequence_id is None:
                    self._next_sequence_id += 1
                self._last_sequence_id = max(self._last_sequence_id, seq)
            return msg_id

        return publish


def create_non_persistent_producer(
    client: HandleOwner,
    topic: str,
    *,
    producer_name: str | None,
    schema: Schema,
    initial_sequence_id: int | None,
    chunking_enabled: bool,
    message_routing_mode: PartitionsRoutingMode,
    message_router: Callable[[Any, int], int] | None,
    hashing_scheme: HashingScheme,
    access_mode: ProducerAccessMode,
    properties: dict[str, str] | None,
) -> NonPersistentProducer:
    """``Client.create_producer`` for a non-persistent topic (arguments already type-checked)."""
    name = TopicName.parse(topic)
    if chunking_enabled:
        raise unsupported(
            f"chunking_enabled=True is not supported on non-persistent topic {name}: chunks are reassembled "
            "from storage, which a non-persistent topic does not have",
            topic=str(name),
        )
    partitions = client._broker.partitions(name)
    router = None
    if len(partitions) > 1 or partitions[0] != name:
        # as for a persistent producer, with batching off: a non-persistent send is never batched
        router = router_for(len(partitions), message_routing_mode=message_routing_mode,
                            message_router=message_router, hashing_scheme=hashing_scheme, clock=client._clock)
    producer = NonPersistentProducer(
        client, name, partitions,
        producer_name=producer_name or f"pubsub-{os.getpid()}-np{next(_NAME_COUNTER)}-{uuid.uuid4().hex[:6]}",
        schema=schema, initial_sequence_id=initial_sequence_id, router=router, access_mode=access_mode,
        properties=properties,
    )
    track(client, producer)
    return producer


__all__ = [
    "NonPersistentProducer",
    "create_non_persistent_producer",
]
