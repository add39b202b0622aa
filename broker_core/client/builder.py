"""Turn pending messages (or a user's Arrow table) into segment rows and entry layouts.

The producer queues ``PendingMessage`` objects; at flush time they become one ``SEGMENT_SCHEMA``
table whose entry layout says which rows form a batch (one entry) and which are entries of their
own (unbatched sends, delayed messages, chunks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from broker_core.hashing.columns import sticky_key_hash_array
from broker_core.log.segment import SEGMENT_SCHEMA
from broker_core.log.segment_ref import normalise_layout
from broker_core.message_id import MessageId

if TYPE_CHECKING:
    from broker_core.schema.avro_encode import RecordEncoder


@dataclass(slots=True)
class PendingMessage:
    """A message accepted by ``send``/``send_async`` and not yet committed."""

    value: bytes | tuple[Any, ...] | None  # a tuple: a record whose encoding was deferred to the batch (D91)
    key: str | None
    ordering_key: bytes | None
    properties: dict[str, str] | None
    sequence_id: int
    publish_time_ms: int
    event_time_ms: int | None
    deliver_at_ms: int | None
    size_bytes: int
    callback: Callable[[PendingMessage], None] | None = None
    enqueued_s: float = 0.0  # (monotonic; passed positionally by the send path, which sets all fields up to here)
    wants_id: bool = True  # False for a send_async without callback: nobody reads its MessageId
    result: MessageId | None = None
    error: BaseException | None = None
    done: bool = False
    chunk_uuid: str | None = None
    chunk_id: int | None = None
    num_chunks: int | None = None
    chunk_total_size_bytes: int | None = None

    @property
    def is_chunk(self) -> bool:
        return self.num_chunks is not None

    @property
    def batch_key(self) -> bytes | str | None:
        """What key-based batching groups by: the ordering key, else the partition key."""
        return self.ordering_key if self.ordering_key else self.key


_VALUE = attrgetter("value")
_KEY = attrgetter("key")
_ORDERING_KEY = attrgetter("ordering_key")
_PROPERTIES = attrgetter("properties")
_SEQUENCE_ID = attrgetter("sequence_id")
_PUBLISH_TIME_MS = attrgetter("publish_time_ms")
_EVENT_TIME_MS = attrgetter("event_time_ms")
_DELIVER_AT_MS = attrgetter("deliver_at_ms")
_NUM_CHUNKS = attrgetter("num_chunks")
_CHUNK_FIELDS = attrgetter("chunk_uuid", "chunk_id", "num_chunks", "chunk_total_size_bytes")
_TS_US = pa.timestamp("us", tz="UTC")


def _column(values: list[Any], kind: pa.DataType) -> pa.Array:
    """An Arrow column of ``values``; all-null (the common case for the optional fields) without a scan."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), kind)
    return pa.array(values, kind)


def _ts_us(values: list[int | None]) -> pa.Array:
    """Milliseconds (or None) as microsecond timestamps."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), _TS_US)
    if None in values:
        return pa.array([None if v is None else v * 1000 for v in values], _TS_US)
    return pa.array(np.array(values, dtype=np.int64) * 1000).view(_TS_US)


# The sticky key hash of a message with neither key nor ordering key (``NONE_KEY``'s), worked out
# once: a batch of keyless messages, the common case, then skips the vectorised hash, which costs
# about half of building a small batch's rows.
_KEYLESS_HASH = sticky_key_hash_array(pa.nulls(1, pa.binary()), pa.nulls(1, pa.string()))[0].as_py()


def rows_for(pending: list[PendingMessage], producer_name: str, *, schema_version: bytes | None = None,
             encoder: RecordEncoder | None = None) -> pa.Table:
    """The segment rows of ``pending``, in order (all written under the producer's ``schema_version``;
    ``encoder`` encodes the payloads its producer deferred at send, D91).

    It runs on a pool worker for every batch, holding the GIL the send path needs: each column is
    pulled out with one C-level ``map`` and converted by Arrow, and the columns that are all null
    (keys, properties, delays, chunks, usually) are made without looking at their values twice.
    """
    n = len(pending)
    ordering = _column(list(map(_ORDERING_KEY, pending)), pa.binary())
    keys = _column(list(map(_KEY, pending)), pa.string())
    if ordering.null_count == n and keys.null_count == n:
        sticky = pa.array(np.full(n, _KEYLESS_HASH, dtype=np.int32))
    else:
        sticky = sticky_key_hash_array(ordering, keys).cast(pa.int32())
    props = list(map(_PROPERTIES, pending))
    if props.count(None) == n:
        properties = pa.nulls(n, _PROPERTIES_TYPE)
    else:
        properties = pa.array([list(p.items()) if p else None for p in props], _PROPERTIES_TYPE)
    num_chunks = list(map(_NUM_CHUNKS, pending))
    if num_chunks.count(None) == n:
        chunk_uuid, chunk_id, chunk_count, chunk_total = (pa.nulls(n, kind) for kind in _CHUNK_TYPES)
    else:
        fields = zip(*map(_CHUNK_FIELDS, pending), strict=True)  # one tuple per chunk column
        chunk_uuid, chunk_id, chunk_count, chunk_total = (
            pa.array(list(values), kind) for values, kind in zip(fields, _CHUNK_TYPES, strict=True)
        )
    columns = [
        pa.array(list(map(_VALUE, pending)), pa.binary()) if encoder is None
        else encoder.column(list(map(_VALUE, pending))),
        keys,
        ordering,
        sticky,
        properties,
        pa.repeat(pa.scalar(producer_name, pa.string()), n),
        pa.array(np.array(list(map(_SEQUENCE_ID, pending)), dtype=np.int64)),
        _ts_us(list(map(_PUBLISH_TIME_MS, pending))),
        _ts_us(list(map(_EVENT_TIME_MS, pending))),
        _ts_us(list(map(_DELIVER_AT_MS, pending))),
        pa.nulls(n, pa.binary()) if schema_version is None else pa.repeat(pa.scalar(schema_version, pa.binary()), n),
        chunk_uuid,
        chunk_id,
        chunk_count,
        chunk_total,
    ]
    return pa.Table.from_arrays(columns, schema=SEGMENT_SCHEMA)


_PROPERTIES_TYPE = SEGMENT_SCHEMA.field("properties").type
_CHUNK_TYPES = tuple(SEGMENT_SCHEMA.field(name).type
                     for name in ("chunk_uuid", "chunk_id", "num_chunks", "chunk_total_size_bytes"))


def _all_plain(pending: list[PendingMessage]) -> bool:
    """No delayed message and no chunk among ``pending`` (two C-level passes, no Python per message)."""
    n = len(pending)
    return list(map(_DELIVER_AT_MS, pending)).count(None) == n and list(map(_NUM_CHUNKS, pending)).count(None) == n


def plan_entries(
    pending: list[PendingMessage], *, batching: bool, key_based: bool
) -> tuple[list[PendingMessage], list[int]]:
    """Order the messages of one flush and describe their entries.

    Returns the messages in commit order and the entry layout.  With batching, consecutive ordinary
    messages form one batch (with key-based batching, one batch per key, keys in first-seen order);
    delayed messages and chunks are always entries of their own, as in Pulsar.
    """
    if not batching:
        return pending, [-len(pending)]
    if not key_based and _all_plain(pending):  # the common batch: one entry, in send order
        return pending, [len(pending)]
    ordered: list[PendingMessage] = []
    layout: list[int] = []
    run: list[PendingMessage] = []

    def close_run() -> None:
        if not run:
            return
        if key_based:
            groups: dict[bytes | str | None, list[PendingMessage]] = {}
            for p in run:
                groups.setdefault(p.batch_key, []).append(p)
            for group in groups.values():
                ordered.extend(group)
                layout.append(len(group))
        else:
            ordered.extend(run)
            layout.append(len(run))
        run.clear()

    for p in pending:
        if p.deliver_at_ms is not None or p.is_chunk:
            close_run()
            ordered.append(p)
            layout.append(-1)
        else:
            run.append(p)
    close_run()
    return ordered, normalise_layout(layout)


__all__ = ["PendingMessage", "plan_entries", "rows_for"]
