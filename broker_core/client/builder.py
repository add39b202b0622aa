"""Turn queued messages (or a user's Arrow table) into segment rows and entry layouts.

The producer queues messages in ``QueuedBatch`` columns, one batch as it will be taken; at upload
time a batch becomes one ``SEGMENT_SCHEMA`` table whose entry layout says which rows form a batch
(one entry) and which are entries of their own (unbatched sends, delayed messages, chunks).
"""

from __future__ import annotations

from array import array
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
    """What a queued message holds beyond its payload, sequence id and publish time (those live in
    its ``QueuedBatch``'s columns): only a send with a key, an ordering key, properties, an event or
    delivery time, a callback or a waiter, and each chunk, has one (D103)."""

    key: str | None
    ordering_key: bytes | None
    properties: dict[str, str] | None
    event_time_ms: int | None
    deliver_at_ms: int | None
    callback: Callable[[PendingMessage], None] | None = None
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


# What a plain send's message holds beyond its columns: nothing (shared, never changed).
_PLAIN = PendingMessage(None, None, None, None, None, wants_id=False)


class QueuedBatch:
    """Queued messages of one partition, as the sender will take them: columns, not an object per
    message (D103).

    A producer may hold a million messages queued or in flight.  An object per message is tracked by
    the garbage collector, outlives the young generations and is scanned again by every full
    collection, which then ran often and cost a third of producing.  Here a batch holds one list of
    payloads (bytes, or a deferred record's tuple, untracked after its first collection) and two
    arrays of machine integers (sequence ids, publish times), whose contents the collector never
    visits.  A send that needs more (a key, properties, a callback or a waiter, a chunk...) also
    has its ``PendingMessage`` in ``extras``, by its index in the batch.
    """

    __slots__ = ("bytes", "enqueued_s", "extras", "publish_ms", "sequence_ids", "values")

    def __init__(self, enqueued_s: float) -> None:
        self.values: list[Any] = []  # payloads: bytes, a deferred record's tuple (D91), or None
        self.sequence_ids = array("q")
        self.publish_ms = array("q")
        self.extras: dict[int, PendingMessage] = {}  # index in the batch -> the send's extra state
        self.bytes = 0  # the payloads' sizes (a deferred payload's bound), as the batch limit counts them
        self.enqueued_s = enqueued_s  # monotonic: when its first message was queued

    def __len__(self) -> int:
        return len(self.values)

    def append(self, value: Any, size_bytes: int, sequence_id: int, publish_ms: int,
               extra: PendingMessage | None = None) -> None:
        """Add one message (the send path inlines this; chunks and tests use it)."""
        if extra is not None:
            self.extras[len(self.values)] = extra
        self.values.append(value)
        self.sequence_ids.append(sequence_id)
        self.publish_ms.append(publish_ms)
        self.bytes += size_bytes

    def messages(self) -> list[PendingMessage]:
        """Every message's ``PendingMessage`` in send order, a shared empty one for a plain send."""
        out = [_PLAIN] * len(self.values)
        for index, extra in self.extras.items():
            out[index] = extra
        return out


_KEY = attrgetter("key")
_ORDERING_KEY = attrgetter("ordering_key")
_PROPERTIES = attrgetter("properties")
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


def rows_for(batch: QueuedBatch, order: list[int] | None, producer_name: str, *,
             schema_version: bytes | None = None, encoder: RecordEncoder | None = None) -> pa.Table:
    """The segment rows of ``batch`` in commit ``order`` (``plan_entries``; None: send order), all
    written under the producer's ``schema_version``; ``encoder`` encodes the payloads its producer
    deferred at send (D91).

    It runs on a pool worker for every batch, holding the GIL the send path needs: the columns are
    the batch's own, converted by Arrow, and a batch of plain sends (no ``extras``) makes the
    columns they leave null (keys, properties, delays, chunks) without looking at anything; otherwise
    each column is pulled out of the messages with one C-level ``map``.
    """
    n = len(batch)
    if batch.extras:
        pending = batch.messages()
        ordering = _column(list(map(_ORDERING_KEY, pending)), pa.binary())
        keys = _column(list(map(_KEY, pending)), pa.string())
        props = list(map(_PROPERTIES, pending))
        event_times = _ts_us(list(map(_EVENT_TIME_MS, pending)))
        deliver_times = _ts_us(list(map(_DELIVER_AT_MS, pending)))
        num_chunks = list(map(_NUM_CHUNKS, pending))
    else:
        pending, ordering, keys = [], pa.nulls(n, pa.binary()), pa.nulls(n, pa.string())
        props = num_chunks = [None] * n
        event_times = deliver_times = pa.nulls(n, _TS_US)
    if ordering.null_count == n and keys.null_count == n:
        sticky = pa.array(np.full(n, _KEYLESS_HASH, dtype=np.int32))
    else:
        sticky = sticky_key_hash_array(ordering, keys).cast(pa.int32())
    if props.count(None) == n:
        properties = pa.nulls(n, _PROPERTIES_TYPE)
    else:
        properties = pa.array([list(p.items()) if p else None for p in props], _PROPERTIES_TYPE)
    if num_chunks.count(None) == n:
        chunk_uuid, chunk_id, chunk_count, chunk_total = (pa.nulls(n, kind) for kind in _CHUNK_TYPES)
    else:
        fields = zip(*map(_CHUNK_FIELDS, pending), strict=True)  # one tuple per chunk column
        chunk_uuid, chunk_id, chunk_count, chunk_total = (
            pa.array(list(values), kind) for values, kind in zip(fields, _CHUNK_TYPES, strict=True)
        )
    columns = [
        pa.array(batch.values, pa.binary()) if encoder is None else encoder.column(batch.values),
        keys,
        ordering,
        sticky,
        properties,
        pa.repeat(pa.scalar(producer_name, pa.string()), n),
        pa.array(np.frombuffer(batch.sequence_ids, dtype=np.int64)),
        pa.array(np.frombuffer(batch.publish_ms, dtype=np.int64) * 1000).view(_TS_US),
        event_times,
        deliver_times,
        pa.nulls(n, pa.binary()) if schema_version is None else pa.repeat(pa.scalar(schema_version, pa.binary()), n),
        chunk_uuid,
        chunk_id,
        chunk_count,
        chunk_total,
    ]
    table = pa.Table.from_arrays(columns, schema=SEGMENT_SCHEMA)
    return table if order is None else table.take(pa.array(order, pa.int64()))


_PROPERTIES_TYPE = SEGMENT_SCHEMA.field("properties").type
_CHUNK_TYPES = tuple(SEGMENT_SCHEMA.field(name).type
                     for name in ("chunk_uuid", "chunk_id", "num_chunks", "chunk_total_size_bytes"))


def plan_entries(batch: QueuedBatch, *, batching: bool, key_based: bool) -> tuple[list[int] | None, list[int]]:
    """Order the messages of one batch and describe their entries.

    Returns the commit order (indexes into the batch; None when it is the send order) and the entry
    layout.  With batching, consecutive ordinary messages form one batch (with key-based batching,
    one batch per key, keys in first-seen order); delayed messages and chunks are always entries of
    their own, as in Pulsar.
    """
    n = len(batch)
    if not batching:
        return None, [-n]
    extras = list(batch.extras.values())
    plain = list(map(_DELIVER_AT_MS, extras)).count(None) == len(extras) and (
        list(map(_NUM_CHUNKS, extras)).count(None) == len(extras))  # no delayed message, no chunk
    if plain and (not key_based or not extras):  # the common batch: one entry, in send order
        return None, [n]
    ordered: list[int] = []
    layout: list[int] = []
    run: list[int] = []
    pending = batch.messages()

    def close_run() -> None:
        if not run:
            return
        if key_based:
            groups: dict[bytes | str | None, list[int]] = {}
            for index in run:
                groups.setdefault(pending[index].batch_key, []).append(index)
            for group in groups.values():
                ordered.extend(group)
                layout.append(len(group))
        else:
            ordered.extend(run)
            layout.append(len(run))
        run.clear()

    for index, p in enumerate(pending):
        if p.deliver_at_ms is not None or p.is_chunk:
            close_run()
            ordered.append(index)
            layout.append(-1)
        else:
            run.append(index)
    close_run()
    return (None if ordered == list(range(n)) else ordered), normalise_layout(layout)


__all__ = ["PendingMessage", "QueuedBatch", "plan_entries", "rows_for"]
