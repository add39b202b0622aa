"""Typed topics: schemas shaped like ``pulsar.schema``, the per-topic registry and compatibility rules.

May import: the base modules, ``storage``, ``log`` and ``topic`` (a topic's schema policies).
Never ``producer``, ``subscription`` or anything above them.
"""

from broker_core.schema.avro import AvroSchema
from broker_core.schema.base import Schema
from broker_core.schema.compatibility import SchemaCompatibilityStrategy
from broker_core.schema.containers import Array, Map
from broker_core.schema.fields import (
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Null,
    String,
)
from broker_core.schema.info import SchemaInfo, SchemaType
from broker_core.schema.json_schema import JsonSchema
from broker_core.schema.key_value import KeyValue, KeyValueEncodingType, KeyValueSchema
from broker_core.schema.primitive import (
    BooleanSchema,
    BytesSchema,
    DoubleSchema,
    FloatSchema,
    Int8Schema,
    Int16Schema,
    Int32Schema,
    Int64Schema,
    StringSchema,
)
from broker_core.schema.record import Record
from broker_core.schema.registry import SchemaRegistry

__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "BooleanSchema",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "DoubleSchema",
    "Field",
    "Float",
    "FloatSchema",
    "Int8Schema",
    "Int16Schema",
    "Int32Schema",
    "Int64Schema",
    "Integer",
    "JsonSchema",
    "KeyValue",
    "KeyValueEncodingType",
    "KeyValueSchema",
    "Long",
    "Map",
    "Null",
    "Record",
    "Schema",
    "SchemaCompatibilityStrategy",
    "SchemaInfo",
    "SchemaRegistry",
    "SchemaType",
    "String",
    "StringSchema",
]
