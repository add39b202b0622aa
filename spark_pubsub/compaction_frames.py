"""The DataFrames of the Spark compaction job: the planned rows, and each key's newest message.

Column pruning decides the job's speed.  A compaction reads every row up to the horizon but keeps
only one message per key, so the reduction runs on a narrow projection and the payloads are read
only where they can still win:

1. ``ends``: per planned row only ``(_topic, key, offset, chunk columns)``, ``_topic`` the plan's
   index.  The offset is the file's base offset plus Spark's ``_metadata.row_index``, the base
   found by the native scan's driver-planned search over file-name hashes (D84): no join, no
   per-row Python, no message ids yet.
2. ``winners``: ``max(offset)`` of the message-ending rows grouped by key (and ``_topic`` when
   the job has several): a hash aggregate of longs, partially aggregated before its shuffle (at
   most keys x map tasks rows cross).
3. ``kept``: each topic's planned rows with every column, semi-joined to that topic's winners on
   the message end through a broadcast of the winners (one long per key), so no payload is
   shuffled; a chunked winner keeps all its chunks; tombstones drop out.
4. Message ids (``entry_id``, ``batch_index``) of the kept segment rows are looked up by the view
   writer from the segments' layouts (as the local run's ``finish_compaction`` does); rows of the
   previous view carry theirs.

``carry_payload=True`` is the other shape measured (``docs/DECISIONS.md``): one scan, the whole row
carried in ``max_by(struct(...), offset)``, chunk rows of chunked winners joined back.  Spark cannot
hash-aggregate a variable-width buffer, so that falls back to sorting every row by key.

Only the DataFrame API is used (classic and Spark Connect sessions alike).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.jobs.compaction import CompactionPlan
from broker_core.topic.compacted_view import VIEW_SCHEMA
from spark_pubsub.native_plan import TopicRead, plan_topic_read
from spark_pubsub.native_scan import functions_for, positioned_segments

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from broker_core.topic.topic_log import TopicLog

TIME_COLUMNS = ("publish_time", "event_time", "deliver_at")
"""View columns that travel as int64 µs through Spark (no session time zone in the Arrow batches)."""

UNKNOWN_ID = -1
"""``entry_id`` of a kept segment row until the view writer looks it up (real ids are >= 0)."""

_POSITIONS = ("offset", "entry_id", "batch_index")
_IDS = ("entry_id", "batch_index")
_PAYLOAD = tuple(n for n in VIEW_SCHEMA.names if n not in _POSITIONS)
_END_COLUMNS = ("key", "num_chunks", "chunk_id")


def topic_reads(plans: list[tuple[TopicLog, CompactionPlan]]) -> list[TopicRead]:
    """Each plan's log rows ``[start, horizon)`` as a native read of its snapshot (no view)."""
    return [plan_topic_read(lg, topic=p.topic, partition=-1, start=p.start, end=p.horizon, read_compacted=False,
                            fail_on_data_loss=False, snapshot=p.snapshot) for lg, p in plans]


def _msg_end(F: Any) -> Any:
    """The offset of a row's message's last row (``broker_core.jobs.compaction.message_ends``)."""
    rest = F.coalesce(F.col("num_chunks"), F.lit(1)) - 1 - F.coalesce(F.col("chunk_id"), F.lit(0))
    return F.col("offset") + F.greatest(rest, F.lit(0)).cast("long")


def _segment_rows(spark: SparkSession, base: str, read: TopicRead, columns: tuple[str, ...]) -> DataFrame:
    """``offset``, ``columns`` and ``topic_path`` of the planned rows of one topic's segments; the
    offset is ``base_offset(file) + row index`` from the native scan's driver-planned search (D84),
    no join (``native_scan.positioned_segments``; unselected id columns are pruned)."""
    F = functions_for(spark)
    rows = positioned_segments(spark, base, read, columns)
    return rows.select("offset", *columns).withColumn("topic_path", F.lit(read.topic_path))


def _view_rows(spark: SparkSession, base: str, plan: CompactionPlan, columns: tuple[str, ...]) -> DataFrame:
    """``offset``, ``columns`` and ``topic_path`` of the previous view's rows."""
    F = functions_for(spark)
    assert plan.previous is not None
    return (spark.read.parquet(f"{base}/{plan.topic_path}/{plan.previous.file}").select("offset", *columns)
            .withColumn("topic_path", F.lit(plan.topic_path)))


def _union(frames: list[DataFrame]) -> DataFrame | None:
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _unknown_ids(F: Any, segment_rows: DataFrame) -> DataFrame:
    """Segment rows with ``entry_id``/``batch_index`` still unknown (-1): the view writer looks them up
    from the segments' layouts for the kept rows only (``broker_core.topic.offset_ids``)."""
    return segment_rows.withColumn("entry_id", F.lit(UNKNOWN_ID).cast("long")).withColumn(
        "batch_index", F.lit(-1).cast("int"))


def _as_view(F: Any, frame: DataFrame) -> DataFrame:
    """``topic_path`` plus the view's columns in order, times as µs longs."""
    return frame.select("topic_path", *[F.unix_micros(F.col(n)).alias(n) if n in TIME_COLUMNS else F.col(n)
                                        for n in VIEW_SCHEMA.names])


def _keep(F: Any, rows: DataFrame, winners: DataFrame) -> DataFrame:
    """The rows of winning messages (every chunk), tombstones dropped: a broadcast semi-join on the
    message end (``rows`` and ``winners`` are of one topic)."""
    rows = rows.where(F.col("key").isNotNull()).withColumn("_end", _msg_end(F))
    return rows.join(F.broadcast(winners), ["_end"], "left_semi").where(F.col("value").isNotNull())


def end_rows(spark: SparkSession, base: str, plans: list[tuple[TopicLog, CompactionPlan]],
             reads: list[TopicRead]) -> DataFrame:
    """The narrow projection the reduction runs on: ``_topic`` (the plan's index in ``plans``),
    ``offset``, ``key`` and the chunk columns of every planned row (segments and previous views)."""
    F = functions_for(spark)
    frames = []
    for index, ((_, plan), read) in enumerate(zip(plans, reads, strict=True)):
        if read.segments:
            frames.append(positioned_segments(spark, base, read, _END_COLUMNS).select("offset", *_END_COLUMNS)
                          .withColumn("_topic", F.lit(index)))
        if plan.previous is not None:
            frames.append(_view_rows(spark, base, plan, _END_COLUMNS).drop("topic_path")
                          .withColumn("_topic", F.lit(index)))
    ends = _union(frames)
    assert ends is not None
    return ends


def winners_frame(spark: SparkSession, base: str, plans: list[tuple[TopicLog, CompactionPlan]],
                  reads: list[TopicRead]) -> DataFrame:
    """``(_topic, _end, _span)`` per key: the plan's index, the offset of the key's newest message end,
    and the most rows before their end that any of its messages spans (0 unless chunked): hash
    aggregates of longs.

    The per-row work is what the job's time goes to, so: a row ends its message when its chunk
    columns say so (no offset needed for the test, whose expression would be evaluated twice per
    row), and with one topic the group is the key alone (a constant string in the grouping key
    is hashed and copied for every row; measured ~20% of the stage's CPU)."""
    F = functions_for(spark)
    rest = F.coalesce(F.col("num_chunks"), F.lit(1)) - 1 - F.coalesce(F.col("chunk_id"), F.lit(0))
    span = F.greatest(F.coalesce(F.col("num_chunks"), F.lit(1)) - 1, F.lit(0)).cast("long")
    ends = end_rows(spark, base, plans, reads).where(F.col("key").isNotNull() & (rest <= 0))
    groups = ["key"] if len(plans) == 1 else ["_topic", "key"]
    winners = ends.groupBy(*groups).agg(F.max("offset").alias("_end"), F.max(span).alias("_span"))
    if len(plans) == 1:
        winners = winners.withColumn("_topic", F.lit(0))
    return winners.select("_topic", "_end", "_span")


def needed_segments(read: TopicRead, ends: np.ndarray, spans: np.ndarray) -> TopicRead:
    """``read`` cut to the segments holding a row of a winning message (offsets ``[end - span, end]``).

    Keys are usually rewritten often, so their newest messages sit in the last segments: the
    payload pass then opens a few files instead of all of them."""
    if not read.segments or not len(ends):
        return replace(read, segments=())
    starts = np.asarray([r.segment.base_offset + r.row_lo for r in read.segments], dtype=np.int64)
    in_log = ends >= starts[0]  # winners from the previous view are read from the view
    ends, spans = ends[in_log], spans[in_log]
    first = np.searchsorted(starts, ends - spans, side="right") - 1
    last = np.searchsorted(starts, ends, side="right") - 1
    hit = np.zeros(len(starts), dtype=bool)
    hit[last] = True
    for lo, hi in zip(first[first != last], last[first != last], strict=True):  # chunked winners only
        hit[max(lo, 0):hi + 1] = True
    segments = tuple(r for r, used in zip(read.segments, hit, strict=True) if used)
    return replace(read, segments=segments, rows=sum(r.row_hi - r.row_lo for r in segments))


def winners_on_driver(spark: SparkSession, base: str, plans: list[tuple[TopicLog, CompactionPlan]],
                      reads: list[TopicRead]) -> pa.Table:
    """``winners_frame`` brought to the driver as Arrow (two longs and a small int per key): the job's
    one Spark action before the payloads are read."""
    return winners_frame(spark, base, plans, reads).toArrow()


def kept_rows(spark: SparkSession, base: str, plans: list[tuple[TopicLog, CompactionPlan]],
              reads: list[TopicRead], winners: pa.Table | None, *,
              retain_null_key: bool = False) -> DataFrame | None:
    """``topic_path`` plus ``VIEW_SCHEMA`` columns (times as µs) of every row the new views keep
    (None when no row survives anywhere: every view is empty).  Kept segment rows carry
    ``entry_id = UNKNOWN_ID`` for the view writer to look up.

    ``winners`` (``winners_on_driver``) picks the segment files the payload pass must open and is
    broadcast to it; None selects the one-scan shape (``carry_payload``), which reduces here."""
    F = functions_for(spark)
    out = []
    for index, ((_, plan), read) in enumerate(zip(plans, reads, strict=True)):
        view = None if plan.previous is None else _view_rows(spark, base, plan, _PAYLOAD + _IDS)
        segments = None if not read.segments or not (winners is None or retain_null_key) else (
            _unknown_ids(F, _segment_rows(spark, base, read, _PAYLOAD)))
        if winners is None:
            out.append(_carrying_payload(F, segments, view))
        else:
            mine = winners.filter(pc.equal(winners.column("_topic"), index))
            ends = spark.createDataFrame(mine.select(["_end"]))
            needed = needed_segments(read, mine.column("_end").to_numpy(), mine.column("_span").to_numpy())
            if needed.segments:
                out.append(_keep(F, _unknown_ids(F, _segment_rows(spark, base, needed, _PAYLOAD)), ends))
            if view is not None:
                out.append(_keep(F, view, ends))
        if retain_null_key:
            out += [frame.where(F.col("key").isNull()) for frame in (segments, view) if frame is not None]
    return _union([_as_view(F, f) for f in out])


def _carrying_payload(F: Any, segments: DataFrame | None, view: DataFrame | None) -> DataFrame:
    """One topic's kept rows from one scan: ``max_by(struct(row), offset)`` per key over the message
    ends, plus the other chunks of chunked winners (joined back; none on an unchunked topic)."""
    rows = _union([f for f in (segments, view) if f is not None])
    assert rows is not None
    rows = rows.where(F.col("key").isNotNull()).withColumn("_end", _msg_end(F))
    columns = [c for c in rows.columns if c not in ("topic_path", "key")]
    best = (rows.where(F.col("_end") == F.col("offset")).groupBy("topic_path", "key")
            .agg(F.max_by(F.struct(*columns), F.col("offset")).alias("_w")).select("topic_path", "key", "_w.*"))
    chunks = rows.where(F.col("_end") != F.col("offset")).join(
        F.broadcast(best.select("topic_path", "_end")), ["topic_path", "_end"], "left_semi")
    return best.unionByName(chunks).where(F.col("value").isNotNull())


__all__ = ["TIME_COLUMNS", "UNKNOWN_ID", "end_rows", "kept_rows", "needed_segments", "topic_reads", "winners_frame",
           "winners_on_driver"]
