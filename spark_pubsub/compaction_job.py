"""Topic compaction on Spark: the native scan, Spark's own aggregation, view files written by tasks.

The driver plans each internal topic exactly as the local run does (``plan_compaction``: the
previous view and the log offsets up to the horizon, from one snapshot).  Spark then

1. reduces a narrow projection of the planned rows (key, offset, chunk columns; offsets from the
   files' base offsets and Spark's ``_metadata.row_index``) to each key's newest message end with
   ``max(offset)`` grouped by (topic, key), and brings those winners to the driver;
2. keeps the winners' rows (every chunk of a chunked winner; tombstones dropped), as
   ``latest_per_key`` does, from only the segment files that hold a winner (usually the last few).
   When those files are small (``DRIVER_READ_ROWS``) and the winners few (``DRIVER_WRITE_ROWS``),
   the driver reads them itself through ``FileIO``, one file at a time, cut at once to the winners'
   rows: the kept rows end up on the driver either way, and a second Spark scan, broadcast and
   semi-join cost more than the read (D107).  Otherwise Spark reads every column of those files
   and keeps the winners' rows with a broadcast left-semi join on the message end
   (``compaction_frames``);
3. writes each topic's view file: its rows sorted by offset, their message ids looked up from the
   segments' layouts, written through the project's ``FileIO`` under a fresh
   ``_compacted/<32 hex>.parquet`` name, once, fsynced, never visible until named.  With up to
   ``DRIVER_WRITE_ROWS`` winners (the view is at most that many rows) the driver writes the files
   (after a Spark payload pass, its survivors come over with ``toArrow``): a view is one file per
   topic, so the tasks' way shuffles each topic to one task and waits on its Python worker.  Above
   it (or with the keyless rows retained, whose number is unknown) the survivors are
   hash-partitioned by topic and each task writes its topics' files (``mapInArrow``).

Only then does the driver commit each topic's pointer (``commit_view_file``, put-if-absent), so a
job killed at any instant leaves the old view or the new one, and files of killed runs are orphans
for vacuum (``docs/PROTOCOL.md``).  Where Spark cannot open the root the job reads through the
library in its tasks instead (``compaction_fallback``), with one log line.

Only the DataFrame API is used, so the job runs on a classic or a Spark Connect session.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.broker.broker import Broker
from broker_core.jobs.compaction import (
    CompactionPlan,
    CompactionResult,
    CompactionSummary,
    CompactionTask,
    commit_view_file,
    compaction_result,
    compaction_tasks,
    finish_compaction,
    message_ends,
    plan_compaction,
    read_compaction_task,
    up_to_date,
)
from broker_core.log.segment import TIMESTAMP
from broker_core.log.segment_ref import SegmentRef
from broker_core.naming import TopicName
from broker_core.topic.compacted_view import VIEW_SCHEMA, encode_view, new_view_file
from broker_core.topic.offset_ids import segment_id_arrays
from broker_core.topic.topic_log import TopicLog
from spark_pubsub.compaction_fallback import compact_planned_in_tasks, default_parallelism
from spark_pubsub.compaction_frames import (
    TIME_COLUMNS,
    UNKNOWN_ID,
    kept_rows,
    needed_segments,
    topic_reads,
    winners_on_driver,
)
from spark_pubsub.native_scan import root_uri, spark_can_open, spark_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from broker_core.storage.protocol import FileIO
    from spark_pubsub.native_plan import TopicRead

log = logging.getLogger(__name__)

_WRITTEN_SCHEMA = "topic_path string, file string, rows long, write_s double"


ROWS_PER_SHUFFLE_PARTITION = 4_000_000
"""Planned rows per shuffle partition of the job (at least one partition per core): the reduction's
shuffle carries at most keys x map tasks narrow rows, so a few partitions per job suffice, where
Spark's default of 200 would make ~200 tiny tasks per stage on a small cluster."""


def shuffle_partitions_for(spark: SparkSession, rows: int) -> int:
    """The job's ``spark.sql.shuffle.partitions``: one per ``ROWS_PER_SHUFFLE_PARTITION`` planned rows,
    at least the session's parallelism."""
    return max(default_parallelism(spark), -(-rows // ROWS_PER_SHUFFLE_PARTITION))


DRIVER_WRITE_ROWS = 1_000_000
"""At most this many winners over the job's topics: the kept rows come to the driver, which writes
the view files (no shuffle to one task per topic, no Python worker); above it, tasks write them."""

DRIVER_READ_ROWS = 4_000_000
"""At most this many rows in the files holding a winner (over the job's topics; previous views
included), and at most ``DRIVER_WRITE_ROWS`` winners: the driver reads the kept rows' payloads from
those files itself, one file at a time, instead of a second Spark scan and semi-join whose result
it would receive anyway (measured: ~1.5M rows of 5-6 files in 0.7-1.2 s on a loaded 2-core machine, so
the bound is a few seconds of one driver core); above it the payload pass stays on the executors, in
parallel."""

_JOB_CONF = {
    # With ~100,000 keys per task Spark's first-level "fast" aggregation map (65,536 entries) fills
    # and every later row probes it before the regular map: measured ~25% of the reduction's CPU.
    "spark.sql.codegen.aggregate.map.twolevel.enabled": "false",
}
"""SQL settings of the job's duration (``spark.sql.shuffle.partitions`` is chosen per job)."""


@contextmanager
def _session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL confs for the job's duration and restore the caller's values after."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def fill_ids(view: pa.Table, segments: Sequence[SegmentRef]) -> pa.Table:
    """``view`` (sorted by offset) with the ``entry_id``/``batch_index`` of its segment rows (those with
    ``UNKNOWN_ID``) looked up from the layouts of ``segments`` (the topic's planned segments)."""
    entries = view.column("entry_id").to_numpy()
    unknown = np.flatnonzero(entries == UNKNOWN_ID)
    if not len(unknown):
        return view
    entries, batches = entries.copy(), view.column("batch_index").to_numpy().copy()
    offsets = view.column("offset").to_numpy()[unknown]
    bases = np.asarray([s.base_offset for s in segments], dtype=np.int64)
    which = np.searchsorted(bases, offsets, side="right") - 1
    for i in np.unique(which):
        rows = unknown[which == i]
        seg_entries, seg_batches = segment_id_arrays(segments[i])
        entries[rows] = seg_entries[offsets[which == i] - segments[i].base_offset]
        batches[rows] = seg_batches[offsets[which == i] - segments[i].base_offset]
    view = view.set_column(view.schema.get_field_index("entry_id"), VIEW_SCHEMA.field("entry_id"), pa.array(entries))
    return view.set_column(view.schema.get_field_index("batch_index"), VIEW_SCHEMA.field("batch_index"),
                           pa.array(batches))


def write_view(io: FileIO, topic_path: str, rows: pa.Table, segments: Sequence[SegmentRef]) -> dict[str, object]:
    """One topic's kept rows (``topic_path`` plus view columns, times as µs, any order) as its view
    file: sorted by offset, message ids looked up (``fill_ids``), written through ``io`` under a
    fresh name (fsynced; nothing names it until the driver commits).  A ``_WRITTEN_SCHEMA`` row."""
    started = time.monotonic()
    columns = [rows.column(n).cast(TIMESTAMP) if n in TIME_COLUMNS else rows.column(n) for n in VIEW_SCHEMA.names]
    view = pa.Table.from_arrays(columns, names=VIEW_SCHEMA.names).sort_by("offset")
    view = fill_ids(view, segments).cast(VIEW_SCHEMA)
    file = new_view_file()
    io.write_new(f"{topic_path}/{file}", encode_view(view), anchor=topic_path)
    return {"topic_path": topic_path, "file": file, "rows": view.num_rows, "write_s": time.monotonic() - started}


def _view_writer(root: str, segments: Mapping[str, Sequence[SegmentRef]],
                 storage_options: Mapping[str, str] | None = None,
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: the input holds whole topics in ``(topic_path, offset)`` order; each
    topic's rows become one view file (``write_view``) written through the root's ``FileIO``."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        io = Broker.for_url(root, storage_options=storage_options).io
        pending: list[pa.RecordBatch] = []
        current: str | None = None

        def flush() -> pa.RecordBatch:
            assert current is not None
            return pa.RecordBatch.from_pylist(
                [write_view(io, current, pa.Table.from_batches(pending), segments.get(current, ()))])

        for batch in batches:
            paths = batch.column(0)
            for path in paths.unique().to_pylist():  # sorted input: a batch spans few topics
                piece = batch if paths.null_count == 0 and pc.all(pc.equal(paths, path)).as_py() else (
                    batch.filter(pc.equal(paths, path)))
                if path != current and pending:
                    yield flush()
                    pending = []
                current = path
                pending.append(piece)
        if pending:
            yield flush()

    return write


def _written_on_driver(io: FileIO, kept: DataFrame, segments: Mapping[str, Sequence[SegmentRef]],
                       ) -> list[dict[str, object]]:
    """The kept rows brought to the driver (``toArrow``) and each topic's view file written there
    (``write_view``): no shuffle to one task per topic and no Python worker."""
    table = kept.toArrow()
    paths = table.column("topic_path")
    topics = pc.unique(paths).to_pylist()
    return [write_view(io, path, table if len(topics) == 1 else table.filter(pc.equal(paths, path)),
                       segments.get(path, ())) for path in topics]


def compact_with_spark(spark: SparkSession, root: str, topic: str, *, up_to_offset: int | None = None,
                       dry_run: bool = False, retain_null_key: bool = False, parallelism: int | None = None,
                       spark_root: str | None = None, timings: dict[str, float] | None = None,
                       progress: Callable[[str], None] | None = None,
                       storage_options: Mapping[str, str] | None = None, shuffle_partitions: int | None = None,
                       carry_payload: bool = False, driver_write_rows: int | None = None,
                       driver_read_rows: int | None = None) -> CompactionSummary:
    """``broker_core.jobs.compaction.compact_topic`` on Spark (see the module docstring).

    ``timings``, when given, receives seconds per phase: ``planning`` (the log, Spark's look at the
    root), ``winners`` (the narrow scan and reduction, the winners on the driver), ``payload plan``
    (the payload pass's DataFrame built), ``views`` (the payload scan, the semi-join and the view
    files written by tasks; ``write`` is the writing summed over tasks), ``commit``; the fallback
    reports ``planning`` and ``spark``.  ``progress`` is told of each phase as it ends (kill trials
    use it).  ``shuffle_partitions`` is the job's
    ``spark.sql.shuffle.partitions`` (default: ``shuffle_partitions_for`` the planned rows; the
    session's own value is restored after).  ``carry_payload`` selects the one-scan reduction
    (``compaction_frames``), kept for measuring: the default two-pass shape is faster.
    ``driver_write_rows`` (default ``DRIVER_WRITE_ROWS``): up to this many winners the driver writes
    the view files, above it the tasks do (``retain_null_key`` and ``carry_payload`` always use tasks:
    their row count is not known before the write).  ``driver_read_rows`` (default
    ``DRIVER_READ_ROWS``): when the driver writes and the files holding a winner have up to this
    many rows, the driver also reads the kept rows from them (no Spark payload pass; ``payload
    plan`` is then ~0 and ``views`` is the driver's read and write).
    """
    started = time.monotonic()
    clock = {"t": started}

    def phase(name: str) -> None:
        now = time.monotonic()
        if timings is not None:
            timings[name] = timings.get(name, 0.0) + now - clock["t"]
        clock["t"] = now
        if progress is not None:
            progress(name)

    broker = Broker.for_url(root, storage_options=storage_options)
    name = TopicName.parse(topic)
    plans: list[tuple[TopicLog, CompactionPlan]] = []
    results: list[CompactionResult] = []
    for partition in broker.partitions(name, auto_create=False):
        topic_log = broker.topic_log(partition, create=False)
        if not topic_log.exists():
            continue
        plan = plan_compaction(topic_log, str(partition), up_to_offset=up_to_offset)
        if plan is None:
            results.append(up_to_date(topic_log, str(partition)))
        else:
            plans.append((topic_log, plan))
    base = spark_url(spark_root or root_uri(root, storage_options))
    native = bool(plans) and spark_can_open(spark, base, topic_reads(plans),
                                            instead="the compaction job's tasks read through the library instead")
    phase("planning")
    read = {p.topic_path: sum(t.hi - t.lo for t in compaction_tasks(p) if t.kind == "segment") for _, p in plans}
    if plans and not native:
        results += compact_planned_in_tasks(spark, root, plans, read, retain_null_key=retain_null_key,
                                            parallelism=parallelism, dry_run=dry_run, started_s=started,
                                            storage_options=storage_options)
        phase("spark")
    elif plans:
        partitions = shuffle_partitions or shuffle_partitions_for(spark, sum(read.values()))
        with _session_conf(spark, {**_JOB_CONF, "spark.sql.shuffle.partitions": str(partitions)}):
            results += _native(spark, broker, root, base, plans, read, retain_null_key=retain_null_key,
                               parallelism=parallelism, dry_run=dry_run, started_s=started, phase=phase,
                               timings=timings, storage_options=storage_options, carry_payload=carry_payload,
                               driver_write_rows=DRIVER_WRITE_ROWS if driver_write_rows is None
                               else driver_write_rows,
                               driver_read_rows=DRIVER_READ_ROWS if driver_read_rows is None
                               else driver_read_rows)
    return CompactionSummary(topic=str(name), results=tuple(sorted(results, key=lambda r: r.topic)))


def _kept_on_driver(io: FileIO, plan: CompactionPlan, read: TopicRead, winners: pa.Table) -> pa.Table:
    """One topic's kept rows (``VIEW_SCHEMA``, segment rows with ``UNKNOWN_ID``), read by the driver
    from the previous view and the segments holding a winner (``needed_segments``) one file at a
    time, each cut at once to the rows of winning messages (every chunk; tombstones dropped), as
    ``latest_per_key`` keeps them."""
    ends, spans = winners.column("_end").to_numpy(), winners.column("_span").to_numpy()
    wanted = pa.array(ends, pa.int64())
    tasks = [t for t in compaction_tasks(plan) if t.kind == "view"] + [
        CompactionTask(kind="segment", path=r.segment.path, base_offset=r.segment.base_offset, lo=r.row_lo,
                       hi=r.row_hi, max_message_bytes=plan.max_message_bytes)
        for r in needed_segments(read, ends, spans).segments]
    pieces = [VIEW_SCHEMA.empty_table()]
    for task in tasks:
        rows = read_compaction_task(io, plan.topic_path, task)
        rows = rows.filter(pc.is_valid(rows.column("key")))
        rows = rows.filter(pc.is_in(message_ends(rows), value_set=wanted))
        pieces.append(rows.filter(pc.is_valid(rows.column("value"))))
    return pa.concat_tables(pieces)


def _payload_rows_on_driver(plans: list[tuple[TopicLog, CompactionPlan]], reads: list[TopicRead],
                            winners: pa.Table) -> int:
    """Rows of the files the driver would read for the kept rows' payloads: the segment files holding
    a winner, and the previous views."""
    total = 0
    for index, ((_, plan), read) in enumerate(zip(plans, reads, strict=True)):
        mine = winners.filter(pc.equal(winners.column("_topic"), index))
        total += needed_segments(read, mine.column("_end").to_numpy(), mine.column("_span").to_numpy()).rows
        total += plan.previous.rows if plan.previous is not None else 0
    return total


def _native(spark: SparkSession, broker: Broker, root: str, base: str, plans: list[tuple[TopicLog, CompactionPlan]],
            read: dict[str, int], *, retain_null_key: bool, parallelism: int | None, dry_run: bool,
            started_s: float, phase: Callable[[str], None], timings: dict[str, float] | None,
            storage_options: Mapping[str, str] | None, carry_payload: bool,
            driver_write_rows: int, driver_read_rows: int) -> list[CompactionResult]:
    """The native job's Spark part and commits (see the module docstring)."""
    reads = topic_reads(plans)
    winners = None if carry_payload else winners_on_driver(spark, base, plans, reads)
    phase("winners")
    refs = {r.topic_path: tuple(s.segment for s in r.segments) for r in reads}
    slices = max(1, min(len(plans), parallelism or default_parallelism(spark)))
    by_topic = {p.topic_path: (lg, p) for lg, p in plans}
    on_driver = (winners is not None and not retain_null_key and winners.num_rows <= driver_write_rows
                 and _payload_rows_on_driver(plans, reads, winners) <= driver_read_rows)
    written: list[Any] = []
    counts: dict[str, int] = {}
    if on_driver:
        assert winners is not None
        phase("payload plan")
        for index, ((_, plan), topic_read) in enumerate(zip(plans, reads, strict=True)):
            mine = winners.filter(pc.equal(winners.column("_topic"), index))
            rows = _kept_on_driver(broker.io, plan, topic_read, mine)
            counts[plan.topic_path] = rows.num_rows
            if rows.num_rows and not dry_run:
                written.append(write_view(broker.io, plan.topic_path, rows, refs[plan.topic_path]))
    else:
        kept = kept_rows(spark, base, plans, reads, winners, retain_null_key=retain_null_key)
        phase("payload plan")
        if dry_run:
            counts = {} if kept is None else {
                r["topic_path"]: r["count"] for r in kept.groupBy("topic_path").count().collect()}
        elif kept is not None and not retain_null_key and winners is not None \
                and winners.num_rows <= driver_write_rows:
            written = _written_on_driver(broker.io, kept, refs)
        elif kept is not None:
            written = (kept.repartition(slices, "topic_path").sortWithinPartitions("topic_path", "offset")
                       .mapInArrow(_view_writer(root, refs, storage_options), _WRITTEN_SCHEMA).collect())
    phase("views")
    if dry_run:
        return [compaction_result(p, "dry-run", rows=counts.get(path, 0), messages_read=read[path],
                                  started_s=started_s) for path, (_, p) in by_topic.items()]
    if timings is not None:
        timings["write"] = sum(r["write_s"] for r in written)
    phase("written")
    done = {r["topic_path"]: r for r in written}
    results = []
    for path, (topic_log, plan) in by_topic.items():
        row = done.get(path)
        if row is None:  # every key deleted: an empty view, written here
            results.append(finish_compaction(topic_log, plan, VIEW_SCHEMA.empty_table(),
                                             messages_read=read[path], started_s=started_s))
        else:
            results.append(commit_view_file(topic_log, plan, file=row["file"], rows=row["rows"],
                                            messages_read=read[path], started_s=started_s))
    phase("commit")
    return results


__all__ = ["DRIVER_READ_ROWS", "DRIVER_WRITE_ROWS", "ROWS_PER_SHUFFLE_PARTITION", "compact_with_spark",
           "default_parallelism", "shuffle_partitions_for", "write_view"]
