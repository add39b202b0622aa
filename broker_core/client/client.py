"""``Client``: the entry point, shaped like the official ``pulsar.Client``.

The service URL names a storage root (a folder or ``file://`` URL), not a broker.  Keyword
arguments that only make sense for a network client (TLS, authentication, threads, lookups) are
accepted and type-checked so ported code runs, and otherwise ignored; ``docs/CLIENT.md`` lists them.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

from broker_core.client.args import (
    check_initial_sequence_id,
    check_positive,
    check_str_map,
    check_type,
    check_type_or_none,
    check_utf8,
)
from broker_core.client.client_core import ClientCore
from broker_core.client.consumer import Consumer
from broker_core.client.non_persistent import create_non_persistent_producer, create_non_persistent_reader
from broker_core.client.policies import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    InitialPosition,
    RegexSubscriptionMode,
    SubscriptionMode,
)
from broker_core.client.producer import BatchingType, Producer
from broker_core.client.reader import Reader
from broker_core.client.subscribe import subscribe
from broker_core.client.table_view import TableView
from broker_core.crypto import ConsumerCryptoFailureAction, CryptoKeyReader, MessageDecryptor, MessageEncryptor
from broker_core.errors import InvalidConfiguration, OperationNotSupported
from broker_core.hashing.keys import HashingScheme
from broker_core.log.segment import CompressionType
from broker_core.message import BytesSchema, Schema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.producer.registry import ProducerAccessMode
from broker_core.producer.routing import CustomRouter, MessageRouter, PartitionsRoutingMode, router_for
from broker_core.schema.info import SchemaInfo
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType

_NAME_COUNTER = itertools.count()


class Client(ClientCore):
    """A client of the storage root ``service_url`` (a path or ``file://`` URL).

    Args:
        service_url: the storage root.  Pulsar URLs (``pulsar://``...) are refused with an error.
        broker_config: a ``BrokerConfig``, or a path to a TOML file; by default the root's
            ``_pubsub/broker.toml`` if present, else the built-in defaults.
        clock: time source (tests inject a ``ManualClock``).
        reader_poll_interval_ms: how often a drained reader checks storage for other processes' commits.
        create_root: create the storage root if it does not exist; by default a missing root is
            ``RootNotFound`` (a typo in the path must not make a new, empty root).
        storage_options: how to reach an object-store root (``s3://bucket/prefix``): the keys delta-rs
            uses (``aws_endpoint``, ``aws_region``, ``aws_access_key_id``, ...); ``AWS_*`` environment
            variables fill in the rest.  ``pubsub_single_writer="true"`` accepts a store without
            conditional puts when exactly one process writes.
        The remaining arguments mirror the official client and are type-checked.
    """

    # -- helpers ------------------------------------------------------------------------------------

    def _schema_lookup(self, topic: str, version: bytes) -> SchemaInfo | None:
        """The schema a message of ``topic`` was written with (``Schema.attach_client`` hands this out)."""
        return self._broker.schemas.lookup(topic, version)

    # -- API ----------------------------------------------------------------------------------------

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Schema | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: int = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: int = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: Callable[[Any, int], int] | None = None,
        *,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
    ) -> Producer:
        """Create a producer on ``topic`` (auto-created per ``allowAutoTopicCreation``)."""
        self._check_open()
        check_type_or_none(str, producer_name, "producer_name")
        if producer_name is not None:
            check_utf8(producer_name, "producer_name")
        schema = BytesSchema() if schema is None else check_type(Schema, schema, "schema")
        check_initial_sequence_id(initial_sequence_id)
        check_type(int, send_timeout_millis, "send_timeout_millis")
        check_type(CompressionType, compression_type, "compression_type")
        check_positive(max_pending_messages, "max_pending_messages")
        check_positive(max_pending_messages_across_partitions, "max_pending_messages_across_partitions")
        check_type(bool, block_if_queue_full, "block_if_queue_full")
        check_type(bool, batching_enabled, "batching_enabled")
        check_positive(batching_max_messages, "batching_max_messages")
        check_positive(batching_max_allowed_size_in_bytes, "batching_max_allowed_size_in_bytes")
        check_positive(batching_max_publish_delay_ms, "batching_max_publish_delay_ms", allow_zero=True)
        check_type(bool, chunking_enabled, "chunking_enabled")
        check_type(PartitionsRoutingMode, message_routing_mode, "message_routing_mode")
        check_type(bool, lazy_start_partitioned_producers, "lazy_start_partitioned_producers")
        props = check_str_map(properties, "properties")
        check_type(int, batching_type, "batching_type")
        if batching_type not in (BatchingType.Default, BatchingType.KeyBased):
            raise InvalidConfiguration(
                f"argument 'batching_type' must be BatchingType.Default or KeyBased, got {batching_type!r}"
            )
        check_type(ProducerAccessMode, access_mode, "access_mode")
        check_type(HashingScheme, hashing_scheme, "hashing_scheme")
        encryptor = None
        if encryption_key is not None or crypto_key_reader is not None:
            if encryption_key is None or crypto_key_reader is None:
                raise InvalidConfiguration(
                    "end-to-end encryption needs both encryption_key (the key name) and crypto_key_reader"
                )
            if chunking_enabled:
                raise OperationNotSupported("end-to-end encryption with chunking is not supported; turn one off")
            if not TopicName.parse(check_type(str, topic, "topic")).is_persistent:
                raise OperationNotSupported("end-to-end encryption applies to persistent topics only")
            encryptor = MessageEncryptor(encryption_key, crypto_key_reader)  # CryptoError if the key is unusable
        if message_router is not None and not callable(message_router):
            raise InvalidConfiguration(f"argument 'message_router' must be callable, got {message_router!r}")
        if batching_enabled and chunking_enabled:
            raise InvalidConfiguration("batching and chunking cannot be enabled together; turn batching off to chunk")
        if producer_name is not None and (not producer_name or producer_name.startswith("pubsub.")):
            raise InvalidConfiguration(
                f"producer_name {producer_name!r} is not allowed: it must be non-empty and may not start "
                "with the reserved prefix 'pubsub.'"
            )
        if not TopicName.parse(check_type(str, topic, "topic")).is_persistent:  # docs/NON_PERSISTENT.md
            return create_non_persistent_producer(  # type: ignore[return-value]  # Producer's methods
                self,
                topic,
                producer_name=producer_name,
                schema=schema,
                initial_sequence_id=initial_sequence_id,
                chunking_enabled=chunking_enabled,
                message_routing_mode=message_routing_mode,
                message_router=message_router,
                hashing_scheme=hashing_scheme,
                access_mode=access_mode,
                properties=props,
            )
        name, partitions = self._resolve(topic)
        schema_version = self._broker.schemas.attach_producer(name, schema)  # IncompatibleSchema: nothing written
        schema.attach_client(self)
        router: MessageRouter | None = None
        if len(partitions) > 1 or partitions[0] != name:
            router = router_for(
                len(partitions),
                message_routing_mode=message_routing_mode,
                message_router=message_router,
                hashing_scheme=hashing_scheme,
                batching_enabled=batching_enabled,
                partition_switch_ms=max(1, batching_max_publish_delay_ms),
                clock=self._clock,
            )
        producer = Producer(
            self,
            name,
            partitions,
            producer_name=producer_name or f"pubsub-{os.getpid()}-{next(_NAME_COUNTER)}-{uuid.uuid4().hex[:6]}",
            schema=schema,
            initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis,
            compression_type=compression_type,
            max_pending_messages=max_pending_messages,
            max_pending_messages_across_partitions=max_pending_messages_across_partitions,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            chunking_enabled=chunking_enabled,
            router=router,
            batching_type=batching_type,
            access_mode=access_mode,
            properties=props,
        )
        producer._encryptor = encryptor  # before any send: the caller has not seen the producer yet
        # records encoded a batch at a time (D91), unless each send's payload is needed at once: to
        # encrypt it, to chunk it, or to hand it to a custom router
        bulk = schema.deferred_encoder()
        if bulk is not None and encryptor is None and not chunking_enabled and not isinstance(router, CustomRouter):
            producer._bulk, producer._encode = bulk, bulk.defer
        producer._schema_version = schema_version
        producer._key_from_value = schema.separated_key
        with self._lock:
            self._handles.add(producer)
        return producer

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Schema | None = None,
        reader_listener: Callable[[Reader, Any], None] | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: Any = None,
    ) -> Reader:
        """Create a non-durable reader positioned at ``start_message_id`` (earliest, latest or an id)."""
        self._check_open()
        check_type(MessageId, start_message_id, "start_message_id")
        schema = BytesSchema() if schema is None else check_type(Schema, schema, "schema")
        if reader_listener is not None and not callable(reader_listener):
            raise InvalidConfiguration(f"argument 'reader_listener' must be callable, got {reader_listener!r}")
        check_positive(receiver_queue_size, "receiver_queue_size", allow_zero=True)
        receiver_queue_size = max(receiver_queue_size, 1)  # 0 (no prefetch): a reader claims nothing, so 1 is the same
        check_type_or_none(str, reader_name, "reader_name")
        check_type_or_none(str, subscription_role_prefix, "subscription_role_prefix")
        check_type(bool, is_read_compacted, "is_read_compacted")
        check_type(bool, start_message_id_inclusive, "start_message_id_inclusive")
        check_type_or_none(ConsumerCryptoFailureAction, crypto_failure_action, "crypto_failure_action")
        check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
        if not TopicName.parse(check_type(str, topic, "topic")).is_persistent:  # docs/NON_PERSISTENT.md
            if crypto_key_reader is not None:
                raise OperationNotSupported("end-to-end encryption applies to persistent topics only")
            if is_read_compacted:
                raise InvalidConfiguration(
                    f"is_read_compacted=True can only be used with persistent topics; {topic} is "
                    "non-persistent and is never compacted",
                    argument="is_read_compacted",
                )
            return create_non_persistent_reader(  # type: ignore[return-value]  # Reader's methods
                self,
                topic,
                start_message_id=start_message_id,
                receiver_queue_size=receiver_queue_size,
                reader_name=reader_name,
                schema=schema,
                reader_listener=reader_listener,
            )
        name, partitions = self._resolve(topic)
        self._broker.schemas.attach_consumer(name, schema)
        schema.attach_client(self)
        reader = Reader(
            self,
            name,
            partitions,
            start_message_id=start_message_id,
            start_message_id_inclusive=start_message_id_inclusive,
            receiver_queue_size=receiver_queue_size,
            reader_name=reader_name or f"reader-{uuid.uuid4().hex[:10]}",
            schema=schema,
            reader_listener=reader_listener,
            poll_interval_ms=self._poll_ms,
            read_compacted=is_read_compacted,
            decryptor=MessageDecryptor(crypto_key_reader, crypto_failure_action),
        )
        with self._lock:
            self._handles.add(reader)
        return reader

    def create_table_view(
        self, topic: str, subscription_name: str | None = None, schema: Schema | None = None
    ) -> TableView:
        """A latest-value-per-key map of ``topic``, loaded before this returns and kept up to date.

        Built from the compacted view and the log after it (``broker_core/client/table_view.py``);
        ``subscription_name`` only names the view's reader (readers never register on storage).
        """
        self._check_open()
        check_type(str, topic, "topic")
        check_type_or_none(str, subscription_name, "subscription_name")
        schema = BytesSchema() if schema is None else check_type(Schema, schema, "schema")
        view = TableView(
            self, topic, subscription_name=subscription_name, schema=schema, poll_interval_ms=self._poll_ms
        )
        with self._lock:
            self._handles.add(view)
        return view

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Schema | None = None,
        message_listener: Callable[[Consumer, Any], None] | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: Any = None,
        *,
        priority_level: int = 0,
        retry_enable: bool = False,
        subscription_mode: SubscriptionMode = SubscriptionMode.Durable,
        negative_ack_backoff: MultiplierRedeliveryBackoff | None = None,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a pattern (``re.compile(...)``).

        The keyword-only arguments extend the official signature: ``priority_level`` (Failover),
        ``retry_enable`` (the retry letter topic and ``reconsume_later``), ``subscription_mode``
        (Durable or NonDurable) and ``negative_ack_backoff``.  Batch-index acknowledgment is always
        on: every message of a batch has an offset of its own.
        """
        self._check_open()
        check_positive(
            max_total_receiver_queue_size_across_partitions, "max_total_receiver_queue_size_across_partitions"
        )
        check_positive(broker_consumer_stats_cache_time_ms, "broker_consumer_stats_cache_time_ms", allow_zero=True)
        check_type(bool, replicate_subscription_state_enabled, "replicate_subscription_state_enabled")
        check_positive(max_pending_chunked_message, "max_pending_chunked_message")
        check_type(bool, auto_ack_oldest_chunked_message_on_queue_full, "auto_ack_oldest_chunked_message_on_queue_full")
        check_type(bool, batch_index_ack_enabled, "batch_index_ack_enabled")
        check_type_or_none(ConsumerCryptoFailureAction, crypto_failure_action, "crypto_failure_action")
        check_type_or_none(CryptoKeyReader, crypto_key_reader, "crypto_key_reader")
        consumer = subscribe(
            self,
            topic,
            subscription_name,
            consumer_type=consumer_type,
            schema=schema,
            message_listener=message_listener,
            receiver_queue_size=receiver_queue_size,
            consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            is_read_compacted=is_read_compacted,
            properties=properties,
            pattern_auto_discovery_period=pattern_auto_discovery_period,
            initial_position=initial_position,
            start_message_id_inclusive=start_message_id_inclusive,
            batch_receive_policy=batch_receive_policy,
            key_shared_policy=key_shared_policy,
            regex_subscription_mode=regex_subscription_mode,
            dead_letter_policy=dead_letter_policy,
            priority_level=priority_level,
            retry_enable=retry_enable,
            subscription_mode=subscription_mode,
            negative_ack_backoff=negative_ack_backoff,
            decryptor=MessageDecryptor(crypto_key_reader, crypto_failure_action),
        )
        with self._lock:
            self._handles.add(consumer)
        return consumer


__all__ = ["Client"]
