"""Schema compatibility: Avro's "can this reader read that writer" and Pulsar's strategies over versions.

Strategies (Pulsar's names; Pulsar's default is ``FULL``):

- ``BACKWARD``: the new schema reads data written with the latest one (consumers upgrade first).
- ``FORWARD``: the latest schema reads data written with the new one (producers upgrade first).
- ``FULL``: both.  ``*_TRANSITIVE``: against every live version, not only the latest.
- ``ALWAYS_COMPATIBLE`` accepts any new version; ``ALWAYS_INCOMPATIBLE`` accepts none.

AVRO and JSON schemas are compared by their Avro definitions; a change of schema type is never
compatible; primitives are compatible only with themselves; a KeyValue schema compares key and
value separately and may not change its encoding.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from broker_core.schema.info import RECORD_TYPES, SchemaInfo, SchemaType


class SchemaCompatibilityStrategy(enum.Enum):
    """How a new schema version must relate to the registered ones."""

    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


STRATEGY_NAMES = [s.value for s in SchemaCompatibilityStrategy]
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}


def _collect_names(schema: Any, namespace: str | None, names: dict[str, Any]) -> None:
    """Index every named type (record, enum, fixed) by full and short name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect_names(branch, namespace, names)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed", "error"):
        name = str(schema.get("name", ""))
        ns = schema.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        names[full] = schema
        names.setdefault(name.rsplit(".", 1)[-1], schema)
        if kind in ("record", "error"):
            for f in schema.get("fields", []):
                _collect_names(f.get("type"), ns, names)
    elif kind == "array":
        _collect_names(schema.get("items"), namespace, names)
    elif kind == "map":
        _collect_names(schema.get("values"), namespace, names)
    elif isinstance(kind, dict | list):
        _collect_names(kind, namespace, names)


class _Checker:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.r_names: dict[str, Any] = {}
        self.w_names: dict[str, Any] = {}
        _collect_names(reader, None, self.r_names)
        _collect_names(writer, None, self.w_names)
        self.seen: set[tuple[int, int]] = set()

    @staticmethod
    def _deref(schema: Any, names: dict[str, Any]) -> Any:
        while True:
            if isinstance(schema, str) and schema not in _PRIMITIVES:
                schema = names.get(schema, names.get(schema.rsplit(".", 1)[-1], schema))
                if isinstance(schema, str):
                    return schema
                continue
            if isinstance(schema, dict) and (isinstance(schema.get("type"), list | dict)
                                             or schema.get("type") in _PRIMITIVES):
                schema = schema["type"]
                continue
            return schema

    @staticmethod
    def _kind(schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        if isinstance(schema, str):
            return schema
        return str(schema.get("type"))

    def readable(self, reader: Any, writer: Any, path: str) -> str | None:
        """None if ``reader`` can read data written with ``writer``, else why not."""
        r, w = self._deref(reader, self.r_names), self._deref(writer, self.w_names)
        key = (id(r), id(w))
        if isinstance(r, dict) and isinstance(w, dict):
            if key in self.seen:
                return None  # a recursive type already under check
            self.seen.add(key)
        rk, wk = self._kind(r), self._kind(w)
        if wk == "union":
            for branch in w:
                problem = self.readable(r, branch, path)
                if problem:
                    return problem
            return None
        if rk == "union":
            problems = [self.readable(branch, w, path) for branch in r]
            if any(p is None for p in problems):
                return None
            return f"{path}: writer type {wk!r} matches no branch of the reader's union"
        if rk != wk:
            if rk in _PROMOTIONS.get(wk, ()):
                return None
            return f"{path}: writer type {wk!r} cannot be read as {rk!r}"
        if rk == "record":
            return self._record(r, w, path)
        if rk == "enum":
            missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
            if missing and "default" not in r:
                return f"{path}: enum symbols {missing} written by the writer are unknown to the reader"
            return None
        if rk == "array":
            return self.readable(r.get("items"), w.get("items"), f"{path}[]")
        if rk == "map":
            return self.readable(r.get("values"), w.get("values"), f"{path}{{}}")
        if rk == "fixed" and r.get("size") != w.get("size"):
            return f"{path}: fixed size {w.get('size')} cannot be read as size {r.get('size')}"
        return None

    def _record(self, r: dict[str, Any], w: dict[str, Any], path: str) -> str | None:
        written = {f["name"]: f for f in w.get("fields", [])}
        for field in r.get("fields", []):
            name = field["name"]
            source = written.get(name) or next(
                (written[a] for a in field.get("aliases", []) if a in written), None)
            where = f"{path}.{name}" if path else name
            if source is None:
                if "default" not in field:
                    return f"field {where!r} is missing in the writer's schema and has no default in the reader's"
                continue
            problem = self.readable(field["type"], source["type"], where)
            if problem:
                return problem
        return None


def avro_readable(reader: Any, writer: Any) -> str | None:
    """None if Avro data written with ``writer`` resolves to ``reader``; else the first reason it does not."""
    return _Checker(reader, writer).readable(reader, writer, "")


def can_read(reader: SchemaInfo, writer: SchemaInfo) -> str | None:
    """None if a consumer with ``reader`` can read messages written with ``writer``; else why not."""
    if reader.type != writer.type:
        return f"schema type {writer.type.name} cannot be read as {reader.type.name}"
    if reader.type in RECORD_TYPES:
        return avro_readable(reader.parsed(), writer.parsed())
    if reader.type == SchemaType.KEY_VALUE:
        if reader.props != writer.props:
            return f"KeyValue encoding {writer.props} differs from {reader.props}"
        r, w = reader.parsed(), writer.parsed()
        for part in ("key", "value"):
            problem = can_read(SchemaInfo.from_json(r[part]), SchemaInfo.from_json(w[part]))
            if problem:
                return f"{part}: {problem}"
        return None
    return None if reader.same_as(writer) else f"{writer.type.name} schema differs"


def incompatibility(
    new: SchemaInfo, existing: Sequence[tuple[int, SchemaInfo]], strategy: SchemaCompatibilityStrategy
) -> tuple[int, str] | None:
    """Check ``new`` against live versions (oldest first) under ``strategy``.

    Returns None when ``new`` may be registered, else (the version it conflicts with, the reason).
    """
    if not existing or strategy is SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE:
        return None
    latest_version = existing[-1][0]
    if strategy is SchemaCompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        return latest_version, "the strategy ALWAYS_INCOMPATIBLE accepts no new schema version"
    transitive = strategy.value.endswith("_TRANSITIVE")
    base = strategy.value.removesuffix("_TRANSITIVE")
    against = list(reversed(existing)) if transitive else [existing[-1]]
    for version, old in against:
        if base in ("BACKWARD", "FULL"):
            problem = can_read(new, old)
            if problem:
                return version, f"the new schema cannot read data written with version {version}: {problem}"
        if base in ("FORWARD", "FULL"):
            problem = can_read(old, new)
            if problem:
                return version, f"version {version} cannot read data written with the new schema: {problem}"
    return None


__all__ = ["STRATEGY_NAMES", "SchemaCompatibilityStrategy", "avro_readable", "can_read", "incompatibility"]
