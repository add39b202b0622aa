"""``pulsar_subscription_delayed``: per subscription, the unacknowledged messages whose deliver-at time
is still in the future.

No ``add`` records anything about ``deliver_at`` (its stats are not written), so the column is read
from the segments the backlogs cover, once per segment: what a segment holds never changes, so its
delayed rows (offset and deliver-at time, usually none) are kept by path and a later scrape of an
unchanged topic reads nothing (D178).  A segment whose footer says the column is all null costs its
footer only.  Segments before every subscription's first unacknowledged message are never read.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker_core.log.snapshot import Snapshot
from broker_core.storage import FileIO
from broker_core.subscription.cursor import Cursor

_LOG = logging.getLogger(__name__)
_EMPTY = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))

WHOLE_READ_BYTES = 64 * 1024
"""Segments up to this size are read whole for their footer (one request instead of a footer read)."""

Delayed = tuple[np.ndarray, np.ndarray]
"""Offsets of a segment's messages that carry a deliver-at time, and those times (epoch ms)."""


@dataclass(slots=True)
class _TopicCache:
    version: int = -1
    low: int = -1
    segments: dict[str, Delayed] = field(default_factory=dict)
    rows: Delayed = _EMPTY


class DelayedCounter:
    """Counts delayed messages per subscription, keeping each read segment's delayed rows."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._topics: dict[Hashable, _TopicCache] = {}

    def forget_except(self, keys: set[Hashable]) -> None:
        """Drop what is kept for topics no longer sampled."""
        self._topics = {k: c for k, c in self._topics.items() if k in keys}

    def count(self, key: Hashable, topic_path: str, snap: Snapshot, first_unacked: dict[str, int],
              docs: dict[str, dict[str, Any]], now_ms: int) -> dict[str, int]:
        """Subscription -> delayed messages; ``first_unacked`` and ``docs`` are the cursors' as sampled."""
        backlogged = [f for f in first_unacked.values() if f < snap.next_offset]
        if not backlogged:
            return dict.fromkeys(first_unacked, 0)
        offsets, times = self._rows(key, topic_path, snap, min(backlogged))
        out = dict.fromkeys(first_unacked, 0)
        if not len(offsets):
            return out
        future = times > now_ms
        for sub, first in first_unacked.items():
            mask = future & (offsets >= first)
            if not mask.any():
                continue
            candidates = offsets[mask]
            acked = Cursor.from_json(docs[sub]).acked
            out[sub] = int(len(candidates) - acked.contains_array(candidates).sum()) if acked else len(candidates)
        return out

    def _rows(self, key: Hashable, topic_path: str, snap: Snapshot, low: int) -> Delayed:
        cache = self._topics.setdefault(key, _TopicCache())
        if cache.version == snap.version and cache.low == low:
            return cache.rows
        kept: dict[str, Delayed] = {}
        for seg in snap.segments[snap.segment_index_for(low):]:
            rows = cache.segments.get(seg.path)
            if rows is None:
                rows = self._read(f"{topic_path}/{seg.path}", seg.base_offset, seg.size_bytes)
            kept[seg.path] = rows
        parts = [r for r in kept.values() if len(r[0])]
        cache.rows = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])) if parts else _EMPTY
        cache.version, cache.low, cache.segments = snap.version, low, kept
        return cache.rows

    def _read(self, path: str, base_offset: int, size_bytes: int) -> Delayed:
        try:
            # a small segment (the add says how small) is read whole, in one request, and parsed from
            # memory: cheaper than mapping it and reading its footer apart (D187); a missing file
            # then takes the usual path, which says so
            data = self.io.read_bytes(path) if size_bytes <= WHOLE_READ_BYTES else None
            with self.io.open_input(path) if data is None else pa.BufferReader(data) as source:
                parquet = pq.ParquetFile(source, pre_buffer=False)
                meta = parquet.metadata
                if _all_null(meta):
                    return _EMPTY
                column = parquet.read(["deliver_at"], use_threads=False).column(0)
        except (OSError, ValueError) as exc:  # a damaged segment: ``topics check`` reports it; not here
            _LOG.warning("metrics: cannot read deliver_at of %s: %s", path, exc)
            return _EMPTY
        valid = column.is_valid()
        present = np.flatnonzero(valid.to_numpy(zero_copy_only=False))
        if not len(present):
            return _EMPTY
        micros = pc.filter(column, valid).cast(pa.int64()).to_numpy(zero_copy_only=False)
        return (present.astype(np.int64) + base_offset, micros.astype(np.int64) // 1000)


def _all_null(meta: pq.FileMetaData) -> bool:
    """True when the footer's statistics say every ``deliver_at`` is null (False when it cannot tell)."""
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if "deliver_at" not in names:
        return True
    index = names.index("deliver_at")
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(index).statistics
        if stats is None or stats.null_count != group.num_rows:
            return False
    return True


__all__ = ["DelayedCounter"]
