"""The asyncio ``Consumer`` and ``Reader``, shaped like ``pulsar.asyncio.Consumer`` and ``Reader``.

Each wraps a core consumer or reader.  ``receive``/``read_next`` are served by a ``Pump`` (one
thread per consumer however many calls wait); a message already in the receiver queue is taken on
the loop without a thread hop (an in-memory pop).  Calls that may touch storage (acknowledging by
message id, seek, unsubscribe, close, ``get_last_message_id``, ``has_message_available``) run on
the client's small executor.  Acknowledging a ``Message`` is in memory, so it runs on the loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from broker_core.asyncio.pump import Pump
from broker_core.client.args import check_seek_target
from broker_core.client.consumer_base import ConsumerBase
from broker_core.client.reader import Reader as CoreReader
from broker_core.message import Message
from broker_core.message_id import MessageId

T = TypeVar("T")


async def _off_loop(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args))


class Consumer:
    """Receives messages of a subscription without blocking the event loop.

    Create with ``await broker_core.asyncio.Client(...).subscribe(...)``.  Errors are the
    synchronous client's (``broker_core.errors``).
    """

    def __init__(self, consumer: ConsumerBase, executor: Executor) -> None:
        self._consumer: Any = consumer
        self._executor = executor
        self._pump: Pump[Message] = Pump(
            lambda timeout_ms: consumer.receive(timeout_ms),  # type: ignore[attr-defined]
            name=f"pubsub-aio-receive-{consumer.consumer_name()}",
        )

    def _take_queued(self) -> Message | None:
        """The next queued message if one is ready now (in memory, no waiting), else None."""
        core = self._consumer
        if core._listener is not None:
            return None  # the listener owns the queue; the core's receive() says so
        with core._cv:
            if core._queue and not core._closed:
                msg: Message = core._take()
                return msg
        return None

    async def receive(self) -> Message:
        """The next message, waiting as long as it takes (wrap in ``asyncio.wait_for`` to bound it).

        A call cancelled by ``wait_for`` loses nothing: a message taken for it goes to the next call.
        """
        self._consumer._check_open()
        if not self._pump._waiters and not self._pump._ready:
            msg = self._take_queued()
            if msg is not None:
                return msg
        return await self._pump.get()

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message or message id (grouped and committed like the sync client's)."""
        if isinstance(message, Message):
            self._consumer.acknowledge(message)
        else:
            await _off_loop(self._executor, self._consumer.acknowledge, message)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to this one (Exclusive and Failover subscriptions)."""
        if isinstance(message, Message):
            self._consumer.acknowledge_cumulative(message)
        else:
            await _off_loop(self._executor, self._consumer.acknowledge_cumulative, message)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask for redelivery after the negative-ack delay."""
        if isinstance(message, Message):
            self._consumer.negative_acknowledge(message)
        else:
            await _off_loop(self._executor, self._consumer.negative_acknowledge, message)

    async def unsubscribe(self) -> None:
        """Delete the subscription (refused with ``ConsumerBusy`` while others are connected)."""
        await _off_loop(self._executor, self._consumer.unsubscribe)
        self._pump.stop()

    async def seek(self, messageid: MessageId | int) -> None:
        """Reset the subscription to a message id or a publish timestamp in ms."""
        target = check_seek_target(messageid, "messageid")
        # messages taken before the seek are dropped: the new position decides what comes next
        await _off_loop(self._executor, self._pump.reposition, lambda: self._consumer.seek(target))

    async def close(self) -> None:
        """Close the consumer; pending ``receive`` calls raise ``AlreadyClosed``."""
        await _off_loop(self._executor, self._consumer.close)
        self._pump.stop()

    async def get_last_message_id(self) -> MessageId:
        """The id of the last message of the (first) topic."""
        result: MessageId = await _off_loop(self._executor, self._consumer.get_last_message_id)
        return result

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not acknowledged yet (in memory; returns at once)."""
        self._consumer.redeliver_unacknowledged_messages()

    def topic(self) -> str:
        return str(self._consumer.topic())

    def subscription_name(self) -> str:
        return str(self._consumer.subscription_name())

    def consumer_name(self) -> str:
        return str(self._consumer.consumer_name())

    def is_connected(self) -> bool:
        return bool(self._consumer.is_connected())


class Reader:
    """Reads a topic from a chosen position without blocking the event loop.

    Every read may touch storage, so all of them go through the reader's pump thread.
    """

    def __init__(self, reader: CoreReader, executor: Executor) -> None:
        self._reader = reader
        self._executor = executor
        self._pump: Pump[Message] = Pump(
            lambda timeout_ms: reader.read_next(timeout_ms), name=f"pubsub-aio-read-{reader.topic()}"
        )

    async def read_next(self) -> Message:
        """The next message, waiting as long as it takes (wrap in ``asyncio.wait_for`` to bound it)."""
        self._reader._check_open()
        return await self._pump.get()

    async def has_message_available(self) -> bool:
        """Whether ``read_next`` would return without waiting for a new publish."""
        if self._pump._ready:
            return True
        result: bool = await _off_loop(self._executor, self._reader.has_message_available)
        return result

    async def seek(self, messageid: MessageId | int) -> None:
        """Reposition at a message id or a publish timestamp in ms (inclusive)."""
        target = check_seek_target(messageid, "messageid")
        await _off_loop(self._executor, self._pump.reposition, lambda: self._reader.seek(target))

    async def close(self) -> None:
        """Close the reader; pending ``read_next`` calls raise ``AlreadyClosed``."""
        await _off_loop(self._executor, self._reader.close)
        self._pump.stop()

    def topic(self) -> str:
        return self._reader.topic()

    def is_connected(self) -> bool:
        return self._reader.is_connected()


__all__ = ["Consumer", "Reader"]
