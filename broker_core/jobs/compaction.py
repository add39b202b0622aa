"""Topic compaction: the latest message per key below a horizon, as a view beside each internal topic.

``compact_topic`` runs Pulsar's topic compaction as a batch-reconcile job (DESIGN.md section 7) over
every internal topic of a topic:

- **What survives.** For each partition key, the newest message with an offset below the horizon.
  A newest message with a null value is a *tombstone*: it removes its key from the view.  Messages
  without a key are left out of the view (Pulsar's default, ``topicCompactionRetainNullKey=false``;
  ``retain_null_key=True`` keeps them all).  A chunked message competes as one message (its last
  chunk's offset) and survives with all of its chunks.
- **The horizon** defaults to the topic's next offset when the run starts ("up to a point": messages
  committed meanwhile are left for the next run) and never moves backwards.  An explicit
  ``up_to_offset`` is lowered to the start of a chunked message it would cut.
- **Incremental.** A run starts from the previous view and folds in only the log between the old
  and the new horizon, in slices, so memory is bounded by the number of keys plus one slice.  Each
  fold is vectorised (``group_by(key).max(offset)`` and ``is_in``), never a Python loop per row.
- **Safe to kill, safe beside producers and consumers.** The log is only read; the view file is
  written under a fresh name and fsynced before a new pointer version names it (put-if-absent), so
  readers see the old view or the new one (``broker_core/topic/compacted_view.py``).  Orphaned files are
  left for vacuum.

The functions below the entry point are shared with the Spark job (``spark_pubsub/jobs.py``), which
computes the same reduction with Spark and commits through ``finish_compaction``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.errors import InvalidConfiguration, SegmentTooLarge
from broker_core.jobs.progress import JobProgress
from broker_core.log.segment import decode_segment
from broker_core.log.segment_bounds import Oversized
from broker_core.log.snapshot import Snapshot
from broker_core.naming import TopicName
from broker_core.storage import FileIO
from broker_core.topic.compacted_view import (
    POSITION_FIELDS,
    VIEW_SCHEMA,
    ViewPointer,
    decode_view,
    encode_view,
    new_view_file,
    view_store,
)
from broker_core.topic.topic_log import TopicLog

if TYPE_CHECKING:
    from broker_core.broker.broker import Broker

SLICE_ROWS = 1 << 20
"""Log rows folded into the running view at a time (bounds memory; large enough to vectorise well)."""

_UNKNOWN_ID = -1  # entry id of a row read from the log before its id is looked up (real ids are >= 0)
_POSITION_NAMES = tuple(f.name for f in POSITION_FIELDS)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What one run compacts: the previous view, and the log offsets ``[start, horizon)`` to fold in."""

    topic: str
    topic_path: str
    previous: ViewPointer | None
    start: int
    horizon: int
    snapshot: Snapshot = field(repr=False)
    max_message_bytes: int | None = None  # the topic's maxMessageSize: segments above it are refused (D125)

    @property
    def ledger_id(self) -> int:
        return self.snapshot.ledger_id


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The outcome for one internal topic.

    ``status`` is ``compacted`` (a new view was committed), ``dry-run`` (computed, nothing written),
    ``up-to-date`` (nothing new below the horizon) or ``superseded`` (another run committed a view at
    least as new first; ours was discarded).
    """

    topic: str
    status: str
    horizon: int
    previous_horizon: int
    messages_read: int
    rows: int
    file: str | None = None
    version: int | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "status": self.status, "horizon": self.horizon,
                "previousHorizon": self.previous_horizon, "messagesRead": self.messages_read,
                "rows": self.rows, "file": self.file, "version": self.version,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True, slots=True)
class CompactionSummary:
    """Per internal topic results of one ``compact_topic`` call."""

    topic: str
    results: tuple[CompactionResult, ...]

    @property
    def messages_read(self) -> int:
        return sum(r.messages_read for r in self.results)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "messagesRead": self.messages_read, "rows": self.rows,
                "partitions": [r.to_json() for r in self.results]}


# -- the reduction ------------------------------------------------------------------------------------


def message_ends(table: pa.Table) -> pa.Array:
    """Per row, the offset of its message's last row: the row itself, or a chunk's last chunk.

    A chunked message's chunks are consecutive offsets committed together (``docs/DECISIONS.md``
    D24), so chunk ``i`` of ``n`` ends its message at ``offset + n - 1 - i``.
    """
    offsets = table.column("offset")
    if table.column("num_chunks").null_count == table.num_rows:
        return offsets.combine_chunks() if isinstance(offsets, pa.ChunkedArray) else offsets
    num_chunks, chunk_id = table.column("num_chunks").fill_null(1), table.column("chunk_id").fill_null(0)
    rest = pc.subtract(pc.subtract(num_chunks, 1), chunk_id)
    return pc.add(offsets, pc.max_element_wise(rest, 0).cast(pa.int64())).combine_chunks()


def latest_per_key(table: pa.Table, *, retain_null_key: bool = False) -> pa.Table:
    """Reduce ``VIEW_SCHEMA`` rows to the compacted view: the newest message per key, tombstones dropped.

    The input may be in any order (offsets decide); the output keeps the input's order.  Folding is
    associative: ``latest_per_key(concat(latest_per_key(a), b))`` equals ``latest_per_key(concat(a,
    b))`` when ``b`` holds only later offsets, which is what makes incremental runs correct.
    """
    keyed = table.filter(pc.is_valid(table.column("key")))
    ends = message_ends(keyed)
    is_end = pc.equal(ends, keyed.column("offset"))
    candidates = pa.table({"key": keyed.column("key"), "offset": keyed.column("offset")}).filter(is_end)
    winners = candidates.group_by("key").aggregate([("offset", "max")]).column("offset_max")
    kept = keyed.filter(pc.is_in(ends, value_set=winners.combine_chunks()))
    # a winner with a null value is a tombstone: its key leaves the view (chunks always carry values)
    kept = kept.filter(pc.is_valid(kept.column("value")))
    if retain_null_key:
        kept = pa.concat_tables([kept, table.filter(pc.is_null(table.column("key")))])
    return kept


# -- planning, reading, committing (shared with the Spark job) -------------------------------------


def plan_compaction(log: TopicLog, topic: str, *, up_to_offset: int | None = None) -> CompactionPlan | None:
    """What a run over ``log`` would fold in; None when the view is already at or past the horizon."""
    if up_to_offset is not None and (isinstance(up_to_offset, bool) or not isinstance(up_to_offset, int)
                                     or up_to_offset < 0):
        raise InvalidConfiguration(f"up_to_offset must be an int >= 0 (an offset), got {up_to_offset!r}")
    snap = log.snapshot()
    horizon = snap.next_offset if up_to_offset is None else min(up_to_offset, snap.next_offset)
    if horizon < snap.next_offset:
        horizon = _message_boundary(log, snap, horizon)
    previous = view_store(log.io, log.path).latest()
    if previous is not None and previous.ledger_id != snap.ledger_id:
        previous = None  # a view of an earlier topic of the same name
    floor = previous.horizon if previous is not None else 0
    if horizon <= floor:
        return None
    return CompactionPlan(topic=topic, topic_path=log.path, previous=previous,
                          start=max(floor, snap.first_offset), horizon=horizon, snapshot=snap,
                          max_message_bytes=log.max_message_bytes)


def _message_boundary(log: TopicLog, snap: Snapshot, horizon: int) -> int:
    """Lower ``horizon`` to the first chunk of a chunked message it would cut in two."""
    if horizon <= snap.first_offset:
        return horizon
    rows, _ = log.read(horizon - 1, horizon, snapshot=snap)
    chunk_id, num_chunks = rows.column("chunk_id")[0].as_py(), rows.column("num_chunks")[0].as_py()
    if num_chunks is not None and chunk_id is not None and chunk_id < num_chunks - 1:
        return horizon - 1 - chunk_id
    return horizon


def with_positions(rows: pa.Table, offsets: np.ndarray) -> pa.Table:
    """Segment rows plus their offsets (entry ids and batch indexes still unknown, looked up at the end)."""
    n = rows.num_rows
    return pa.Table.from_arrays(
        [*rows.columns, pa.array(offsets, pa.int64()), pa.array(np.full(n, _UNKNOWN_ID, dtype=np.int64)),
         pa.array(np.full(n, -1, dtype=np.int32))],
        schema=VIEW_SCHEMA,
    )


@dataclass(frozen=True, slots=True)
class CompactionTask:
    """One piece of a run's input, for engines that read in parallel (plain values: Spark rows pickle).

    ``kind`` is ``view`` (the previous view file, read whole) or ``segment`` (rows ``[lo, hi)`` of
    the segment file ``path`` whose first row has offset ``base_offset``).
    """

    kind: str
    path: str
    base_offset: int = 0
    lo: int = 0
    hi: int = 0
    max_message_bytes: int | None = None  # a segment declaring bigger messages is refused (D125)


def compaction_tasks(plan: CompactionPlan) -> list[CompactionTask]:
    """The previous view and the segment slices covering the log offsets ``[plan.start, plan.horizon)``."""
    tasks = [] if plan.previous is None else [CompactionTask(kind="view", path=plan.previous.file)]
    snap = plan.snapshot
    i = snap.segment_index_for(plan.start)
    while i < len(snap.segments) and snap.segments[i].base_offset < plan.horizon:
        seg = snap.segments[i]
        lo = max(plan.start, seg.base_offset) - seg.base_offset
        hi = min(plan.horizon, seg.end_offset) - seg.base_offset
        tasks.append(CompactionTask(kind="segment", path=seg.path, base_offset=seg.base_offset, lo=lo, hi=hi,
                                    max_message_bytes=plan.max_message_bytes))
        i += 1
    return tasks


def read_compaction_task(io: FileIO, topic_path: str, task: CompactionTask,
                         columns: list[str] | None = None) -> pa.Table:
    """A task's rows as ``VIEW_SCHEMA`` (or only ``columns``, which must include ``offset``).

    Segment rows get their offsets; their entry ids stay unknown until ``finish_compaction``.  This
    opens storage directly, so it runs in any process (the Spark job's executors).
    """
    names = list(columns or VIEW_SCHEMA.names)
    if task.kind == "view":
        table = pq.read_table(io.open_input(f"{topic_path}/{task.path}"), columns=names)
        return table.cast(pa.schema([VIEW_SCHEMA.field(c) for c in names]))
    wanted = [c for c in names if c not in _POSITION_NAMES]
    path = f"{topic_path}/{task.path}"
    try:
        rows = decode_segment(io.open_input(path), columns=wanted, max_message_bytes=task.max_message_bytes)
    except Oversized as exc:
        raise SegmentTooLarge(
            f"segment {path!r} {exc}; compaction reads none of it.  If its messages are genuine, raise "
            "maxMessageSize and run again; otherwise set it aside with `pubsub topics check TOPIC --repair "
            "--execute`", path=path, offset=task.base_offset, max_message_size=task.max_message_bytes,
        ) from None
    rows = rows.slice(task.lo, task.hi - task.lo)
    offsets = np.arange(task.base_offset + task.lo, task.base_offset + task.hi, dtype=np.int64)
    if columns is None:
        return with_positions(rows, offsets)
    return rows.append_column(VIEW_SCHEMA.field("offset"), pa.array(offsets)).select(names)


def read_previous(log: TopicLog, plan: CompactionPlan) -> pa.Table:
    """The previous view's rows (``VIEW_SCHEMA``), or an empty table on the first run."""
    if plan.previous is None:
        return VIEW_SCHEMA.empty_table()
    return decode_view(log.io.open_input(f"{log.path}/{plan.previous.file}"))


def read_log_slices(log: TopicLog, plan: CompactionPlan, *,
                    slice_rows: int = SLICE_ROWS) -> Iterator[pa.Table]:
    """The log rows ``[plan.start, plan.horizon)`` as ``VIEW_SCHEMA`` tables of up to ``slice_rows``."""
    pos = plan.start
    while pos < plan.horizon:
        stop = min(plan.horizon, pos + slice_rows)
        rows, offsets = log.read(pos, stop, snapshot=plan.snapshot)
        pos = stop
        if rows.num_rows:
            yield with_positions(rows, offsets)


def finish_compaction(log: TopicLog, plan: CompactionPlan, view: pa.Table, *, dry_run: bool = False,
                      messages_read: int = 0, started_s: float | None = None) -> CompactionResult:
    """Sort the reduced rows, fill in their message ids, write the view file and commit the pointer."""
    view = view.cast(VIEW_SCHEMA) if view.schema != VIEW_SCHEMA else view
    view = view.sort_by("offset")
    entry_ids = view.column("entry_id").to_numpy()
    unknown = entry_ids == _UNKNOWN_ID
    if unknown.any():
        offsets = view.column("offset").to_numpy()
        entries, batches = log.ids_for_offsets(offsets[unknown], snapshot=plan.snapshot)
        entry_ids = entry_ids.copy()
        entry_ids[unknown] = entries
        batch_indexes = view.column("batch_index").to_numpy().copy()
        batch_indexes[unknown] = batches
        view = view.set_column(view.schema.get_field_index("entry_id"), VIEW_SCHEMA.field("entry_id"),
                               pa.array(entry_ids))
        view = view.set_column(view.schema.get_field_index("batch_index"), VIEW_SCHEMA.field("batch_index"),
                               pa.array(batch_indexes))
    if dry_run:
        return compaction_result(plan, "dry-run", rows=view.num_rows, messages_read=messages_read,
                                 started_s=started_s)
    file = new_view_file()
    log.io.write_new(f"{log.path}/{file}", encode_view(view), anchor=log.path)  # fsynced before anything names it
    return commit_view_file(log, plan, file=file, rows=view.num_rows, messages_read=messages_read,
                            started_s=started_s)


def compaction_result(plan: CompactionPlan, status: str, *, rows: int, messages_read: int,
                      started_s: float | None, file: str | None = None,
                      version: int | None = None) -> CompactionResult:
    """The result of a run over ``plan``."""
    seconds = 0.0 if started_s is None else time.monotonic() - started_s
    previous_horizon = plan.previous.horizon if plan.previous is not None else 0
    return CompactionResult(topic=plan.topic, status=status, horizon=plan.horizon,
                            previous_horizon=previous_horizon, messages_read=messages_read,
                            rows=rows, file=file, version=version, seconds=seconds)


def commit_view_file(log: TopicLog, plan: CompactionPlan, *, file: str, rows: int, messages_read: int = 0,
                     started_s: float | None = None) -> CompactionResult:
    """Name a written, fsynced view file (``new_view_file``, ``VIEW_SCHEMA`` rows in offset order with
    their ids) in a new pointer version; a file superseded by a newer view is deleted (no pointer ever
    named it, so no reader can have opened it).  Engines that write the file elsewhere (the Spark
    job's tasks) commit through here, exactly as the local run does."""
    previous_horizon = plan.previous.horizon if plan.previous is not None else 0
    pointer = view_store(log.io, log.path).commit(
        horizon=plan.horizon, file=file, rows=rows, ledger_id=plan.ledger_id, previous_horizon=previous_horizon,
    )
    if pointer is None:
        log.io.delete(f"{log.path}/{file}")
        return compaction_result(plan, "superseded", rows=rows, messages_read=messages_read, started_s=started_s)
    return compaction_result(plan, "compacted", rows=rows, messages_read=messages_read, started_s=started_s,
                             file=file, version=pointer.version)


def up_to_date(log: TopicLog, topic: str) -> CompactionResult:
    """The result of a run that found nothing new below the horizon (it describes the current view)."""
    pointer = view_store(log.io, log.path).latest()
    if pointer is None:
        return CompactionResult(topic=topic, status="up-to-date", horizon=0, previous_horizon=0,
                                messages_read=0, rows=0)
    return CompactionResult(topic=topic, status="up-to-date", horizon=pointer.horizon,
                            previous_horizon=pointer.horizon, messages_read=0, rows=pointer.rows,
                            file=pointer.file, version=pointer.version)


# -- the entry points -----------------------------------------------------------------------------


def compact_internal_topic(log: TopicLog, topic: str, *, up_to_offset: int | None = None,
                           dry_run: bool = False, retain_null_key: bool = False,
                           slice_rows: int = SLICE_ROWS) -> CompactionResult:
    """Compact one internal topic (see the module docstring)."""
    started = time.monotonic()
    plan = plan_compaction(log, topic, up_to_offset=up_to_offset)
    if plan is None:
        return up_to_date(log, topic)
    view = read_previous(log, plan)
    read = 0
    for rows in read_log_slices(log, plan, slice_rows=slice_rows):
        read += rows.num_rows
        view = latest_per_key(pa.concat_tables([view, rows]), retain_null_key=retain_null_key)
    return finish_compaction(log, plan, view, dry_run=dry_run, messages_read=read, started_s=started)


def compact_topic(broker: Broker, topic: str | TopicName, *, up_to_offset: int | None = None,
                  dry_run: bool = False, retain_null_key: bool = False) -> CompactionSummary:
    """Compact every internal topic of ``topic`` (each partition on its own; the same ``up_to_offset``
    applies to each).

    Raises:
        TopicNotFound: the topic does not exist (compaction never creates one).
    """
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    results = []
    partitions = broker.partitions(name, auto_create=False)
    progress: JobProgress[Any] = JobProgress("compaction", str(name), total=len(partitions), dry_run=dry_run)
    try:
        for partition in partitions:
            log = broker.topic_log(partition, create=False)
            if not log.exists():  # a partition nobody has written to yet
                continue
            progress.start(str(partition))
            results.append(compact_internal_topic(log, str(partition), up_to_offset=up_to_offset,
                                                  dry_run=dry_run, retain_null_key=retain_null_key))
    finally:
        progress.end()  # compaction keeps a summary type of its own
    return CompactionSummary(topic=str(name), results=tuple(results))


__all__ = [
    "SLICE_ROWS",
    "CompactionPlan",
    "CompactionResult",
    "CompactionSummary",
    "CompactionTask",
    "commit_view_file",
    "compact_internal_topic",
    "compact_topic",
    "compaction_result",
    "compaction_tasks",
    "finish_compaction",
    "latest_per_key",
    "message_ends",
    "plan_compaction",
    "read_compaction_task",
    "read_log_slices",
    "read_previous",
    "up_to_date",
    "with_positions",
]
