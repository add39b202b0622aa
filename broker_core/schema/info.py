"""What a schema is, independent of how it encodes: its type, name, definition text and properties.

``SchemaInfo`` is what the registry stores per version and what ``Schema.schema_info()`` returns
(the accessors of the official client's ``SchemaInfo``).  Schema types keep the official numbering.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import SchemaDefinitionError


class SchemaType(enum.IntEnum):
    """Schema types with the official client's numbers."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    KEY_VALUE = 15
    BYTES = -1


# Types whose definition text is an Avro schema (Pulsar describes JSON schemas in Avro too).
RECORD_TYPES = frozenset({SchemaType.AVRO, SchemaType.JSON})
# Types a producer may use on a typed topic without being "typed" itself (Pulsar's bytes producer).
UNTYPED = frozenset({SchemaType.BYTES, SchemaType.NONE})


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One schema: type, name, definition text ("" for primitives) and properties."""

    type: SchemaType
    type_name: str
    definition: str = ""
    props: dict[str, str] = field(default_factory=dict)

    def schema_type(self) -> SchemaType:
        return self.type

    def name(self) -> str:
        return self.type_name

    def schema(self) -> str:
        """The definition text (an Avro schema's JSON for AVRO and JSON; "" for primitives)."""
        return self.definition

    def properties(self) -> dict[str, str]:
        return dict(self.props)

    def parsed(self) -> Any:
        """The definition parsed as JSON (None when empty)."""
        if not self.definition:
            return None
        try:
            return json.loads(self.definition)
        except ValueError as exc:
            raise SchemaDefinitionError(f"{self.type.name} schema definition is not JSON: {exc}") from exc

    def same_as(self, other: SchemaInfo) -> bool:
        """Do both describe the same schema (whitespace in the definition text does not matter)?"""
        if self.type != other.type or self.props != other.props:
            return False
        return self.definition == other.definition or self.parsed() == other.parsed()

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type.name, "name": self.type_name, "schema": self.definition,
                "properties": dict(self.props)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SchemaInfo:
        """Parse the registry's (and the CLI's) JSON form; errors name the bad key."""
        if not isinstance(doc, dict):
            raise SchemaDefinitionError(f"a schema document must be a JSON object, got {type(doc).__name__}")
        type_name = str(doc.get("type"))
        if type_name not in SchemaType.__members__:
            raise SchemaDefinitionError(
                f"schema type {type_name!r} is not one of {', '.join(SchemaType.__members__)}", key="type"
            )
        definition = doc.get("schema", "")
        if not isinstance(definition, str):
            definition = json.dumps(definition)  # the CLI accepts an inline JSON object too
        props = doc.get("properties") or {}
        if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise SchemaDefinitionError("schema 'properties' must map strings to strings", key="properties")
        info = cls(SchemaType[type_name], str(doc.get("name") or type_name), definition, dict(props))
        needs_definition = info.type in RECORD_TYPES or info.type == SchemaType.KEY_VALUE
        if needs_definition and not isinstance(info.parsed(), dict | list | str):
            raise SchemaDefinitionError(f"{type_name} schema needs a JSON definition in 'schema'", key="schema")
        return info

    def describe(self) -> str:
        """A short description for error messages."""
        if self.type in RECORD_TYPES:
            parsed = self.parsed()
            if isinstance(parsed, dict) and "name" in parsed:
                return f"{self.type.name} record {parsed['name']!r}"
        return self.type.name


__all__ = ["RECORD_TYPES", "UNTYPED", "SchemaInfo", "SchemaType"]
