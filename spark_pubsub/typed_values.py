"""Typed topics in Spark: the ``value`` column as a struct (or typed scalar) derived from the topic's schema.

Reads (``valueFormat`` option): ``auto`` (default) reads a topic that has a schema with ``value`` typed
by its latest schema version and a topic without one as binary; ``typed`` requires a schema;
``binary`` always gives the raw payload.  Every row is decoded with the version it was written with
and resolved to the read schema, so rows of older versions read under the latest one.  A read of
several topics uses one schema that can read every live version of all of them, or names the topic
that differs.  The metadata columns are unchanged: only the type of ``value`` changes.

Writes: a DataFrame whose ``value`` is a struct (or a typed scalar) is encoded with the topic's
latest schema when the column fits it; when it does not, or the topic has none, the schema derived
from the column is registered if the topic's policy allows (as a producer would), else the write is
refused with an error naming the column that does not fit.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import BinaryType, StructField, StructType

from broker_core.broker.broker import Broker
from broker_core.errors import IncompatibleSchema, InvalidConfiguration, InvalidMessage
from broker_core.naming import TopicName
from broker_core.schema.column_encoding import encode_column, fit_problem, record_info
from broker_core.schema.columns import arrow_type, decode_column
from broker_core.schema.compatibility import can_read
from broker_core.schema.info import UNTYPED, SchemaInfo, SchemaType
from broker_core.schema.negotiation import producer_version
from broker_core.schema.registry import version_bytes
from spark_pubsub.schema import HEADERS_FIELD, SOURCE_SCHEMA


def source_schema_with(value_type: Any) -> StructType:
    """``SOURCE_SCHEMA`` with the ``value`` column of another Spark type."""
    return StructType([StructField("value", value_type, True) if f.name == "value" else f
                       for f in SOURCE_SCHEMA.fields])


def required_fields(schema: Any, arrow: pa.DataType, names: dict[str, Any] | None = None) -> pa.DataType:
    """``arrow`` (the column type of the Avro ``schema``) with the fields of its records not nullable
    where the Avro field is (its type is not a union with ``null``: a ``required=True`` field).

    Only for Avro: its binary encoding cannot hold a null where the type has no ``null`` branch, so
    the column never does.  List items and map values stay nullable, as the decoder builds them.
    """
    names = {} if names is None else names
    if isinstance(schema, str):
        return required_fields(names[schema], arrow, names) if schema in names else arrow
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return required_fields(branches[0], arrow, names) if len(branches) == 1 else arrow
    if not isinstance(schema, dict):
        return arrow
    kind = schema.get("type")
    if kind == "record" and pa.types.is_struct(arrow):
        name = schema.get("name", "")
        full = f"{schema['namespace']}.{name}" if schema.get("namespace") and "." not in name else name
        names = {**names, name: schema, full: schema}
        fields = []
        for spec, field in zip(schema.get("fields", []), arrow, strict=True):
            declared = spec["type"]
            nullable = declared == "null" or (isinstance(declared, list) and "null" in declared)
            fields.append(pa.field(field.name, required_fields(declared, field.type, names), nullable=nullable))
        return pa.struct(fields)
    if kind == "array" and pa.types.is_list(arrow):
        return pa.list_(required_fields(schema["items"], arrow.value_type, names))
    if kind == "map" and pa.types.is_map(arrow):
        return pa.map_(arrow.key_type, required_fields(schema["values"], arrow.item_type, names))
    if isinstance(kind, list | dict) or (isinstance(kind, str) and kind in names):
        return required_fields(kind, arrow, names)
    return arrow


def conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` as ``target``, where ``target`` may mark record fields not nullable.

    A cast refuses a child with nulls for a non-nullable field, even where the parent struct is null
    (a null ``value``, a null optional record): those slots mean nothing, so the struct is rebuilt
    over its children with the target's fields instead.  Other differences are cast.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    mask = pc.invert(array.is_valid()) if array.null_count else None
    if pa.types.is_struct(target) and pa.types.is_struct(array.type) and array.type.num_fields == target.num_fields:
        children = [conform(array.field(i), target.field(i).type) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target) and pa.types.is_list(array.type):
        values = conform(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=mask)
    return array if array.type == target else array.cast(target)


@functools.lru_cache(maxsize=64)
def _reader_types(reader_text: str) -> tuple[SchemaInfo, StructType, pa.Schema]:
    """The reader schema, the source's Spark schema and its Arrow form (computed once per executor).

    A required field of an Avro record is not nullable in Spark's schema (``required_fields``); the
    batches are cast to that Arrow form, so what Spark receives matches it."""
    reader = SchemaInfo.from_json(json.loads(reader_text))
    value_type = arrow_type(reader)
    if reader.type == SchemaType.AVRO:
        value_type = required_fields(reader.parsed(), value_type)
    spark_schema = source_schema_with(from_arrow_type(value_type))
    return reader, spark_schema, to_arrow_schema(spark_schema, timezone="UTC")


@dataclass(frozen=True)
class TypedRead:
    """What executors need to type the value column (picklable plain values)."""

    root: str
    reader_text: str  # the reader SchemaInfo's JSON document
    storage: tuple[tuple[str, str], ...] = ()  # the root's storage_options (an object-store root)

    @property
    def reader(self) -> SchemaInfo:
        return _reader_types(self.reader_text)[0]

    def spark_schema(self, *, include_headers: bool = False) -> StructType:
        schema = _reader_types(self.reader_text)[1]
        return StructType([*schema.fields, HEADERS_FIELD]) if include_headers else schema

    def apply(self, batch: pa.RecordBatch, rows: pa.Table, topic: str) -> pa.RecordBatch:
        """Replace the binary value column of a source batch by its typed decoding."""
        reader, _, target = _reader_types(self.reader_text)
        registry = Broker.for_url(self.root, storage_options=dict(self.storage)).schemas.registry(topic)
        typed = decode_column(batch.column("value"), rows.column("schema_version"), reader=reader,
                              writer_of=registry.get, keys=rows.column("key"))
        value_field = target.field("value")
        at = batch.schema.get_field_index("value")
        columns = [(typed if typed.type == value_field.type else conform(typed, value_field.type)) if i == at
                   else batch.column(i) for i in range(batch.num_columns)]
        # the batch may carry more columns than the base schema (headers, on request)
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema.set(at, value_field))


def resolve_read(value_format: str, root: str, topics: list[TopicName], *,
                 storage_options: Mapping[str, str] | None = None) -> TypedRead | None:
    """The typed read of ``topics`` (None: read binary), or an error naming the topic that differs."""
    if value_format == "binary":
        return None
    broker = Broker.for_url(root, storage_options=storage_options)
    bases = list(dict.fromkeys(t.partitioned_topic_name for t in topics))
    live = {str(b): broker.schemas.registry(b).live() for b in bases}
    typed = {name: versions for name, versions in live.items() if versions and versions[-1][1].type not in UNTYPED}
    if not typed:
        if value_format == "typed":
            raise InvalidConfiguration(f"option valueFormat=typed: topic {bases[0]} has no schema; register one "
                                       "(pubsub schemas upload) or read valueFormat=binary", option="valueFormat")
        return None
    untyped = [name for name in live if name not in typed]
    if untyped:
        raise InvalidConfiguration(
            f"option valueFormat={value_format}: topic {untyped[0]} has no schema while {next(iter(typed))} has "
            "one; read the topics separately or with .option('valueFormat', 'binary')", option="valueFormat")
    # the newest schema first: of several that read everything, the most recently registered wins
    created = {name: broker.schemas.registry(name).all_versions()[-1][1].created_ms for name in typed}
    candidates: list[tuple[str, SchemaInfo]] = []
    for name, versions in sorted(typed.items(), key=lambda item: -created[item[0]]):
        if not any(versions[-1][1] == c for _, c in candidates):
            candidates.append((name, versions[-1][1]))
    problems: list[str] = []
    for owner, candidate in candidates:
        problem = _first_unreadable(candidate, typed)
        if problem is None:
            return TypedRead(root, json.dumps(candidate.to_json(), sort_keys=True),
                             tuple(sorted((storage_options or {}).items())))
        problems.append(f"the schema of topic {owner} cannot read {problem}")
    raise InvalidConfiguration(f"option valueFormat={value_format}: no one schema reads every topic: {problems[0]}; "
                               "read the topics separately or with .option('valueFormat', 'binary')",
                               option="valueFormat")


def _first_unreadable(reader: SchemaInfo, typed: dict[str, list[tuple[int, SchemaInfo]]]) -> str | None:
    for name, versions in typed.items():
        for number, writer in versions:
            problem = can_read(reader, writer)
            if problem:
                return f"topic {name} version {number} ({problem})"
    return None


# -- the sink -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypedWrite:
    """How the sink encodes a typed value column: the schema and the version it writes under."""

    schema_doc: dict[str, Any]
    version: bytes

    def encode(self, table: pa.Table) -> pa.Table:
        """The table with ``value`` encoded to payload bytes."""
        info = SchemaInfo.from_json(self.schema_doc)
        index = table.schema.get_field_index("value")
        try:
            encoded = encode_column(table.column(index), info)
        except Exception as exc:
            raise InvalidMessage(f"format('pubsub') sink: {exc}", column="value") from None
        return table.set_column(index, pa.field("value", pa.binary()), encoded)

    def stamp(self, rows: pa.Table) -> pa.Table:
        """Segment rows with their ``schema_version`` column set."""
        index = rows.schema.get_field_index("schema_version")
        return rows.set_column(index, rows.schema.field(index),
                               pa.array([self.version] * rows.num_rows, pa.binary()))


def binary_value_schema(schema: StructType) -> StructType:
    """The DataFrame schema with a typed ``value`` shown as binary (what the column checks expect)."""
    return StructType([StructField("value", BinaryType(), True) if f.name == "value" else f for f in schema.fields])


def is_typed_value(schema: StructType) -> bool:
    fields = {f.name: f.dataType for f in schema.fields}
    value = fields.get("value")
    return value is not None and value.typeName() not in ("binary", "string", "null")


def plan_write(root: str, topic: str | None, schema: StructType, *,
               storage_options: Mapping[str, str] | None = None) -> TypedWrite | None:
    """Check (and register, if the policy allows) the schema a typed ``value`` column is written with."""
    if not is_typed_value(schema):
        return None
    if topic is None:
        raise InvalidConfiguration("a typed (struct) 'value' column needs .option('topic', ...): the topic's "
                                   "schema encodes it", option="topic")
    value_arrow = to_arrow_schema(StructType([f for f in schema.fields if f.name == "value"])).field("value").type
    broker = Broker.for_url(root, storage_options=storage_options)
    name = TopicName.parse(topic)
    latest = broker.schemas.registry(name).latest()
    if latest is not None and latest[1].type not in UNTYPED:
        problem = fit_problem(value_arrow, latest[1])
        if problem is None:
            return TypedWrite(latest[1].to_json(), version_bytes(latest[0]))
    else:
        problem = None
    derived = (record_info(value_arrow) if pa.types.is_struct(value_arrow)
               else _scalar_info(value_arrow, problem))
    policy = broker.schemas.policy(name)
    try:
        version = producer_version(broker.schemas.registry(name), derived, policy, now_ms=int(time.time() * 1000))
    except IncompatibleSchema as exc:
        raise IncompatibleSchema(
            f"format('pubsub') sink: {problem or 'the value column does not fit'} of {name}, and registering the "
            f"column's schema instead was refused: {exc}", **exc.context) from None
    assert version is not None
    return TypedWrite(derived.to_json(), version_bytes(version))


def _scalar_info(arrow: pa.DataType, problem: str | None) -> SchemaInfo:
    from broker_core.schema.primitive import FIXED_WIDTH

    for schema_type, cls in FIXED_WIDTH.items():
        if cls.arrow_type == arrow:
            return SchemaInfo(schema_type, schema_type.name)
    raise InvalidMessage(f"format('pubsub') sink: {problem or f'column value of type {arrow} has no schema'}; "
                         "give a struct, a number, or binary/string", column="value")


__all__ = ["TypedRead", "TypedWrite", "binary_value_schema", "is_typed_value", "plan_write",
           "resolve_read",
           "source_schema_with"]
