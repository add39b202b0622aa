"""Tenants, namespaces and topics on a storage root (the admin API, shaped after pulsar-admin).

Storage layout (``docs/PROTOCOL.md``)::

    <root>/<tenant>/_tenant/<v>.json                         tenant record
    <root>/<tenant>/<ns>/_namespace/<v>.json                 namespace record (policies later)
    <root>/<tenant>/<ns>/<domain>/_partitioned/<topic>/<v>.json   {"partitions": N}
    <root>/<tenant>/<ns>/<domain>/<topic>/                   an internal topic (Delta table)
    <root>/_pubsub/trash/<uuid>/                             a deleted directory, being removed

Names never start with ``_``, so the hidden records cannot collide with a tenant, namespace or
topic directory.  ``public`` and ``public/default`` exist on every root, as in Pulsar standalone.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from broker_core.config import BrokerConfig
from broker_core.cursor import Cursor
from broker_core.cursor_store import CursorStore, list_subscriptions, validate_subscription_name
from broker_core.errors import (
    AlreadyExists,
    BrokerPersistenceError,
    InvalidConfiguration,
    LogCorrupted,
    NamespaceNotFound,
    NotAllowedError,
    SubscriptionNotFound,
    TenantNotFound,
    TopicNotFound,
)
from broker_core.naming import NamespaceName, TopicDomain, TopicName, validate_tenant
from broker_core.producer_registry import ProducerRegistry
from broker_core.schema.registry import SchemaRegistry
from broker_core.state_store import VersionedState
from broker_core.storage import TRASH_DIR, FileIO
from broker_core.topic_log import TopicLog

_LOG = logging.getLogger(__name__)

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"
"""Where deleted directories are renamed to (atomically) before they are removed."""


def topic_dir(topic: TopicName) -> str:
    """The internal topic's directory relative to the root."""
    return "/".join(topic.relative_path())


class Admin:
    """Create and inspect tenants, namespaces and topics.

    Args:
        io: the storage root.
        config: broker settings (auto-creation, partition limits).
        open_topic: callback creating an internal topic's log (the broker supplies it so that one
            process shares one handle per topic).
    """

    def __init__(self, io: FileIO, config: BrokerConfig) -> None:
        self.io = io
        self.config = config
        self._ensure_defaults()

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
        from broker_core.broker import Broker  # the broker owns the shared instance

        return Broker.for_url(
            service_url, broker_config, create_root=create_root, storage_options=storage_options
        ).admin

    # -- records ------------------------------------------------------------------------------------

    def _tenant_state(self, tenant: str) -> VersionedState:
        return VersionedState(self.io, f"{tenant}/_tenant")

    def _namespace_state(self, ns: NamespaceName) -> VersionedState:
        return VersionedState(self.io, f"{ns.tenant}/{ns.namespace}/_namespace")

    def _partitioned_state(self, topic: TopicName) -> VersionedState:
        ns_dir = f"{topic.tenant}/{topic.namespace}/{topic.domain.value}"
        return VersionedState(self.io, f"{ns_dir}/_partitioned/{topic.local_name}", validate=_check_partitions)

    def _ensure_defaults(self) -> None:
        try:
            if self._tenant_state(DEFAULT_TENANT).latest()[1] is None:
                self._create_record(self._tenant_state(DEFAULT_TENANT), {"adminRoles": [], "allowedClusters": []})
            ns = NamespaceName.parse(DEFAULT_NAMESPACE)
            if self._namespace_state(ns).latest()[1] is None:
                self._create_record(self._namespace_state(ns), {"policies": {}})
        except (BrokerPersistenceError, OSError) as exc:
            if isinstance(exc, LogCorrupted) or getattr(self.io, "writable", True):
                raise
            # a read-only root still opens for reading; the defaults appear when a writer opens it
            _LOG.debug("read-only root %s: not creating the default tenant and namespace (%s)", self.io.root_uri, exc)

    @staticmethod
    def _create_record(state: VersionedState, doc: dict[str, object]) -> bool:
        created = {"value": False}

        def fn(current: dict[str, object] | None) -> dict[str, object] | None:
            if current is not None and not current.get("deleted"):
                created["value"] = False
                return None
            created["value"] = True
            return {**doc, "createdMs": int(time.time() * 1000)}

        state.update(fn)
        return created["value"]

    # -- tenants ------------------------------------------------------------------------------------

    def create_tenant(self, tenant: str, *, admin_roles: list[str] | None = None) -> None:
        """Create a tenant; ``AlreadyExists`` if it exists."""
        name = validate_tenant(tenant)
        if not self._create_record(self._tenant_state(name), {"adminRoles": admin_roles or [], "allowedClusters": []}):
            raise AlreadyExists(f"tenant {name!r} already exists", tenant=name)

    def tenant_exists(self, tenant: str) -> bool:
        doc = self._tenant_state(validate_tenant(tenant)).latest()[1]
        return doc is not None and not doc.get("deleted")

    def list_tenants(self) -> list[str]:
        return [name for name in self.io.list_dir("") if not name.startswith(("_", ".")) and self.tenant_exists(name)]

    # -- namespaces ---------------------------------------------------------------------------------

    def create_namespace(self, namespace: str) -> None:
        """Create ``tenant/namespace``; the tenant must exist."""
        ns = NamespaceName.parse(namespace)
        if not self.tenant_exists(ns.tenant):
            raise TenantNotFound(
                f"tenant {ns.tenant!r} does not exist; create it first (Admin.create_tenant)", tenant=ns.tenant
            )
        if not self._create_record(self._namespace_state(ns), {"policies": {}}):
            raise AlreadyExists(f"namespace {ns} already exists", namespace=str(ns))

    def namespace_exists(self, namespace: str | NamespaceName) -> bool:
        ns = namespace if isinstance(namespace, NamespaceName) else NamespaceName.parse(namespace)
        doc = self._namespace_state(ns).latest()[1]
        return doc is not None and not doc.get("deleted")

    def list_namespaces(self, tenant: str) -> list[str]:
        name = validate_tenant(tenant)
        if not self.tenant_exists(name):
            raise TenantNotFound(f"tenant {name!r} does not exist", tenant=name)
        out = []
        for ns in self.io.list_dir(name):
            if ns.startswith(("_", ".")):
                continue
            full = NamespaceName.parse(f"{name}/{ns}")
            if self.namespace_exists(full):
                out.append(str(full))
        return out

    def _require_namespace(self, topic: TopicName) -> None:
        ns = NamespaceName.parse(topic.namespace_name)
        if not self.namespace_exists(ns):
            raise NamespaceNotFound(
                f"namespace {ns} of topic {topic} does not exist; create it with Admin.create_namespace",
                namespace=str(ns),
                topic=str(topic),
            )

    # -- topics -------------------------------------------------------------------------------------

    def partitioned_topic_metadata(self, topic: str | TopicName) -> int:
        """Number of partitions of a partitioned topic, 0 if the topic is not partitioned."""
        name = _topic(topic)
        if name.is_partition:
            return 0
        doc = self._partitioned_state(name).latest()[1]
        if doc is None or doc.get("deleted"):
            return 0
        return int(doc["partitions"])

    def internal_topic_exists(self, topic: TopicName) -> bool:
        log_dir = f"{topic_dir(topic)}/_delta_log"
        return self.io.exists(f"{log_dir}/{0:020d}.json") or self.io.exists(f"{log_dir}/_last_checkpoint")

    def create_partitioned_topic(self, topic: str | TopicName, partitions: int) -> None:
        """Create a partitioned topic with ``partitions`` internal topics (Pulsar's naming)."""
        name = _topic(topic)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidConfiguration(
                f"partitions must be an int >= 1, got {partitions!r}; use create_topic for a non-partitioned topic"
            )
        limit = self.config.max_num_partitions_per_partitioned_topic
        if limit and partitions > limit:
            raise InvalidConfiguration(
                f"partitions={partitions} exceeds maxNumPartitionsPerPartitionedTopic={limit}: use fewer "
                "partitions, or raise the limit in the root's _pubsub/broker.toml", topic=str(name)
            )
        if name.is_partition:
            raise InvalidConfiguration(
                f"{name} names a partition; a partitioned topic's name may not end in -partition-<i>",
                topic=str(name),
            )
        name.partition(partitions - 1)  # the longest partition name must fit (InvalidTopicName) up front
        self._require_namespace(name)
        if self.internal_topic_exists(name):
            raise AlreadyExists(f"a non-partitioned topic {name} exists already", topic=str(name))
        if not self._create_record(self._partitioned_state(name), {"partitions": partitions}):
            raise AlreadyExists(f"partitioned topic {name} exists already", topic=str(name))

    def topic_partitions(self, topic: str | TopicName, *, auto_create: bool = True) -> list[TopicName]:
        """The internal topics of ``topic``: its partitions, or itself; auto-create per config.

        Raises:
            TopicNotFound: the topic does not exist and may not be auto-created.
        """
        name = _topic(topic)
        partitions = self.partitioned_topic_metadata(name)
        if partitions:
            return [name.partition(i) for i in range(partitions)]
        if name.is_partition:
            parent = name.partitioned_topic_name
            count = self.partitioned_topic_metadata(parent)
            if count and name.partition_index >= count:
                raise TopicNotFound(
                    f"{name} does not exist: {parent} has {count} partitions", topic=str(name)
                )
            if count:
                return [name]
        if self.internal_topic_exists(name):
            return [name]
        if not (auto_create and self.config.allow_auto_topic_creation):
            raise TopicNotFound(
                f"topic {name} does not exist and allowAutoTopicCreation is off; create it first", topic=str(name)
            )
        self._require_namespace(name)
        if name.domain != TopicDomain.PERSISTENT:
            return [name]
        if self.config.allow_auto_topic_creation_type == "partitioned" and not name.is_partition:
            with contextlib.suppress(AlreadyExists):
                self.create_partitioned_topic(name, self.config.default_num_partitions)
            return self.topic_partitions(name, auto_create=False)
        return [name]

    def list_topics(self, namespace: str) -> list[str]:
        """Topics of a namespace: partitioned topics by their name, others by theirs."""
        ns = NamespaceName.parse(namespace)
        if not self.namespace_exists(ns):
            raise NamespaceNotFound(f"namespace {ns} does not exist", namespace=str(ns))
        out: list[str] = []
        for domain in TopicDomain:
            base = f"{ns.tenant}/{ns.namespace}/{domain.value}"
            partitioned = set()
            for local in self.io.list_dir(f"{base}/_partitioned"):
                name = TopicName.parse(f"{domain.value}://{ns}/{local}")
                if self.partitioned_topic_metadata(name):
                    partitioned.add(local)
                    out.append(str(name))
            for local in self.io.list_dir(base):
                if local.startswith(("_", ".")):
                    continue
                name = TopicName.parse(f"{domain.value}://{ns}/{local}")
                if name.is_partition and name.partitioned_topic_name.local_name in partitioned:
                    continue
                if self.internal_topic_exists(name):
                    out.append(str(name))
        return sorted(out)

    def ensure_not_partitioned_parent(self, topic: TopicName) -> None:
        if self.partitioned_topic_metadata(topic):
            raise NotAllowedError(f"{topic} is partitioned; address one of its partitions", topic=str(topic))

    def create_topic(self, topic: str | TopicName) -> None:
        """Create a non-partitioned persistent topic: its log at version 0 (one put-if-absent commit).

        Raises:
            AlreadyExists: the topic, or a partitioned topic of that name, exists.
            NamespaceNotFound: its namespace does not exist.
            NotAllowedError: a non-persistent topic (nothing of it is on storage).
            InvalidConfiguration: a partition's name (``-partition-<i>``).
        """
        name = _topic(topic)
        if not name.is_persistent:
            raise NotAllowedError(f"{name} is non-persistent: it lives in the memory of the processes using "
                                  "it, so there is nothing to create on storage", topic=str(name))
        if name.is_partition:
            raise InvalidConfiguration(f"{name} names a partition; create the partitioned topic "
                                       f"{name.partitioned_topic_name} with partitions", topic=str(name))
        self._require_namespace(name)
        if self.partitioned_topic_metadata(name):
            raise AlreadyExists(f"a partitioned topic {name} exists already", topic=str(name))
        log = TopicLog(self.io, topic_dir(name), checkpoint_interval=self.config.checkpoint_interval,
                       max_retries=self.config.commit_max_retries)
        if not log.create(name=str(name)):
            raise AlreadyExists(f"topic {name} exists already", topic=str(name))

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
            raise SubscriptionNotFound(f"subscription {sub!r} does not exist on {_topic(topic)}",
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
        name = _topic(topic)
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
            _forget_handles(self.io, path)
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
        from broker_core import broker as shared  # broker.py imports this module

        with shared._REGISTRY_LOCK:
            log = shared._TOPIC_LOGS.get((self.io.root_uri, path))
        if log is None:
            log = TopicLog(self.io, path, checkpoint_interval=self.config.checkpoint_interval,
                           max_retries=self.config.commit_max_retries)
        # TopicDeleted: fenced already by a deletion that did not finish; TopicNotFound: a partition
        # nobody used has no log to fence
        with contextlib.suppress(TopicNotFound):
            log.mark_deleted()


def _forget_handles(io: FileIO, path: str) -> None:
    """Drop this process's shared handles of a deleted internal topic (``broker.py`` keeps one per
    topic and subscription), so that a topic re-created under its name starts from storage."""
    from broker_core import broker as shared  # broker.py imports this module

    with shared._REGISTRY_LOCK:
        shared._TOPIC_LOGS.pop((io.root_uri, path), None)
        for key in [k for k in shared._CURSOR_STORES if k[:2] == (io.root_uri, path)]:
            del shared._CURSOR_STORES[key]


def _check_partitions(doc: dict[str, object]) -> None:
    """A partitioned-topic record holds ``partitions``, an int >= 1 (``VersionedState`` turns the
    ``ValueError`` into ``LogCorrupted`` naming the file)."""
    if doc.get("deleted"):
        return
    count = doc["partitions"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"partitions must be an int >= 1, found {count!r}")


def _topic(topic: str | TopicName) -> TopicName:
    return topic if isinstance(topic, TopicName) else TopicName.parse(topic)


__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_TENANT", "TRASH_DIR", "Admin", "topic_dir"]
