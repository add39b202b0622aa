"""The non-persistent topics of one storage root in this process, and the process-wide table of them.

There is no broker process to hold non-persistent topics, so the process holds them: one
``NonPersistentRegistry`` per storage root URI, shared by every ``Client`` of that root, whatever
configuration each was opened with.  Topic objects are never discarded, so a message id (which
counts the messages of its topic) is never reused within a process.
"""

from __future__ import annotations

import threading

from broker_core.naming import NamespaceName, TopicName
from broker_core.non_persistent.topic import NonPersistentTopic
from broker_core.storage.fork import on_fork_in_child


class NonPersistentRegistry:
    """The non-persistent topics of one storage root in this process."""

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri
        self._lock = threading.Lock()
        self._topics: dict[TopicName, NonPersistentTopic] = {}

    def topic(self, name: TopicName) -> NonPersistentTopic:
        """The topic object of an internal topic, created on first use and kept for the process."""
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                topic = NonPersistentTopic(name)
                self._topics[name] = topic
            return topic

    def get(self, name: TopicName) -> NonPersistentTopic | None:
        """The topic object if it was used in this process, else None."""
        with self._lock:
            return self._topics.get(name)

    def topics(self, namespace: NamespaceName | None = None) -> list[TopicName]:
        """Internal topics used in this process (optionally of one namespace), sorted by name."""
        with self._lock:
            names = list(self._topics)
        if namespace is not None:
            names = [n for n in names if n.tenant == namespace.tenant and n.namespace == namespace.namespace]
        return sorted(names, key=str)


_REGISTRY_LOCK = threading.Lock()
_REGISTRIES: dict[str, NonPersistentRegistry] = {}


def _forget_after_fork() -> None:
    """Non-persistent topics live in one process: a forked child starts with none."""
    global _REGISTRY_LOCK, _REGISTRIES
    _REGISTRY_LOCK, _REGISTRIES = threading.Lock(), {}


on_fork_in_child(_forget_after_fork)


def registry_for(root_uri: str) -> NonPersistentRegistry:
    """The process's registry of non-persistent topics for the storage root ``root_uri``.

    Keyed by the root alone (not by broker configuration), so every ``Client`` of a root in this
    process reaches the same topics whatever configuration it was opened with.
    """
    with _REGISTRY_LOCK:
        registry = _REGISTRIES.get(root_uri)
        if registry is None:
            registry = NonPersistentRegistry(root_uri)
            _REGISTRIES[root_uri] = registry
        return registry


__all__ = ["NonPersistentRegistry", "registry_for"]
