"""``.option("emit", "ranges")``: a stream whose micro-batch is its offset ranges, not its messages.

The normal stream reads each batch's messages in a Python task.  With ``emit=ranges`` the same
batches (the same offsets, admission control and checkpoint) are planned exactly as before, but
each batch is one row per internal topic with data in it: which offsets ``[startOffset, endOffset)``
it covers, computed from the very ``start``/``end`` Spark passes to ``partitions`` (so a batch
replayed from the checkpoint after a failure gets the same ranges), plus the log's ledger id at
planning (a topic deleted and re-created in between is caught) and the compacted view the batch
pinned (``readCompacted``).  ``spark_pubsub.read_ranges`` turns a batch of these rows into the
native scan of exactly those messages (``foreachBatch``; docs/SPARK.md, DECISIONS D92).

A Spark ``foreachBatch`` function cannot learn its batch's offsets any other way: Spark's offset
log records only each batch's end, and no data source gets to record more (D81).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from broker_core.naming import TopicName
from spark_pubsub.offsets import PartitionPlanner
from spark_pubsub.schema import user_topic

RANGES_SCHEMA = StructType([
    StructField("topic", StringType(), False),  # as the source's topic column (a partition's parent)
    StructField("partition", IntegerType(), False),  # -1: a non-partitioned topic
    StructField("internalTopic", StringType(), False),
    StructField("startOffset", LongType(), False),  # inclusive
    StructField("endOffset", LongType(), False),  # exclusive
    StructField("ledgerId", LongType(), False),  # the log's ledger id when the batch was planned
    StructField("compactedHorizon", LongType(), True),  # readCompacted: the batch's view, if any
    StructField("compactedFile", StringType(), True),
])
"""One row per internal topic with data in the micro-batch (``emit=ranges``)."""

RANGES_ARROW_SCHEMA = to_arrow_schema(RANGES_SCHEMA)

REQUIRED_COLUMNS = ("partition", "internalTopic", "startOffset", "endOffset")
"""What ``read_ranges`` cannot do without; ``ledgerId`` and the view columns are checked when present."""


class RangesPartition(InputPartition):
    """The one task of an ``emit=ranges`` batch: its rows, planned on the driver (plain values)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__(None)
        self.rows = rows


def ranges_partitions(planner: PartitionPlanner, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
    """The batch ``(start, end)`` as range rows, in one partition (none when the batch is empty).

    The ranges are ``PartitionPlanner.batch_work``'s, the very ranges the ``emit=messages`` tasks
    would scan, so both modes read the same messages per batch.
    """
    work, views = planner.batch_work(start, end)
    if not work:
        return []
    indexes = {display: (topic, index) for topic, display, index in planner.internal_topics()}
    rows = []
    for display, ranges, _ in work:
        topic, index = indexes.get(display) or (TopicName.parse(display), TopicName.parse(display).partition_index)
        ledger_id = planner.broker.topic_log(topic, create=False).snapshot().ledger_id
        view = views.get(display)
        for lo, hi in ranges:
            rows.append({"topic": user_topic(display, index), "partition": index, "internalTopic": display,
                         "startOffset": int(lo), "endOffset": int(hi), "ledgerId": ledger_id,
                         "compactedHorizon": None if view is None else int(view[0]),
                         "compactedFile": None if view is None else str(view[1])})
    return [RangesPartition(rows)]


def read_ranges_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of a ``RangesPartition`` as one Arrow batch (nothing for pyspark's empty stand-in)."""
    if isinstance(partition, RangesPartition) and partition.rows:
        yield pa.RecordBatch.from_pylist(partition.rows, schema=RANGES_ARROW_SCHEMA)


__all__ = ["RANGES_ARROW_SCHEMA", "RANGES_SCHEMA", "REQUIRED_COLUMNS", "RangesPartition", "ranges_partitions",
           "read_ranges_partition"]
