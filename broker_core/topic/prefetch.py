"""Tailing an object store: fetch a new commit's segment while the log is still being polled.

A consumer on an object store learns of a commit by reading ``<v+1>.json``; it then reads on
(``<v+2>.json``, a 404 that says "that was the tip") before it reads the segment the commit adds.
Each is a round trip (30 ms on S3 Standard, 10 ms on Express One Zone), one after the other.  The
segment's name is known as soon as the commit is parsed, so ``SegmentPrefetcher`` starts its GET
right then, on a background thread, and the dispatcher's read later takes the bytes that are
already there (or waits for the one request in flight, never a second).

Only where it pays: on object stores (a folder's read is a page-cache copy), only for logs that
somebody waits on (consumers and readers; a producer's own commits are never read back), and only
for the last few commits of a replay (a fresh open replaying a long log prefetches nothing).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from broker_core.storage.fork import on_fork_in_child

_MAX_PENDING = 16  # prefetched segments nobody took yet (a reader that went away): the oldest are dropped
_WORKERS = 4

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="pubsub-prefetch")
        return _POOL


def _forget_after_fork() -> None:
    """A forked child (Spark's Python workers) inherits the pool but not its threads."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


on_fork_in_child(_forget_after_fork)


class SegmentPrefetcher:
    """Segment reads started ahead of need, by segment path; ``take`` hands each one over once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, Future[pa.Table]] = OrderedDict()

    def start(self, path: str, read: Callable[[], pa.Table]) -> None:
        """Begin ``read()`` in the background unless a read of ``path`` is pending already."""
        with self._lock:
            if path in self._pending:
                return
            self._pending[path] = _pool().submit(read)
            while len(self._pending) > _MAX_PENDING:
                self._pending.popitem(last=False)[1].cancel()

    def take(self, path: str) -> Future[pa.Table] | None:
        """The pending read of ``path`` (its result raises what the read raised), or None."""
        with self._lock:
            return self._pending.pop(path, None)


__all__ = ["SegmentPrefetcher"]
