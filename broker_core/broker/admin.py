"""The admin API of a storage root (shaped after pulsar-admin): ``Admin``.

``Tenancy`` (``tenancy.py``) holds the records of tenants, namespaces and topics; ``Admin`` adds what
only an administrator does: deleting tenants, namespaces, topics and subscriptions.  One process
shares one ``Admin`` per root (``shared_admin``) with its ``Broker``; the two share the process's
topic handles through ``handles.py`` rather than import each other.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

from broker_core.broker.handles import existing_topic_log, forget_topic
from broker_core.broker.root import OpenedRoot, resolve_root
from broker_core.broker.tenancy import DEFAULT_NAMESPACE, DEFAULT_TENANT, Tenancy, as_topic_name, topic_dir
from broker_core.config.settings import BrokerConfig
from broker_core.errors import (
    NotAllowedError,
    SubscriptionNotFound,
    TopicNotFound,
)
from broker_core.naming import NamespaceName, TopicName, validate_tenant
from broker_core.producer.registry import ProducerRegistry
from broker_core.schema.registry import SchemaRegistry
from broker_core.storage.fork import on_fork_in_child
from broker_core.subscription.cursor import Cursor
from broker_core.subscription.cursor_store import CursorStore, list_subscriptions, validate_subscription_name
from broker_core.topic.topic_log import TopicLog


class Admin(Tenancy):
    """Create, inspect and delete tenants, namespaces, topics and subscriptions."""

    @classmethod
    def open(
        cls,
        service_url: str,
        *,
        broker_config: BrokerConfig | str | None = None,
        create_root: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Admin:
        """The admin API of a storage root (shared with the process's clients of that root).

        A missing root is ``RootNotFound`` unless ``create_root``.
        """
        return shared_admin(resolve_root(
            service_url, broker_config, create_root=create_root, storage_options=storage_options
        ))

    # -- deletion: ``FileIO.delete_tree`` removes a directory so that other processes see it whole or
    # gone (locally one rename into TRASH_DIR; on object stores a tombstone, then a prefix delete)

    def _trash(self, path: str) -> None:
        self.io.delete_tree(path)

    def delete_tenant(self, tenant: str) -> None:
        """Delete a tenant without namespaces (``public`` is refused: every open re-creates it)."""
        name = validate_tenant(tenant)
        if name == DEFAULT_TENANT:
            raise NotAllowedError(f"tenant {name!r} cannot be deleted: every open of the root re-creates it")
        if namespaces := self.list_namespaces(name):
            raise NotAllowedError(f"tenant {name!r} has namespaces ({', '.join(namespaces)}); delete them")
        self._trash(name)

    def delete_namespace(self, namespace: str) -> None:
        """Delete a namespace without topics, with its policies (don't create topics in it meanwhile)."""
        ns = NamespaceName.parse(namespace)
        if str(ns) == DEFAULT_NAMESPACE:
            raise NotAllowedError(f"namespace {ns} cannot be deleted: every open of the root re-creates it")
        if topics := self.list_topics(str(ns)):
            shown = ", ".join(topics[:3]) + (" ..." if len(topics) > 3 else "")
            raise NotAllowedError(f"namespace {ns} has topics ({shown}); delete them", namespace=str(ns))
        self._trash(f"{ns.tenant}/{ns.namespace}")

    def list_subscriptions(self, topic: str | TopicName) -> list[str]:
        """Durable subscriptions on any internal topic of ``topic`` (deleted ones excluded)."""
        found: set[str] = set()
        for path in map(topic_dir, self.topic_partitions(topic, auto_create=False)):
            found.update(s for s in list_subscriptions(self.io, path)
                         if CursorStore(self.io, path, s).load()[1] is not None)
        return sorted(found)

    def delete_subscription(self, topic: str | TopicName, subscription: str, *, force: bool = False) -> int:
        """Delete a durable subscription (its cursors are marked deleted, as ``unsubscribe`` does);
        returns on how many internal topics.  With ``force`` even if consumers are connected: one that
        renews its lease re-creates it, as a Pulsar consumer re-subscribes after a disconnect.

        Raises:
            SubscriptionNotFound: no internal topic has it.
            NotAllowedError: consumers are connected and ``force`` is off.
        """
        sub = validate_subscription_name(subscription)
        now = int(time.time() * 1000)
        deleted = [0]

        def check(cursor: Cursor) -> None:
            if (live := sorted(cursor.live_consumers(now))) and not force:
                raise NotAllowedError(f"subscription {sub!r} has connected consumers {live}; close them "
                                      "first, or force it", subscription=sub)

        def fn(cursor: Cursor | None) -> Cursor | None:
            if cursor is None:
                return None
            check(cursor)
            cursor.deleted, deleted[0] = True, deleted[0] + 1
            cursor.consumers.clear()
            return cursor

        parts = self.topic_partitions(topic, auto_create=False)
        found = [(s, c) for p in parts if (c := (s := CursorStore(self.io, topic_dir(p), sub)).load()[1])]
        for _, cursor in found:  # every check before any change
            check(cursor)
        for store, _ in found:
            store.update(fn)
        if not deleted[0]:
            raise SubscriptionNotFound(f"subscription {sub!r} does not exist on {as_topic_name(topic)}",
                                       subscription=sub)
        return deleted[0]

    def delete_topic(self, topic: str | TopicName, *, force: bool = False) -> dict[str, list[str]]:
        """Delete a topic from storage; returns the internal topics and subscriptions deleted.

        First every internal topic's log gets a tombstone (``TopicLog.mark_deleted``): from then on no
        commit of anyone lands, so a producer still connected (``force``) fails with ``TopicDeleted``,
        as Pulsar disconnects it.  Then each internal topic's directory goes (segments, log, cursors,
        producers, compacted view) in one rename, and no write of a topic re-creates its directory,
        so nothing a late writer does lands under the deleted path.  The topic's policies and, for a
        partitioned topic, its metadata go last: a killed deletion leaves a topic that still exists
        (refusing writes if it was fenced), and deleting it again finishes.  ``force`` skips the
        check for connected producers and consumers.  Of a non-persistent topic only partition
        metadata and policies are on storage.

        Raises:
            TopicNotFound: no such topic.
            NotAllowedError: a partition of a partitioned topic; in use without ``force``.
        """
        name = as_topic_name(topic)
        count, parent = self.partitioned_topic_metadata(name), name.partitioned_topic_name
        if not count and not name.is_persistent:
            raise NotAllowedError(f"{name} is non-persistent and not partitioned: it has nothing on storage",
                                  topic=str(name))
        if not count and name.is_partition and self.partitioned_topic_metadata(parent):
            raise NotAllowedError(f"{name} is a partition of {parent}; delete {parent}", topic=str(name))
        if not count and not self.internal_topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist", topic=str(name))
        internal = [name.partition(i) for i in range(count)] if count else [name]
        internal = internal if name.is_persistent else []
        now, busy, subscriptions = int(time.time() * 1000), set[str](), set[str]()
        for path in map(topic_dir, internal):
            busy.update(f"producer {p!r}" for p in ProducerRegistry(self.io, path).live_producers(now_ms=now))
            for sub in list_subscriptions(self.io, path):
                if (cursor := CursorStore(self.io, path, sub).load()[1]) is not None:
                    subscriptions.add(sub)
                    busy.update(f"consumer {c!r} of {sub!r}" for c in cursor.live_consumers(now))
        if busy and not force:
            shown = ", ".join(sorted(busy)[:3]) + (" ..." if len(busy) > 3 else "")
            raise NotAllowedError(f"topic {name} is in use ({shown}); stop them or force", topic=str(name))
        base = f"{name.tenant}/{name.namespace}/{name.domain.value}"
        for path in map(topic_dir, internal):  # fence every internal topic before removing any
            self._fence(path)
        for path in map(topic_dir, internal):
            self._trash(path)
            forget_topic(self.io.root_uri, path)
        if not name.is_partition:  # a partition-named topic shares the policies of its base name
            self._trash(f"{base}/_policies/{name.local_name}")
            # the schema history ends with the topic (a marker version: docs/PROTOCOL.md section 6c)
            SchemaRegistry(self.io, name).delete(now_ms=now)
        if count:
            self._trash(f"{base}/_partitioned/{name.local_name}")
        return {"internalTopics": [str(p) for p in internal], "subscriptions": sorted(subscriptions)}

    def _fence(self, path: str) -> None:
        """Commit the tombstone of an internal topic's log, through this process's shared handle when
        there is one, so that its producers and readers here see it at once."""
        log = existing_topic_log(self.io.root_uri, path)
        if log is None:
            log = TopicLog(self.io, path, checkpoint_interval=self.config.checkpoint_interval,
                           max_retries=self.config.commit_max_retries)
        # TopicDeleted: fenced already by a deletion that did not finish; TopicNotFound: a partition
        # nobody used has no log to fence
        with contextlib.suppress(TopicNotFound):
            log.mark_deleted()


_ADMINS_LOCK = threading.Lock()
_ADMINS: dict[object, Admin] = {}


def _forget_after_fork() -> None:
    global _ADMINS_LOCK, _ADMINS
    _ADMINS_LOCK, _ADMINS = threading.Lock(), {}


on_fork_in_child(_forget_after_fork)


def shared_admin(root: OpenedRoot) -> Admin:
    """The process's ``Admin`` of an opened root: ``Admin.open`` and ``Broker.for_url`` share it."""
    with _ADMINS_LOCK:
        admin = _ADMINS.get(root.key)
        if admin is None:
            admin = Admin(root.io, root.config)
            _ADMINS[root.key] = admin
        return admin


__all__ = ["Admin", "shared_admin"]
