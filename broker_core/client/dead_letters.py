"""Dead letter and retry letter topics, implemented by the consumer as in Pulsar.

A message redelivered ``max_redeliver_count`` times is, at its next redelivery, published to the
dead letter topic (``<topic>-<subscription>-DLQ``) with ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID``
properties and acknowledged on the original subscription.  ``reconsume_later`` publishes to the
retry letter topic (``<topic>-<subscription>-RETRY``) with a delivery delay and the
``RECONSUMETIMES`` / ``DELAY_TIME`` bookkeeping; past the limit the message goes to the DLQ.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

from broker_core.client.policies import ConsumerDeadLetterPolicy
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.errors import PulsarException
from broker_core.message import Message

if TYPE_CHECKING:
    from broker_core.client.client import Client
    from broker_core.client.producer import Producer

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
DEFAULT_MAX_RECONSUME_TIMES = 16  # the Java client's default when retry is on without a policy


def retry_topic_name(topic: str, subscription: str, policy: ConsumerDeadLetterPolicy | None) -> str:
    if policy is not None and policy.retry_letter_topic:
        return policy.retry_letter_topic
    return f"{topic}-{subscription}-RETRY"


class DeadLetters:
    """The DLQ / retry producers of one consumer (created on first use)."""

    def __init__(
        self, client: Client, policy: ConsumerDeadLetterPolicy | None, subscription: str, *, retry_enabled: bool
    ) -> None:
        self._client = client
        self._policy = policy
        self._subscription = subscription
        self.retry_enabled = retry_enabled
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()

    @property
    def max_redeliver_count(self) -> int | None:
        if self._policy is not None:
            return self._policy.max_redeliver_count
        return DEFAULT_MAX_RECONSUME_TIMES if self.retry_enabled else None

    def should_dead_letter(self, msg: Message) -> bool:
        """At a redelivery (nack, ack timeout): has the message used up its redeliveries?"""
        limit = self.max_redeliver_count  # retry without a policy implies the default limit, as in Java
        return limit is not None and msg.redelivery_count() >= limit

    def over_limit(self, msg: Message) -> bool:
        """At delivery: was it redelivered past the limit (e.g. its consumer died)?"""
        limit = self.max_redeliver_count
        return limit is not None and msg.redelivery_count() > limit

    def _origin_topic(self, msg: Message, part: SubscriptionPart) -> str:
        return msg.properties().get(REAL_TOPIC) or str(part.name.partitioned_topic_name)

    def _producer(self, topic: str, *, dead_letter: bool = False) -> Producer:
        with self._lock:
            producer = self._producers.get(topic)
            if producer is None:
                # the initial subscription belongs to the dead letter topic, whatever its name
                if self._policy is not None and self._policy.initial_subscription_name and dead_letter:
                    self._client._broker.create_subscription(topic, self._policy.initial_subscription_name)
                producer = self._client.create_producer(topic)
                self._producers[topic] = producer
            return producer

    def send_to_dlq(self, msg: Message, part: SubscriptionPart) -> None:
        origin = self._origin_topic(msg, part)
        topic = (self._policy.dead_letter_topic if self._policy and self._policy.dead_letter_topic
                 else f"{origin}-{self._subscription}-DLQ")
        props = msg.properties()
        props.setdefault(REAL_TOPIC, origin)
        props.setdefault(ORIGIN_MESSAGE_ID, msg.message_id().to_admin_string())
        producer = self._producer(topic, dead_letter=True)
        producer.send(msg._data, properties=props, partition_key=msg._key or None,
                      ordering_key=msg.ordering_key() or None)

    def reconsume_later(
        self, msg: Message, part: SubscriptionPart, delay_ms: int, properties: dict[str, str] | None
    ) -> None:
        origin = self._origin_topic(msg, part)
        props = msg.properties()
        props.update(properties or {})
        times = int(props.get(RECONSUMETIMES, "0")) + 1
        limit = self.max_redeliver_count or DEFAULT_MAX_RECONSUME_TIMES
        if times > limit:
            self.send_to_dlq(msg, part)
            return
        props[REAL_TOPIC] = origin
        props.setdefault(ORIGIN_MESSAGE_ID, msg.message_id().to_admin_string())
        props[RECONSUMETIMES] = str(times)
        props[DELAY_TIME] = str(delay_ms)
        topic = retry_topic_name(origin, self._subscription, self._policy)
        self._producer(topic).send(msg._data, properties=props, partition_key=msg._key or None,
                                   ordering_key=msg.ordering_key() or None,
                                   deliver_after=timedelta(milliseconds=delay_ms))

    def close(self) -> None:
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            with contextlib.suppress(PulsarException):
                producer.close()


__all__ = [
    "DELAY_TIME",
    "ORIGIN_MESSAGE_ID",
    "REAL_TOPIC",
    "RECONSUMETIMES",
    "DeadLetters",
    "retry_topic_name",
]
