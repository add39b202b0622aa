"""Tenants, namespaces and topics as records on a storage root: the half of the admin API that the
``Broker`` needs to resolve a topic to its internal topics.

Storage layout (``docs/PROTOCOL.md``)::

    <root>/<tenant>/_tenant/<v>.json                         tenant record
    <root>/<tenant>/<ns>/_namespace/<v>.json                 namespace record (policies later)
    <root>/<tenant>/<ns>/<domain>/_partitioned/<topic>/<v>.json   {"partitions": N}
    <root>/<tenant>/<ns>/<domain>/<topic>/                   an internal topic (Delta table)
    <root>/_pubsub/trash/<uuid>/                             a deleted directory, being removed

Names never start with ``_``, so the hidden records cannot collide with a tenant, namespace or
topic directory.  ``public`` and ``public/default`` exist on every root, as in Pulsar standalone.
``Admin`` (``admin.py``) adds deletion, subscriptions and ``Admin.open``.
"""

from __future__ import annotations

import contextlib
import logging
import time

from broker_core.config.settings import BrokerConfig
from broker_core.errors import (
    AlreadyExists,
    BrokerPersistenceError,
    InvalidConfiguration,
    LogCorrupted,
    NamespaceNotFound,
    NotAllowedError,
    TenantNotFound,
    TopicNotFound,
)
from broker_core.log.state_store import VersionedState
from broker_core.naming import NamespaceName, TopicDomain, TopicName, validate_tenant
from broker_core.storage import FileIO
from broker_core.topic.topic_log import TopicLog

_LOG = logging.getLogger(__name__)

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"
"""Where deleted directories are renamed to (atomically) before they are removed."""


def topic_dir(topic: TopicName) -> str:
    """The internal topic's directory relative to the root."""
    return "/".join(topic.relative_path())


class Tenancy:
    """Create and inspect tenants, namespaces and topics (``Admin`` adds deletion).

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
        name = as_topic_name(topic)
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
        name = as_topic_name(topic)
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
        name = as_topic_name(topic)
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
        return sorted(str(name) for name, _ in self._listed_topics(namespace, probe=True))

    def list_internal_topics(self, namespace: str) -> list[TopicName]:
        """The internal topics a namespace may hold: every partition of its partitioned topics, and
        each other topic directory, without probing that its log exists (whoever opens it finds out;
        ``list_topics`` with ``topic_partitions`` per topic costs a probe or two per topic more)."""
        out: list[TopicName] = []
        for name, partitions in self._listed_topics(namespace, probe=False):
            if partitions:
                out.extend(name.partition(i) for i in range(partitions))
            else:
                out.append(name)
        return out

    def _listed_topics(self, namespace: str, *, probe: bool) -> list[tuple[TopicName, int]]:
        """(topic, partitions, 0 when not partitioned); ``probe``: only directories with a log."""
        ns = NamespaceName.parse(namespace)
        if not self.namespace_exists(ns):
            raise NamespaceNotFound(f"namespace {ns} does not exist", namespace=str(ns))
        out: list[tuple[TopicName, int]] = []
        for domain in TopicDomain:
            base = f"{ns.tenant}/{ns.namespace}/{domain.value}"
            partitioned = set()
            for local in self.io.list_dir(f"{base}/_partitioned"):
                name = TopicName.parse(f"{domain.value}://{ns}/{local}")
                count = self.partitioned_topic_metadata(name)
                if count:
                    partitioned.add(local)
                    out.append((name, count))
            for local in self.io.list_dir(base):
                if local.startswith(("_", ".")):
                    continue
                name = TopicName.parse(f"{domain.value}://{ns}/{local}")
                if name.is_partition and name.partitioned_topic_name.local_name in partitioned:
                    continue
                if not probe or self.internal_topic_exists(name):
                    out.append((name, 0))
        return out

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
        name = as_topic_name(topic)
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


def _check_partitions(doc: dict[str, object]) -> None:
    """A partitioned-topic record holds ``partitions``, an int >= 1 (``VersionedState`` turns the
    ``ValueError`` into ``LogCorrupted`` naming the file)."""
    if doc.get("deleted"):
        return
    count = doc["partitions"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"partitions must be an int >= 1, found {count!r}")


def as_topic_name(topic: str | TopicName) -> TopicName:
    """``topic``, parsed if it is a string."""
    return topic if isinstance(topic, TopicName) else TopicName.parse(topic)


__all__ = ["DEFAULT_NAMESPACE", "DEFAULT_TENANT", "Tenancy", "as_topic_name", "topic_dir"]
