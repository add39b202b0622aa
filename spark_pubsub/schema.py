"""The source's DataFrame schema and the vectorised conversion of segment rows to it.

Column names follow Spark's Kafka source where one exists (key, value, topic, partition, offset).
Record batches must match the declared schema exactly, so conversion casts to
``to_arrow_schema(SOURCE_SCHEMA)`` (string, not large_string; timestamps in UTC microseconds).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SOURCE_SCHEMA = StructType(
    [
        StructField("key", StringType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("messageId", StringType(), False),
        StructField("publishTime", TimestampType(), False),
        StructField("eventTime", TimestampType(), True),
        StructField("properties", MapType(StringType(), StringType(), True), True),
        StructField("producerName", StringType(), True),
        StructField("sequenceId", LongType(), True),
        StructField("orderingKey", BinaryType(), True),
        StructField("redeliveryCount", IntegerType(), False),
        StructField("deliverAt", TimestampType(), True),
        # added for Spark Kafka connector users (docs/SPARK.md, "Moving over from Kafka"); appended so
        # positional selects of the columns above keep working
        StructField("internalTopic", StringType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("timestampType", IntegerType(), False),
    ]
)
"""The source's columns.  ``topic`` is the topic as the user names it (a partitioned topic's name,
not its ``-partition-N`` internal topic, which is ``internalTopic``); ``timestamp`` is the publish
time, with ``timestampType`` 0 (Kafka's CreateTime: the producer stamps it)."""

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True),
    True,
)
"""``includeHeaders``: the properties as Kafka-style headers (``array<struct<key: string, value: binary>>``)."""

CREATE_TIME = 0
"""``timestampType`` of every row: Kafka's CreateTime (the publish time is set by the producer)."""

SOURCE_SCHEMA_WITH_HEADERS = StructType([*SOURCE_SCHEMA.fields, HEADERS_FIELD])

ARROW_SOURCE_SCHEMA = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")
ARROW_SOURCE_SCHEMA_WITH_HEADERS = to_arrow_schema(SOURCE_SCHEMA_WITH_HEADERS, timezone="UTC")


def source_schema(*, include_headers: bool) -> StructType:
    """The source's schema for the ``includeHeaders`` option."""
    return SOURCE_SCHEMA_WITH_HEADERS if include_headers else SOURCE_SCHEMA


def user_topic(internal_topic: str, partition: int) -> str:
    """The topic name a user subscribed to: a partition's internal topic without its suffix."""
    suffix = f"-partition-{partition}"
    if partition >= 0 and internal_topic.endswith(suffix):
        return internal_topic[: -len(suffix)]
    return internal_topic


def properties_as_headers(properties: pa.Array | pa.ChunkedArray, headers_type: pa.DataType) -> pa.Array:
    """map<string,string> to Kafka's headers list, vectorised (values UTF-8 encoded as binary)."""
    maps = properties.combine_chunks() if isinstance(properties, pa.ChunkedArray) else properties
    if len(maps) == 0:
        return pa.array([], type=headers_type)
    first, last = maps.offsets[0].as_py(), maps.offsets[-1].as_py()
    keys, items = maps.keys, maps.items
    if len(keys) != last - first:  # a slice: its entries are a window of the child arrays
        keys, items = keys.slice(first, last - first), items.slice(first, last - first)
    entries = pa.StructArray.from_arrays(
        [keys.cast(pa.string()), items.cast(pa.binary())], fields=list(headers_type.value_type)
    )
    offsets = pc.subtract(maps.offsets, pa.scalar(first, pa.int32())) if first else maps.offsets
    mask = pc.invert(maps.is_valid()) if maps.null_count else None
    return pa.ListArray.from_arrays(offsets, entries, type=headers_type, mask=mask)


def message_id_strings(ledger_id: int, entry_ids: np.ndarray, partition: int, batch_indexes: np.ndarray) -> pa.Array:
    """``ledger:entry:partition:batch`` per row (``MessageId``'s admin form, which it parses back).

    Joining two varying columns around a constant and inserting the constant prefix is about twice
    as fast as one four-way join: this runs over every row the source emits.
    """
    entries = pa.array(entry_ids).cast(pa.string())
    if len(batch_indexes) and batch_indexes.min() == batch_indexes.max():  # unbatched (-1) or one batch
        batches: pa.Array | pa.Scalar = pa.scalar(str(int(batch_indexes[0])))
    else:
        batches = pa.array(batch_indexes).cast(pa.string())
    tail = pc.binary_join_element_wise(entries, batches, f":{partition}:")
    return pc.utf8_replace_slice(tail, 0, 0, f"{ledger_id}:")


def to_source_batch(
    rows: pa.Table,
    *,
    topic: str,
    partition: int,
    offsets: np.ndarray,
    ledger_id: int,
    entry_ids: np.ndarray,
    batch_indexes: np.ndarray,
    redelivery_counts: np.ndarray | None = None,
    include_headers: bool = False,
) -> pa.RecordBatch:
    """Segment rows of one internal topic as a record batch of ``source_schema(include_headers=...)``."""
    n = rows.num_rows
    schema = ARROW_SOURCE_SCHEMA_WITH_HEADERS if include_headers else ARROW_SOURCE_SCHEMA
    counts = np.zeros(n, dtype=np.int32) if redelivery_counts is None else redelivery_counts.astype(np.int32)
    publish = rows.column("publish_time")
    publish = publish.combine_chunks() if isinstance(publish, pa.ChunkedArray) else publish
    columns = [
        rows.column("key"),
        rows.column("value"),
        pa.repeat(pa.scalar(user_topic(topic, partition), pa.string()), n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets.astype(np.int64)),
        message_id_strings(ledger_id, entry_ids, partition, batch_indexes),
        publish,
        rows.column("event_time"),
        rows.column("properties"),
        rows.column("producer_name"),
        rows.column("sequence_id"),
        rows.column("ordering_key"),
        pa.array(counts),
        rows.column("deliver_at"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        publish,  # timestamp: the same array, not a copy
        pa.array(np.full(n, CREATE_TIME, dtype=np.int32)),
    ]
    if include_headers:
        columns.append(properties_as_headers(rows.column("properties"), schema.field("headers").type))
    table = pa.Table.from_arrays(
        [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns],
        schema=schema,
    )
    batches = table.to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


__all__ = [
    "ARROW_SOURCE_SCHEMA",
    "ARROW_SOURCE_SCHEMA_WITH_HEADERS",
    "CREATE_TIME",
    "SOURCE_SCHEMA",
    "SOURCE_SCHEMA_WITH_HEADERS",
    "message_id_strings",
    "properties_as_headers",
    "source_schema",
    "to_source_batch",
    "user_topic",
]
