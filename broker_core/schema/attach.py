"""Where clients meet the registry: one ``SchemaRegistries`` per storage root and process.

It caches a ``SchemaRegistry`` per topic (versions are immutable, so their cache never goes stale),
answers the writer-schema lookups that ``Message.value()`` makes, and applies the topic's schema
policies when a producer or consumer attaches (``negotiation.py``).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from broker_core.naming import TopicName
from broker_core.schema.base import Schema
from broker_core.schema.info import SchemaInfo
from broker_core.schema.negotiation import SchemaPolicy, check_consumer, producer_version
from broker_core.schema.registry import SchemaRegistry, version_bytes, version_of

if TYPE_CHECKING:
    from broker_core.storage import FileIO
    from broker_core.topic.policies import PolicyStore


class SchemaRegistries:
    """The registries of one storage root."""

    def __init__(self, io: FileIO, policies: PolicyStore) -> None:
        self.io = io
        self.policies = policies
        self._registries: dict[str, SchemaRegistry] = {}
        self._lock = threading.Lock()

    def registry(self, topic: TopicName | str) -> SchemaRegistry:
        name = (topic if isinstance(topic, TopicName) else TopicName.parse(topic)).partitioned_topic_name
        key = str(name)
        with self._lock:
            registry = self._registries.get(key)
            if registry is None:
                registry = self._registries[key] = SchemaRegistry(self.io, name)
            return registry

    def policy(self, topic: TopicName) -> SchemaPolicy:
        return SchemaPolicy.of(self.policies.effective(topic, fresh=True))

    def lookup(self, topic: str, version: bytes) -> SchemaInfo | None:
        """The schema a message of ``topic`` was written with (its ``schema_version`` bytes)."""
        return self.registry(topic).get(version_of(version))

    def attach_producer(self, topic: TopicName, schema: Schema) -> bytes | None:
        """The ``schema_version`` bytes a new producer writes (registering if allowed), or None if untyped.

        Raises ``IncompatibleSchema`` before anything of the producer exists.
        """
        version = producer_version(self.registry(topic), schema.schema_info(), self.policy(topic),
                                   now_ms=int(time.time() * 1000))
        return None if version is None else version_bytes(version)

    def attach_consumer(self, topic: TopicName, schema: Schema) -> None:
        """Refuse a consumer whose schema cannot read the topic's (``IncompatibleSchema``)."""
        check_consumer(self.registry(topic), schema.schema_info(), self.policy(topic))


__all__ = ["SchemaRegistries"]
