"""The driver side of the native scan: which files, which rows, and the runs that give them ids.

A native read hands Spark's own Parquet reader the segment files of one snapshot per internal
topic; each row's offset and message id then follow from its file and its row index alone (the
log's ``add.tags`` carry every segment's base offset, base entry id and entry layout).  This module
turns a snapshot into plain values: per internal topic the files to read with their base offsets
(``offset = base_offset(file) + row_index``), and the *runs* that map an offset to its message id.

Why runs: a layout is a list of entries (``n > 0``: a batch of n messages; ``-k``: k single-message
entries), possibly one per entry.  Consecutive entries of the same shape form a *run*, anchored at
offset ``start`` with entry id ``entry_base``, in which ``entry = entry_base + (offset - start) div
size`` and ``batch = (offset - start) mod size`` (``size = -1``: singles, ``entry = entry_base +
offset - start``, batch ``-1``).  Offsets and entry ids are dense across segments, so runs merge over
segment boundaries: a topic of single entries, or of equal batches, is one run.  Few runs become a
Spark expression; many become a small table joined on an offset *bucket* (a power-of-two slice of
offsets, chosen so the table stays small) plus a range check (``run_table``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from broker_core.errors import DataLoss
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot
from broker_core.storage import FileIO
from broker_core.topic.compacted_view import CompactedTopic
from broker_core.topic.topic_log import TopicLog

RUN_TABLE_SCHEMA = pa.schema([
    pa.field("bucket", pa.int64(), nullable=False),  # offset >> shift
    pa.field("lo", pa.int64(), nullable=False),  # offsets [lo, hi) of the run fall in this bucket
    pa.field("hi", pa.int64(), nullable=False),
    pa.field("start", pa.int64(), nullable=False),  # the offset the run's formula counts from
    pa.field("entry_base", pa.int64(), nullable=False),  # entry id at run_start
    pa.field("size", pa.int64(), nullable=False),  # messages per entry in the run; -1 = single entries
])
"""Columns of the broadcast table that maps an offset to its run, for topics with many runs."""

_MIN_BUCKETS = 4096  # a bucket table this small is free to broadcast, whatever the layout


class OffsetRun(NamedTuple):
    """Read offsets ``[lo, hi)`` whose ids follow one formula, anchored at offset ``start`` (entry
    ``entry_base``; see the module docstring).  ``start <= lo``: a read may begin inside a run."""

    lo: int
    hi: int
    start: int
    entry_base: int
    size: int  # messages per entry; -1 = single entries


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
    max_message_bytes: int | None = None
    """The topic's ``maxMessageSize`` (``TopicLog.max_message_bytes``): each segment file's footer is
    checked against it before its pages are read (D125, D175); None: not checked."""
    io: FileIO | None = field(default=None, compare=False, repr=False)
    """The root the plan was made from: the DataFrame route checks footers through it (D176)."""


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
                     snapshot_version=snap.version, segments=tuple(reads), view=view, rows=rows,
                     max_message_bytes=log.max_message_bytes, io=log.io)


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


def offset_runs(reads: tuple[SegmentRead, ...]) -> list[OffsetRun]:
    """The runs of the read rows in the offset space, clipped to the read and merged across segment
    boundaries wherever the arithmetic carries on (a topic of single entries, or of equal batches, is
    one run however many segments it has)."""
    runs: list[OffsetRun] = []
    for read in reads:
        seg = read.segment
        for a, b, entry, size in layout_runs(seg):
            lo, hi = max(a, read.row_lo), min(b, read.row_hi)
            if hi <= lo:
                continue
            run = OffsetRun(seg.base_offset + lo, seg.base_offset + hi, seg.base_offset + a, entry, size)
            if runs and _continues(runs[-1], run):
                runs[-1] = runs[-1]._replace(hi=run.hi)
            else:
                runs.append(run)
    return runs


def _continues(prev: OffsetRun, run: OffsetRun) -> bool:
    """Whether ``run`` is ``prev``'s formula carried on: adjacent, same shape, same entry counting."""
    if prev.hi != run.lo or prev.size != run.size:
        return False
    step = run.start - prev.start
    if run.size < 0:
        return prev.entry_base + step == run.entry_base
    return step % run.size == 0 and prev.entry_base + step // run.size == run.entry_base


def run_table(runs: list[OffsetRun]) -> tuple[pa.Table, int]:
    """The bucketed run table of a topic's runs (``RUN_TABLE_SCHEMA``), and its bucket shift: the
    smallest power-of-two width that keeps the table at most about twice the number of runs (or
    ``_MIN_BUCKETS``), so an offset meets one or two runs."""
    if not runs:
        return RUN_TABLE_SCHEMA.empty_table(), 0
    span = runs[-1].hi - runs[0].lo
    budget = max(_MIN_BUCKETS, len(runs))
    shift = 0
    while (span >> shift) > budget:
        shift += 1
    cols = np.asarray([(r.lo, r.hi, r.start, r.entry_base, r.size) for r in runs], dtype=np.int64).reshape(-1, 5)
    lo_a, hi_a = cols[:, 0], cols[:, 1]
    first, last = lo_a >> shift, (hi_a - 1) >> shift
    counts = last - first + 1
    which = np.repeat(np.arange(len(lo_a)), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    buckets = np.repeat(first, counts) + (np.arange(int(counts.sum())) - starts)
    arrays = [pa.array(buckets, pa.int64())] + [pa.array(cols[which, i], pa.int64()) for i in range(5)]
    return pa.Table.from_arrays(arrays, schema=RUN_TABLE_SCHEMA), shift


__all__ = ["RUN_TABLE_SCHEMA", "OffsetRun", "SegmentRead", "TopicRead", "layout_runs", "offset_runs",
           "plan_topic_read", "run_table"]
