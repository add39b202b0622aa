"""Producers, consumers and readers of non-persistent topics (``non-persistent://...``).

``Client.create_producer``, ``Client.create_reader`` and ``Client.subscribe`` hand a
non-persistent topic to this module; the classes here expose the same methods as ``Producer``,
``Consumer`` and ``Reader``.  Messages never touch storage: ``broker_core.non_persistent`` relays
each one, inside this process, to the consumers and readers connected at the moment it is sent
(``docs/NON_PERSISTENT.md`` says what that means across processes and what is refused).

- ``send`` delivers before it returns; ``send_async`` delivers and runs its callback before it
  returns.  Batching settings are accepted and have no effect (every send is its own entry).
- Acknowledgments only forget the message (nothing is stored to acknowledge).  A negative ack, an
  ack timeout or ``redeliver_unacknowledged_messages`` dispatches the consumer's in-memory copy
  again on its subscription, with the redelivery count raised, to whichever consumer the
  subscription type picks now.  A message still unacknowledged when its consumer closes is lost.
- A consumer or reader whose receiver queue is full when a message arrives misses it (Pulsar drops
  non-persistent messages a consumer has no permits for).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from broker_core.backoff import MultiplierRedeliveryBackoff
from broker_core.client.args import check_str_map, check_type, check_type_or_none
from broker_core.client.policies import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    RegexSubscriptionMode,
)
from broker_core.client.receive_batch import collect_batch
from broker_core.cursor import ConsumerType
from broker_core.errors import (
    AlreadyClosed,
    ConsumerBusy,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfiguration,
    MessageTooBig,
    OperationNotSupported,
    PulsarException,
    Timeout,
    result_for,
)
from broker_core.hashing import HashingScheme
from broker_core.key_shared import KeySharedMode
from broker_core.message import Message, Schema
from broker_core.message_id import MessageId
from broker_core.naming import NamespaceName, TopicName
from broker_core.non_persistent import NonPersistentRegistry, NonPersistentTopic, ProducerToken, registry_for
from broker_core.producer_registry import ProducerAccessMode
from broker_core.routing import (
    CustomRouter,
    MessageRouter,
    PartitionsRoutingMode,
    RoundRobinRouter,
    SinglePartitionRouter,
)

if TYPE_CHECKING:
    from broker_core.client.client import Client

_LOG = logging.getLogger(__name__)
_NAME_COUNTER = itertools.count()
_NP_DOCS = "see docs/NON_PERSISTENT.md"


def _registry(client: Client) -> NonPersistentRegistry:
    return registry_for(client._broker.io.root_uri)


def _track(client: Client, handle: Any) -> None:
    with client._lock:
        client._handles.add(handle)


# -- producer ---------------------------------------------------------------------------------------


class NonPersistentProducer:
    """Publishes to a non-persistent topic. Create with ``Client.create_producer``.

    Access modes apply among the producers of this process, which are all the producers the topic
    has: Shared, Exclusive, WaitForExclusive and ExclusiveWithFencing behave as in Pulsar.
    """

    def __init__(
        self,
        client: Client,
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
        registry = _registry(client)
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
        props = check_str_map(properties, "properties")
        check_type_or_none(str, partition_key, "partition_key")
        check_type_or_none(str, ordering_key, "ordering_key")
        check_type_or_none(int, sequence_id, "sequence_id")
        check_type_or_none(list, replication_clusters, "replication_clusters")
        check_type(bool, disable_replication, "disable_replication")
        check_type_or_none(int, event_timestamp, "event_timestamp")
        check_type_or_none(int, deliver_at, "deliver_at")
        check_type_or_none(timedelta, deliver_after, "deliver_after")
        if deliver_at is not None or deliver_after is not None:
            raise OperationNotSupported(
                f"delayed delivery (deliver_at / deliver_after) needs a stored message; {self._topic} is "
                f"non-persistent and delivers at once ({_NP_DOCS})",
                topic=str(self._topic),
            )
        if sequence_id is not None and sequence_id < 0:
            raise InvalidConfiguration(f"argument 'sequence_id' must be >= 0, got {sequence_id}")
        size = 0 if data is None else len(data)
        if size > self._max_message_size:
            raise MessageTooBig(
                f"message of {size} bytes exceeds maxMessageSize={self._max_message_size} on {self._topic}; "
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


def _router_for(
    client: Client, count: int, *, message_routing_mode: PartitionsRoutingMode,
    message_router: Callable[[Any, int], int] | None, hashing_scheme: HashingScheme,
) -> MessageRouter:
    """The router of a partitioned topic, chosen as for a persistent producer (batching off, since a
    non-persistent send is never batched)."""
    if message_router is not None:
        return CustomRouter(count, message_router)
    if message_routing_mode == PartitionsRoutingMode.UseSinglePartition:
        return SinglePartitionRouter(count, scheme=hashing_scheme)
    if message_routing_mode == PartitionsRoutingMode.CustomPartition:
        raise InvalidConfiguration("message_routing_mode=CustomPartition needs a message_router function")
    return RoundRobinRouter(count, scheme=hashing_scheme, batching_enabled=False, clock=client._clock)


def create_non_persistent_producer(
    client: Client,
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
        raise OperationNotSupported(
            f"chunking_enabled=True is not supported on non-persistent topic {name}: chunks are reassembled "
            f"from storage, which a non-persistent topic does not have ({_NP_DOCS})",
            topic=str(name),
        )
    partitions = client._broker.partitions(name)
    router = None
    if len(partitions) > 1 or partitions[0] != name:
        router = _router_for(client, len(partitions), message_routing_mode=message_routing_mode,
                             message_router=message_router, hashing_scheme=hashing_scheme)
    producer = NonPersistentProducer(
        client, name, partitions,
        producer_name=producer_name or f"pubsub-{os.getpid()}-np{next(_NAME_COUNTER)}-{uuid.uuid4().hex[:6]}",
        schema=schema, initial_sequence_id=initial_sequence_id, router=router, access_mode=access_mode,
        properties=properties,
    )
    _track(client, producer)
    return producer


# -- reader -----------------------------------------------------------------------------------------


class NonPersistentReader:
    """Reads the messages published to a non-persistent topic from now on. Create with
    ``Client.create_reader``; ``MessageId.earliest`` and ``MessageId.latest`` both mean "from now"."""

    def __init__(
        self,
        client: Client,
        topic: TopicName,
        partitions: list[TopicName],
        *,
        receiver_queue_size: int,
        reader_name: str,
        schema: Schema,
        reader_listener: Callable[[NonPersistentReader, Message], None] | None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._name = reader_name
        self._schema = schema
        self._queue_size = receiver_queue_size
        self._cv = threading.Condition()
        self._buffer: deque[Message] = deque()
        self._closed = False
        registry = _registry(client)
        self._topics = [registry.topic(p) for p in partitions]
        self._tokens = [np_topic.add_reader(self) for np_topic in self._topics]
        self._listener_thread: threading.Thread | None = None
        if reader_listener is not None:
            self._listener_thread = threading.Thread(
                target=self._listen, args=(reader_listener,), name=f"pubsub-np-reader-{reader_name}",
                daemon=True,
            )
            self._listener_thread.start()

    def offer(self, message: Message) -> bool:
        """``Receiver`` hook: buffer a message the topic relays (False when full or closed)."""
        with self._cv:
            if self._closed or len(self._buffer) >= self._queue_size:
                return False
            message._schema = self._schema
            self._buffer.append(message)
            self._cv.notify_all()
            return True

    def topic(self) -> str:
        return str(self._topic)

    def is_connected(self) -> bool:
        return not self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"reader {self._name!r} on {self._topic} is closed")

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; waits up to ``timeout_millis`` (forever if None), else ``Timeout``."""
        check_type_or_none(int, timeout_millis, "timeout_millis")
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        with self._cv:
            while True:
                self._check_open()
                if self._buffer:
                    return self._buffer.popleft()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Timeout(f"no message on {self._topic} within {timeout_millis} ms",
                                  topic=str(self._topic))
                self._cv.wait(timeout=remaining)

    def has_message_available(self) -> bool:
        """Whether ``read_next`` would return without waiting for a new publish."""
        self._check_open()
        with self._cv:
            return bool(self._buffer)

    def seek(self, message_id: MessageId | int) -> None:
        """Refused: a non-persistent topic keeps no messages to go back (or forward) to."""
        self._check_open()
        raise OperationNotSupported(
            f"seek is not supported on non-persistent topic {self._topic}: no message is kept ({_NP_DOCS})",
            topic=str(self._topic),
        )

    def close(self) -> None:
        """Disconnect; a blocked ``read_next`` wakes and raises ``AlreadyClosed``."""
        if self._closed:
            return
        with self._cv:
            self._closed = True
            self._buffer.clear()
            self._cv.notify_all()
        for np_topic, token in zip(self._topics, self._tokens, strict=True):
            np_topic.remove_reader(token)
        self._client._forget(self)

    def _listen(self, listener: Callable[[NonPersistentReader, Message], None]) -> None:
        while not self._closed:
            try:
                msg = self.read_next(timeout_millis=100)
            except (Timeout, AlreadyClosed):
                continue
            try:
                listener(self, msg)
            except Exception:
                _LOG.exception("reader listener of %s on %s raised", self._name, self._topic)

    def __iter__(self) -> Iterator[Message]:
        while self.has_message_available():
            yield self.read_next()


def create_non_persistent_reader(
    client: Client,
    topic: str,
    *,
    start_message_id: MessageId,
    receiver_queue_size: int,
    reader_name: str | None,
    schema: Schema,
    reader_listener: Callable[[Any, Any], None] | None,
) -> NonPersistentReader:
    """``Client.create_reader`` for a non-persistent topic (arguments already type-checked)."""
    name = TopicName.parse(topic)
    if start_message_id not in (MessageId.earliest, MessageId.latest):
        raise OperationNotSupported(
            f"a reader on non-persistent topic {name} can start only at MessageId.earliest or "
            f"MessageId.latest (both mean: the next message published), not at {start_message_id}; "
            "no message is kept "
            f"({_NP_DOCS})",
            topic=str(name),
        )
    partitions = client._broker.partitions(name)
    reader = NonPersistentReader(
        client, name, partitions, receiver_queue_size=receiver_queue_size,
        reader_name=reader_name or f"reader-{uuid.uuid4().hex[:10]}", schema=schema,
        reader_listener=reader_listener,
    )
    _track(client, reader)
    return reader


# -- consumer ---------------------------------------------------------------------------------------


class _Inbox:
    """The consumer's ``Receiver`` on one of its internal topics."""

    __slots__ = ("consumer", "source")

    def __init__(self, consumer: NonPersistentConsumer, source: int) -> None:
        self.consumer = consumer
        self.source = source

    def offer(self, message: Message) -> bool:
        return self.consumer._offer(self.source, message)


class NonPersistentConsumer:
    """A consumer of a subscription on non-persistent topics. Create with ``Client.subscribe``."""

    def __init__(
        self,
        client: Client,
        topics: list[TopicName],
        *,
        topic_label: str,
        subscription: str,
        consumer_name: str,
        consumer_type: ConsumerType,
        schema: Schema,
        receiver_queue_size: int,
        message_listener: Callable[[NonPersistentConsumer, Message], None] | None,
        unacked_messages_timeout_ms: int | None,
        negative_ack_redelivery_delay_ms: int,
        negative_ack_backoff: MultiplierRedeliveryBackoff | None,
        batch_receive_policy: ConsumerBatchReceivePolicy | None,
        priority_level: int,
        key_shared: dict[str, Any] | None,
        discover: Callable[[], list[TopicName]] | None = None,
        discovery_period_s: float = 60.0,
    ) -> None:
        self._client = client
        self._topic_label = topic_label
        self._subscription = subscription
        self._name = consumer_name
        self._type = consumer_type
        self._schema = schema
        self._queue_size = receiver_queue_size
        self._listener = message_listener
        self._ack_timeout_s = None if not unacked_messages_timeout_ms else unacked_messages_timeout_ms / 1000
        self._nack_delay_ms = negative_ack_redelivery_delay_ms
        self._nack_backoff = negative_ack_backoff
        self._batch_policy = batch_receive_policy or ConsumerBatchReceivePolicy()
        self._priority = priority_level
        ks = key_shared or {}
        self._ks_mode = KeySharedMode[ks.get("mode", "AutoSplit")]
        self._ks_consistent = bool(ks.get("consistentHashing", False))
        self._ks_ranges = [(int(r[0]), int(r[1])) for r in ks.get("stickyRanges", [])]
        self._discover = discover
        self._discovery_period_s = discovery_period_s
        self._cv = threading.Condition()
        self._queue: deque[Message] = deque()
        self._unacked: dict[tuple[int, MessageId], tuple[Message, float | None]] = {}
        self._nacks: list[tuple[float, Message]] = []
        self._closed = False
        self._paused = False
        self._wake = threading.Event()
        self._registry = _registry(client)
        self._topics: list[NonPersistentTopic] = []
        try:
            for name in topics:
                self._join(name)
        except BaseException:
            self._leave_all()
            raise
        self._thread = threading.Thread(target=self._run, name=f"pubsub-np-consumer-{consumer_name}",
                                        daemon=True)
        self._thread.start()
        self._listener_thread: threading.Thread | None = None
        if message_listener is not None:
            self._listener_thread = threading.Thread(
                target=self._listen, name=f"pubsub-np-listener-{consumer_name}", daemon=True
            )
            self._listener_thread.start()

    def _join(self, name: TopicName) -> None:
        np_topic = self._registry.topic(name)
        config = self._client._broker.config
        np_topic.subscribe(
            self._subscription, self._name, self._type, _Inbox(self, len(self._topics)),
            priority_level=self._priority, key_shared_mode=self._ks_mode,
            consistent_hashing=self._ks_consistent,
            points_per_consumer=config.subscription_key_shared_consistent_hashing_replica_points,
            sticky_ranges=self._ks_ranges,
        )
        self._topics.append(np_topic)

    def _leave_all(self) -> None:
        for np_topic in self._topics:
            with contextlib.suppress(PulsarException):
                np_topic.leave(self._subscription, self._name)

    def _offer(self, source: int, message: Message) -> bool:
        with self._cv:
            if self._closed or len(self._queue) >= self._queue_size:
                return False
            message._source = source
            message._schema = self._schema
            self._queue.append(message)
            self._cv.notify_all()
            return True

    # -- identity -----------------------------------------------------------------------------------

    def topic(self) -> str:
        return self._topic_label

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._name

    def is_connected(self) -> bool:
        return not self._closed

    # -- receiving ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"consumer {self._name!r} on {self._topic_label} is closed")

    def _take(self) -> Message:
        msg = self._queue.popleft()
        deadline = None if self._ack_timeout_s is None else time.monotonic() + self._ack_timeout_s
        self._unacked[(msg._source, msg.message_id())] = (msg, deadline)
        if deadline is not None:
            self._wake.set()
        return msg

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; ``Timeout`` if none arrives within ``timeout_millis`` (None: wait forever)."""
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be used on a consumer with a message_listener")
        check_type_or_none(int, timeout_millis, "timeout_millis")
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        with self._cv:
            while True:
                self._check_open()
                if self._queue:
                    return self._take()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Timeout(f"no message on {self._topic_label} within {timeout_millis} ms",
                                  topic=self._topic_label)
                self._cv.wait(timeout=remaining)

    def batch_receive(self) -> list[Message]:
        """Messages up to the batch receive policy's limits, waiting at most its timeout."""
        return collect_batch(self._cv, self._queue, self._take, self._check_open, self._batch_policy)

    def _listen(self) -> None:
        while not self._closed:
            with self._cv:
                while not self._closed and (not self._queue or self._paused):
                    self._cv.wait(timeout=0.1)
                if self._closed:
                    return
                msg = self._take()
            assert self._listener is not None
            try:
                self._listener(self, msg)
            except Exception:
                _LOG.exception("message listener of %s on %s raised", self._name, self._topic_label)

    def pause_message_listener(self) -> None:
        self._paused = True

    def resume_message_listener(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    # -- acknowledgment -----------------------------------------------------------------------------

    def _pop_unacked(self, message: Message | MessageId) -> Message | None:
        """Remove and return the unacked message ``message`` names (None if it is not unacked)."""
        if isinstance(message, Message):
            entry = self._unacked.pop((message._source, message.message_id()), None)
            return None if entry is None else entry[0]
        if not isinstance(message, MessageId):
            raise InvalidConfiguration(f"expected a Message or MessageId, got {type(message).__name__}")
        for key in self._unacked:
            if key[1] == message:
                return self._unacked.pop(key)[0]
        return None

    def acknowledge(self, message: Message | MessageId) -> None:
        """Forget the message: nothing is stored, so there is nothing else to acknowledge."""
        self._check_open()
        with self._cv:
            self._pop_unacked(message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Forget every unacked message up to this one on its topic (Exclusive and Failover only)."""
        self._check_open()
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgment is not allowed on {self._type.name} subscription "
                f"{self._subscription!r}; acknowledge messages one by one",
            )
        if not isinstance(message, Message | MessageId):
            raise InvalidConfiguration(f"expected a Message or MessageId, got {type(message).__name__}")
        msg_id = message.message_id() if isinstance(message, Message) else message
        with self._cv:
            source = message._source if isinstance(message, Message) else next(
                (k[0] for k in self._unacked if k[1] == msg_id), None)
            for key in list(self._unacked):
                if ((source is None or key[0] == source) and key[1].partition() == msg_id.partition()
                        and key[1] <= msg_id):
                    del self._unacked[key]

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Redeliver the message after the negative-ack delay (or the backoff for its redelivery
        count), through the subscription: it goes to whichever consumer the type picks then."""
        self._check_open()
        with self._cv:
            msg = self._pop_unacked(message)
            if msg is None and isinstance(message, Message) and 0 <= message._source < len(self._topics):
                msg = message
            if msg is None:
                return
            delay_ms = (self._nack_backoff.next_delay_ms(msg.redelivery_count()) if self._nack_backoff
                        else self._nack_delay_ms)
            self._nacks.append((time.monotonic() + delay_ms / 1000, msg))
        self._wake.set()

    def redeliver_unacknowledged_messages(self) -> None:
        """Dispatch every received, unacknowledged message again on the subscription, now."""
        self._check_open()
        with self._cv:
            msgs = [m for m, _ in self._unacked.values()]
            self._unacked.clear()
        self._redeliver(msgs)

    def _redeliver(self, msgs: list[Message]) -> None:
        by_source: dict[int, list[Message]] = {}
        for msg in msgs:
            by_source.setdefault(msg._source, []).append(msg)
        for source, group in by_source.items():
            self._topics[source].redeliver(self._subscription, group)

    # -- refused ------------------------------------------------------------------------------------

    def seek(self, messageid: MessageId | int) -> None:
        """Refused: a non-persistent subscription keeps no messages to reset to."""
        self._check_open()
        raise OperationNotSupported(
            f"seek is not supported on non-persistent topic {self._topic_label}: no message is kept "
            f"({_NP_DOCS})",
            topic=self._topic_label,
        )

    def get_last_message_id(self) -> MessageId:
        """Refused, as Pulsar refuses it on non-persistent topics."""
        self._check_open()
        raise OperationNotSupported(
            f"get_last_message_id is not supported on non-persistent topic {self._topic_label} ({_NP_DOCS})",
            topic=self._topic_label,
        )

    def reconsume_later(
        self, message: Message, delay_millis: int, properties: dict[str, str] | None = None
    ) -> None:
        """Refused: retry letter topics are not available for non-persistent subscriptions."""
        self._check_open()
        raise OperationNotSupported(
            f"reconsume_later is not supported on non-persistent topic {self._topic_label}: it needs a retry "
            f"letter topic and delayed delivery ({_NP_DOCS})",
            topic=self._topic_label,
        )

    # -- leaving ------------------------------------------------------------------------------------

    def unsubscribe(self) -> None:
        """Delete the subscription (refused while other consumers are connected) and close."""
        self._check_open()
        for np_topic in self._topics:
            others = np_topic.other_consumers(self._subscription, self._name)
            if others:
                raise ConsumerBusy(
                    f"cannot unsubscribe {self._subscription!r}: consumers {others} are still connected "
                    f"on {np_topic.name}",
                    subscription=self._subscription,
                )
        for np_topic in self._topics:
            np_topic.unsubscribe(self._subscription, self._name)
        self._shutdown()

    def close(self) -> None:
        """Leave the subscription; queued and unacknowledged messages are lost (nothing keeps them)."""
        if self._closed:
            return
        self._shutdown()

    def _shutdown(self) -> None:
        with self._cv:
            self._closed = True
            self._queue.clear()
            self._unacked.clear()
            self._nacks.clear()
            self._cv.notify_all()
        self._leave_all()
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        self._client._forget(self)

    # -- the timer thread: nack delays, ack timeouts, pattern discovery -----------------------------

    def _run(self) -> None:
        last_discovery = time.monotonic()
        while not self._closed:
            now = time.monotonic()
            due: list[Message] = []
            next_due: float | None = None
            with self._cv:
                if self._nacks:
                    due.extend(m for t, m in self._nacks if t <= now)
                    self._nacks = [(t, m) for t, m in self._nacks if t > now]
                    if self._nacks:
                        next_due = min(t for t, _ in self._nacks)
                if self._ack_timeout_s is not None:
                    for key, (msg, deadline) in list(self._unacked.items()):
                        if deadline is None:
                            continue
                        if deadline <= now:
                            del self._unacked[key]
                            due.append(msg)
                        else:
                            next_due = deadline if next_due is None else min(next_due, deadline)
            try:
                if due and not self._closed:
                    self._redeliver(due)
                if self._discover is not None and now - last_discovery >= self._discovery_period_s:
                    last_discovery = now
                    for name in self._discover():
                        self._join(name)
            except PulsarException:
                _LOG.exception("consumer %s on %s: redelivery or discovery failed", self._name,
                               self._topic_label)
            waits = [1.0]
            if next_due is not None:
                waits.append(next_due - time.monotonic())
            if self._discover is not None:
                waits.append(last_discovery + self._discovery_period_s - time.monotonic())
            self._wake.wait(max(min(waits), 0.001))
            self._wake.clear()


# -- subscribe --------------------------------------------------------------------------------------


def is_non_persistent_subscription(topics: list[TopicName], pattern: re.Pattern[str] | None) -> bool:
    """Whether ``Client.subscribe`` should build a ``NonPersistentConsumer``.

    Raises:
        OperationNotSupported: the topic list mixes persistent and non-persistent topics.
    """
    if pattern is not None:
        return pattern.pattern.startswith("non-persistent://")
    kinds = {t.is_persistent for t in topics}
    if len(kinds) > 1:
        raise OperationNotSupported(
            "a consumer's topics must be all persistent or all non-persistent; subscribe to the "
            f"non-persistent ones with a consumer of their own ({_NP_DOCS})"
        )
    return kinds == {False}


def check_pattern_mode(mode: RegexSubscriptionMode, *, non_persistent: bool, pattern: str) -> None:
    """Refuse a pattern whose domain the regex subscription mode excludes (it could match nothing).

    Raises:
        InvalidConfiguration: e.g. a ``non-persistent://`` pattern with ``PersistentOnly``.
    """
    if mode == RegexSubscriptionMode.AllTopics:
        return
    if non_persistent != (mode == RegexSubscriptionMode.NonPersistentOnly):
        domain = "non-persistent" if non_persistent else "persistent"
        raise InvalidConfiguration(
            f"topic pattern {pattern!r} names {domain} topics but regex_subscription_mode is {mode.name}, so "
            f"it could match nothing; pass regex_subscription_mode=RegexSubscriptionMode."
            f"{'NonPersistentOnly' if non_persistent else 'PersistentOnly'} (or AllTopics)"
        )


def list_non_persistent_topics(client: Client, namespace: NamespaceName) -> list[str]:
    """Non-persistent topics of a namespace that this process knows: partitioned ones (their metadata
    is stored) and every topic a producer, consumer or reader of this process has used."""
    names = {t for t in client._broker.admin.list_topics(str(namespace)) if t.startswith("non-persistent://")}
    for name in _registry(client).topics(namespace):
        if name.is_partition and str(name.partitioned_topic_name) in names:
            continue
        names.add(str(name))
    return sorted(names)


def subscribe_non_persistent(
    client: Client,
    topics: list[TopicName],
    subscription: str,
    *,
    topic_label: str,
    pattern: re.Pattern[str] | None,
    namespace: NamespaceName | None,
    consumer_type: ConsumerType,
    schema: Schema,
    message_listener: Callable[[Any, Any], None] | None,
    receiver_queue_size: int,
    consumer_name: str,
    unacked_messages_timeout_ms: int | None,
    negative_ack_redelivery_delay_ms: int,
    negative_ack_backoff: MultiplierRedeliveryBackoff | None,
    batch_receive_policy: ConsumerBatchReceivePolicy | None,
    key_shared: dict[str, Any] | None,
    priority_level: int,
    retry_enable: bool,
    dead_letter_policy: ConsumerDeadLetterPolicy | None,
    pattern_auto_discovery_period: int,
) -> NonPersistentConsumer:
    """``Client.subscribe`` for non-persistent topics (arguments already checked by ``subscribe``).

    ``initial_position``, ``subscription_mode`` and ``start_message_id_inclusive`` do not reach
    here: a non-persistent subscription always starts with the next message published.
    """
    if dead_letter_policy is not None or retry_enable:
        raise OperationNotSupported(
            f"dead letter and retry letter topics are not supported on non-persistent topics "
            f"({topic_label}): "
            f"a redelivery count cannot outlive the consumer's memory ({_NP_DOCS})"
        )
    internal: list[TopicName] = []
    for name in topics:
        internal.extend(client._broker.partitions(name))
    discover = None
    if pattern is not None and namespace is not None:
        subscribed = {str(t) for t in topics}

        def discover() -> list[TopicName]:
            fresh: list[TopicName] = []
            for full in list_non_persistent_topics(client, namespace):
                if full not in subscribed and pattern.fullmatch(full):
                    subscribed.add(full)
                    fresh.extend(client._broker.partitions(TopicName.parse(full)))
            return fresh

    return NonPersistentConsumer(
        client, internal, topic_label=topic_label, subscription=subscription, consumer_name=consumer_name,
        consumer_type=consumer_type, schema=schema, receiver_queue_size=receiver_queue_size,
        message_listener=message_listener, unacked_messages_timeout_ms=unacked_messages_timeout_ms,
        negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
        negative_ack_backoff=negative_ack_backoff,
        batch_receive_policy=batch_receive_policy, priority_level=priority_level, key_shared=key_shared,
        discover=discover, discovery_period_s=float(pattern_auto_discovery_period),
    )


__all__ = [
    "NonPersistentConsumer",
    "NonPersistentProducer",
    "NonPersistentReader",
    "check_pattern_mode",
    "create_non_persistent_producer",
    "create_non_persistent_reader",
    "is_non_persistent_subscription",
    "list_non_persistent_topics",
    "subscribe_non_persistent",
]
