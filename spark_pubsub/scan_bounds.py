"""The DataFrame route's guard against decompression bombs (D176).

The JVM scan checks each segment file's footer in the task that reads it (``SegmentBounds.java``,
D175).  The DataFrame route hands the files to Spark's own Parquet source, which checks nothing, so
the driver checks their footers before building the DataFrame, with the rule every Python reader
applies (``segment_bounds.declared_excess``, D125): a row group declaring more uncompressed bytes
than its rows may hold under ``maxMessageSize`` is refused with ``SegmentTooLarge`` naming the file,
before any executor inflates it.  That costs one footer read per planned file on the driver (a local
file: ~0.1 ms; an object store: a ranged GET), paid only on this fallback route.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.errors import BrokerPersistenceError, SegmentTooLarge
from broker_core.log.segment_bounds import declared_excess
from spark_pubsub.native_plan import TopicRead


def refuse_bombs(plan: TopicRead) -> None:
    """``SegmentTooLarge`` when a planned segment file's footer declares a message bigger than
    ``plan.max_message_bytes`` allows.  A file that cannot be opened is left to Spark's read, which
    reports it (or skips it, with ``failOnDataLoss=false``) as it does today."""
    limit, io = plan.max_message_bytes, plan.io
    if limit is None or io is None:
        return
    for read in plan.segments:
        seg = read.segment
        path = f"{plan.topic_path}/{seg.path}"
        try:
            with io.open_input(path) as source:
                metadata = pq.read_metadata(source)
        except (BrokerPersistenceError, OSError, ValueError, pa.ArrowException):
            continue
        problem = declared_excess(metadata, limit)
        if problem is not None:
            raise SegmentTooLarge(
                f"segment {path!r} (offsets {seg.base_offset}..{seg.end_offset - 1}) {problem}; the read delivers "
                "none of it.  If its messages are genuine, raise maxMessageSize (broker configuration) and read "
                "again; otherwise run `pubsub topics check TOPIC --repair --execute` to set it aside (its messages "
                "are then recorded as lost)",
                path=path, offset=seg.base_offset, max_message_size=limit,
            )


__all__ = ["refuse_bombs"]
