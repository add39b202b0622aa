"""In-process push: events set when something a reader or consumer waits on changes.

A topic log and a cursor store each keep a ``Waiters``; readers and consumers of the same process
register an event and sleep on it, so a commit wakes them at once instead of at their next poll.
"""

from __future__ import annotations

import threading


class Waiters:
    """A set of events to set on every change."""

    def __init__(self) -> None:
        self._events: set[threading.Event] = set()
        self._lock = threading.Lock()

    def add_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.add(event)

    def remove_waiter(self, event: threading.Event) -> None:
        with self._lock:
            self._events.discard(event)

    def notify(self) -> None:
        with self._lock:
            events = list(self._events)
        for event in events:
            event.set()


__all__ = ["Waiters"]
