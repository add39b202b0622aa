"""Append a whole ``pyarrow.Table`` of messages: one commit per partition (the Spark sink's path).

The input uses message columns (``value`` required; ``key``, ``ordering_key``, ``properties``,
``event_time``, ``deliver_at``, ``partition``, ``sequence_id``, ``producer_name`` optional).  Every
column is checked before anything is written; routing and the sticky key hash are computed
vectorised; each partition's rows become one segment and one entry (a batch) in one commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import InvalidMessage, MessageTooBig
from broker_core.hashing import HashingScheme, sticky_key_hash_array
from broker_core.routing import RoundRobinRouter, partitions_for_keys
from broker_core.segment import SEGMENT_SCHEMA, TIMESTAMP, CompressionType
from broker_core.topic_log import AppendResult, TopicLog

_TEXT = (pa.string(), pa.large_string())
_BYTES = (pa.binary(), pa.large_binary())

INPUT_COLUMNS = (
    "value", "key", "ordering_key", "properties", "event_time", "deliver_at",
    "partition", "sequence_id", "producer_name",
)


@dataclass(frozen=True, slots=True)
class PartitionAppend:
    """What one partition's commit of a bulk append wrote."""

    partition: int
    rows: int
    result: AppendResult


def _fail(column: str, problem: str) -> InvalidMessage:
    return InvalidMessage(f"column {column!r} {problem}", column=column)


def _time_column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name).combine_chunks()
    if pa.types.is_timestamp(col.type):
        return col.cast(pa.timestamp(col.type.unit, tz="UTC")).cast(TIMESTAMP)
    if pa.types.is_integer(col.type):
        return pc.multiply(col.cast(pa.int64()), 1000).cast(TIMESTAMP)
    raise _fail(name, f"must be a timestamp or an int64 of ms since the epoch, not {col.type}")


def to_segment_rows(
    table: pa.Table, *, publish_time_ms: int, max_message_size: int, default_producer: str | None = None
) -> tuple[pa.Table, np.ndarray | None]:
    """Validate a user table and convert it to ``SEGMENT_SCHEMA`` rows plus explicit partitions.

    Raises:
        InvalidMessage: a missing ``value`` column, an unknown column or a column of the wrong type.
        MessageTooBig: a value above ``max_message_size`` (bulk appends do not chunk).
    """
    unknown = [c for c in table.column_names if c not in INPUT_COLUMNS]
    if unknown:
        raise _fail(unknown[0], f"is not a message column; allowed columns: {', '.join(INPUT_COLUMNS)}")
    if "value" not in table.column_names:
        raise _fail("value", "is required (binary; null for a tombstone)")
    n = table.num_rows

    def get(name: str, allowed: tuple[pa.DataType, ...], target: pa.DataType, what: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n, target)
        col = table.column(name).combine_chunks()
        if col.type not in allowed and not pa.types.is_null(col.type):
            raise _fail(name, f"must be {what}, not {col.type}")
        return col.cast(target)

    value = get("value", _BYTES + _TEXT, pa.binary(), "binary (or string)")
    if n and max_message_size:
        longest = pc.max(pc.binary_length(value)).as_py() or 0
        if longest > max_message_size:
            raise MessageTooBig(
                f"a value of {longest} bytes exceeds maxMessageSize={max_message_size}; bulk appends do not "
                "chunk: send it through a producer with chunking_enabled=True",
            )
    key = get("key", _TEXT, pa.string(), "string")
    ordering = get("ordering_key", _BYTES + _TEXT, pa.binary(), "binary or string")
    if "properties" in table.column_names:
        props = table.column("properties").combine_chunks()
        if not (pa.types.is_map(props.type) and props.type.key_type in _TEXT and props.type.item_type in _TEXT):
            raise _fail("properties", f"must be map<string, string>, not {props.type}")
        props = props.cast(pa.map_(pa.string(), pa.string()))
    else:
        props = pa.nulls(n, pa.map_(pa.string(), pa.string()))
    seq = get("sequence_id", (pa.int64(), pa.int32(), pa.int16(), pa.int8()), pa.int64(), "an integer")
    if "producer_name" in table.column_names:
        producer = get("producer_name", _TEXT, pa.string(), "string")
    else:
        producer = pa.array([default_producer] * n, pa.string())
    event = _time_column(table, "event_time") if "event_time" in table.column_names else pa.nulls(n, TIMESTAMP)
    deliver = _time_column(table, "deliver_at") if "deliver_at" in table.column_names else pa.nulls(n, TIMESTAMP)
    partitions = None
    if "partition" in table.column_names:
        part = table.column("partition").combine_chunks()
        if not pa.types.is_integer(part.type):
            raise _fail("partition", f"must be an integer partition index, not {part.type}")
        partitions = part.cast(pa.int32()).fill_null(-1).to_numpy(zero_copy_only=False)
    rows = pa.Table.from_arrays(
        [
            value, key, ordering,
            sticky_key_hash_array(ordering, key).cast(pa.int32()),
            props, producer, seq,
            pa.array(np.full(n, publish_time_ms * 1000, dtype=np.int64)).cast(TIMESTAMP),
            event, deliver,
            pa.nulls(n, pa.binary()), pa.nulls(n, pa.string()), pa.nulls(n, pa.int32()),
            pa.nulls(n, pa.int32()), pa.nulls(n, pa.int64()),
        ],
        schema=SEGMENT_SCHEMA,
    )
    return rows, partitions


def route_rows(
    rows: pa.Table,
    explicit: np.ndarray | None,
    num_partitions: int,
    *,
    hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
    router: Callable[[pa.Table, int], np.ndarray] | None = None,
) -> np.ndarray:
    """Partition of each row: explicit ``partition`` > custom router > key hash > round robin."""
    n = rows.num_rows
    if num_partitions == 1:
        chosen = np.zeros(n, dtype=np.int32)
    elif router is not None:
        chosen = np.asarray(router(rows, num_partitions), dtype=np.int32)
    else:
        chosen = partitions_for_keys(rows.column("key"), num_partitions, hashing_scheme)
        keyless = chosen < 0
        if keyless.any():
            rr = RoundRobinRouter(num_partitions, scheme=hashing_scheme, batching_enabled=False)
            chosen[keyless] = rr.choose_many(pa.nulls(int(keyless.sum()), pa.string()))
    if explicit is not None:
        chosen = np.where(explicit >= 0, explicit, chosen).astype(np.int32)
    bad = (chosen < 0) | (chosen >= num_partitions)
    if bad.any():
        raise _fail("partition", f"holds {int(chosen[bad][0])}, outside [0, {num_partitions}) for this topic")
    return chosen


def append_partitioned(
    logs: list[TopicLog],
    rows: pa.Table,
    partitions: np.ndarray,
    *,
    compression: CompressionType = CompressionType.NONE,
    batched: bool = True,
    dedup: bool = False,
    txn: tuple[str, int] | None = None,
) -> list[PartitionAppend]:
    """Append each partition's rows (in input order) as one commit; partitions without rows
    commit only ``txn`` (so a replayed idempotent batch is recognised on every partition)."""
    out: list[PartitionAppend] = []
    for index, log in enumerate(logs):
        take = np.nonzero(partitions == index)[0]
        if not len(take) and txn is None:
            continue
        part_rows = rows if len(take) == rows.num_rows else rows.take(pa.array(take))
        layout = ([len(take)] if batched else [-len(take)]) if len(take) else []
        result = log.append(part_rows, layout=layout, compression=compression, dedup=dedup, txn=txn)
        out.append(PartitionAppend(partition=index, rows=len(take), result=result))
    return out


__all__ = ["INPUT_COLUMNS", "PartitionAppend", "append_partitioned", "route_rows", "to_segment_rows"]
