"""The sink's DataFrame columns: validated on the driver, converted to the core's bulk columns on executors.

A DataFrame written with ``format("pubsub")`` has one row per message.  ``value`` is required; the
other columns are optional and named as in the source schema (Kafka style, camelCase).  The driver
checks the whole schema before anything is written; executors only rename and convert Arrow columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from broker_core.errors import InvalidMessage


@dataclass(frozen=True, slots=True)
class _Column:
    core: str | None  # the broker_core.producer.bulk column it becomes (None: handled by the sink itself)
    types: tuple[type[DataType], ...]
    what: str  # the accepted types, for error messages
    fix: str  # how to get a column of the right type


_INTS = (IntegerType, ShortType, ByteType)

SINK_COLUMNS: dict[str, _Column] = {
    "value": _Column("value", (BinaryType, StringType), "binary or string",
                     "F.col('value').cast('binary'), or F.to_json(...) / F.to_avro(...) to encode a struct"),
    "key": _Column("key", (StringType, BinaryType), "string or binary (UTF-8: Pulsar keys are strings)",
                   "F.col('key').cast('string')"),
    "orderingKey": _Column("ordering_key", (BinaryType, StringType), "binary or string",
                           "F.col('orderingKey').cast('string')"),
    "properties": _Column("properties", (MapType,), "map<string,string>",
                          "F.create_map(F.lit('k'), F.col('v').cast('string'))"),
    "eventTime": _Column("event_time", (TimestampType, LongType), "timestamp or long (ms since the epoch)",
                         "F.col('eventTime').cast('timestamp')"),
    "deliverAt": _Column("deliver_at", (TimestampType, LongType), "timestamp or long (ms since the epoch)",
                         "F.col('deliverAt').cast('timestamp')"),
    "deliverAfterMs": _Column(None, (LongType, *_INTS), "long (a delay in ms)",
                              "F.col('deliverAfterMs').cast('long')"),
    "partition": _Column("partition", (*_INTS, LongType), "int (a partition index)",
                         "F.col('partition').cast('int')"),
    "topic": _Column(None, (StringType,), "string (a topic name)", "F.col('topic').cast('string')"),
    "sequenceId": _Column("sequence_id", (LongType, *_INTS), "long", "F.col('sequenceId').cast('long')"),
    "producerName": _Column("producer_name", (StringType,), "string", "F.col('producerName').cast('string')"),
    "headers": _Column("properties", (ArrayType,), "array<struct<key: string, value: binary or string>> "
                       "(Kafka's headers)", "F.array(F.struct(F.lit('k').alias('key'), F.col('v').cast('binary')"
                       ".alias('value')))"),
}
"""Accepted columns: name -> (bulk column, Spark types); an optional column may also be NullType."""


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


_BY_SQUASHED = {_squash(n): n for n in SINK_COLUMNS}


def _fail(column: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"format('pubsub') sink: column {column!r} {problem}", column=column)


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """The validated column plan of a sink's DataFrame (picklable: names only)."""

    names: tuple[str, ...]
    has_topic: bool
    deliver_after: bool

    @classmethod
    def validate(cls, schema: StructType) -> SinkColumns:
        """Check every column of ``schema``; raise ``InvalidMessage`` naming the column and the fix."""
        names = [f.name for f in schema.fields]
        for field in schema.fields:
            spec = SINK_COLUMNS.get(field.name)
            if spec is None:
                guess = _BY_SQUASHED.get(_squash(field.name))
                hint = (f"did you mean {guess!r}? .withColumnRenamed({field.name!r}, {guess!r})" if guess
                        else f"drop it or rename it to one of {', '.join(SINK_COLUMNS)}")
                raise _fail(field.name, f"is not a message column: {hint}")
            dtype = field.dataType
            if isinstance(dtype, NullType) and field.name != "topic":
                continue
            ok = isinstance(dtype, spec.types)
            if isinstance(dtype, MapType):
                ok = isinstance(dtype.keyType, StringType) and isinstance(dtype.valueType, StringType)
            if isinstance(dtype, ArrayType):
                ok = _is_headers(dtype)
            if not ok:
                extra = ""
                if isinstance(dtype, TimestampNTZType):
                    extra = " (timestamp_ntz has no time zone; say which one it is with F.to_utc_timestamp)"
                raise _fail(field.name, f"must be {spec.what}, not {dtype.simpleString()}{extra}; "
                                        f"convert it, e.g. {spec.fix}")
        if "value" not in names:
            raise _fail("value", "is required: the message payload (binary or string; null for a tombstone); "
                                 "e.g. df.select(F.to_json(F.struct('*')).alias('value'))")
        if "headers" in names and "properties" in names:
            raise _fail("headers", "cannot be given together with 'properties' (both become the message "
                                   "properties): keep one of them")
        if "deliverAt" in names and "deliverAfterMs" in names:
            raise _fail("deliverAfterMs", "cannot be given together with 'deliverAt': keep one of them")
        return cls(names=tuple(names), has_topic="topic" in names, deliver_after="deliverAfterMs" in names)

    def to_bulk(
        self, table: pa.Table, *, now_ms: int, default_producer: str | None, first_sequence_id: int | None = None
    ) -> pa.Table:
        """Rename and convert a record batch's columns to ``broker_core.producer.bulk.INPUT_COLUMNS``.

        Without a ``sequenceId`` column the rows get ``first_sequence_id``, ``+1``, ... (the sink's
        numbering, ``sequence_base``), so every message the sink writes has a sequence id.
        """
        arrays: list[pa.Array | pa.ChunkedArray] = []
        names: list[str] = []
        for name in self.names:
            core = SINK_COLUMNS[name].core
            if core is None:
                continue
            column = table.column(name)
            if pa.types.is_null(column.type) and core != "value":
                continue  # an all-null column of no type: the same as leaving the column out
            if core == "producer_name" and default_producer is not None:
                column = pc.fill_null(column.cast(pa.string()), default_producer)
            if name == "key" and pa.types.is_binary(column.type):
                column = _utf8(column, name)
            if name == "headers":
                column = headers_as_properties(column)
            arrays.append(column)
            names.append(core)
        if first_sequence_id is not None and "sequenceId" not in self.names:
            arrays.append(pa.array(np.arange(first_sequence_id, first_sequence_id + table.num_rows, dtype=np.int64)))
            names.append("sequence_id")
        if self.deliver_after:
            delay = table.column("deliverAfterMs").cast(pa.int64())
            arrays.append(pc.add(delay, pa.scalar(now_ms, pa.int64())))
            names.append("deliver_at")
        return pa.Table.from_arrays(arrays, names=names)


def _is_headers(dtype: ArrayType) -> bool:
    element = dtype.elementType
    if not isinstance(element, StructType) or [f.name for f in element.fields] != ["key", "value"]:
        return False
    return isinstance(element["key"].dataType, StringType) and isinstance(
        element["value"].dataType, (BinaryType, StringType)
    )


def _utf8(column: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    """Binary to string, refusing bytes that are not UTF-8 (Pulsar keys and properties are strings)."""
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        raise _fail(name, "holds bytes that are not UTF-8 text; Pulsar keys and properties are strings "
                          "(put binary keys in 'orderingKey', or base64-encode them)") from None


def headers_as_properties(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Kafka's ``array<struct<key, value>>`` headers as a properties map (vectorised; a later header
    with the same key wins when the core reads the map, as a property set twice does)."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    first, last = lists.offsets[0].as_py(), lists.offsets[-1].as_py()
    entries = lists.values
    if len(entries) != last - first:
        entries = entries.slice(first, last - first)
    keys, values = entries.field("key"), entries.field("value")
    if keys.null_count:
        raise _fail("headers", "has a header with a null key; every header needs a key")
    values = _utf8(values, "headers") if pa.types.is_binary(values.type) else values.cast(pa.string())
    offsets = pc.subtract(lists.offsets, pa.scalar(first, pa.int32())) if first else lists.offsets
    mask = pc.invert(lists.is_valid()) if lists.null_count else None
    return pa.MapArray.from_arrays(offsets, keys.cast(pa.string()), values, mask=mask)


ROWS_PER_TASK_BITS = 24
"""A task's rows are numbered below ``2**24`` within its slot of the sequence id space..."""
TASK_BITS = 16
"""...and a micro-batch has ``2**16`` task slots: sequence id = batch, task, row (high to low bits)."""


def sequence_base(batch_id: int, task: int) -> int:
    """The first sequence id of a sink task: ``(batch_id, task, 0)`` packed so that the ids of later
    micro-batches are higher, the same (batch, task) always numbers its rows the same way (a replayed
    batch writes the same ids), and tasks never overlap (a task with more rows than its slot spills
    into the next slot's range only beyond ``2**24`` rows)."""
    return ((batch_id << TASK_BITS) | (task & ((1 << TASK_BITS) - 1))) << ROWS_PER_TASK_BITS


__all__ = ["SINK_COLUMNS", "SinkColumns", "headers_as_properties", "sequence_base"]
