"""Dead letter and retry letter topics, implemented by the consumer as in Pulsar 4.x.

A message redelivered ``max_redeliver_count`` times is, at its next redelivery, published to the
dead letter topic with ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` properties and acknowledged on the
original subscription.  ``reconsume_later`` publishes to the retry letter topic with a delivery
delay and the ``RECONSUMETIMES`` / ``DELAY_TIME`` bookkeeping (``reconsume_properties``); once
``RECONSUMETIMES`` exceeds the limit the message goes to the dead letter topic instead, at once.

Topic names (``letter_topics``, the one place that decides them, also for the Spark helpers): a
policy's explicit names; else ``<topic>-<subscription>-RETRY`` / ``-DLQ``, except that with retry
enabled the names of Pulsar before 2.8, ``<domain>://<tenant>/<namespace>/<subscription>-RETRY`` /
``-DLQ``, are kept when those topics already exist (so their messages are not abandoned).

A letter is the original message as it was written: the payload bytes go over unchanged under the
original's writer schema (registered on the letter topic, as the Java client's ``AUTO_PRODUCE_BYTES``
producer does), so a typed consumer of the letter topic decodes it as it would the original.  A
message that arrived encrypted stays encrypted: a decrypted one is sealed again for the same key name
with the consumer's ``crypto_key_reader`` (``CryptoError`` if that reader has no public key for it:
the letter is not sent and the message stays unacknowledged, never copied in plaintext), and one the
consumer could not decrypt (``ConsumerCryptoFailureAction.CONSUME``) goes over as the ciphertext with
its encryption header (``docs/DECISIONS.md``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from broker_core.client import telemetry
from broker_core.client.context import HandleOwner
from broker_core.client.policies import ConsumerDeadLetterPolicy
from broker_core.client.subscription_part import SubscriptionPart
from broker_core.crypto import ENCRYPTION_PROPERTY, CryptoKeyReader
from broker_core.errors import CryptoError, PulsarException
from broker_core.message import Message
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.schema.base import Schema
from broker_core.schema.info import SchemaInfo

if TYPE_CHECKING:
    from broker_core.broker.broker import Broker
    from broker_core.client.producer import Producer

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
ORIGIN_MESSAGE_IDY_TIME = "ORIGIN_MESSAGE_IDY_TIME"
"""The misspelt key Pulsar's Java client still writes next to ``ORIGIN_MESSAGE_ID``."""
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
DEFAULT_MAX_RECONSUME_TIMES = 16  # the Java client's default when retry is on without a policy
RETRY_SUFFIX = "-RETRY"
DLQ_SUFFIX = "-DLQ"


class LetterClient(HandleOwner, Protocol):
    """The client as dead letters see it: it also makes the letter topics' producers."""

    def create_producer(self, topic: str, producer_name: str | None = None, schema: Schema | None = None,
                        *args: Any, **kwargs: Any) -> Producer:
        """A producer of ``topic`` (the client's own method)."""


class WriterSchema(Schema):
    """A letter producer's schema: the original message's writer schema, its payload passed through.

    Registering it on the letter topic gives the copy a schema version there that names the very
    schema the payload was encoded with (the Java client's ``AUTO_PRODUCE_BYTES``).
    """

    def __init__(self, info: SchemaInfo) -> None:
        self._info = info

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return data

    def schema_info(self) -> SchemaInfo:
        return self._info


@dataclass(frozen=True, slots=True)
class _Letter:
    """How one message is copied: under which schema, sealed for which key, with which properties."""

    schema: SchemaInfo | None
    encryption_key: str | None
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class LetterTopics:
    """Where one topic's retried and dead-lettered messages of one subscription go."""

    retry: str
    dead_letter: str


def _topic_exists(broker: Broker, name: str) -> bool:
    topic = TopicName.parse(name)
    return bool(broker.admin.partitioned_topic_metadata(topic)) or broker.admin.internal_topic_exists(topic)


def letter_topics(
    broker: Broker, topic: str, subscription: str, policy: ConsumerDeadLetterPolicy | None, *, retry_enabled: bool
) -> LetterTopics:
    """The retry and dead letter topics of ``topic`` (a partition counts as its partitioned topic)."""
    origin = TopicName.parse(topic).partitioned_topic_name
    retry = f"{origin}-{subscription}{RETRY_SUFFIX}"
    dead = f"{origin}-{subscription}{DLQ_SUFFIX}"
    explicit_retry = policy.retry_letter_topic if policy is not None else None
    explicit_dead = policy.dead_letter_topic if policy is not None else None
    if retry_enabled and not (explicit_retry and explicit_dead):
        legacy = f"{origin.domain.value}://{origin.tenant}/{origin.namespace}/{subscription}"
        if _topic_exists(broker, legacy + RETRY_SUFFIX):
            retry = legacy + RETRY_SUFFIX
        if _topic_exists(broker, legacy + DLQ_SUFFIX):
            dead = legacy + DLQ_SUFFIX
    return LetterTopics(retry=explicit_retry or retry, dead_letter=explicit_dead or dead)


def pulsar_id_string(message_id: MessageId) -> str:
    """Pulsar's ``MessageId.toString()``: ``ledger:entry:partition``, plus ``:batch`` inside a batch."""
    base = f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.partition()}"
    return base if message_id.batch_index() < 0 else f"{base}:{message_id.batch_index()}"


def reconsume_properties(
    original: dict[str, str], *, real_topic: str, message_id: str, delay_ms: int, custom: dict[str, str] | None
) -> tuple[dict[str, str], int]:
    """The properties of a reconsumed copy and its ``RECONSUMETIMES``.

    The original properties stay; ``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID`` and the legacy
    ``ORIGIN_MESSAGE_IDY_TIME`` are added when absent; the caller's properties override;
    ``RECONSUMETIMES`` is the original's + 1 (1 when absent) and ``DELAY_TIME`` the delay in ms
    (a negative delay counts as 0).
    """
    props = dict(original)
    props.setdefault(REAL_TOPIC, real_topic)
    props.setdefault(ORIGIN_MESSAGE_ID, message_id)
    props.setdefault(ORIGIN_MESSAGE_IDY_TIME, message_id)
    props.update(custom or {})
    times = int(original.get(RECONSUMETIMES, "0")) + 1
    props[RECONSUMETIMES] = str(times)
    props[DELAY_TIME] = str(max(delay_ms, 0))
    return props, times


def retry_topic_name(
    broker: Broker, topic: str, subscription: str, policy: ConsumerDeadLetterPolicy | None
) -> str:
    """The retry letter topic a retry-enabled consumer of ``topic`` also subscribes to."""
    return letter_topics(broker, topic, subscription, policy, retry_enabled=True).retry


class DeadLetters:
    """The DLQ / retry producers of one consumer (created on first use)."""

    def __init__(
        self, client: LetterClient, policy: ConsumerDeadLetterPolicy | None, subscription: str, *, retry_enabled: bool,
        crypto_key_reader: CryptoKeyReader | None = None,
    ) -> None:
        self._client = client
        self._policy = policy
        self._subscription = subscription
        self.retry_enabled = retry_enabled
        self._crypto_key_reader = crypto_key_reader
        self._producers: dict[tuple[str, str | None, str | None], Producer] = {}
        self._names: dict[str, LetterTopics] = {}
        self._lock = threading.Lock()
        self.metric_attributes: dict[str, Any] = {}  # the consumer's (``pulsar.client.consumer.message.dlq``)

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

    def _topics(self, origin: str) -> LetterTopics:
        with self._lock:
            topics = self._names.get(origin)
        if topics is None:
            topics = letter_topics(self._client._broker, origin, self._subscription, self._policy,
                                   retry_enabled=self.retry_enabled)
            with self._lock:
                self._names[origin] = topics
        return topics

    def _letter(self, msg: Message, properties: dict[str, str]) -> _Letter:
        """The original's writer schema and encryption, carried over to its copy."""
        info = None
        if msg._schema_version:
            info = self._client._broker.schemas.lookup(msg.topic_name(), msg._schema_version)
        context = msg._encryption
        if context is None:
            return _Letter(info, None, properties)
        if context.is_decryption_failed():  # ciphertext: it goes over with the header that opens it
            return _Letter(info, None, {**properties, ENCRYPTION_PROPERTY: context.header_property()})
        names = [key.key for key in context.keys()]  # noqa: SIM118  # the official method
        if self._crypto_key_reader is None or not names:
            raise CryptoError(
                f"message {msg.message_id()} of {msg.topic_name()} arrived encrypted but the consumer has no "
                "crypto_key_reader to encrypt its letter copy with; it is not copied in plaintext",
                topic=msg.topic_name(),
            )
        return _Letter(info, names[0], properties)

    def _producer(self, topic: str, letter: _Letter, *, dead_letter: bool = False) -> Producer:
        schema_key = json.dumps(letter.schema.to_json(), sort_keys=True) if letter.schema is not None else None
        key = (topic, schema_key, letter.encryption_key)
        with self._lock:
            producer = self._producers.get(key)
            if producer is None:
                # the initial subscription belongs to the dead letter topic, whatever its name
                if self._policy is not None and self._policy.initial_subscription_name and dead_letter:
                    self._client._broker.create_subscription(topic, self._policy.initial_subscription_name)
                options: dict[str, Any] = {}
                if letter.schema is not None:
                    options["schema"] = WriterSchema(letter.schema)
                if letter.encryption_key is not None:
                    options.update(encryption_key=letter.encryption_key, crypto_key_reader=self._crypto_key_reader)
                producer = self._client.create_producer(topic, **options)
                self._producers[key] = producer
            return producer

    def send_to_dlq(self, msg: Message, part: SubscriptionPart, properties: dict[str, str] | None = None) -> None:
        origin = self._origin_topic(msg, part)
        topic = self._topics(origin).dead_letter
        props = msg.properties() if properties is None else properties
        props.setdefault(REAL_TOPIC, origin)
        props.setdefault(ORIGIN_MESSAGE_ID, pulsar_id_string(msg.message_id()))
        letter = self._letter(msg, props)
        producer = self._producer(topic, letter, dead_letter=True)
        producer.send(msg._data, properties=letter.properties, partition_key=msg._key or None,
                      ordering_key=msg.ordering_key() or None)
        telemetry.DLQ.add(1, self.metric_attributes)

    def reconsume_later(
        self, msg: Message, part: SubscriptionPart, delay_ms: int, properties: dict[str, str] | None
    ) -> None:
        origin = self._origin_topic(msg, part)
        props, times = reconsume_properties(
            msg.properties(), real_topic=origin, message_id=pulsar_id_string(msg.message_id()),
            delay_ms=delay_ms, custom=properties,
        )
        limit = self.max_redeliver_count or DEFAULT_MAX_RECONSUME_TIMES
        if times > limit:  # past the limit: straight to the dead letter topic, no delay
            self.send_to_dlq(msg, part, props)
            return
        letter = self._letter(msg, props)
        producer = self._producer(self._topics(origin).retry, letter)
        deliver_after = timedelta(milliseconds=delay_ms) if delay_ms > 0 else None
        producer.send(msg._data, properties=letter.properties, partition_key=msg._key or None,
                      ordering_key=msg.ordering_key() or None, deliver_after=deliver_after)

    def close(self) -> None:
        with self._lock:
            producers, self._producers = list(self._producers.values()), {}
        for producer in producers:
            with contextlib.suppress(PulsarException):
                producer.close()


__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DELAY_TIME",
    "ORIGIN_MESSAGE_ID",
    "ORIGIN_MESSAGE_IDY_TIME",
    "REAL_TOPIC",
    "RECONSUMETIMES",
    "DeadLetters",
    "LetterTopics",
    "WriterSchema",
    "letter_topics",
    "pulsar_id_string",
    "reconsume_properties",
    "retry_topic_name",
]
