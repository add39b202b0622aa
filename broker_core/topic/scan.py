"""Bulk scans of offset ranges for engines (the Spark source's executor side).

A ``ScanTask`` names an internal topic, the offset ranges to read and optionally a slice of the
Key_Shared hash space; ``scan`` yields Arrow tables of segment rows with their offsets and ids.  It
opens storage directly (no process-wide broker state), so a task can run in any process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from broker_core.errors import DataLoss
from broker_core.log.segment_bounds import DEFAULT_MAX_MESSAGE_BYTES
from broker_core.storage import file_io_for
from broker_core.topic.compacted_view import CompactedView, load_view
from broker_core.topic.topic_log import TopicLog

HASH_SLOTS = 65536


@dataclass(frozen=True, slots=True)
class ScanTask:
    """What one task reads: ``ranges`` are half-open offset ranges, ascending."""

    root: str
    topic_path: str
    topic: str
    partition: int
    ranges: tuple[tuple[int, int], ...]
    slot_range: tuple[int, int] | None = None  # inclusive [lo, hi] of hash % 65536
    fail_on_data_loss: bool = True
    redelivery: dict[int, int] = field(default_factory=dict)
    # readCompacted: (horizon, view file) fixed when the batch was planned; offsets below the horizon
    # are read from that (immutable) compacted view, so a replayed batch reads the same rows
    compacted: tuple[int, str] | None = None
    # how to reach an object-store root from the task's process (repr=False: may hold credentials)
    storage_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # the largest message the read accepts (the planner's maxMessageSize): a bigger one in a segment is
    # ``SegmentTooLarge`` before the segment is decompressed whole (D125)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


@dataclass(frozen=True, slots=True)
class ScanChunk:
    rows: pa.Table
    offsets: np.ndarray
    entry_ids: np.ndarray
    batch_indexes: np.ndarray
    ledger_id: int


def split_slots(count: int) -> list[tuple[int, int]]:
    """``count`` contiguous inclusive slot ranges covering 0..65535."""
    bounds = np.linspace(0, HASH_SLOTS, count + 1).astype(int)
    return [(int(bounds[i]), int(bounds[i + 1]) - 1) for i in range(count) if bounds[i + 1] > bounds[i]]


def scan(task: ScanTask, *, max_rows: int = 65_536) -> Iterator[ScanChunk]:
    """Yield the live rows of ``task`` in offset order, at most ``max_rows`` per chunk.

    Raises:
        DataLoss: part of a range was removed by retention and ``fail_on_data_loss`` is set.
        SegmentTooLarge: a segment holds a message above ``task.max_message_bytes`` (D125).
    """
    log = TopicLog(file_io_for(task.root, fsync=False, storage_options=dict(task.storage_options)), task.topic_path,
                   max_message_bytes=task.max_message_bytes)
    snap = log.snapshot()
    view = None
    if task.compacted is not None:
        view = load_view(log.io, task.topic_path, file=task.compacted[1], horizon=task.compacted[0])
    for start, end in task.ranges:
        if view is not None and start < view.horizon:
            yield from _view_chunks(task, view, start, end, max_rows, snap.ledger_id)
            start = view.horizon
            if start >= end:
                continue
        if start < snap.first_offset and task.fail_on_data_loss:
            raise DataLoss(
                f"offsets [{start}, {min(end, snap.first_offset)}) of {task.topic} were removed by retention "
                "before this query read them; set failOnDataLoss=false to skip them",
                topic=task.topic,
            )
        pos = max(start, snap.first_offset)
        lost = snap.holes(pos, end) if task.fail_on_data_loss else []
        if lost:
            raise DataLoss(
                f"offsets [{lost[0][0]}, {lost[0][1]}) of {task.topic} were set aside as damaged by `pubsub topics "
                "check --repair` before this query read them; set failOnDataLoss=false to skip them",
                topic=task.topic,
            )
        while pos < end:
            stop = min(end, pos + max_rows)
            rows, offsets = log.read(pos, stop, snapshot=snap, read_ahead_to=end)
            pos = stop
            keep = _slot_mask(rows, task.slot_range)
            if keep is not None:
                rows = rows.filter(pa.array(keep))
                offsets = offsets[keep]
            if not len(offsets):
                continue
            entries, batches = log.ids_for_offsets(offsets, snapshot=snap)
            yield ScanChunk(rows=rows, offsets=offsets, entry_ids=entries, batch_indexes=batches,
                            ledger_id=snap.ledger_id)


def _slot_mask(rows: pa.Table, slot_range: tuple[int, int] | None) -> np.ndarray | None:
    """Rows whose key hash falls in the task's slice of the hash space (None: keep every row)."""
    if slot_range is None or not rows.num_rows:
        return None
    slots = rows.column("sticky_key_hash").to_numpy(zero_copy_only=False) % HASH_SLOTS
    keep = (slots >= slot_range[0]) & (slots <= slot_range[1])
    return None if keep.all() else keep


def _view_chunks(task: ScanTask, view: CompactedView, start: int, end: int, max_rows: int,
                 ledger_id: int) -> Iterator[ScanChunk]:
    """The compacted view's rows in ``[start, min(end, horizon))``: no data-loss check applies, the
    view keeps them even after retention removed their segments."""
    piece = view.between(start, end)
    rows, offsets, entries, batches = piece.rows, piece.offsets, piece.entry_ids, piece.batch_indexes
    keep = _slot_mask(rows, task.slot_range)
    if keep is not None:
        rows = rows.filter(pa.array(keep))
        offsets, entries, batches = offsets[keep], entries[keep], batches[keep]
    for lo in range(0, len(offsets), max_rows):
        hi = lo + max_rows
        yield ScanChunk(rows=rows.slice(lo, max_rows), offsets=offsets[lo:hi], entry_ids=entries[lo:hi],
                        batch_indexes=batches[lo:hi], ledger_id=ledger_id)


__all__ = ["HASH_SLOTS", "ScanChunk", "ScanTask", "scan", "split_slots"]
