"""The asyncio ``Client``, shaped like ``pulsar.asyncio.Client``.

It is the synchronous client underneath: the same storage root, the same ``Broker``, the same
checks and the same errors.  What it adds is where the work runs.  Creating, closing, seeking and
everything else that may touch storage runs on a small executor owned by the client
(``_EXECUTOR_THREADS`` threads), so the event loop never waits on file I/O.  Waiting for messages
does not hold an executor thread: each consumer or reader has one ``Pump`` thread that serves all
of its pending ``receive``/``read_next`` calls.  Thread count therefore grows with the number of
producers and consumers, never with the number of pending calls.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from broker_core.asyncio.consumer import Consumer, Reader
from broker_core.asyncio.producer import Producer
from broker_core.client.args import check_type
from broker_core.client.client import Client as CoreClient
from broker_core.client.policies import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    InitialPosition,
    RegexSubscriptionMode,
)
from broker_core.errors import InvalidConfiguration
from broker_core.message import Schema
from broker_core.message_id import MessageId
from broker_core.subscription.cursor import ConsumerType

T = TypeVar("T")

_EXECUTOR_THREADS = 4
_PRODUCER_SIGNATURE = inspect.signature(CoreClient.create_producer)


class Client:
    """An asyncio client of the storage root ``service_url``.

    Args:
        service_url: the storage root, as for ``broker_core.Client``.
        **kwargs: ``broker_core.Client``'s arguments (type-checked the same way).
    """

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        self._client = CoreClient(service_url, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=_EXECUTOR_THREADS, thread_name_prefix="pubsub-aio")
        self._handles: weakref.WeakSet[Any] = weakref.WeakSet()

    async def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        self._client._check_open()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def create_producer(self, topic: str, *args: Any, **kwargs: Any) -> Producer:
        """Create a producer: ``broker_core.Client.create_producer``'s arguments, in its order.

        As in ``pulsar.asyncio``, ``batching_enabled`` defaults to True here: concurrent awaited
        sends then share commits.
        """
        try:
            bound = _PRODUCER_SIGNATURE.bind_partial(None, topic, *args, **kwargs)
        except TypeError as exc:
            raise InvalidConfiguration(f"create_producer: {exc}") from None
        call = dict(bound.arguments)
        call.pop("self")
        call.setdefault("batching_enabled", True)
        core = await self._run(self._client.create_producer, **call)
        producer = Producer(core, self._executor)
        self._handles.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Schema | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
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
        is_pattern_topic: bool = False,
        **extras: Any,
    ) -> Consumer:
        """Subscribe, with ``pulsar.asyncio.Client.subscribe``'s arguments (no message listener:
        await ``receive()`` instead).  ``is_pattern_topic=True`` reads a ``str`` topic as a regex.
        ``extras`` are the sync client's keyword-only additions (``priority_level``,
        ``retry_enable``, ``subscription_mode``, ``negative_ack_backoff``).
        """
        if check_type(bool, is_pattern_topic, "is_pattern_topic"):
            if not isinstance(topic, str):
                raise InvalidConfiguration(
                    "argument 'topic' must be a str when is_pattern_topic is True (a list of topics "
                    "cannot be a pattern)",
                    argument="topic",
                )
            topic = re.compile(topic)
        core = await self._run(
            self._client.subscribe,
            topic,
            subscription_name,
            consumer_type=consumer_type,
            schema=schema,
            receiver_queue_size=receiver_queue_size,
            max_total_receiver_queue_size_across_partitions=max_total_receiver_queue_size_across_partitions,
            consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            broker_consumer_stats_cache_time_ms=broker_consumer_stats_cache_time_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            is_read_compacted=is_read_compacted,
            properties=properties,
            initial_position=initial_position,
            crypto_key_reader=crypto_key_reader,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            max_pending_chunked_message=max_pending_chunked_message,
            auto_ack_oldest_chunked_message_on_queue_full=auto_ack_oldest_chunked_message_on_queue_full,
            start_message_id_inclusive=start_message_id_inclusive,
            batch_receive_policy=batch_receive_policy,
            key_shared_policy=key_shared_policy,
            batch_index_ack_enabled=batch_index_ack_enabled,
            regex_subscription_mode=regex_subscription_mode,
            dead_letter_policy=dead_letter_policy,
            crypto_failure_action=crypto_failure_action,
            **extras,
        )
        consumer = Consumer(core, self._executor)
        self._handles.add(consumer)
        return consumer

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Schema | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: Any = None,
    ) -> Reader:
        """Create a reader, with ``pulsar.asyncio.Client.create_reader``'s arguments (no listener)."""
        core = await self._run(
            self._client.create_reader,
            topic,
            start_message_id,
            schema=schema,
            receiver_queue_size=receiver_queue_size,
            reader_name=reader_name,
            subscription_role_prefix=subscription_role_prefix,
            is_read_compacted=is_read_compacted,
            crypto_key_reader=crypto_key_reader,
            start_message_id_inclusive=start_message_id_inclusive,
            crypto_failure_action=crypto_failure_action,
        )
        reader = Reader(core, self._executor)
        self._handles.add(reader)
        return reader

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition names of a partitioned topic, or ``[topic]``."""
        return await self._run(self._client.get_topic_partitions, topic)

    async def close(self) -> None:
        """Close every producer (flushing it), consumer and reader of this client."""
        if self._client._closed:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._client.close)
        self._release()

    def shutdown(self) -> None:
        """Close now, from synchronous code (blocks until pending sends are flushed)."""
        self._client.shutdown()
        self._release()

    def _release(self) -> None:
        for handle in list(self._handles):
            if isinstance(handle, Producer):
                handle._lane.shutdown(wait=False)
            else:
                handle._pump.stop()
        self._executor.shutdown(wait=False)


__all__ = ["Client"]
