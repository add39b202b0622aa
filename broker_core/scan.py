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
from broker_core.storage import file_io_for
from broker_core.topic_log import TopicLog

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
    """
    log = TopicLog(file_io_for(task.root, fsync=False), task.topic_path)
    snap = log.snapshot()
    for start, end in task.ranges:
        if start < snap.first_offset and task.fail_on_data_loss:
            raise DataLoss(
                f"offsets [{start}, {min(end, snap.first_offset)}) of {task.topic} were removed by retention "
                "before this query read them; set failOnDataLoss=false to skip them",
                topic=task.topic,
            )
        pos = max(start, snap.first_offset)
        while pos < end:
            stop = min(end, pos + max_rows)
            rows, offsets = log.read(pos, stop, snapshot=snap)
            pos = stop
            if task.slot_range is not None and rows.num_rows:
                slots = rows.column("sticky_key_hash").to_numpy(zero_copy_only=False) % HASH_SLOTS
                keep = (slots >= task.slot_range[0]) & (slots <= task.slot_range[1])
                if not keep.all():
                    rows = rows.filter(pa.array(keep))
                    offsets = offsets[keep]
            if not len(offsets):
                continue
            entries, batches = log.ids_for_offsets(offsets, snapshot=snap)
            yield ScanChunk(rows=rows, offsets=offsets, entry_ids=entries, batch_indexes=batches,
                            ledger_id=snap.ledger_id)


__all__ = ["HASH_SLOTS", "ScanChunk", "ScanTask", "scan", "split_slots"]
