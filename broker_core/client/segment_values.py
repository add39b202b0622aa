"""A consumer part's batch-decoded payloads of the segment it is reading (D118).

A typed consumer decodes a read's payloads all at once (``Schema.decode_batch``: NumPy over the
Arrow column).  At a receiver queue's ~1,000 rows the decoder's few dozen NumPy calls, not the rows,
are most of what it costs.  A backlog is read in order, a segment of thousands of rows in several
reads, so the part decodes the segment's whole payload column once, when the first ``value()`` of a
read inside it asks, and every read of that segment takes its slice of the result.  One segment is
kept: the one being read.  A read across segments, a segment evicted from the log's cache meanwhile
(no storage call is made for it here), a big segment, and a segment the schema cannot decode as a
batch (tombstones, other writer versions...) leave the read to decode its own rows, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from broker_core.log.segment_ref import SegmentRef
from broker_core.schema.base import Schema
from broker_core.schema.constant_column import distinct_values

if TYPE_CHECKING:
    from broker_core.topic.topic_log import TopicLog

MAX_SEGMENT_ROWS = 1 << 16  # a bigger segment is decoded a read at a time: its first value() must not
# wait for (and the memo must not hold) a whole large segment's values


class SegmentValues:
    """The decoded payload column of the segment a part reads (one segment at a time)."""

    __slots__ = ("_log", "_memo", "_schema", "_topic")

    def __init__(self, log: TopicLog, schema: Schema | None, topic: str) -> None:
        self._log = log
        self._schema = schema
        self._topic = topic
        self._memo: tuple[str, Any] | None = None  # (segment path, its decoded column or None)

    def source_for(self, offsets: np.ndarray) -> Callable[[], Any] | None:
        """For a read of ``offsets`` (ascending): a function that gives the read's rows of its segment's
        decoded column (None: the segment does not decode as a batch, or left the cache); None when the
        read is not one run of offsets inside one segment of at most ``MAX_SEGMENT_ROWS`` rows."""
        schema = self._schema
        n = len(offsets)
        if schema is None or not schema.batch_decodes or n == 0:
            return None
        first, last = int(offsets[0]), int(offsets[-1])
        if last - first != n - 1:
            return None
        snap = self._log.log.cached_snapshot()
        i = snap.segment_index_for(first)
        if i >= len(snap.segments):
            return None
        seg = snap.segments[i]
        if first < seg.base_offset or last >= seg.end_offset or seg.end_offset - seg.base_offset > MAX_SEGMENT_ROWS:
            return None
        return partial(self._rows, seg, first - seg.base_offset, n)

    def _rows(self, seg: SegmentRef, start: int, n: int) -> Any:
        memo = self._memo  # (two threads may both decode a segment: the same column either way)
        if memo is None or memo[0] != seg.path:
            memo = self._memo = (seg.path, self._decode(seg))
        column = memo[1]
        return None if column is None else column.slice(start, n)

    def _decode(self, seg: SegmentRef) -> Any:
        table = self._log.cached_segment_rows(seg)
        if table is None or self._schema is None or table.num_rows != seg.end_offset - seg.base_offset:
            return None
        # (a narrow table lacks the column when it is null in every row)
        versions = distinct_values(table.column("schema_version")) if "schema_version" in table.column_names else [None]
        payloads: pa.Array = table.column("value").combine_chunks()
        return self._schema.decode_batch(payloads, versions, self._topic)


__all__ = ["MAX_SEGMENT_ROWS", "SegmentValues"]
