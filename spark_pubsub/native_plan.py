"""The driver side of the native scan: which files, which rows, and the tables that give them ids.

A native read hands Spark's own Parquet reader the segment files of one snapshot per internal
topic; each row's offset and message id then follow from its file and its row index alone (the
log's ``add.tags`` carry every segment's base offset, base entry id and entry layout).  This module
turns a snapshot into plain values: per internal topic the files to read, and one *id table* row
per (file, row bucket, layout run) that Spark joins on ``(_metadata.file_name, row_index >> shift)``.

Why runs and buckets: a layout is a list of entries (``n > 0``: a batch of n messages; ``-k``: k
single-message entries), possibly one per entry.  Consecutive entries of the same shape form a
*run*, in which ``entry = entry_base + (row - run_start) div size`` and ``batch = (row - run_start)
mod size`` (``size = -1``: singles, ``entry = entry_base + row - run_start``, batch ``-1``).  A row
finds its run by an equi-join on its bucket (a fixed power-of-two slice of row indexes, chosen so
the table stays small) plus a range check, so no Python runs per row and a file with one run costs
one hash lookup per row.  Rows outside the read's offset range match no run and drop out of the join.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from broker_core.errors import DataLoss
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot
from broker_core.topic.compacted_view import CompactedTopic
from broker_core.topic.topic_log import TopicLog

ID_TABLE_SCHEMA = pa.schema([
    pa.field("file_name", pa.string(), nullable=False),
    pa.field("bucket", pa.int64(), nullable=False),
    pa.field("row_lo", pa.int64(), nullable=False),  # rows [row_lo, row_hi) of the file are read
    pa.field("row_hi", pa.int64(), nullable=False),
    pa.field("run_start", pa.int64(), nullable=False),  # the run's first row (for div/mod)
    pa.field("entry_base", pa.int64(), nullable=False),  # entry id of the run's first row
    pa.field("size", pa.int64(), nullable=False),  # messages per entry in the run; -1 = single entries
    pa.field("base_offset", pa.int64(), nullable=False),
])
"""Columns of the broadcast table that maps a segment row to its offset and message id."""

_MIN_BUCKETS = 4096  # a bucket table this small is free to broadcast, whatever the layout


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Rows ``[row_lo, row_hi)`` of one segment file."""

    segment: SegmentRef
    row_lo: int
    row_hi: int


@dataclass(frozen=True, slots=True)
class TopicRead:
    """What a native read takes from one internal topic, fixed from one snapshot.

    ``view`` is ``(view file, lo, hi)``: offsets ``[lo, hi)`` served by the compacted view
    (``readCompacted``); ``segments`` cover the log's part of the range.
    """

    topic: str
    partition: int
    topic_path: str
    ledger_id: int
    snapshot_version: int
    segments: tuple[SegmentRead, ...] = ()
    view: tuple[str, int, int] | None = None
    rows: int = field(default=0)


def plan_topic_read(log: TopicLog, *, topic: str, partition: int, start: int, end: int,
                    read_compacted: bool, fail_on_data_loss: bool, snapshot: Snapshot | None = None) -> TopicRead:
    """The files and row ranges holding offsets ``[start, end)`` of ``log`` in one snapshot.

    The same rules as the Data Source path's ``broker_core.topic.scan.scan``: below the compacted view's
    horizon the view serves the range; a start below the log's first offset is data loss.

    Raises:
        DataLoss: retention removed part of the range and ``fail_on_data_loss`` is set.
    """
    snap = snapshot or log.snapshot()
    end = min(end, snap.next_offset)
    view = None
    if read_compacted and start < end:
        compacted = CompactedTopic(log).view(snap)
        if compacted is not None and start < compacted.horizon:
            view = (compacted.file, start, min(end, compacted.horizon))
            start = compacted.horizon
    reads: list[SegmentRead] = []
    if start < end:
        if start < snap.first_offset and fail_on_data_loss:
            raise DataLoss(
                f"offsets [{start}, {min(end, snap.first_offset)}) of {topic} were removed by retention "
                "before this query read them; set failOnDataLoss=false to skip them",
                topic=topic,
            )
        start = max(start, snap.first_offset)
        i = snap.segment_index_for(start)
        while i < len(snap.segments) and snap.segments[i].base_offset < end:
            seg = snap.segments[i]
            lo, hi = max(start, seg.base_offset) - seg.base_offset, min(end, seg.end_offset) - seg.base_offset
            if hi > lo:
                reads.append(SegmentRead(seg, lo, hi))
            i += 1
    rows = sum(r.row_hi - r.row_lo for r in reads)
    return TopicRead(topic=topic, partition=partition, topic_path=log.path, ledger_id=snap.ledger_id,
                     snapshot_version=snap.version, segments=tuple(reads), view=view, rows=rows)


def layout_runs(seg: SegmentRef) -> list[tuple[int, int, int, int]]:
    """``(row_start, row_end, entry_base, size)`` runs of a segment's layout (see the module docstring)."""
    runs: list[list[int]] = []
    row, entry = 0, seg.base_entry_id
    for part in seg.layout:
        size = part if part > 0 else -1
        count = part if part > 0 else -part
        last = runs[-1] if runs else None
        if last is not None and last[3] == size:  # same shape: the run's arithmetic still holds
            last[1] += count
        else:
            runs.append([row, row + count, entry, size])
        row += count
        entry += 1 if part > 0 else -part
    return [(a, b, e, s) for a, b, e, s in runs]


def bucket_shift(reads: list[SegmentRead], runs: list[list[tuple[int, int, int, int]]]) -> int:
    """The bucket width (a power of two, as a shift) for one scan: the smallest width that keeps the
    table at most about twice the number of runs (or ``_MIN_BUCKETS``), so a row meets ~1-2 runs."""
    rows = sum(r.row_hi - r.row_lo for r in reads)
    budget = max(_MIN_BUCKETS, sum(len(r) for r in runs))
    shift = 0
    while (rows >> shift) > budget:
        shift += 1
    return shift


def id_table(reads: tuple[SegmentRead, ...]) -> tuple[pa.Table, int]:
    """The id table of a topic's segment reads, and its bucket shift."""
    runs = [layout_runs(r.segment) for r in reads]
    shift = bucket_shift(list(reads), runs)
    names: list[str] = []
    cols: list[list[int]] = [[] for _ in range(6)]
    for read, seg_runs in zip(reads, runs, strict=True):
        for a, b, entry, size in seg_runs:
            lo, hi = max(a, read.row_lo), min(b, read.row_hi)
            if hi <= lo:
                continue
            names.append(read.segment.path)
            for col, value in zip(cols, (lo, hi, a, entry, size, read.segment.base_offset), strict=True):
                col.append(value)
    lo_a, hi_a = np.asarray(cols[0], dtype=np.int64), np.asarray(cols[1], dtype=np.int64)
    first, last = lo_a >> shift, (hi_a - 1) >> shift
    counts = last - first + 1
    which = np.repeat(np.arange(len(lo_a)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    buckets = np.repeat(first, counts) + (np.arange(int(counts.sum())) - starts)
    arrays = [pa.array(np.asarray(names, dtype=object)[which] if names else [], pa.string()),
              pa.array(buckets, pa.int64())]
    arrays += [pa.array(np.asarray(c, dtype=np.int64)[which], pa.int64()) for c in cols]
    return pa.Table.from_arrays(arrays, schema=ID_TABLE_SCHEMA), shift


__all__ = ["ID_TABLE_SCHEMA", "SegmentRead", "TopicRead", "bucket_shift", "id_table", "layout_runs",
           "plan_topic_read"]
