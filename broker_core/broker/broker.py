"""The in-process "broker": one shared handle per storage root.

There is no broker process; the broker is the state on storage.  Within one process, though, every
``Client`` on the same root shares one ``Broker``, so that they share one ``TopicLog`` per internal
topic: a commit by one client's producer wakes another client's reader at once (push), while other
processes see it at their next poll of the log (a stat of the next version file).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from broker_core.broker.admin import Admin, shared_admin
from broker_core.broker.handles import shared_cursor_store, shared_topic_log
from broker_core.broker.root import resolve_root
from broker_core.broker.tenancy import topic_dir
from broker_core.config.settings import BrokerConfig
from broker_core.errors import InvalidConfiguration, LogCorrupted, NotAllowedError
from broker_core.log.checkpoint import LOG_DIR
from broker_core.naming import TopicName
from broker_core.schema.attach import SchemaRegistries
from broker_core.storage import FileIO, LocalFileIO
from broker_core.storage.fork import on_fork_in_child
from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor
from broker_core.subscription.cursor_store import CursorStore
from broker_core.topic.policies import PolicyStore
from broker_core.topic.topic_log import TopicLog
from broker_core.topic.watch import ChangeNotifier, PollingNotifier, Unwatch, local_notifier

_PATTERN_PREFIX = re.compile(r"^(persistent|non-persistent)://([^/]+)/([^/]+)/")
_REGISTRY_LOCK = threading.Lock()
_BROKERS: dict[object, Broker] = {}


def _forget_after_fork() -> None:
    """A forked child's clients get brokers of their own (the parent's hold its notifier and handles)."""
    global _REGISTRY_LOCK, _BROKERS
    _REGISTRY_LOCK, _BROKERS = threading.Lock(), {}


on_fork_in_child(_forget_after_fork)


def notifier_for(io: FileIO, config: BrokerConfig) -> ChangeNotifier:
    """File-system notifications for a local root (where the platform has them), else polling."""
    if isinstance(io, LocalFileIO) and config.file_system_notifications_enabled:
        return local_notifier(enabled=True)
    return PollingNotifier()


class Broker:
    """Shared per-process state of one storage root."""

    def __init__(self, io: FileIO, config: BrokerConfig, *, admin: Admin | None = None) -> None:
        self.io = io
        self.config = config
        self.admin = admin if admin is not None else Admin(io, config)
        self.policies = PolicyStore(io, config)
        self.schemas = SchemaRegistries(io, self.policies)
        self.notifier = notifier_for(io, config)
        self._lock = threading.Lock()

    def _watch(self, directory: str) -> Callable[[Callable[[int], None]], Unwatch]:
        """What a shared log or cursor store calls, while anybody waits on it, to hear of other
        processes' commits in ``directory`` (relative to the root)."""
        path = self.io.abs_path(directory)
        notifier = self.notifier
        return lambda callback: notifier.watch(path, callback)

    @classmethod
    def for_url(
        cls,
        service_url: str,
        config: BrokerConfig | str | os.PathLike[str] | None = None,
        *,
        create_root: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Broker:
        """The process's broker for a storage root (created on first use).

        A missing root is ``RootNotFound`` unless ``create_root`` (see ``root_check``).
        ``storage_options`` configure an object-store root (``aws_endpoint``, credentials, ...; the
        keys delta-rs uses); brokers of one root opened with different options are separate.
        """
        root = resolve_root(service_url, config, create_root=create_root, storage_options=storage_options)
        with _REGISTRY_LOCK:
            broker = _BROKERS.get(root.key)
            if broker is None:
                broker = cls(root.io, root.config, admin=shared_admin(root))
                _BROKERS[root.key] = broker
            return broker

    def topic_log(self, topic: TopicName, *, create: bool = True) -> TopicLog:
        """The shared handle of an internal topic, creating its log if needed and allowed."""
        if not topic.is_persistent:
            raise NotAllowedError(
                f"{topic} is non-persistent: it has no log on storage", topic=str(topic)
            )
        path = topic_dir(topic)
        # reads refuse bigger messages (D125): the limit producers of this configuration write under
        try:
            policy_limit = self.policies.effective(topic).max_message_size
        except LogCorrupted:  # a damaged policy record: `topics check` reports it; the log still opens
            policy_limit = self.config.max_message_size
        limit = max(self.config.max_message_size, policy_limit)

        def open_log() -> TopicLog:
            log = TopicLog(
                self.io,
                path,
                checkpoint_interval=self.config.checkpoint_interval,
                max_retries=self.config.commit_max_retries,
                background_checkpoints=True,
                max_message_bytes=limit,
            )
            log.watch_with(self._watch(f"{path}/{LOG_DIR}"))
            return log

        log = shared_topic_log(self.io.root_uri, path, open_log)
        log.allow_message_bytes(limit)
        if create and not log.exists():
            log.create(name=str(topic))
        return log

    def cursor_store(self, topic: TopicName, subscription: str) -> CursorStore:
        """The shared handle of a subscription's cursor on an internal topic."""
        path = topic_dir(topic)

        def open_store() -> CursorStore:
            store = CursorStore(self.io, path, subscription)
            store.watch_with(self._watch(store.state.directory))
            return store

        return shared_cursor_store(self.io.root_uri, path, subscription, open_store)

    def create_subscription(self, topic: str | TopicName, subscription: str, *, earliest: bool = True) -> bool:
        """Create a durable subscription with no consumer (at the earliest or latest message).

        Returns False if it existed already on every partition (it is left as it is).
        """
        created = False
        for partition in self.partitions(topic):
            log = self.topic_log(partition)
            snap = log.snapshot()
            offset = snap.first_offset if earliest else snap.next_offset

            def fn(cursor: Cursor | None, offset: int = offset) -> Cursor | None:
                nonlocal created
                if cursor is not None:
                    return None
                created = True
                return new_cursor(subscription, ConsumerType.Exclusive, offset)

            self.cursor_store(partition, subscription).update(fn)
        return created

    def match_topics(self, pattern: str) -> tuple[str, list[str]]:
        """The namespace a topic pattern watches and the existing topics it fully matches.

        The pattern must start with ``persistent://tenant/namespace/`` so the namespace is known.
        """
        match = _PATTERN_PREFIX.match(pattern)
        if match is None:
            raise InvalidConfiguration(
                f"topic pattern {pattern!r} must start with 'persistent://tenant/namespace/' so the namespace "
                "to watch is known"
            )
        namespace = f"{match.group(2)}/{match.group(3)}"
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidConfiguration(f"topic pattern {pattern!r} is not a valid regex: {exc}") from exc
        return namespace, [t for t in self.admin.list_topics(namespace) if regex.fullmatch(t)]

    def partitions(self, topic: str | TopicName, *, auto_create: bool = True) -> list[TopicName]:
        """Resolve a topic to its internal topics (auto-creating per the broker config)."""
        return self.admin.topic_partitions(topic, auto_create=auto_create)


__all__ = ["Broker", "notifier_for"]
