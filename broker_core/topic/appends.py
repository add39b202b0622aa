"""Appends in two halves: upload a segment now, commit it later, possibly with others in one commit.

``TopicLog.append`` runs both halves back to back.  A producer pipelines them
(``client/producer_pipeline``): while a commit of a partition is in flight, the segments of the next
batches upload, and the next commit makes all of them visible at once, each its own ``add`` with
its own entries, in order.  Only the commit JSON is ordered; segment uploads are independent of
versions.  A segment nobody commits (a writer killed mid-flight) is an orphan no ``add`` names:
invisible, and vacuum deletes it (``docs/PROTOCOL.md`` section 5).

Deduplication works as for a lone append: a segment is written without the rows that are
duplicates against the state its writer expects (the log, raised by ``floors``: the highest
sequence ids of the batches ahead of it that are not committed yet), and the commit checks every
segment of its group again against the state it lands on, in order; a segment whose rows changed is
written again before the commit is retried (``Rewrite``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import ProducerFenced
from broker_core.log.actions import Action, Add, Txn
from broker_core.log.segment import CompressionType, encode_segment, new_segment_name
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import TXN_NEXT_ENTRY_ID, TXN_NEXT_OFFSET, Snapshot
from broker_core.log.transaction_log import NothingToCommit
from broker_core.storage import FileIO
from broker_core.topic.append_checks import Rewrite, check_topic_id, dedup_keep_mask, filter_layout, producer_txns


@dataclass(frozen=True, slots=True, eq=False)
class PreparedAppend:
    """A segment written for a commit that has not happened yet (see ``TopicLog.prepare``).

    ``table`` and ``layout`` are the rows as offered; ``keep`` marks those the segment holds
    (False: a duplicate); ``path`` is the segment's name in the topic directory, None when no row
    was kept.
    """

    table: pa.Table
    layout: list[int]
    compression: CompressionType
    dedup: bool
    keep: np.ndarray
    rows: pa.Table
    path: str | None
    size_bytes: int = 0
    min_publish_ms: int = 0
    max_publish_ms: int = 0


def upload(io: FileIO, topic_path: str, table: pa.Table, *, layout: list[int], compression: CompressionType,
           dedup: bool, keep: np.ndarray) -> PreparedAppend:
    """Write the kept rows of ``table`` as a fresh segment nobody references yet.

    The anchor check of an object store is left to the commit (``checked_by_commit``), which comes
    after this write, or to the deletion of the segment when no commit does.

    Raises:
        DirectoryGone: the topic directory was deleted (local roots; callers translate it).
    """
    rows = table if keep.all() else table.filter(pa.array(keep))
    if not rows.num_rows:
        return PreparedAppend(table, layout, compression, dedup, keep, rows, None)
    name = new_segment_name(compression)
    data = encode_segment(rows, compression=compression)
    io.write_new(f"{topic_path}/{name}", data, anchor=topic_path, checked_by_commit=True)
    publish = pc.min_max(rows.column("publish_time").cast(pa.int64()))
    return PreparedAppend(table, layout, compression, dedup, keep, rows, name, len(data),
                          (publish["min"].as_py() or 0) // 1000, (publish["max"].as_py() or 0) // 1000)


def discard(io: FileIO, topic_path: str, prepared: Sequence[PreparedAppend]) -> None:
    """Delete the segments of appends that will not be committed (best effort: a leftover is an
    invisible orphan for vacuum)."""
    for item in prepared:
        if item.path is not None:
            with contextlib.suppress(Exception):
                io.delete(f"{topic_path}/{item.path}")


def group_keeps(group: Sequence[PreparedAppend], snap: Snapshot) -> list[np.ndarray]:
    """The dedup masks of a commit's segments against ``snap``, in order: each segment's floors are
    raised by the rows of the deduplicated segments before it (one vectorised pass over all)."""
    deduped = [item for item in group if item.dedup]
    if not deduped:
        return [item.keep for item in group]
    tables = [item.table for item in deduped]
    mask = dedup_keep_mask(tables[0] if len(tables) == 1 else pa.concat_tables(tables), snap)
    out: list[np.ndarray] = []
    pos = 0
    for item in group:
        if item.dedup:
            out.append(mask[pos:pos + item.table.num_rows])
            pos += item.table.num_rows
        else:
            out.append(item.keep)
    return out


def group_actions(snap: Snapshot, group: Sequence[PreparedAppend], *, now_ms: int,
                  txn: tuple[str, int] | None) -> tuple[list[Action], list[SegmentRef | None]]:
    """The actions that commit ``group`` on top of ``snap``: one ``add`` per segment with
    consecutive offsets and entry ids, the producers' dedup high-water marks, ``txn``, and the
    offset counters.  Returns them with each segment's ``SegmentRef`` (None: nothing kept)."""
    actions: list[Action] = []
    refs: list[SegmentRef | None] = []
    offset, entry = snap.next_offset, snap.next_entry_id
    deduped: list[pa.Table] = []
    for item in group:
        if item.path is None:
            refs.append(None)
            continue
        ref = SegmentRef(
            path=item.path,
            base_offset=offset,
            num_records=item.rows.num_rows,
            base_entry_id=entry,
            layout=filter_layout(item.layout, item.keep),
            size_bytes=item.size_bytes,
            min_publish_ms=item.min_publish_ms,
            max_publish_ms=item.max_publish_ms,
            modification_time_ms=now_ms,
        )
        refs.append(ref)
        actions.append(Add(path=item.path, size=item.size_bytes, modification_time=now_ms, data_change=True,
                           stats=f'{{"numRecords":{item.rows.num_rows}}}', tags=ref.tags()))
        offset, entry = ref.end_offset, ref.end_entry_id
        if item.dedup:
            deduped.append(item.rows.select(["producer_name", "sequence_id"]))
    if deduped:
        actions.extend(producer_txns(deduped[0] if len(deduped) == 1 else pa.concat_tables(deduped), now_ms))
    if txn is not None:
        actions.append(Txn(app_id=txn[0], version=txn[1], last_updated=now_ms))
    actions.append(Txn(app_id=TXN_NEXT_OFFSET, version=offset, last_updated=now_ms))
    actions.append(Txn(app_id=TXN_NEXT_ENTRY_ID, version=entry, last_updated=now_ms))
    return actions, refs


def commit_actions(snap: Snapshot, group: Sequence[PreparedAppend], *, topic: str, producer_epoch: int | None,
                   topic_id: str | None, txn: tuple[str, int] | None) -> tuple[list[Action], list[SegmentRef | None]]:
    """What a commit of ``group`` on top of ``snap`` writes, after the checks every append makes.

    Raises:
        TopicDeleted: the topic at the path is no longer the one with ``topic_id``.
        ProducerFenced: the topic's producer epoch is not ``producer_epoch``.
        NothingToCommit: ``txn`` is recorded at its version or later, or every row is a duplicate.
        Rewrite: the rows a segment must hold changed (a segment holds rows that are duplicates now).
    """
    check_topic_id(snap, topic_id)
    if producer_epoch is not None and snap.producer_epoch != producer_epoch:
        raise ProducerFenced(
            f"producer fenced on {topic!r}: the topic's producer epoch is {snap.producer_epoch}, this producer "
            f"holds {producer_epoch}; an exclusive producer took the topic over",
            topic=topic,
        )
    if txn is not None:
        prior = snap.txn_version(txn[0])
        if prior is not None and prior >= txn[1]:
            raise NothingToCommit(f"{txn[0]} already at {prior}")
    keeps = group_keeps(group, snap)
    if any(not np.array_equal(keep, item.keep) for keep, item in zip(keeps, group, strict=True)):
        raise Rewrite(keeps)
    if txn is None and all(item.path is None for item in group):
        raise NothingToCommit("every row was a duplicate")
    return group_actions(snap, group, now_ms=int(time.time() * 1000), txn=txn)


__all__ = ["PreparedAppend", "commit_actions", "discard", "group_actions", "group_keeps", "upload"]
