"""Reading a topic's messages by offset range or publish time from a snapshot's segments.

Pure functions of a ``Snapshot`` and a way to get a segment's decoded rows (``TopicLog.segment_table``,
which caches), so the range logic is one place and is tested without storage.  Removed ranges
(retention) are simply absent from what a read returns; callers detect data loss by comparing with
the snapshot's ``first_offset``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from broker_core.errors import SegmentCorrupted
from broker_core.log.segment import SEGMENT_SCHEMA, widen
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import Snapshot

SegmentRows = Callable[[SegmentRef], pa.Table]


def read_range(snap: Snapshot, start: int, end: int, segment_rows: SegmentRows, *,
               partial: bool, spanned: Callable[[int, int], None] | None = None,
               ) -> tuple[pa.Table, np.ndarray, int]:
    """The live rows with offsets in [start, end), their offsets, and where reading stopped.

    With ``partial``, a damaged segment after some readable rows ends the read early (``stop`` is its
    base offset, where the next read starts and reports the damage); otherwise, and for a read that
    starts at a damaged segment, ``SegmentCorrupted`` propagates.  ``spanned`` is told the index of
    the first segment after the read and how many segments it read (``TopicLog``'s readahead).
    ``segment_rows`` may leave out a segment's all-null columns (``TopicLog.segment_rows``); what is
    returned has every column.
    """
    stop = end
    end = min(end, snap.next_offset)
    pieces: list[pa.Table] = []
    runs: list[list[int]] = []  # [first, end) of each run of consecutive offsets read (gaps: retention)
    i = snap.segment_index_for(start)
    while start < end and i < len(snap.segments):
        seg = snap.segments[i]
        if seg.base_offset >= end:
            break
        lo = max(start, seg.base_offset) - seg.base_offset
        hi = min(end, seg.end_offset) - seg.base_offset
        try:
            whole = segment_rows(seg)
        except SegmentCorrupted:
            if not (partial and pieces):
                raise
            stop = seg.base_offset
            break
        pieces.append(whole if lo == 0 and hi == whole.num_rows else whole.slice(lo, hi - lo))
        if runs and runs[-1][1] == seg.base_offset + lo:
            runs[-1][1] = seg.base_offset + hi
        else:
            runs.append([seg.base_offset + lo, seg.base_offset + hi])
        i += 1
    if spanned is not None:
        spanned(i, len(pieces))
    if not pieces:
        return SEGMENT_SCHEMA.empty_table(), np.empty(0, dtype=np.int64), stop
    offsets = [np.arange(first, run_end, dtype=np.int64) for first, run_end in runs]
    return _joined(pieces), offsets[0] if len(offsets) == 1 else np.concatenate(offsets), stop


def _joined(pieces: list[pa.Table]) -> pa.Table:
    """The pieces as one ``SEGMENT_SCHEMA`` table.  Pieces may lack the columns null in every row of
    their segment (``decode_segment_narrow``): when they all lack the same ones (a backlog written
    alike), the narrow pieces are concatenated and the null columns added once for the whole read;
    otherwise each piece is widened first."""
    if len(pieces) == 1:
        return widen(pieces[0])
    try:
        return widen(pa.concat_tables(pieces))  # (which compares the pieces' schemas anyway)
    except pa.ArrowInvalid:
        return pa.concat_tables([widen(piece) for piece in pieces])


def offset_for_publish_time(snap: Snapshot, publish_time_ms: int, segment_table: SegmentRows) -> int:
    """The first live offset whose publish time is at or after ``publish_time_ms`` (inclusive); the
    snapshot's next offset if there is none.  Segments ending earlier are skipped by their stats."""
    for seg in snap.segments:
        if seg.max_publish_ms < publish_time_ms:
            continue
        times = segment_table(seg).column("publish_time").cast(pa.int64()).to_numpy()
        hits = np.nonzero(times >= publish_time_ms * 1000)[0]
        if len(hits):
            return seg.base_offset + int(hits[0])
    return snap.next_offset


__all__ = ["SegmentRows", "offset_for_publish_time", "read_range"]
