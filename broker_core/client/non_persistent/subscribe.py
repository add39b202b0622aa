"""What ``Client.subscribe`` decides and builds for non-persistent topics.

Whether a subscription is non-persistent (a topic list may not mix the two kinds), whether a
pattern can match anything under the regex subscription mode, which non-persistent topics a
pattern can see (those this process knows), and the ``NonPersistentConsumer`` itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from broker_core.client.context import HandleOwner
from broker_core.client.non_persistent.consumer import NonPersistentConsumer
from broker_core.client.non_persistent.handles import registry_of
from broker_core.client.non_persistent.refusals import unsupported
from broker_core.client.policies import ConsumerBatchReceivePolicy, ConsumerDeadLetterPolicy, RegexSubscriptionMode
from broker_core.errors import InvalidConfiguration
from broker_core.message import Schema
from broker_core.naming import NamespaceName, TopicName
from broker_core.subscription.backoff import MultiplierRedeliveryBackoff
from broker_core.subscription.cursor import ConsumerType


def is_non_persistent_subscription(topics: list[TopicName], pattern: re.Pattern[str] | None) -> bool:
    """Whether ``Client.subscribe`` should build a ``NonPersistentConsumer``.

    Raises:
        OperationNotSupported: the topic list mixes persistent and non-persistent topics.
    """
    if pattern is not None:
        return pattern.pattern.startswith("non-persistent://")
    kinds = {t.is_persistent for t in topics}
    if len(kinds) > 1:
        raise unsupported(
            "a consumer's topics must be all persistent or all non-persistent; subscribe to the "
            "non-persistent ones with a consumer of their own"
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


def list_non_persistent_topics(client: HandleOwner, namespace: NamespaceName) -> list[str]:
    """Non-persistent topics of a namespace that this process knows: partitioned ones (their metadata
    is stored) and every topic a producer, consumer or reader of this process has used."""
    names = {t for t in client._broker.admin.list_topics(str(namespace)) if t.startswith("non-persistent://")}
    for name in registry_of(client).topics(namespace):
        if name.is_partition and str(name.partitioned_topic_name) in names:
            continue
        names.add(str(name))
    return sorted(names)


def subscribe_non_persistent(
    client: HandleOwner,
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
        raise unsupported(
            f"dead letter and retry letter topics are not supported on non-persistent topics ({topic_label}): "
            "a redelivery count cannot outlive the consumer's memory"
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
    "check_pattern_mode",
    "is_non_persistent_subscription",
    "list_non_persistent_topics",
    "subscribe_non_persistent",
]
