"""This process's shared handles of a root's internal topics: one ``TopicLog`` per internal topic and
one ``CursorStore`` per subscription.

Every ``Client``, ``Admin`` and job of one process that opens the same internal topic gets the same
handle, so a commit by one wakes the others at once (``waiters``) instead of at their next poll.
The registry lives here, below both ``Broker`` (which opens handles) and ``Admin`` (which fences and
forgets them when it deletes a topic), so that neither has to import the other for it.  Handles are
keyed by ``(root URI, internal topic directory[, subscription])``; the dictionaries are looked up by
name at every call, so a test can swap them for empty ones to act as a fresh process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker_core.storage.fork import on_fork_in_child
from broker_core.subscription.cursor_store import CursorStore
from broker_core.topic.topic_log import TopicLog

_REGISTRY_LOCK = threading.Lock()
_TOPIC_LOGS: dict[tuple[str, str], TopicLog] = {}
_CURSOR_STORES: dict[tuple[str, str, str], CursorStore] = {}


def _forget_after_fork() -> None:
    """A forked child opens its own handles: the parent's may hold locks of threads gone in the child."""
    global _REGISTRY_LOCK, _TOPIC_LOGS, _CURSOR_STORES
    _REGISTRY_LOCK, _TOPIC_LOGS, _CURSOR_STORES = threading.Lock(), {}, {}


on_fork_in_child(_forget_after_fork)


def shared_topic_log(root_uri: str, path: str, open_log: Callable[[], TopicLog]) -> TopicLog:
    """The process's handle of the internal topic at ``path``, opened with ``open_log`` on first use."""
    key = (root_uri, path)
    with _REGISTRY_LOCK:
        log = _TOPIC_LOGS.get(key)
        if log is None:
            log = open_log()
            _TOPIC_LOGS[key] = log
        return log


def existing_topic_log(root_uri: str, path: str) -> TopicLog | None:
    """The process's handle of an internal topic if one was opened, else None."""
    with _REGISTRY_LOCK:
        return _TOPIC_LOGS.get((root_uri, path))


def shared_cursor_store(
    root_uri: str, path: str, subscription: str, open_store: Callable[[], CursorStore]
) -> CursorStore:
    """The process's handle of a subscription's cursor, opened with ``open_store`` on first use."""
    key = (root_uri, path, subscription)
    with _REGISTRY_LOCK:
        store = _CURSOR_STORES.get(key)
        if store is None:
            store = open_store()
            _CURSOR_STORES[key] = store
        return store


def forget_topic(root_uri: str, path: str) -> None:
    """Drop the handles of a deleted internal topic (its log and its subscriptions' cursors), so that a
    topic re-created under its name starts from storage."""
    with _REGISTRY_LOCK:
        _TOPIC_LOGS.pop((root_uri, path), None)
        for key in [k for k in _CURSOR_STORES if k[:2] == (root_uri, path)]:
            del _CURSOR_STORES[key]


__all__ = ["existing_topic_log", "forget_topic", "shared_cursor_store", "shared_topic_log"]
