"""A synchronous face on ``broker_core.asyncio``, so the client contract tests run against it too.

A test written for the sync client gets an object with the same methods; each call runs the async
client's coroutine on an event loop in a background thread and waits for it.  ``receive`` and
``read_next`` with a timeout use ``asyncio.wait_for``, which also exercises the async client's
cancellation path (a message taken for a cancelled call goes to the next one).  Methods the async
API does not have (``batch_receive``, ``send_table``, ...) are absent, so a test using them
cannot run here by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

import broker_core.asyncio as aio
from broker_core import Client, Message, MessageId, Timeout, result_for
from broker_core.errors import Result

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-aio-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _timed(coro: Coroutine[Any, Any, T], timeout_millis: int | None, what: str) -> T:
    if timeout_millis is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout_millis / 1000)
    except TimeoutError:
        raise Timeout(f"no message on {what} within {timeout_millis} ms") from None


class SyncProducer:
    def __init__(self, runner: LoopThread, producer: aio.Producer) -> None:
        self._run = runner.run
        self._loop = runner.loop
        self._p = producer

    def send(self, content: Any, **kwargs: Any) -> MessageId:
        return self._run(self._p.send(content, **kwargs))

    def send_async(
        self, content: Any, callback: Callable[[Result, MessageId | None], None] | None, **kwargs: Any
    ) -> None:
        # scheduled in call order; the async producer queues sends in the order they start.  A send
        # refused before it was queued (a closed producer) raises here, as the sync send_async does.
        task = self._run(_started(self._p.send(content, **kwargs)))
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        self._run(_started(_report(task, callback)))

    def flush(self) -> None:
        self._run(self._p.flush())

    def close(self) -> None:
        self._run(self._p.close())

    def __getattr__(self, name: str) -> Any:  # topic, producer_name, last_sequence_id, is_connected
        return getattr(self._p, name)


_TASKS: set[asyncio.Task[Any]] = set()


async def _started(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start ``coro`` as a task and return it once it has run up to its first wait."""
    task = asyncio.ensure_future(coro)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    await asyncio.sleep(0)
    return task


async def _report(task: asyncio.Task[MessageId], callback: Callable[[Result, MessageId | None], None] | None) -> None:
    """Hand a send's outcome to a ``send_async`` callback."""
    try:
        msg_id = await task
    except Exception as exc:  # the callback gets the failure, as with the sync send_async
        if callback is not None:
            callback(result_for(exc), None)
        return
    if callback is not None:
        callback(Result.Ok, msg_id)


class SyncConsumer:
    def __init__(self, runner: LoopThread, consumer: aio.Consumer) -> None:
        self._run = runner.run
        self._c = consumer

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._run(_timed(self._c.receive(), timeout_millis, self._c.topic()))

    def acknowledge(self, message: Any) -> None:
        self._run(self._c.acknowledge(message))

    def acknowledge_cumulative(self, message: Any) -> None:
        self._run(self._c.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Any) -> None:
        self._run(self._c.negative_acknowledge(message))

    def unsubscribe(self) -> None:
        self._run(self._c.unsubscribe())

    def seek(self, messageid: Any) -> None:
        self._run(self._c.seek(messageid))

    def close(self) -> None:
        self._run(self._c.close())

    def get_last_message_id(self) -> MessageId:
        return self._run(self._c.get_last_message_id())

    def __getattr__(self, name: str) -> Any:  # redeliver_unacknowledged_messages and the accessors
        return getattr(self._c, name)


class SyncReader:
    def __init__(self, runner: LoopThread, reader: aio.Reader) -> None:
        self._run = runner.run
        self._r = reader

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._run(_timed(self._r.read_next(), timeout_millis, self._r.topic()))

    def has_message_available(self) -> bool:
        return self._run(self._r.has_message_available())

    def seek(self, messageid: Any) -> None:
        self._run(self._r.seek(messageid))

    def close(self) -> None:
        self._run(self._r.close())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)


class SyncClient:
    """``broker_core.Client``'s face over ``broker_core.asyncio.Client`` (same constructor)."""

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        self._runner = LoopThread()
        try:
            self._client = aio.Client(service_url, **kwargs)
        except BaseException:
            self._runner.stop()
            raise

    def create_producer(self, topic: str, *args: Any, **kwargs: Any) -> SyncProducer:
        kwargs.setdefault("batching_enabled", False)  # the sync client's default, which the tests assume
        return SyncProducer(self._runner, self._runner.run(self._client.create_producer(topic, *args, **kwargs)))

    def subscribe(self, topic: Any, subscription_name: Any, **kwargs: Any) -> SyncConsumer:
        return SyncConsumer(self._runner, self._runner.run(self._client.subscribe(topic, subscription_name, **kwargs)))

    def create_reader(self, topic: str, start_message_id: Any, **kwargs: Any) -> SyncReader:
        return SyncReader(self._runner, self._runner.run(self._client.create_reader(topic, start_message_id, **kwargs)))

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._runner.run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        self._runner.run(self._client.close())

    def __getattr__(self, name: str) -> Any:  # ``_broker`` and such, for tests that look at storage
        return getattr(self._client._client, name)

    def dispose(self) -> None:
        """Close, then stop the loop thread (fixtures call this at teardown)."""
        try:
            self.close()
        finally:
            self._runner.stop()


BOTH_CLIENTS = pytest.mark.parametrize("client", ["sync", "async"], indirect=True)
"""Run a test that takes the ``client`` fixture against the sync client and the async one."""


@contextlib.contextmanager
def any_client(request: pytest.FixtureRequest, make: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
    """The client a ``client`` fixture yields: ``make(*args, **kwargs)`` (the sync ``Client``), or
    the async client behind a sync face when the test is parametrized with ``"async"``."""
    if getattr(request, "param", "sync") == "async":
        facade = SyncClient(*args, **kwargs)
        try:
            yield facade
        finally:
            facade.dispose()
    else:
        client = make(*args, **kwargs)
        try:
            yield client
        finally:
            client.close()


class ClientMaker:
    """Makes clients of one kind (``Client`` or the async one behind ``SyncClient``) and disposes
    of the async ones' loop threads at teardown."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._made: list[SyncClient] = []

    def __call__(self, service_url: str, **kwargs: Any) -> Any:
        if self.kind == "sync":
            return Client(service_url, **kwargs)
        facade = SyncClient(service_url, **kwargs)
        self._made.append(facade)
        return facade

    def dispose(self) -> None:
        for facade in self._made:
            facade.dispose()


BOTH_CLIENT_CLASSES = pytest.mark.parametrize("client_class", ["sync", "async"], indirect=True)
"""Run a test that makes its clients with the ``client_class`` fixture against both clients."""


__all__ = ["BOTH_CLIENTS", "BOTH_CLIENT_CLASSES", "ClientMaker", "LoopThread", "SyncClient", "any_client"]
