"""Turn pending messages (or a user's Arrow table) into segment rows and entry layouts.

The producer queues ``PendingMessage`` objects; at flush time they become one ``SEGMENT_SCHEMA``
table whose entry layout says which rows form a batch (one entry) and which are entries of their
own (unbatched sends, delayed messages, chunks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    result: MessageId | None = None
    error: BaseException | None = None
    done: bool = False
    chunk_uuid: str | None = None
    chunk_id: int | None = None
    num_chunks: int | None = None
    chunk_total_size_bytes: int | None = None
    enqueued_s: float = 0.0
    wants_id: bool = True  # False for a send_async without callback: nobody reads its MessageId

    @property
    def is_chunk(self) -> bool:
        return self.num_chunks is not None

    @property
    def batch_key(self) -> bytes | str | None:
        """What key-based batching groups by: the ordering key, else the partition key."""
        return self.ordering_key if self.ordering_key else self.key


def _ts_us(values: list[int | None]) -> pa.Array:
    return pa.array([None if v is None else v * 1000 for v in values], pa.timestamp("us", tz="UTC"))


# The sticky key hash of a message with neither key nor ordering key (``NONE_KEY``'s), worked out
# once: a batch of keyless messages, the common case, then skips the vectorised hash, which costs
# about half of building a small batch's rows.
_KEYLESS_HASH = sticky_key_hash_array(pa.nulls(1, pa.binary()), pa.nulls(1, pa.string()))[0].as_py()


def rows_for(pending: list[PendingMessage], producer_name: str, *, schema_version: bytes | None = None,
             encoder: RecordEncoder | None = None) -> pa.Table:
    """The segment rows of ``pending``, in order (all written under the producer's ``schema_version``;
    ``encoder`` encodes the payloads its producer deferred at send, D91)."""
    n = len(pending)
    values = [p.value for p in pending]
    ordering = pa.array([p.ordering_key for p in pending], pa.binary())
    keys = pa.array([p.key for p in pending], pa.string())
    props = [list(p.properties.items()) if p.properties else None for p in pending]
    if ordering.null_count == n and keys.null_count == n:
        sticky = pa.array(np.full(n, _KEYLESS_HASH, dtype=np.int32))
    else:
        sticky = sticky_key_hash_array(ordering, keys).cast(pa.int32())
    columns = {
        "value": pa.array(values, pa.binary()) if encoder is None else encoder.column(values),
        "key": keys,
        "ordering_key": ordering,
        "sticky_key_hash": sticky,
        "properties": pa.array(props, pa.map_(pa.string(), pa.string())),
        "producer_name": pa.array([producer_name] * n, pa.string()),
        "sequence_id": pa.array([p.sequence_id for p in pending], pa.int64()),
        "publish_time": _ts_us([p.publish_time_ms for p in pending]),
        "event_time": _ts_us([p.event_time_ms for p in pending]),
        "deliver_at": _ts_us([p.deliver_at_ms for p in pending]),
        "schema_version": pa.nulls(n, pa.binary()) if schema_version is None
        else pa.array([schema_version] * n, pa.binary()),
        "chunk_uuid": pa.array([p.chunk_uuid for p in pending], pa.string()),
        "chunk_id": pa.array([p.chunk_id for p in pending], pa.int32()),
        "num_chunks": pa.array([p.num_chunks for p in pending], pa.int32()),
        "chunk_total_size_bytes": pa.array([p.chunk_total_size_bytes for p in pending], pa.int64()),
    }
    return pa.Table.from_pydict(columns, schema=SEGMENT_SCHEMA)


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
