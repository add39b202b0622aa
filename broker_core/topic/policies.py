"""Namespace and topic policies, stored with atomic commits, resolved most-specific-wins.

Precedence (DESIGN.md section 2): built-in defaults < ``broker.toml`` < namespace policies < topic
policies < explicit arguments.  A policy field left unset (``None``) at a level inherits from the
level below.  Namespace policies live in the namespace record (``<tenant>/<ns>/_namespace``); topic
policies in ``<tenant>/<ns>/<domain>/_policies/<topic>``, both versioned put-if-absent state, so a
change is visible to every process at its next read and nothing needs a restart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker_core.config.settings import BrokerConfig
from broker_core.errors import InvalidConfiguration, LogCorrupted, NamespaceNotFound
from broker_core.log.state_store import VersionedState
from broker_core.naming import NamespaceName, TopicName
from broker_core.storage import FileIO

BacklogQuotaPolicy = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
SchemaCompatibility = Literal[
    "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
    "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
]


class Policies(BaseModel):
    """Policy values set at one level; ``None`` means "inherit"."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    retention_time_in_minutes: int | None = Field(None, alias="retentionTimeInMinutes", ge=-1)
    retention_size_in_mb: int | None = Field(None, alias="retentionSizeInMB", ge=-1)
    message_ttl_in_seconds: int | None = Field(None, alias="messageTTLInSeconds", ge=0)
    backlog_quota_limit_size: int | None = Field(None, alias="backlogQuotaLimitSize", ge=-1)
    backlog_quota_limit_time: int | None = Field(None, alias="backlogQuotaLimitTime", ge=-1)
    backlog_quota_policy: BacklogQuotaPolicy | None = Field(None, alias="backlogQuotaPolicy")
    deduplication_enabled: bool | None = Field(None, alias="deduplicationEnabled")
    delayed_delivery_enabled: bool | None = Field(None, alias="delayedDeliveryEnabled")
    delayed_delivery_tick_time_millis: int | None = Field(None, alias="delayedDeliveryTickTimeMillis", gt=0)
    max_message_size: int | None = Field(None, alias="maxMessageSize", gt=0)
    schema_compatibility_strategy: SchemaCompatibility | None = Field(None, alias="schemaCompatibilityStrategy")
    is_allow_auto_update_schema: bool | None = Field(None, alias="isAllowAutoUpdateSchema")
    schema_validation_enforced: bool | None = Field(None, alias="schemaValidationEnforced")
    compaction_threshold: int | None = Field(None, alias="compactionThreshold", ge=0)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


POLICY_KEYS = sorted(f.alias or n for n, f in Policies.model_fields.items())


def parse_policies(values: dict[str, Any], *, source: str) -> Policies:
    """Validate policy values (Pulsar-style names); errors name the key, the value and the rule."""
    unknown = sorted(k for k in values if k not in POLICY_KEYS and k not in Policies.model_fields)
    if unknown:
        raise InvalidConfiguration(
            f"{source}: unknown policy {unknown[0]!r}; known policies: {', '.join(POLICY_KEYS)}", key=unknown[0]
        )
    try:
        return Policies.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err.get("loc") else "?"
        raise InvalidConfiguration(
            f"{source}: policy {key}={values.get(key)!r} is invalid: {err['msg']}", key=key
        ) from None


@dataclass(frozen=True, slots=True)
class EffectivePolicies:
    """The policies in force for one topic, every value concrete."""

    retention_time_in_minutes: int
    retention_size_in_mb: int
    message_ttl_in_seconds: int
    backlog_quota_limit_size: int
    backlog_quota_limit_time: int
    backlog_quota_policy: str
    deduplication_enabled: bool
    delayed_delivery_enabled: bool
    delayed_delivery_tick_time_millis: int
    max_message_size: int
    schema_compatibility_strategy: str = "FULL"
    is_allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False
    compaction_threshold: int = 0  # bytes since the last compaction that trigger one (0: off)

    @classmethod
    def resolve(cls, config: BrokerConfig, *levels: Policies | None) -> EffectivePolicies:
        values: dict[str, Any] = {
            "retention_time_in_minutes": config.default_retention_time_in_minutes,
            "retention_size_in_mb": config.default_retention_size_in_mb,
            "message_ttl_in_seconds": config.ttl_duration_default_in_seconds,
            "backlog_quota_limit_size": config.backlog_quota_default_limit_bytes,
            "backlog_quota_limit_time": config.backlog_quota_default_limit_second,
            "backlog_quota_policy": config.backlog_quota_default_retention_policy,
            "deduplication_enabled": config.broker_deduplication_enabled,
            "delayed_delivery_enabled": config.delayed_delivery_enabled,
            "delayed_delivery_tick_time_millis": config.delayed_delivery_tick_time_millis,
            "max_message_size": config.max_message_size,
            "schema_compatibility_strategy": config.schema_compatibility_strategy,
            "is_allow_auto_update_schema": config.is_allow_auto_update_schema_enabled,
            "schema_validation_enforced": config.is_schema_validation_enforced,
            "compaction_threshold": config.broker_service_compaction_threshold_in_bytes,
        }
        for level in levels:
            if level is not None:
                values.update({k: v for k, v in level.model_dump().items() if v is not None})
        return cls(**values)


class PolicyStore:
    """Reads and writes namespace and topic policies on a storage root.

    Reads are cached for ``cache_ms`` so hot paths (a producer's commit) can ask every time.  Once
    the cache is stale, one caller re-reads while the others get the stale value: on an object store
    a re-read is several round trips, and every upload worker of a producer asking at the same moment
    must not each pay for one.
    """

    def __init__(self, io: FileIO, config: BrokerConfig, *, cache_ms: int = 1000) -> None:
        self.io = io
        self.config = config
        self.cache_ms = cache_ms
        self._cache: dict[str, tuple[float, EffectivePolicies]] = {}
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    def _namespace_state(self, ns: NamespaceName) -> VersionedState:
        return VersionedState(self.io, f"{ns.tenant}/{ns.namespace}/_namespace", validate=_check_record)

    def _topic_state(self, topic: TopicName) -> VersionedState:
        base = topic.partitioned_topic_name
        return VersionedState(
            self.io, f"{base.tenant}/{base.namespace}/{base.domain.value}/_policies/{base.local_name}",
            validate=_check_record,
        )

    def damaged_records(self, topic: TopicName) -> list[tuple[str, str]]:
        """(file, what is wrong) for the topic's and its namespace's policy records whose newest version
        is unreadable (``pubsub topics check``)."""
        out = []
        for state in (self._namespace_state(NamespaceName.parse(topic.namespace_name)), self._topic_state(topic)):
            try:
                state.latest()
            except LogCorrupted as exc:
                out.append((state.directory, str(exc)))
        return out

    def namespace_policies(self, namespace: str | NamespaceName) -> Policies:
        ns = namespace if isinstance(namespace, NamespaceName) else NamespaceName.parse(namespace)
        doc = self._namespace_state(ns).latest()[1]
        if doc is None or doc.get("deleted"):
            raise NamespaceNotFound(f"namespace {ns} does not exist", namespace=str(ns))
        return Policies.model_validate(doc.get("policies", {}))

    def topic_policies(self, topic: str | TopicName) -> Policies:
        name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
        doc = self._topic_state(name).latest()[1]
        return Policies.model_validate((doc or {}).get("policies", {}))

    def set_namespace_policies(
        self, namespace: str, changes: dict[str, Any], *, remove: Sequence[str] = ()
    ) -> Policies:
        """Set (and/or unset) namespace policy values in one commit; returns the new policies."""
        ns = NamespaceName.parse(namespace)
        self.namespace_policies(ns)  # must exist
        result: dict[str, Policies] = {}

        def fn(doc: dict[str, Any] | None) -> dict[str, Any]:
            merged = _merge((doc or {}).get("policies", {}), changes, remove, source=f"namespace {ns}")
            result["p"] = merged
            return {**(doc or {}), "policies": merged.to_json()}

        self._namespace_state(ns).update(fn)
        self._cache.clear()
        return result["p"]

    def set_topic_policies(self, topic: str, changes: dict[str, Any], *, remove: Sequence[str] = ()) -> Policies:
        name = TopicName.parse(topic)
        result: dict[str, Policies] = {}

        def fn(doc: dict[str, Any] | None) -> dict[str, Any]:
            merged = _merge((doc or {}).get("policies", {}), changes, remove, source=f"topic {name}")
            result["p"] = merged
            return {"policies": merged.to_json()}

        self._topic_state(name).update(fn)
        self._cache.clear()
        return result["p"]

    def effective(self, topic: TopicName, *, fresh: bool = False) -> EffectivePolicies:
        """Broker config < namespace < topic, cached for ``cache_ms``."""
        key = str(topic.partitioned_topic_name)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and not fresh and ((now - hit[0]) * 1000 < self.cache_ms or key in self._refreshing):
                return hit[1]
            self._refreshing.add(key)
        try:
            ns = NamespaceName.parse(topic.namespace_name)
            try:
                ns_policies: Policies | None = self.namespace_policies(ns)
            except NamespaceNotFound:
                ns_policies = None
            value = EffectivePolicies.resolve(self.config, ns_policies, self.topic_policies(topic))
        finally:
            with self._lock:
                self._refreshing.discard(key)
        with self._lock:
            self._cache[key] = (now, value)
        return value


def _check_record(doc: dict[str, Any]) -> None:
    """A namespace or topic-policy record must hold valid policies: a damaged one is ``LogCorrupted``
    naming its file (``VersionedState`` wraps the ``ValueError`` this raises), not a raw pydantic error."""
    Policies.model_validate(doc.get("policies", {}))


def _merge(current: dict[str, Any], changes: dict[str, Any], remove: Sequence[str], *, source: str) -> Policies:
    base = parse_policies(current, source=source).to_json()
    update = parse_policies(changes, source=source).to_json()
    for key in remove:
        if key not in POLICY_KEYS:
            raise InvalidConfiguration(f"{source}: unknown policy {key!r}; known: {', '.join(POLICY_KEYS)}", key=key)
        base.pop(key, None)
    base.update(update)
    return parse_policies(base, source=source)


__all__ = ["POLICY_KEYS", "BacklogQuotaPolicy", "EffectivePolicies", "Policies", "PolicyStore", "parse_policies"]
