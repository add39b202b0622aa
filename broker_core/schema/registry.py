"""The schema registry of one topic: immutable, numbered schema versions stored beside the topic.

Layout (docs/PROTOCOL.md, "Schema registry"): ``<tenant>/<ns>/<domain>/_schemas/<topic>/<v20>.json``,
one file per version, created with put-if-absent and never changed or cleaned up (messages name the
version they were written with in their ``schema_version`` column, as 8 big-endian bytes).  A
partitioned topic has one registry for all its partitions.  Deleting the schema appends a version
with ``"deleted": true``; versions before the newest deletion no longer count (Pulsar trims them the
same way), so a new schema may then be registered freely.

Versions are immutable, so a reader caches every version it has read for good; finding the latest
lists the directory (registration and producer/consumer creation only, never per message).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker_core.errors import CommitConflict, LogCorrupted
from broker_core.naming import TopicName
from broker_core.schema.info import SchemaInfo, SchemaType
from broker_core.storage import FileIO

_VERSION_RE = re.compile(r"^(\d{20})\.json$")


class SchemaVersionDoc(BaseModel):
    """One stored version (the JSON file's content)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: str = "NONE"
    name: str = ""
    schema_text: str = Field("", alias="schema")
    properties: dict[str, str] = Field(default_factory=dict)
    created_ms: int = Field(0, alias="createdMs")
    deleted: bool = False

    def info(self) -> SchemaInfo | None:
        if self.deleted:
            return None
        return SchemaInfo(SchemaType[self.type], self.name, self.schema_text, dict(self.properties))


def version_bytes(version: int) -> bytes:
    """The ``schema_version`` column value of a version (Pulsar's 8-byte big-endian long)."""
    return version.to_bytes(8, "big", signed=True)


def version_of(raw: bytes) -> int:
    """The version number in a ``schema_version`` column value."""
    return int.from_bytes(raw, "big", signed=True)


def registry_dir(topic: TopicName) -> str:
    base = topic.partitioned_topic_name
    return f"{base.tenant}/{base.namespace}/{base.domain.value}/_schemas/{base.local_name}"


class SchemaRegistry:
    """Versions of one topic's schema on a storage root (thread-safe; one per topic and process is enough)."""

    def __init__(self, io: FileIO, topic: TopicName) -> None:
        self.io = io
        self.topic = topic.partitioned_topic_name
        self.directory = registry_dir(topic)
        self._docs: dict[int, SchemaVersionDoc] = {}
        self._lock = threading.Lock()

    def _path(self, version: int) -> str:
        return f"{self.directory}/{version:020d}.json"

    def _read(self, version: int) -> SchemaVersionDoc | None:
        doc = self._docs.get(version)
        if doc is not None:
            return doc
        data = self.io.read_bytes(self._path(version))
        if data is None:
            return None
        try:
            doc = SchemaVersionDoc.model_validate(json.loads(data))
        except (ValueError, ValidationError, RecursionError) as exc:
            raise LogCorrupted(f"schema version file {self._path(version)!r} is invalid: {exc}",
                               version=version) from None
        with self._lock:
            self._docs[version] = doc
        return doc

    def get(self, version: int) -> SchemaInfo | None:
        """The schema registered as ``version`` (None if absent or a deletion marker)."""
        doc = self._read(version) if version >= 0 else None
        return None if doc is None else doc.info()

    def all_versions(self) -> list[tuple[int, SchemaVersionDoc]]:
        """Every stored version, oldest first (deletion markers included)."""
        numbers = sorted(int(m.group(1)) for n in self.io.list_dir(self.directory) if (m := _VERSION_RE.match(n)))
        out = []
        for number in numbers:
            doc = self._read(number)
            if doc is not None:
                out.append((number, doc))
        return out

    def live(self) -> list[tuple[int, SchemaInfo]]:
        """The versions after the newest deletion, oldest first: the ones compatibility checks use."""
        out: list[tuple[int, SchemaInfo]] = []
        for number, doc in self.all_versions():
            info = doc.info()
            if info is None:
                out.clear()
            else:
                out.append((number, info))
        return out

    def latest(self) -> tuple[int, SchemaInfo] | None:
        live = self.live()
        return live[-1] if live else None

    def _next_version(self) -> int:
        versions = self.all_versions()
        return versions[-1][0] + 1 if versions else 0

    def put(self, build: Any, *, now_ms: int, max_retries: int = 1000) -> tuple[int, SchemaInfo | None]:
        """Append a version: ``build(live)`` returns (existing version to reuse, None) or (None, doc).

        ``build`` sees the live versions as of the attempt and is re-run after a lost race, so a check
        it makes always holds against what the new version lands after.
        """
        for attempt in range(1, max_retries + 1):
            live = self.live()
            number = self._next_version()
            reuse, doc = build(live)
            if reuse is not None:
                return reuse, self.get(reuse)
            stamped = {**doc, "createdMs": now_ms}
            data = json.dumps(stamped, separators=(",", ":"), sort_keys=True).encode()
            if self.io.put_if_absent(self._path(number), data):
                return number, SchemaVersionDoc.model_validate(stamped).info()
            if attempt > 8:
                time.sleep(random.uniform(0, min(0.05, 0.001 * attempt)))
        raise CommitConflict(f"gave up registering a schema of {self.topic} after {max_retries} attempts",
                             path=self.directory)

    def delete(self, *, now_ms: int) -> int | None:
        """Mark the schema deleted (a new version); None when there was no live schema."""

        def build(live: list[tuple[int, SchemaInfo]]) -> tuple[int | None, dict[str, Any] | None]:
            if not live:
                return -1, None
            return None, {"deleted": True}

        number, _ = self.put(build, now_ms=now_ms)
        return None if number < 0 else number


__all__ = ["SchemaRegistry", "SchemaVersionDoc", "registry_dir", "version_bytes", "version_of"]
