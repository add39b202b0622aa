"""Topic compaction on Spark through the library read: the fallback of ``compaction_job``.

Where Spark cannot open the root itself, the compaction job's tasks read their segments through
``broker_core`` (``read_compaction_task``) and Spark only keeps the newest row of each key; the
driver then finishes each topic exactly as the local run does (``finish_compaction``).  Its own
module so that ``compaction_job`` (which falls back to it) and ``jobs`` (the command line) both
build on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_core.jobs.compaction import (
    CompactionPlan,
    CompactionResult,
    CompactionTask,
    compaction_tasks,
    finish_compaction,
    message_ends,
    read_compaction_task,
)
from broker_core.log.segment import TIMESTAMP
from broker_core.storage import file_io_for
from broker_core.topic.compacted_view import VIEW_SCHEMA
from broker_core.topic.topic_log import TopicLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TIME_COLUMNS = ("publish_time", "event_time", "deliver_at")


# -- compaction with Spark --------------------------------------------------------------------------


def _spark_types() -> tuple[Any, Any, Any]:
    """The Spark schemas of the compaction job: tasks, message ends, rows (times travel as int64 µs,
    which sidesteps Spark's session time zone in Arrow batches)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    spark_type = {"binary": BinaryType(), "string": StringType(), "int32": IntegerType(), "int64": LongType()}
    def required(names: str, dtype: Any) -> list[Any]:
        return [StructField(name, dtype, False) for name in names.split()]

    tasks = StructType(required("topic_path kind path", StringType())
                       + required("base_offset lo hi", LongType())
                       + [StructField("max_message_bytes", LongType(), True)])
    ends = StructType(required("topic_path key", StringType()) + required("offset", LongType()))
    fields = [StructField("topic_path", StringType(), False)]
    for field in VIEW_SCHEMA:
        if pa.types.is_map(field.type):
            dtype: Any = MapType(StringType(), StringType(), True)
        elif pa.types.is_timestamp(field.type):
            dtype = LongType()
        else:
            dtype = spark_type[str(field.type)]
        fields.append(StructField(field.name, dtype, True))
    rows = StructType([*fields, StructField("msg_end", LongType(), True)])
    return tasks, ends, rows


def _task_reader(root: str, project: Callable[[pa.Table, str], pa.Table], schema: pa.Schema,
                 columns: list[str] | None, storage: Mapping[str, str] | None = None
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: each input row is a task, each output batch that task's rows."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        io = file_io_for(root, fsync=False, storage_options=storage)
        for batch in batches:
            for row in batch.to_pylist():
                task = CompactionTask(kind=row["kind"], path=row["path"], base_offset=row["base_offset"],
                                      lo=row["lo"], hi=row["hi"], max_message_bytes=row["max_message_bytes"])
                table = project(read_compaction_task(io, row["topic_path"], task, columns), row["topic_path"])
                yield from table.cast(schema).to_batches()

    return read


def _ends(table: pa.Table, topic_path: str) -> pa.Table:
    """(topic, key, offset) of the keyed rows that end a message: the candidates to win their key."""
    ends = message_ends(table)
    keep = pc.and_(pc.is_valid(table.column("key")), pc.equal(ends, table.column("offset")))
    picked = table.filter(keep)
    return pa.table({"topic_path": pa.array([topic_path] * picked.num_rows, pa.string()),
                     "key": picked.column("key"), "offset": picked.column("offset")})


def _rows(table: pa.Table, topic_path: str) -> pa.Table:
    """Every row with its topic and message end, times as int64 µs."""
    columns = [pa.array([topic_path] * table.num_rows, pa.string())]
    for name in VIEW_SCHEMA.names:
        column = table.column(name)
        columns.append(column.cast(pa.int64()) if name in _TIME_COLUMNS else column)
    columns.append(message_ends(table))
    return pa.Table.from_arrays(columns, names=["topic_path", *VIEW_SCHEMA.names, "msg_end"])


def _view_rows(table: pa.Table) -> pa.Table:
    """Collected rows of one topic back to ``VIEW_SCHEMA`` (times from int64 µs)."""
    columns = [table.column(n).cast(TIMESTAMP) if n in _TIME_COLUMNS else table.column(n)
               for n in VIEW_SCHEMA.names]
    return pa.Table.from_arrays(columns, names=VIEW_SCHEMA.names).cast(VIEW_SCHEMA)


def latest_per_key_df(spark: SparkSession, root: str, tasks: list[tuple[str, CompactionTask]], *,
                      retain_null_key: bool = False, parallelism: int | None = None,
                      storage_options: Mapping[str, str] | None = None) -> DataFrame:
    """The compacted view's rows of every planned topic as a DataFrame (``topic_path`` + view columns).

    Two scans of the input: the first reads only keys and chunk columns and finds each key's winning
    message end (``max(offset)`` per topic and key, aggregated map-side, so only keys are shuffled);
    the second keeps the rows of winning messages (a semi-join on the message end, which also keeps
    every chunk of a chunked winner) and drops tombstones.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    task_schema, ends_schema, rows_schema = _spark_types()
    task_rows = [(path, t.kind, t.path, t.base_offset, t.lo, t.hi, t.max_message_bytes) for path, t in tasks]
    slices = max(1, min(len(task_rows), parallelism or default_parallelism(spark) * 4))
    task_df = spark.createDataFrame(task_rows, task_schema).repartition(slices)
    ends = task_df.mapInArrow(
        _task_reader(root, _ends, to_arrow_schema(ends_schema), ["key", "chunk_id", "num_chunks", "offset"],
                     storage_options),
        ends_schema,
    )
    winners = ends.groupBy("topic_path", "key").agg(F.max("offset").alias("msg_end")).drop("key")
    rows = task_df.mapInArrow(_task_reader(root, _rows, to_arrow_schema(rows_schema), None, storage_options),
                              rows_schema)
    kept = (rows.where(F.col("key").isNotNull()).join(winners, ["topic_path", "msg_end"], "left_semi")
            .where(F.col("value").isNotNull()))
    if retain_null_key:
        kept = kept.unionByName(rows.where(F.col("key").isNull()))
    return kept.drop("msg_end")


def compact_planned_in_tasks(spark: SparkSession, root: str, plans: list[tuple[TopicLog, CompactionPlan]],
                             read: dict[str, int], *, retain_null_key: bool, parallelism: int | None,
                             dry_run: bool, started_s: float,
                             storage_options: Mapping[str, str] | None = None) -> list[CompactionResult]:
    """The compaction job's path for roots Spark's file systems cannot open: tasks read through the
    library (``read_compaction_task``), the driver collects each view, writes and commits it."""
    tasks = [(plan.topic_path, task) for _, plan in plans for task in compaction_tasks(plan)]
    collected = pa.table({"topic_path": pa.array([], pa.string())})
    if tasks:
        collected = latest_per_key_df(spark, root, tasks, retain_null_key=retain_null_key,
                                      parallelism=parallelism, storage_options=storage_options).toArrow()
    results = []
    for log, plan in plans:
        mine = collected.filter(pc.equal(collected.column("topic_path"), plan.topic_path))
        view = _view_rows(mine) if mine.num_rows else VIEW_SCHEMA.empty_table()
        results.append(finish_compaction(log, plan, view, dry_run=dry_run, messages_read=read[plan.topic_path],
                                         started_s=started_s))
    return results


def default_parallelism(spark: SparkSession) -> int:
    """Tasks to use when the caller names none: the cores of a classic session, else the session's
    shuffle partitions (a Spark Connect client has no ``SparkContext`` to ask)."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return int(spark.sparkContext.defaultParallelism)
    return max(1, int(spark.conf.get("spark.sql.shuffle.partitions") or 2))


__all__ = ["compact_planned_in_tasks", "default_parallelism", "latest_per_key_df"]
