"""``Client.subscribe``: resolve topics (one, a list, or a pattern), join every internal topic.

Kept apart from ``client.py`` because it is most of the consumer's set-up: argument checks with the
official names, topic resolution and pattern discovery, the retry letter topic, and registering the
consumer in each internal topic's cursor.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from broker_core.client.args import check_positive, check_str_map, check_type, check_type_or_none
from broker_core.client.consumer import Consumer
from broker_core.client.dead_letters import DeadLetters, LetterClient, retry_topic_name
from broker_core.client.non_persistent import (
    check_pattern_mode,
    is_non_persistent_subscription,
    list_non_persistent_topics,
    subscribe_non_persistent,
)
from broker_core.client.policies import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    InitialPosition,
    RegexSubscriptionMode,
    SubscriptionMode,
)
from broker_core.client.subscription_part import MemoryCursorStore, Store, SubscriptionPart
from broker_core.crypto import MessageDecryptor
from broker_core.errors import InvalidConfiguration, OperationNotSupported
from broker_core.message import BytesSchema, Message, Schema, messages_from_rows
from broker_core.naming import NamespaceName, TopicName
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType, Cursor
from broker_core.subscription.cursor_store import validate_subscription_name
from broker_core.topic.compacted_view import CompactedTopic

_PATTERN_PREFIX = re.compile(r"^(persistent|non-persistent)://([^/]+)/([^/]+)/")


class _CompactedPart(SubscriptionPart):
    """An Exclusive or Failover consumer with ``is_read_compacted``: below the compaction horizon it
    gets the compacted view's messages (with their original ids), and the offsets compaction dropped
    are acknowledged as it passes them, so markDelete moves on as if they had been consumed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.compacted = CompactedTopic(self.log)

    def messages_for(self, offsets: list[int], cursor: Cursor | None, *, source: int = -1) -> list[Message]:
        view = self.compacted.view()
        if view is None or not offsets or offsets[0] >= view.horizon:
            return super().messages_for(offsets, cursor, source=source)
        wanted = np.asarray(offsets, dtype=np.int64)
        below = wanted[wanted < view.horizon]
        present = view.contains(below)
        dropped = below[~present]
        if len(dropped):

            def skip(latest: Cursor | None) -> Cursor | None:
                if latest is not None:
                    latest.ack(dropped)
                return latest

            self.store.update(skip)
        piece = view.select(below[present])
        msgs = messages_from_rows(piece.rows, piece.offsets, piece.entry_ids, piece.batch_indexes,
                                  ledger_id=self.log.log.cached_snapshot().ledger_id,
                                  partition=self.partition, topic=self.display_topic, schema=self.schema,
                                  source=source)
        counts = cursor.redelivery if cursor is not None else {}
        for msg in msgs:
            msg._redelivery_count = counts.get(msg._offset, 0)
        rest = wanted[wanted >= view.horizon].tolist()
        return self._join_chunks(piece.rows, msgs) + super().messages_for(rest, cursor, source=source)


def _parts_for(
    client: LetterClient,
    topic: TopicName,
    *,
    subscription: str,
    consumer_name: str,
    consumer_type: ConsumerType,
    priority_level: int,
    key_shared: dict[str, Any] | None,
    schema: Schema,
    durable: bool,
    initial_position: InitialPosition,
    read_compacted: bool = False,
) -> list[SubscriptionPart]:
    if not topic.is_persistent:
        raise OperationNotSupported(
            f"{topic} is non-persistent; consumers on non-persistent topics are not supported yet",
            topic=str(topic),
        )
    broker = client._broker
    partitions = client._lookup_partitions(topic)
    partitioned = len(partitions) > 1 or partitions[0] != topic
    parts: list[SubscriptionPart] = []
    for index, name in enumerate(partitions):
        log = client._lookup_log(name)
        store: Store = broker.cursor_store(name, subscription) if durable else MemoryCursorStore()
        part = (_CompactedPart if read_compacted else SubscriptionPart)(
            name=name, display_topic=str(name), partition=index if partitioned else -1, log=log, store=store,
            subscription=subscription, consumer_name=consumer_name, sub_type=consumer_type,
            priority_level=priority_level, key_shared=key_shared, schema=schema,
        )

        def initial(log: Any = log) -> int:
            snap = log.snapshot()
            return snap.first_offset if initial_position == InitialPosition.Earliest else snap.next_offset

        try:
            part.join(now_ms=client._clock.now_ms(), lease_ms=broker.config.consumer_lease_written_ms,
                      initial_offset=initial, auto_create=broker.config.allow_auto_subscription_creation,
                      in_process=True)
        except BaseException:
            for joined in parts:
                joined.leave()
            raise
        parts.append(part)
    return parts


def subscribe(
    client: LetterClient,
    topic: str | list[str] | re.Pattern[str],
    subscription_name: str,
    *,
    consumer_type: ConsumerType,
    schema: Schema | None,
    message_listener: Callable[[Consumer, Any], None] | None,
    receiver_queue_size: int,
    consumer_name: str | None,
    unacked_messages_timeout_ms: int | None,
    negative_ack_redelivery_delay_ms: int,
    is_read_compacted: bool,
    properties: dict[str, str] | None,
    pattern_auto_discovery_period: int,
    initial_position: InitialPosition,
    start_message_id_inclusive: bool,
    batch_receive_policy: ConsumerBatchReceivePolicy | None,
    key_shared_policy: ConsumerKeySharedPolicy | None,
    regex_subscription_mode: RegexSubscriptionMode,
    dead_letter_policy: ConsumerDeadLetterPolicy | None,
    priority_level: int,
    retry_enable: bool,
    subscription_mode: SubscriptionMode,
    negative_ack_backoff: MultiplierRedeliveryBackoff | None,
    decryptor: MessageDecryptor | None = None,
) -> Consumer:
    """Create a consumer (see ``Client.subscribe`` for the arguments)."""
    validate_subscription_name(subscription_name)
    check_type(ConsumerType, consumer_type, "consumer_type")
    schema = BytesSchema() if schema is None else check_type(Schema, schema, "schema")
    if message_listener is not None and not callable(message_listener):
        raise InvalidConfiguration(f"argument 'message_listener' must be callable, got {message_listener!r}")
    check_positive(receiver_queue_size, "receiver_queue_size", allow_zero=True)  # 0: no prefetch
    check_type_or_none(str, consumer_name, "consumer_name")
    check_type_or_none(int, unacked_messages_timeout_ms, "unacked_messages_timeout_ms")
    if unacked_messages_timeout_ms is not None and 0 < unacked_messages_timeout_ms < 1000:
        raise InvalidConfiguration(
            f"unacked_messages_timeout_ms must be 0 (off) or at least 1000, got {unacked_messages_timeout_ms}"
        )
    check_positive(negative_ack_redelivery_delay_ms, "negative_ack_redelivery_delay_ms", allow_zero=True)
    check_type(bool, is_read_compacted, "is_read_compacted")
    check_str_map(properties, "properties")
    check_positive(pattern_auto_discovery_period, "pattern_auto_discovery_period")
    check_type(InitialPosition, initial_position, "initial_position")
    check_type(bool, start_message_id_inclusive, "start_message_id_inclusive")
    check_type_or_none(ConsumerBatchReceivePolicy, batch_receive_policy, "batch_receive_policy")
    check_type_or_none(ConsumerKeySharedPolicy, key_shared_policy, "key_shared_policy")
    check_type(RegexSubscriptionMode, regex_subscription_mode, "regex_subscription_mode")
    check_type_or_none(ConsumerDeadLetterPolicy, dead_letter_policy, "dead_letter_policy")
    check_type(int, priority_level, "priority_level")
    check_type(bool, retry_enable, "retry_enable")
    check_type(SubscriptionMode, subscription_mode, "subscription_mode")
    check_type_or_none(MultiplierRedeliveryBackoff, negative_ack_backoff, "negative_ack_backoff")
    if priority_level < 0:
        raise InvalidConfiguration(f"priority_level must be >= 0, got {priority_level}")
    if is_read_compacted and consumer_type not in (ConsumerType.Exclusive, ConsumerType.Failover):
        # Pulsar's rule: a Shared or Key_Shared consumer would skip other consumers' keys' history
        raise InvalidConfiguration(
            f"is_read_compacted=True can only be used with Exclusive or Failover subscriptions, not "
            f"{consumer_type.name} (subscription {subscription_name!r})", argument="is_read_compacted",
        )
    if key_shared_policy is not None and consumer_type != ConsumerType.KeyShared:
        raise InvalidConfiguration("key_shared_policy applies only to ConsumerType.KeyShared")
    key_shared = None
    if consumer_type == ConsumerType.KeyShared:
        policy = key_shared_policy or ConsumerKeySharedPolicy()
        key_shared = {
            "mode": policy.key_shared_mode.name,
            "allowOutOfOrder": policy.allow_out_of_order_delivery,
            "consistentHashing": client._broker.config.subscription_key_shared_use_consistent_hashing,
            "replicaPoints": client._broker.config.subscription_key_shared_consistent_hashing_replica_points,
            "rangeSize": client._broker.config.subscription_key_shared_auto_split_range_size,
            "stickyRanges": [list(r) for r in policy.sticky_ranges],
        }
    name = consumer_name or f"consumer-{uuid.uuid4().hex[:10]}"
    durable = subscription_mode == SubscriptionMode.Durable

    def parts_for(topic_name: TopicName) -> list[SubscriptionPart]:
        return _parts_for(client, topic_name, subscription=subscription_name, consumer_name=name,
                          consumer_type=consumer_type, priority_level=priority_level, key_shared=key_shared,
                          schema=schema, durable=durable, initial_position=initial_position,
                          read_compacted=is_read_compacted)

    topics, label, discover_ns, pattern = _resolve_topics(topic, regex_subscription_mode, client)
    if receiver_queue_size == 0 and (len(topics) != 1 or pattern is not None or retry_enable
                                     or not topics[0].is_persistent
                                     or len(client._broker.partitions(topics[0])) != 1):
        # as the official clients: a zero queue needs one persistent topic to ask for one message at a time
        raise InvalidConfiguration(
            f"receiver_queue_size=0 needs a single persistent, non-partitioned topic; {label} is not one "
            "(use a receiver_queue_size of 1 or more)", argument="receiver_queue_size",
        )
    if is_non_persistent_subscription(topics, pattern):  # in memory, this process: docs/NON_PERSISTENT.md
        if decryptor is not None and decryptor.has_reader:
            raise OperationNotSupported("end-to-end encryption applies to persistent topics only")
        if is_read_compacted:
            raise InvalidConfiguration("is_read_compacted=True can only be used with persistent topics",
                                       argument="is_read_compacted")
        return subscribe_non_persistent(  # type: ignore[return-value]  # Consumer's methods
            client, topics, subscription_name, topic_label=label, pattern=pattern, namespace=discover_ns,
            consumer_type=consumer_type, schema=schema, message_listener=message_listener,
            receiver_queue_size=receiver_queue_size, consumer_name=name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            negative_ack_backoff=negative_ack_backoff, batch_receive_policy=batch_receive_policy,
            key_shared=key_shared, priority_level=priority_level, retry_enable=retry_enable,
            dead_letter_policy=dead_letter_policy,
            pattern_auto_discovery_period=pattern_auto_discovery_period,
        )
    if retry_enable:
        topics = topics + [
            TopicName.parse(retry_topic_name(client._broker, str(t), subscription_name, dead_letter_policy))
            for t in topics
        ]
    for topic_name in topics:  # IncompatibleSchema before the subscription exists
        client._broker.schemas.attach_consumer(topic_name, schema)
    schema.attach_client(client)
    parts: list[SubscriptionPart] = []
    try:
        for topic_name in topics:
            parts.extend(parts_for(topic_name))
    except BaseException:
        for part in parts:
            part.leave()
        raise
    subscribed = {str(t) for t in topics}

    discover = None
    if pattern is not None and discover_ns is not None:
        def discover() -> list[SubscriptionPart]:
            fresh: list[SubscriptionPart] = []
            for full in client._broker.admin.list_topics(str(discover_ns)):
                if full not in subscribed and pattern.fullmatch(full):
                    subscribed.add(full)
                    fresh.extend(parts_for(TopicName.parse(full)))
            return fresh

    dead_letters = None
    if dead_letter_policy is not None or retry_enable:
        dead_letters = DeadLetters(client, dead_letter_policy, subscription_name, retry_enabled=retry_enable,
                                   crypto_key_reader=decryptor.reader if decryptor is not None else None)
    return Consumer(
        client, parts, topic_label=label, subscription=subscription_name, consumer_name=name,
        consumer_type=consumer_type, receiver_queue_size=receiver_queue_size, message_listener=message_listener,
        unacked_messages_timeout_ms=unacked_messages_timeout_ms,
        negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms, negative_ack_backoff=negative_ack_backoff,
        batch_receive_policy=batch_receive_policy, dead_letters=dead_letters,
        start_message_id_inclusive=start_message_id_inclusive, discover=discover,
        discovery_period_s=float(pattern_auto_discovery_period), decryptor=decryptor,
    )


def _full_pattern(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern with its domain and namespace spelled out, from the short forms the official
    client accepts as it accepts short topic names: ``<regex>`` is in ``persistent://public/default``
    and ``tenant/namespace/<regex>`` in ``persistent://tenant/namespace``."""
    text = pattern.pattern.removeprefix("^")
    if "://" in text:
        return pattern
    slashes = text.count("/")
    if slashes == 0:
        return re.compile("persistent://public/default/" + text, pattern.flags)
    if slashes == 2:
        return re.compile("persistent://" + text, pattern.flags)
    return pattern  # refused by the caller, naming the forms it accepts


def _resolve_topics(
    topic: object, mode: RegexSubscriptionMode, client: LetterClient
) -> tuple[list[TopicName], str, NamespaceName | None, re.Pattern[str] | None]:
    if isinstance(topic, str):
        name = TopicName.parse(topic)
        return [name], str(name), None, None
    if isinstance(topic, list):
        if not topic:
            raise InvalidConfiguration("argument 'topic' is an empty list; give at least one topic")
        names = [TopicName.parse(check_type(str, t, "topic")) for t in topic]
        return names, ",".join(str(n) for n in names), None, None
    if isinstance(topic, re.Pattern):
        topic = _full_pattern(topic)
        match = _PATTERN_PREFIX.match(topic.pattern)
        if match is None:
            raise InvalidConfiguration(
                f"topic pattern {topic.pattern!r} must name its namespace: 'persistent://tenant/namespace/<regex>', "
                "'tenant/namespace/<regex>', or a bare '<regex>' (public/default)"
            )
        non_persistent = match.group(1) == "non-persistent"
        check_pattern_mode(mode, non_persistent=non_persistent, pattern=topic.pattern)
        namespace = NamespaceName.parse(f"{match.group(2)}/{match.group(3)}")
        listed = (list_non_persistent_topics(client, namespace) if non_persistent
                  else client._broker.admin.list_topics(str(namespace)))
        names = [TopicName.parse(t) for t in listed if topic.fullmatch(t)]
        return names, topic.pattern, namespace, topic
    raise InvalidConfiguration(
        f"argument 'topic' must be a str, a list of str or a compiled regex pattern, got {type(topic).__name__}"
    )


__all__ = ["subscribe"]
