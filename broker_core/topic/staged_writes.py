"""Staged segments: the two halves of a distributed write (Spark tasks write, the driver commits).

An executor writes its rows as a segment that no commit names yet (``write_staged``), so it needs
no log access and never races; the driver later makes all staged segments of a topic visible in one
commit (``staged_commit_actions``), where offsets and entry ids are assigned as for any append.
An aborted write leaves orphans for vacuum, and an idempotent retry that finds its ``txn`` already
committed deletes only the files no commit names (``unreferenced``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from broker_core.log.actions import Action, Add, Txn
from broker_core.log.segment import CompressionType, encode_segment, new_segment_name
from broker_core.log.segment_ref import SegmentRef
from broker_core.log.snapshot import TXN_NEXT_ENTRY_ID, TXN_NEXT_OFFSET, Snapshot
from broker_core.log.transaction_log import NothingToCommit
from broker_core.storage import FileIO
from broker_core.topic.append_checks import check_app_ids


@dataclass(frozen=True, slots=True)
class StagedSegment:
    """A segment file written but not yet committed (see ``TopicLog.stage``)."""

    path: str
    size_bytes: int
    num_records: int
    min_publish_ms: int
    max_publish_ms: int


def write_staged(io: FileIO, topic_dir: str, table: pa.Table, compression: CompressionType) -> StagedSegment:
    """Write ``table`` (``SEGMENT_SCHEMA``) as a segment of ``topic_dir`` that nobody references yet.

    No anchor: a Spark task may stage into a partition whose log does not exist yet
    (``docs/PROTOCOL.md`` section 1, anchored writes).
    """
    check_app_ids(table, None)
    path = new_segment_name(compression)
    data = encode_segment(table, compression=compression)
    io.write_new(f"{topic_dir}/{path}", data)
    publish = pc.min_max(table.column("publish_time").cast(pa.int64()))
    lo, hi = publish["min"].as_py(), publish["max"].as_py()
    return StagedSegment(
        path=path,
        size_bytes=len(data),
        num_records=table.num_rows,
        min_publish_ms=(lo or 0) // 1000,
        max_publish_ms=(hi or 0) // 1000,
    )


def staged_commit_actions(snap: Snapshot, staged: list[StagedSegment], txn: tuple[str, int] | None) -> list[Action]:
    """The actions that make ``staged`` visible on top of ``snap``, each segment one entry (a batch).

    Raises:
        NothingToCommit: ``txn`` is recorded at its version or later already.
    """
    if txn is not None:
        prior = snap.txn_version(txn[0])
        if prior is not None and prior >= txn[1]:
            raise NothingToCommit(f"{txn[0]} already at {prior}")
    now_ms = int(time.time() * 1000)
    actions: list[Action] = []
    offset, entry = snap.next_offset, snap.next_entry_id
    for seg in staged:
        ref = SegmentRef(
            path=seg.path,
            base_offset=offset,
            num_records=seg.num_records,
            base_entry_id=entry,
            layout=[seg.num_records],
            size_bytes=seg.size_bytes,
            min_publish_ms=seg.min_publish_ms,
            max_publish_ms=seg.max_publish_ms,
            modification_time_ms=now_ms,
        )
        actions.append(
            Add(
                path=seg.path,
                size=seg.size_bytes,
                modification_time=now_ms,
                data_change=True,
                stats=f'{{"numRecords":{seg.num_records}}}',
                tags=ref.tags(),
            )
        )
        offset, entry = ref.end_offset, ref.end_entry_id
    if txn is not None:
        actions.append(Txn(app_id=txn[0], version=txn[1], last_updated=now_ms))
    actions.append(Txn(app_id=TXN_NEXT_OFFSET, version=offset, last_updated=now_ms))
    actions.append(Txn(app_id=TXN_NEXT_ENTRY_ID, version=entry, last_updated=now_ms))
    return actions


def unreferenced(staged: list[StagedSegment], snap: Snapshot) -> list[str]:
    """Paths of ``staged`` that ``snap`` names nowhere, live or tombstoned: safe to delete after a
    retry found its commit already there (a merge may have retired what an earlier attempt made
    visible, and that file must stay)."""
    named = {seg.path for seg in snap.segments} | set(snap.tombstones)
    return [seg.path for seg in staged if seg.path not in named]


__all__ = ["StagedSegment", "staged_commit_actions", "unreferenced", "write_staged"]
