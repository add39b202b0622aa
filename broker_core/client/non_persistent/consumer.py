"""``NonPersistentConsumer``: one consumer of a subscription on non-persistent topics.

The topic's subscription picks the consumer of each message; this class keeps its receiver queue,
remembers what it handed out until it is acknowledged (the only copy: nothing is stored), and
dispatches negatively acknowledged and timed-out messages again through the subscription.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from broker_core.client.consumer_base import ConsumerBase
from broker_core.client.context import HandleOwner
from broker_core.client.non_persistent.handles import registry_of
from broker_core.client.non_persistent.receiver_queue import wait_next
from broker_core.client.non_persistent.refusals import seek_refused, unsupported
from broker_core.client.policies import ConsumerBatchReceivePolicy
from broker_core.errors import (
    ConsumerBusy,
    InvalidConfiguration,
    PulsarException,
)
from broker_core.message import Message, Schema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.non_persistent import NonPersistentTopic
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType
from broker_core.subscription.key_shared import KeySharedMode

_LOG = logging.getLogger(__name__)


class _Inbox:
    """The consumer's ``Receiver`` on one of its internal topics."""

    __slots__ = ("consumer", "source")

    def __init__(self, consumer: NonPersistentConsumer, source: int) -> None:
        self.consumer = consumer
        self.source = source

    def offer(self, message: Message) -> bool:
        return self.consumer._offer(self.source, message)


class NonPersistentConsumer(ConsumerBase):
    """A consumer of a subscription on non-persistent topics. Create with ``Client.subscribe``."""

    _log = _LOG

    def __init__(
        self,
        client: HandleOwner,
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
        self._registry = registry_of(client)
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
            range_size=config.subscription_key_shared_auto_split_range_size,
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

    # -- receiving ----------------------------------------------------------------------------------

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
        return wait_next(self._cv, self._queue, self._take, self._check_open, timeout_millis, self._topic_label)

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
        self._check_cumulative_allowed()
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
            self._schedule_nack(msg)
        self._wake.set()

    def _redeliver(self, msgs: list[Message]) -> None:
        """Dispatch ``msgs`` again on the subscription of their topic, to whichever consumer it picks now."""
        by_source: dict[int, list[Message]] = {}
        for msg in msgs:
            by_source.setdefault(msg._source, []).append(msg)
        for source, group in by_source.items():
            self._topics[source].redeliver(self._subscription, group)

    # -- refused ------------------------------------------------------------------------------------

    def seek(self, messageid: MessageId | int) -> None:
        """Refused: a non-persistent subscription keeps no messages to reset to."""
        self._check_open()
        raise seek_refused(self._topic_label)

    def get_last_message_id(self) -> MessageId:
        """Refused, as Pulsar refuses it on non-persistent topics."""
        self._check_open()
        raise unsupported(
            f"get_last_message_id is not supported on non-persistent topic {self._topic_label}",
            topic=self._topic_label,
        )

    def reconsume_later(
        self, message: Message, delay_millis: int, properties: dict[str, str] | None = None
    ) -> None:
        """Refused: retry letter topics are not available for non-persistent subscriptions."""
        self._check_open()
        raise unsupported(
            f"reconsume_later is not supported on non-persistent topic {self._topic_label}: it needs a retry "
            "letter topic and delayed delivery",
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


__all__ = ["NonPersistentConsumer"]
