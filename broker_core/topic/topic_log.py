"""One internal topic: append messages atomically, read them by offset, map ids and times.

This is the storage core every caller (client, Spark connector, jobs) goes through.  An append
writes one segment file under a fresh name, then commits an ``add`` whose tags carry the base
offset and entry layout, together with ``txn`` actions for deduplication and the offset
high-water marks.  A lost race re-validates against the winner's state: offsets move, and rows that
became duplicates are filtered out by rewriting the (still invisible) segment.

Pure helpers live in a module per concept (``append_checks``, ``offset_ids``, ``staged_writes``,
``segment_reads``, ``segment_cache``); ``AppendResult`` and ``StagedSegment`` stay importable from
here.  ``append`` stays whole: its commit builder closes over the attempt's segment.

Deleting a topic commits a tombstone first (``mark_deleted``), which refuses every later commit, and
no write of a topic ever re-creates its directory once the deletion has renamed it away
(``docs/DECISIONS.md`` D39).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.errors import DirectoryGone, ProducerFenced, TopicDeleted
from broker_core.log.actions import Action, Add, Metadata, Txn
from broker_core.log.segment import (
    CompressionType,
    delta_schema_string,
    encode_segment,
    new_segment_name,
    read_segment_checked,
)
from broker_core.log.segment_ref import SegmentRef, layout_messages
from broker_core.log.snapshot import (
    LEDGER_ID_KEY,
    TXN_DELETED,
    TXN_NEXT_ENTRY_ID,
    TXN_NEXT_OFFSET,
    TXN_PRODUCER_EPOCH,
    Snapshot,
)
from broker_core.log.transaction_log import NothingToCommit, TransactionLog
from broker_core.message_id import MessageId
from broker_core.storage import FileIO
from broker_core.topic.append_checks import (
    AppendResult,
    Rewrite,
    check_app_ids,
    check_topic_id,
    dedup_keep_mask,
    filter_layout,
    producer_txns,
)
from broker_core.topic.offset_ids import ids_for_offsets, seek_offset
from broker_core.topic.segment_cache import SegmentCache
from broker_core.topic.segment_reads import offset_for_publish_time, read_range
from broker_core.topic.staged_writes import StagedSegment, staged_commit_actions, unreferenced, write_staged
from broker_core.topic.waiters import Waiters


class TopicLog(Waiters):
    """An internal topic (one partition, or a non-partitioned topic) on storage.

    Args:
        io: the storage.
        path: the topic's directory relative to the root.
        checkpoint_interval, max_retries: see ``TransactionLog``.
    """

    def __init__(
        self,
        io: FileIO,
        path: str,
        *,
        checkpoint_interval: int = 100,
        max_retries: int = 1000,
        background_checkpoints: bool = False,
    ) -> None:
        super().__init__()
        self.io = io
        self.path = path
        self.log = TransactionLog(
            io,
            path,
            checkpoint_interval=checkpoint_interval,
            max_retries=max_retries,
            background_checkpoints=background_checkpoints,
        )
        self._cache = SegmentCache()

    # -- lifecycle ----------------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.log.exists()

    def create(self, *, name: str, properties: dict[str, str] | None = None) -> bool:
        """Create the topic's log (version 0); False if it exists already."""
        created_ms = int(time.time() * 1000)
        configuration = {LEDGER_ID_KEY: str(created_ms), "pubsub.formatVersion": "1"}
        configuration.update(properties or {})
        metadata = Metadata(
            id=str(uuid.uuid4()),
            name=name,
            schema_string=delta_schema_string(),
            configuration=configuration,
            created_time=created_ms,
        )
        return self.log.create(metadata)

    def snapshot(self) -> Snapshot:
        return self.log.snapshot()

    def live_snapshot(self) -> Snapshot:
        """The latest state as a writer sees it (``TransactionLog.live_snapshot``): checked against
        storage, of the topic now at this path; ``TopicDeleted`` once its deletion has begun."""
        return self.log.live_snapshot()

    def mark_deleted(self) -> int:
        """Commit the deletion's tombstone and return its version (``Admin.delete_topic`` calls this
        before it removes any file): every later commit of anyone is refused with ``TopicDeleted``.

        Raises:
            TopicDeleted: the tombstone is there already.
            TopicNotFound: there is no log.
        """

        def build(snap: Snapshot) -> list[Action]:
            now_ms = int(time.time() * 1000)
            return [Txn(app_id=TXN_DELETED, version=now_ms, last_updated=now_ms)]

        result = self.log.commit(build, operation="DELETE TOPIC")
        self.notify(written=result.version)
        return result.version

    # -- writing ------------------------------------------------------------------------------------

    def append(
        self,
        table: pa.Table,
        *,
        layout: list[int],
        compression: CompressionType = CompressionType.NONE,
        dedup: bool = False,
        producer_epoch: int | None = None,
        txn: tuple[str, int] | None = None,
        operation: str = "WRITE",
        topic_id: str | None = None,
    ) -> AppendResult:
        """Append ``table`` (``SEGMENT_SCHEMA``) as consecutive messages in one commit.

        Args:
            table: the messages, in order.
            layout: entry layout of the rows (see ``segment_ref``); must cover every row.
            compression: the segment's Parquet codec.
            dedup: drop rows whose sequence id is not above their producer's highest one.
            producer_epoch: fail with ``ProducerFenced`` unless the topic's producer epoch is this.
            txn: ``(app_id, version)``: commit nothing if the log already holds that app id at this
                version or later (idempotent batch writes), else record it with the data.
            topic_id: fail with ``TopicDeleted`` unless the topic at this path is still the one with
                this ``metaData`` id (a producer's topic may be deleted and re-created meanwhile).
        """
        if layout_messages(layout) != table.num_rows:
            raise ValueError(f"entry layout {layout} does not cover {table.num_rows} rows")
        check_app_ids(table, txn)
        snapshot = self.log.live_snapshot()  # checked before replaying: never read another topic's commits
        check_topic_id(snapshot, topic_id)
        keep = dedup_keep_mask(table, snapshot) if dedup else np.ones(table.num_rows, dtype=bool)
        while True:
            rows = table if keep.all() else table.filter(pa.array(keep))
            kept_layout = filter_layout(layout, keep)
            seg_path = None
            size = 0
            stats: tuple[int, int] = (0, 0)
            if rows.num_rows:
                seg_path = new_segment_name(compression)
                data = encode_segment(rows, compression=compression)
                size = len(data)
                try:
                    self.io.write_new(f"{self.path}/{seg_path}", data, anchor=self.path)
                except DirectoryGone as exc:  # renamed away by a deletion: re-create nothing
                    name = snapshot.metadata.name
                    raise TopicDeleted(f"topic {name} was deleted", topic=name) from exc
                publish = pc.min_max(rows.column("publish_time").cast(pa.int64()))
                stats = (publish["min"].as_py() // 1000, publish["max"].as_py() // 1000)
            expected = keep
            written: dict[str, SegmentRef] = {}

            def build(snap: Snapshot) -> list[Action]:
                check_topic_id(snap, topic_id)
                if producer_epoch is not None and snap.producer_epoch != producer_epoch:
                    raise ProducerFenced(
                        f"producer fenced on {self.path!r}: the topic's producer epoch is "
                        f"{snap.producer_epoch}, this producer holds {producer_epoch}; "
                        "an exclusive producer took the topic over",
                        topic=self.path,
                    )
                if txn is not None:
                    prior = snap.txn_version(txn[0])
                    if prior is not None and prior >= txn[1]:
                        raise NothingToCommit(f"{txn[0]} already at {prior}")
                if dedup and not np.array_equal(dedup_keep_mask(table, snap), expected):
                    raise Rewrite(dedup_keep_mask(table, snap))
                if seg_path is None and txn is None:
                    raise NothingToCommit("every row was a duplicate")
                actions: list[Action] = []
                now_ms = int(time.time() * 1000)
                next_offset, next_entry = snap.next_offset, snap.next_entry_id
                if seg_path is not None:
                    seg = SegmentRef(
                        path=seg_path,
                        base_offset=snap.next_offset,
                        num_records=rows.num_rows,
                        base_entry_id=snap.next_entry_id,
                        layout=kept_layout,
                        size_bytes=size,
                        min_publish_ms=stats[0],
                        max_publish_ms=stats[1],
                        modification_time_ms=now_ms,
                    )
                    written["seg"] = seg
                    actions.append(
                        Add(
                            path=seg_path,
                            size=size,
                            modification_time=now_ms,
                            data_change=True,
                            stats=f'{{"numRecords":{rows.num_rows}}}',
                            tags=seg.tags(),
                        )
                    )
                    next_offset, next_entry = seg.end_offset, seg.end_entry_id
                    if dedup:
                        actions.extend(producer_txns(rows, now_ms))
                if txn is not None:
                    actions.append(Txn(app_id=txn[0], version=txn[1], last_updated=now_ms))
                actions.append(Txn(app_id=TXN_NEXT_OFFSET, version=next_offset, last_updated=now_ms))
                actions.append(Txn(app_id=TXN_NEXT_ENTRY_ID, version=next_entry, last_updated=now_ms))
                return actions

            try:
                result = self.log.commit(build, operation=operation, parameters={"mode": "Append"})
            except Rewrite as rewrite:
                self._discard(seg_path)
                keep = rewrite.keep
                continue
            except NothingToCommit:
                self._discard(seg_path)
                return AppendResult(
                    version=None,
                    segment=None,
                    kept=np.zeros(table.num_rows, dtype=bool),
                    skipped_by_txn=txn is not None,
                )
            except BaseException:
                self._discard(seg_path)
                raise
            self.notify(written=result.version)
            return AppendResult(version=result.version, segment=written.get("seg"), kept=keep)

    def stage(self, table: pa.Table, *, compression: CompressionType = CompressionType.NONE) -> StagedSegment:
        """Write ``table`` (``SEGMENT_SCHEMA``) as a segment nobody references yet.

        This is the executor half of a distributed write: a driver later makes staged segments visible
        with ``commit_staged`` (or leaves them as orphans for vacuum if the write is aborted).
        """
        return write_staged(self.io, self.path, table, compression)

    def commit_staged(
        self, staged: list[StagedSegment], *, txn: tuple[str, int] | None = None, operation: str = "WRITE"
    ) -> int | None:
        """Make staged segments visible in one commit, each one entry (a batch), in the given order.

        With ``txn=(app_id, version)`` the commit is idempotent: if the log already records that app
        id at ``version`` or later, nothing is committed, the staged files are deleted (they are
        duplicates of data committed by an earlier attempt) and None is returned.
        """
        staged = [s for s in staged if s.num_records > 0]

        def build(snap: Snapshot) -> list[Action]:
            return staged_commit_actions(snap, staged, txn)

        try:
            result = self.log.commit(build, operation=operation, parameters={"mode": "Append"})
        except NothingToCommit:
            for path in unreferenced(staged, self.log.cached_snapshot()):
                self._discard(path)
            return None
        self.notify(written=result.version)
        return result.version

    def bump_producer_epoch(self, to: int) -> int:
        """Raise the topic's producer epoch to at least ``to`` (never lowers it); return the epoch.

        Producers registered with a lower epoch are fenced from then on.
        """

        def build(snap: Snapshot) -> list[Action]:
            if snap.producer_epoch >= to:
                raise NothingToCommit("epoch already there")
            return [Txn(app_id=TXN_PRODUCER_EPOCH, version=to, last_updated=int(time.time() * 1000))]

        try:
            result = self.log.commit(build, operation="FENCE PRODUCERS")
        except NothingToCommit:
            return self.log.snapshot().producer_epoch
        self.notify(written=result.version)
        return result.snapshot.producer_epoch

    def _discard(self, seg_path: str | None) -> None:
        if seg_path is not None:
            with contextlib.suppress(Exception):
                self.io.delete(f"{self.path}/{seg_path}")

    # -- reading ------------------------------------------------------------------------------------

    def segment_table(self, seg: SegmentRef) -> pa.Table:
        """The decoded rows of a segment (cached: readers fetch a segment piecewise).

        Raises:
            SegmentCorrupted: the file is missing, unreadable, or holds another row count than its
                ``add`` says (``docs/PROTOCOL.md`` section 3a: what to do about it).
        """
        table = self._cache.get(seg.path)
        if table is None:
            table = read_segment_checked(self.io, self.path, seg)
            self._cache.put(seg.path, table)
        return table

    def read(self, start: int, end: int, *, snapshot: Snapshot | None = None) -> tuple[pa.Table, np.ndarray]:
        """Messages with offsets in [start, end) that are still live, and their offsets.

        Returns the rows (``SEGMENT_SCHEMA``) and an int64 array of their offsets; removed ranges
        are simply absent (callers detect data loss by comparing with ``first_offset``).

        Raises:
            SegmentCorrupted: a segment in the range is damaged (``read_until`` returns what precedes it).
        """
        snap = snapshot or self.log.cached_snapshot()
        table, offsets, _ = read_range(snap, start, end, self.segment_table, partial=False)
        return table, offsets

    def read_until(self, start: int, end: int, *,
                   snapshot: Snapshot | None = None) -> tuple[pa.Table, np.ndarray, int]:
        """As ``read``, but a damaged segment after some readable rows ends the read early instead of
        failing it: returns the rows, their offsets and where reading stopped (``end``, or the damaged
        segment's base offset).  A read that *starts* at a damaged segment raises ``SegmentCorrupted``,
        so readers deliver every good message before the damage and then report it."""
        return read_range(snapshot or self.log.cached_snapshot(), start, end, self.segment_table, partial=True)

    def ids_for_offsets(
        self, offsets: np.ndarray, *, snapshot: Snapshot | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Entry ids and batch indexes for (sorted, live) offsets, vectorised per segment."""
        return ids_for_offsets(snapshot or self.log.cached_snapshot(), offsets)

    def message_id(self, offset: int, partition: int, *, snapshot: Snapshot | None = None) -> MessageId:
        snap = snapshot or self.log.cached_snapshot()
        seg = snap.segments[snap.segment_index_for(offset)]
        entry, batch = seg.id_of(offset)
        return MessageId(partition=partition, ledger_id=snap.ledger_id, entry_id=entry, batch_index=batch)

    def offset_for_message_id(self, msg_id: MessageId, *, inclusive: bool, snapshot: Snapshot | None = None) -> int:
        """The first offset a reader positioned at ``msg_id`` reads (Pulsar's start rules)."""
        return seek_offset(snapshot or self.log.snapshot(), msg_id, inclusive=inclusive)

    def offset_for_publish_time(self, publish_time_ms: int, *, snapshot: Snapshot | None = None) -> int:
        """The first live offset whose publish time is at or after ``publish_time_ms`` (inclusive)."""
        return offset_for_publish_time(snapshot or self.log.snapshot(), publish_time_ms, self.segment_table)

__all__ = ["AppendResult", "StagedSegment", "TopicLog", "dedup_keep_mask", "filter_layout"]
