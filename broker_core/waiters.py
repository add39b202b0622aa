"""Push: events set when something a reader or consumer waits on changes.

A topic log and a cursor store each keep a ``Waiters``; readers and consumers of the same process
register an event and sleep on it, so a commit wakes them at once instead of at their next poll.
A commit of another process wakes them too where the storage root can report new files
(``watch.ChangeNotifier``): while anybody waits, the ``Waiters`` watches its directory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker_core.watch import Unwatch

WatchStarter = Callable[[Callable[[], None]], Unwatch]


class Waiters:
    """A set of events to set on every change."""

    def __init__(self) -> None:
        self._events: set[threading.Event] = set()
        self._lock = threading.Lock()
        self._start_watch: WatchStarter | None = None
        self._unwatch: Unwatch | None = None

    def watch_with(self, start: WatchStarter) -> None:
        """While anybody waits, also ``notify`` on other processes' changes: ``start(self.notify)``
        begins watching and returns the function that ends it."""
        with self._lock:
            self._start_watch = start
            if self._events and self._unwatch is None:
                self._unwatch = start(self.notify)

    def add_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.add(event)
            if self._start_watch is not None and self._unwatch is None:
                self._unwatch = self._start_watch(self.notify)

    def remove_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.discard(event)
            if not self._events and self._unwatch is not None:
                unwatch, self._unwatch = self._unwatch, None
                unwatch()

    def notify(self) -> None:
        with self._lock:
            events = list(self._events)
        for event in events:
            event.set()


__all__ = ["Waiters", "WatchStarter"]
