"""``Pump``: many awaiting ``receive()`` calls served from one blocking source by one thread.

The core's ``receive`` and ``read_next`` block a thread until a message arrives.  Running each
awaited call in an executor would park one thread per pending call (1,000 awaits, 1,000 threads),
or, with a bounded pool, let waiting receives starve every other blocking call.  A pump instead
keeps the awaiting futures in a FIFO and has one daemon thread take from the source only while
someone waits, with a bounded wait per take so it notices when every waiter has gone.

A value taken for a waiter that was cancelled meanwhile (``asyncio.wait_for`` ran out) is never
dropped: it goes to the next waiter, or is kept for the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from broker_core.errors import AlreadyClosed, Timeout

T = TypeVar("T")

_TAKE_WINDOW_MS = 200  # how long one take waits before the thread looks at its waiters again


class Pump(Generic[T]):
    """Serve ``get()`` futures in call order from ``take(timeout_ms)``.

    Args:
        take: blocks up to ``timeout_ms`` for the next value; raises ``Timeout`` when none came,
            ``AlreadyClosed`` once the source is closed (every waiter then fails with it), and any
            other error for the waiter at the front only.
        name: the thread's name.
    """

    def __init__(self, take: Callable[[int], T], *, name: str) -> None:
        self._take = take
        self._name = name
        self._lock = threading.Lock()
        self._demand = threading.Condition(self._lock)
        self._waiters: deque[asyncio.Future[T]] = deque()
        self._ready: deque[T] = deque()  # taken while its waiter was cancelled; touched on the loop only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed: AlreadyClosed | None = None
        self._taking = threading.Lock()  # held while a value is taken and posted to the loop

    def get(self) -> asyncio.Future[T]:
        """A future of the next value (call on the event loop)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if self._ready:
            fut.set_result(self._ready.popleft())
            return fut
        with self._lock:
            if self._closed is not None:
                fut.set_exception(self._closed)
                return fut
            self._loop = loop
            self._waiters.append(fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._demand.notify()
        fut.add_done_callback(self._forget)
        return fut

    def reposition(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (a seek, on an executor thread) with no take in flight, then drop what was
        taken before it.

        The drop is posted to the loop before the next take can start, so it lands after every
        value taken before ``fn`` and before any taken after it.
        """
        with self._taking:
            fn()
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._ready.clear)

    def stop(self) -> None:
        """Stop the thread once it has no waiters (the source is closed by its owner)."""
        with self._lock:
            self._closed = self._closed or AlreadyClosed(f"{self._name} is closed")
            self._demand.notify()

    def _forget(self, fut: asyncio.Future[T]) -> None:
        if fut.cancelled():
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove(fut)

    def _next_waiter(self) -> asyncio.Future[T] | None:
        with self._lock:
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    return fut
        return None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiters and self._closed is None:
                    self._demand.wait()
                if not self._waiters:
                    self._thread = None
                    return
            with self._taking:
                if not self._take_one():
                    return

    def _take_one(self) -> bool:
        """Take one value for the front waiter and post it; False once the source is closed."""
        try:
            value = self._take(_TAKE_WINDOW_MS)
        except Timeout:
            return True
        except AlreadyClosed as exc:
            with self._lock:
                self._closed = exc
                waiters, self._waiters = list(self._waiters), deque()
                self._thread = None
            for fut in waiters:
                _post(fut, None, exc)
            return False
        except BaseException as exc:  # this call's error (storage, misuse): the front waiter gets it
            front = self._next_waiter()
            if front is not None:
                _post(front, None, exc)
            return True
        front = self._next_waiter()
        if front is not None:
            _post(front, value, None, spare=self._hand)
        elif self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody can want it
                self._loop.call_soon_threadsafe(self._hand, value)
        return True

    def _hand(self, value: T) -> None:
        """On the loop: give a value whose waiter was cancelled to the next waiter, or keep it."""
        fut = self._next_waiter()
        if fut is not None:
            fut.set_result(value)
        else:
            self._ready.append(value)


def _post(
    fut: asyncio.Future[T],
    value: T | None,
    exc: BaseException | None,
    *,
    spare: Callable[[T], None] | None = None,
) -> None:
    """Settle ``fut`` on its own loop; a value for a future cancelled meanwhile goes to ``spare``."""

    def settle() -> None:
        if fut.done():
            if exc is None and spare is not None:
                spare(value)  # type: ignore[arg-type]  # a value was taken for it
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # the loop is closed
        fut.get_loop().call_soon_threadsafe(settle)


__all__ = ["Pump"]
