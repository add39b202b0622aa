"""Push: events set when something a reader or consumer waits on changes.

A topic log and a cursor store each keep a ``Waiters``; readers and consumers of the same process
register an event and sleep on it, so a commit wakes them at once instead of at their next poll.
A commit of another process wakes them too where the storage root can report new files
(``watch.ChangeNotifier``): while anybody waits, the ``Waiters`` watches its directory.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from broker_core.topic.watch import Unwatch

WatchStarter = Callable[[Callable[[int], None]], Unwatch]


class Waiters:
    """A set of events to set on every change."""

    def __init__(self) -> None:
        self._events: set[threading.Event] = set()
        self._lock = threading.Lock()
        self._start_watch: WatchStarter | None = None
        self._unwatch: Unwatch | None = None
        self._written: deque[int] = deque(maxlen=64)  # versions this process committed (notified already)

    def watch_with(self, start: WatchStarter) -> None:
        """While anybody waits, also ``notify`` on other processes' changes: ``start(callback)``
        begins watching (the callback takes the new version) and returns the function that ends it."""
        with self._lock:
            self._start_watch = start
            if self._events and self._unwatch is None:
                self._unwatch = start(self._stored)

    def add_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.add(event)
            if self._start_watch is not None and self._unwatch is None:
                self._unwatch = self._start_watch(self._stored)

    def remove_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.discard(event)
            if not self._events and self._unwatch is not None:
                unwatch, self._unwatch = self._unwatch, None
                unwatch()

    def notify(self, *, written: int | None = None) -> None:
        """Wake every waiter; ``written``: the version this process just committed (its file-system
        notification then wakes nobody a second time)."""
        with self._lock:
            if written is not None:
                self._written.append(written)
            events = list(self._events)
        for event in events:
            event.set()

    def written_here(self, version: int) -> bool:
        """Did this process commit ``version`` (one of its last 64 commits here)?"""
        with self._lock:
            return version in self._written

    def _stored(self, version: int) -> None:
        """A new version file appeared on storage: wake the waiters unless this process wrote it."""
        with self._lock:
            if version in self._written:
                return
        self.notify()


__all__ = ["Waiters", "WatchStarter"]
