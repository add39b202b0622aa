"""What happens when a producer or consumer with a schema attaches to a topic (Pulsar's rules).

Producer (``producer_version``), in order:

1. An untyped schema (bytes, or a custom ``Schema`` with no ``schema_info``) writes no version; it
   is refused only when the topic has a schema and ``schemaValidationEnforced`` is on.
2. A schema equal to a live version uses that version.
3. Otherwise a new version is registered when ``isAllowAutoUpdateSchema`` allows it and the
   compatibility strategy accepts it against the live versions; else ``IncompatibleSchema``, naming
   the version it conflicts with.  Nothing is written in that case.

Consumer (``check_consumer``): a typed consumer of a topic with a schema must be able to read the
latest version (every live version for a ``_TRANSITIVE`` strategy; an exact match under
``ALWAYS_INCOMPATIBLE``); ``ALWAYS_COMPATIBLE`` accepts any.  Consumers never register a schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker_core.errors import IncompatibleSchema
from broker_core.schema.compatibility import SchemaCompatibilityStrategy, can_read, incompatibility
from broker_core.schema.info import UNTYPED, SchemaInfo
from broker_core.schema.registry import SchemaRegistry


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """The schema policies in force for one topic."""

    strategy: SchemaCompatibilityStrategy = SchemaCompatibilityStrategy.FULL
    allow_auto_update: bool = True
    validation_enforced: bool = False

    @classmethod
    def of(cls, effective: Any) -> SchemaPolicy:
        """From ``EffectivePolicies``."""
        return cls(SchemaCompatibilityStrategy(effective.schema_compatibility_strategy),
                   effective.is_allow_auto_update_schema, effective.schema_validation_enforced)


def _refuse(registry: SchemaRegistry, info: SchemaInfo, version: int | None, reason: str,
            policy: SchemaPolicy, role: str) -> IncompatibleSchema:
    where = "" if version is None else f" version {version}"
    return IncompatibleSchema(
        f"{role} schema {info.describe()} is incompatible with the schema{where} of {registry.topic} "
        f"(strategy {policy.strategy.value}): {reason}; nothing was written. Fix the schema, or change "
        f"the policy (pubsub schemas compatibility / isAllowAutoUpdateSchema)",
        topic=str(registry.topic), version=version, offered=info.describe(), strategy=policy.strategy.value,
    )


def producer_version(registry: SchemaRegistry, info: SchemaInfo, policy: SchemaPolicy, *, now_ms: int) -> int | None:
    """The version a producer with ``info`` writes under (registering it if allowed); None when untyped."""
    if info.type in UNTYPED:
        latest = registry.latest()
        if latest is not None and policy.validation_enforced:
            raise _refuse(registry, info, latest[0], "the topic has a schema and schemaValidationEnforced is on",
                          policy, "producer")
        return None

    def build(live: list[tuple[int, SchemaInfo]]) -> tuple[int | None, dict[str, Any] | None]:
        for number, existing in live:
            if existing.same_as(info):
                return number, None
        if not policy.allow_auto_update:
            raise _refuse(registry, info, live[-1][0] if live else None,
                          "the schema is not registered and isAllowAutoUpdateSchema is off "
                          "(upload it with pubsub schemas upload)", policy, "producer")
        conflict = incompatibility(info, live, policy.strategy)
        if conflict is not None:
            raise _refuse(registry, info, conflict[0], conflict[1], policy, "producer")
        return None, {**info.to_json(), "deleted": False}

    version, _ = registry.put(build, now_ms=now_ms)
    return version


def check_consumer(registry: SchemaRegistry, info: SchemaInfo, policy: SchemaPolicy) -> None:
    """Refuse a consumer whose schema cannot read the topic's (``IncompatibleSchema``)."""
    live = registry.live()
    if info.type in UNTYPED:
        if live and policy.validation_enforced:
            raise _refuse(registry, info, live[-1][0], "the topic has a schema and schemaValidationEnforced is on",
                          policy, "consumer")
        return
    if not live or any(existing.same_as(info) for _, existing in live):
        return
    if policy.strategy is SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if policy.strategy is SchemaCompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise _refuse(registry, info, live[-1][0], "under ALWAYS_INCOMPATIBLE a consumer must use a registered "
                      "schema exactly", policy, "consumer")
    against = live if policy.strategy.value.endswith("_TRANSITIVE") else live[-1:]
    for number, existing in reversed(against):
        problem = can_read(info, existing)
        if problem:
            raise _refuse(registry, info, number, f"it cannot read version {number}: {problem}", policy, "consumer")


__all__ = ["SchemaPolicy", "check_consumer", "producer_version"]
