"""The asyncio ``Producer``, shaped like ``pulsar.asyncio.Producer``.

``send`` queues the message on the core producer (whose sender thread batches and commits) and
awaits the commit's callback, so an awaited send means the message is durable, as with the sync
``send``.  Queueing can touch storage (policies are re-read about once a second) and, with
``block_if_queue_full``, can wait for room, so it runs on a one-thread lane per producer: off the
loop, and in call order, which keeps sequence ids in the order the coroutines called ``send``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from broker_core.client.builder import PendingMessage
from broker_core.client.producer import Producer as CoreProducer
from broker_core.errors import Timeout
from broker_core.message_id import MessageId

_POLICY_MARGIN_S = 0.05  # queue on the loop only if the policy cache outlives the call by this much


class Producer:
    """Publishes messages to one topic without blocking the event loop.

    Create with ``await broker_core.asyncio.Client(...).create_producer(...)``.
    """

    def __init__(self, producer: CoreProducer, executor: Executor) -> None:
        self._producer = producer
        self._executor = executor
        self._lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pubsub-aio-send-{producer.producer_name()}")
        self._lock = threading.Lock()
        self._backlog: deque[tuple[Callable[[], Any], asyncio.Future[MessageId]]] = deque()
        self._draining = False
        self._settled: list[tuple[asyncio.Future[MessageId], BaseException | None, MessageId | None]] = []
        self._posted = False
        self._inflight: deque[tuple[float, asyncio.Future[MessageId]]] = deque()  # loop thread only
        self._timer: asyncio.TimerHandle | None = None

    async def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish a message and return its ``MessageId`` once it is durable.

        With batching on (the asyncio client's default, as in ``pulsar.asyncio``) concurrent sends
        share a commit; the batching delay bounds how long one waits for company.  The send timeout
        raises ``Timeout`` as the sync ``send`` does.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[MessageId] = loop.create_future()

        def settle(pending: PendingMessage) -> None:  # on the producer's sender thread
            self._post(loop, done, pending.error, pending.result)

        enqueue: Callable[[], Any] = functools.partial(
            self._producer._enqueue,
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
            flush=False,
            callback=settle,
        )
        if self._producer._closed:
            enqueue()  # raises AlreadyClosed at once, before any I/O (the lane is shut down)
        with self._lock:
            inline = not self._draining and self._can_queue_inline()
            if not inline:
                self._backlog.append((enqueue, done))
                start = not self._draining
                self._draining = True
        if inline:
            try:
                enqueue()
            except BaseException as exc:  # the send's own error (bad argument, queue full)
                done.set_exception(exc)
        elif start:
            self._lane.submit(self._drain, loop)
        timeout_s = self._producer._send_timeout_s
        if timeout_s is not None:
            self._watch(loop, done, timeout_s)
        return await done

    def _watch(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[MessageId], timeout_s: float) -> None:
        """Fail ``done`` with ``Timeout`` if it is still pending after the send timeout.

        One timer per producer, not one per send: sends finish about in order, so the timer only
        looks at the oldest pending ones.
        """
        inflight = self._inflight
        while inflight and inflight[0][1].done():
            inflight.popleft()
        inflight.append((loop.time() + timeout_s, done))
        if self._timer is None:
            self._timer = loop.call_at(inflight[0][0], self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        inflight = self._inflight
        now = loop.time()
        while inflight and (inflight[0][1].done() or inflight[0][0] <= now):
            _, fut = inflight.popleft()
            if not fut.done():
                fut.set_exception(
                    Timeout(
                        f"send to {self._producer.topic()} did not complete within the send timeout",
                        topic=self._producer.topic(),
                    )
                )
        if inflight:
            self._timer = loop.call_at(inflight[0][0], self._expire, loop)

    def _can_queue_inline(self) -> bool:
        """Whether queueing now is an in-memory append that cannot wait or read storage: no send
        waits on the lane (order), the cached policies stay fresh (they are re-read from storage
        once a second), and no queue is full (``block_if_queue_full`` would wait).  Then the loop
        queues the message itself and skips the thread hop."""
        core = self._producer
        if core._chunking or time.monotonic() + _POLICY_MARGIN_S >= core._policy_expires:
            return False
        return not any(core._full(index, 1) for index in range(len(core._queues)))

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the lane: queue every backlogged send in order (one hop for many sends)."""
        while True:
            with self._lock:
                if not self._backlog:
                    self._draining = False
                    return
                enqueue, done = self._backlog.popleft()
            try:
                enqueue()
            except BaseException as exc:  # the send's own error (bad argument, queue full, closed)
                self._post(loop, done, exc, None)

    def _post(
        self,
        loop: asyncio.AbstractEventLoop,
        fut: asyncio.Future[MessageId],
        error: BaseException | None,
        result: MessageId | None,
    ) -> None:
        """Settle ``fut`` on the loop; outcomes posted close together share one loop wake-up."""
        with self._lock:
            self._settled.append((fut, error, result))
            if self._posted:
                return
            self._posted = True
        try:
            loop.call_soon_threadsafe(self._settle_all)
        except RuntimeError:  # the loop is closed: nobody awaits these
            with self._lock:
                self._settled.clear()
                self._posted = False

    def _settle_all(self) -> None:
        with self._lock:
            settled, self._settled = self._settled, []
            self._posted = False
        for fut, error, result in settled:
            _settle(fut, error, result)

    async def flush(self) -> None:
        """Commit everything queued so far and wait until it is durable (after the sends before it)."""
        if self._producer._closed:
            return  # closing flushed everything; nothing can be queued since
        await asyncio.get_running_loop().run_in_executor(self._lane, self._producer.flush)

    async def close(self) -> None:
        """Flush, stop the sender and give up the registration (a second close does nothing)."""
        if self._producer._closed:
            return
        await asyncio.get_running_loop().run_in_executor(self._lane, self._producer.close)
        self._lane.shutdown(wait=False)

    def topic(self) -> str:
        return self._producer.topic()

    def producer_name(self) -> str:
        return self._producer.producer_name()

    def last_sequence_id(self) -> int:
        return self._producer.last_sequence_id()

    def is_connected(self) -> bool:
        return self._producer.is_connected()


def _settle(fut: asyncio.Future[MessageId], error: BaseException | None, result: MessageId | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        assert result is not None
        fut.set_result(result)


__all__ = ["Producer"]
