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
import functools
import time
import uuid
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from broker_core.errors import CommitNotDurable, DirectoryGone, SegmentCorrupted, TopicDeleted
from broker_core.log.actions import Action, Add, Metadata, Txn
from broker_core.log.segment import (
    SMALL_SEGMENT_BYTES,
    CompressionType,
    delta_schema_string,
    read_segment_checked,
    widen,
)
from broker_core.log.segment_bounds import DEFAULT_MAX_MESSAGE_BYTES
from broker_core.log.segment_ref import SegmentRef, layout_messages
from broker_core.log.snapshot import (
    LEDGER_ID_KEY,
    TXN_DELETED,
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
    check_txn_app_id,
    dedup_keep_mask,
    filter_layout,
)
from broker_core.topic.appends import PreparedAppend, commit_actions, discard, upload
from broker_core.topic.offset_ids import ids_for_offsets, seek_offset
from broker_core.topic.prefetch import SegmentPrefetcher
from broker_core.topic.readahead import Readahead
from broker_core.topic.segment_cache import SegmentCache
from broker_core.topic.segment_reads import offset_for_publish_time, read_range
from broker_core.topic.staged_writes import StagedSegment, staged_commit_actions, unreferenced, write_staged
from broker_core.topic.waiters import Waiters

_READAHEAD_MIN_SEGMENTS = 16  # a read spanning this many segments has the following ones decoded ahead
READ_ON = (1 << 63) - 1
"""``read_ahead_to`` of a caller that reads on to whatever the log holds (a consumer draining it)."""


class TopicLog(Waiters):
    """An internal topic (one partition, or a non-partitioned topic) on storage.

    Args:
        io: the storage.
        path: the topic's directory relative to the root.
        checkpoint_interval, max_retries: see ``TransactionLog``.
        max_message_bytes: the largest message reads accept (``maxMessageSize``, D125).
    """

    def __init__(
        self,
        io: FileIO,
        path: str,
        *,
        checkpoint_interval: int = 100,
        max_retries: int = 1000,
        background_checkpoints: bool = False,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
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
        self._prefetcher: SegmentPrefetcher | None = None
        if not io.is_local:  # a GET is a round trip: start it as soon as a polled commit names the file
            self._prefetcher = SegmentPrefetcher()
            self.log.on_polled = self._prefetch_added
        self._readahead = Readahead(self._warm, name=path.rsplit("/", 1)[-1])
        self.max_message_bytes = max_message_bytes
        """The largest message a read accepts (``maxMessageSize``): a segment holding, or declaring, a
        bigger one is refused with ``SegmentTooLarge`` before it is decompressed whole (D125)."""

    def allow_message_bytes(self, size: int) -> None:
        """Accept messages of up to ``size`` bytes in reads (the log is shared by the process's brokers:
        it keeps the largest limit any of them allows, so none refuses what another could write)."""
        if size > self.max_message_bytes:
            self.max_message_bytes = size

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
        check_txn_app_id(txn)
        prepared = self.prepare(table, layout=layout, compression=compression, dedup=dedup)
        (result,) = self.commit_prepared([prepared], producer_epoch=producer_epoch, topic_id=topic_id, txn=txn,
                                         operation=operation)
        return result

    def prepare(self, table: pa.Table, *, layout: list[int], compression: CompressionType = CompressionType.NONE,
                dedup: bool = False, floors: Mapping[str, int] | None = None) -> PreparedAppend:
        """Write ``table`` as a segment for a later ``commit_prepared`` (the first half of ``append``).

        With ``dedup``, rows that are duplicates against the last known state, raised by ``floors``
        (producer name -> highest sequence id of batches that will commit first), are left out;
        the commit checks again.  Reads nothing from storage when the log is loaded.
        """
        if layout_messages(layout) != table.num_rows:
            raise ValueError(f"entry layout {layout} does not cover {table.num_rows} rows")
        check_app_ids(table, None)
        snapshot = self.log.cached_snapshot()
        keep = dedup_keep_mask(table, snapshot, floors) if dedup else np.ones(table.num_rows, dtype=bool)
        return self._upload(table, layout, compression, dedup, keep)

    def _upload(self, table: pa.Table, layout: list[int], compression: CompressionType, dedup: bool,
                keep: np.ndarray) -> PreparedAppend:
        try:
            return upload(self.io, self.path, table, layout=layout, compression=compression, dedup=dedup, keep=keep)
        except DirectoryGone as exc:  # renamed away by a deletion: re-create nothing
            name = self.log.cached_snapshot().metadata.name
            raise TopicDeleted(f"topic {name} was deleted", topic=name) from exc

    def commit_prepared(
        self,
        prepared: Sequence[PreparedAppend],
        *,
        producer_epoch: int | None = None,
        topic_id: str | None = None,
        txn: tuple[str, int] | None = None,
        operation: str = "WRITE",
    ) -> list[AppendResult]:
        """Make prepared segments visible in one commit, in the given order (each keeps its entries).

        Checks as ``append`` (fencing, the topic's identity, ``txn`` idempotence, dedup against the
        state the commit lands on).  A segment whose kept rows changed is written again first.  On
        any failure, and when nothing is left to commit, the segments are deleted, except after
        ``CommitNotDurable`` (the commit is visible, so they stay).  Returns one
        ``AppendResult`` per prepared append (``segment`` None: every row was a duplicate).
        """
        check_txn_app_id(txn)
        group = list(prepared)
        while True:
            refs: list[SegmentRef | None] = []

            def build(snap: Snapshot) -> list[Action]:
                actions, refs[:] = commit_actions(snap, group, topic=self.path, producer_epoch=producer_epoch,
                                                  topic_id=topic_id, txn=txn)
                return actions

            try:
                result = self.log.commit(build, operation=operation, parameters={"mode": "Append"})
            except Rewrite as rewrite:
                changed = [(i, k) for i, (k, item) in enumerate(zip(rewrite.keeps, group, strict=True))
                           if not np.array_equal(k, item.keep)]
                discard(self.io, self.path, [group[i] for i, _ in changed])
                try:
                    for i, keep in changed:
                        old = group[i]
                        group[i] = self._upload(old.table, old.layout, old.compression, old.dedup, keep)
                except BaseException:
                    discard(self.io, self.path, group)  # those already discarded are gone: a no-op
                    raise
                continue
            except NothingToCommit:
                discard(self.io, self.path, group)
                return [AppendResult(version=None, segment=None, kept=np.zeros(item.table.num_rows, dtype=bool),
                                     skipped_by_txn=txn is not None) for item in group]
            except CommitNotDurable:
                raise  # the commit is visible and names the segments: keep them
            except BaseException:
                discard(self.io, self.path, group)
                raise
            self.notify(written=result.version)
            return [AppendResult(version=result.version, segment=ref, kept=item.keep)
                    for ref, item in zip(refs, group, strict=True)]

    def discard_prepared(self, prepared: Sequence[PreparedAppend]) -> None:
        """Delete the segments of prepared appends that will not be committed (best effort)."""
        discard(self.io, self.path, prepared)

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

    def _prefetch_added(self, snapshot: Snapshot, actions: list[Action]) -> None:
        """A poll found a commit: start reading the segments it adds, if a consumer or reader waits
        here (``topic.prefetch``).  Segments are ordered by offset, and a commit's adds are its last."""
        if self._prefetcher is None or not self._events:
            return
        added = {a.path for a in actions if isinstance(a, Add)}
        for seg in snapshot.segments[-len(added):] if added else ():
            if seg.path in added:
                self._prefetcher.start(seg.path, functools.partial(  # as ``_decode`` caches it
                    read_segment_checked, self.io, self.path, seg, narrow=True,
                    max_message_bytes=self.max_message_bytes))

    def segment_table(self, seg: SegmentRef) -> pa.Table:
        """The decoded rows of a segment (cached: readers fetch a segment piecewise).

        Raises:
            SegmentCorrupted: the file is missing, unreadable, or holds another row count than its
                ``add`` says (``docs/PROTOCOL.md`` section 3a: what to do about it).
        """
        return widen(self.segment_rows(seg))

    def segment_rows(self, seg: SegmentRef) -> pa.Table:
        """As ``segment_table``, but possibly without the columns null in every row of the segment
        (``decode_segment_narrow``; the cache keeps segments so): ``read_range`` widens what it
        concatenates once per read instead of once per segment."""
        cached = self._cache.get(seg.path)
        if cached is None:
            self._readahead.forget(seg.path)  # being decoded right now: wait for it, do not decode twice
            cached = self._cache.get(seg.path)
        return cached if cached is not None else self._decode(seg)

    def cached_segment_rows(self, seg: SegmentRef) -> pa.Table | None:
        """``segment_rows`` if the segment is in the cache (None: not read, no storage call)."""
        return self._cache.get(seg.path)

    def _warm(self, seg: SegmentRef) -> None:
        """The readahead thread's work: decode ``seg`` into the cache unless it is there."""
        if seg.path not in self._cache:
            self._decode(seg)

    def _decode(self, seg: SegmentRef) -> pa.Table:
        pending = None if self._prefetcher is None else self._prefetcher.take(seg.path)
        table = (read_segment_checked(self.io, self.path, seg, narrow=True, max_message_bytes=self.max_message_bytes)
                 if pending is None else pending.result())
        self._cache.put(seg.path, table)
        return table

    def read(self, start: int, end: int, *, snapshot: Snapshot | None = None,
             read_ahead_to: int | None = None) -> tuple[pa.Table, np.ndarray]:
        """Messages with offsets in [start, end) that are still live, and their offsets.

        Returns the rows (``SEGMENT_SCHEMA``) and an int64 array of their offsets; removed ranges
        are simply absent (callers detect data loss by comparing with ``first_offset``).

        ``read_ahead_to``: a caller that will read on (a consumer draining a backlog: ``READ_ON``; a scan of a
        range) gives the offset it will read up to; a read spanning many small segments then has the
        following ones, below that offset, decoded in the background (``readahead``).  None: no
        readahead (a one-off read must not spend a core on rows nobody asks for).

        Raises:
            SegmentCorrupted: a segment in the range is damaged (``read_until`` returns what precedes it).
        """
        table, offsets, _ = self._read(start, end, snapshot, partial=False, ahead_to=read_ahead_to)
        return table, offsets

    def read_until(self, start: int, end: int, *, snapshot: Snapshot | None = None,
                   read_ahead_to: int | None = None) -> tuple[pa.Table, np.ndarray, int]:
        """As ``read``, but a damaged segment after some readable rows ends the read early instead of
        failing it: returns the rows, their offsets and where reading stopped (``end``, or the damaged
        segment's base offset).  A read that *starts* at a damaged segment raises ``SegmentCorrupted``,
        so readers deliver every good message before the damage and then report it."""
        return self._read(start, end, snapshot, partial=True, ahead_to=read_ahead_to)

    def _read(self, start: int, end: int, snapshot: Snapshot | None, *,
              partial: bool, ahead_to: int | None) -> tuple[pa.Table, np.ndarray, int]:
        snap = snapshot or self.log.cached_snapshot()
        while True:
            spanned = None if ahead_to is None else functools.partial(self._spanned, snap, ahead_to)
            try:
                return read_range(snap, start, end, self.segment_rows, partial=partial, spanned=spanned)
            except SegmentCorrupted as exc:
                newer = self._moved_past(snap, exc)
                if newer is None:
                    raise
                snap = newer

    def _spanned(self, snap: Snapshot, ahead_to: int, first: int, count: int) -> None:
        """A read of ``snap`` spanned ``count`` segments from ``first``: many means a backlog of tiny
        ones, so have the next ones read ahead (up to ``ahead_to``)."""
        if count >= _READAHEAD_MIN_SEGMENTS:
            self._read_ahead(snap, first, count, ahead_to)

    def _moved_past(self, snap: Snapshot, exc: SegmentCorrupted) -> Snapshot | None:
        """The latest state when it no longer holds the segment ``exc`` names, else None (real damage).

        A reader's snapshot may name a segment that a later commit removed (merged into a bigger one,
        or retired by retention) and that vacuum has since deleted (``pubsub maintain`` deletes them
        after ``removedSegmentGracePeriodInSeconds``): that is no damage, the offsets now live in the
        merged segment or are gone as retention meant, so the read is redone against the latest state
        (D181).  Each retry needs a newer version, so the loop ends."""
        latest = self.log.snapshot()
        if latest.version <= snap.version:
            return None
        damaged = exc.context.get("path")
        if any(f"{self.path}/{seg.path}" == damaged for seg in latest.segments):
            return None
        return latest

    def _read_ahead(self, snap: Snapshot, first: int, count: int, until: int) -> None:
        """A read that spanned ``count`` segments (a backlog of tiny ones): have the next as many small
        segments below offset ``until``, from index ``first``, decoded in the background
        (``readahead``), within a quarter of the cache so that they never push out the rows the
        reader is working on."""
        budget = self._cache.budget_bytes // 4
        wanted: list[SegmentRef] = []
        for seg in snap.segments[first:first + min(count, self._cache.max_entries // 4)]:
            budget -= seg.size_bytes
            if seg.base_offset >= until or seg.size_bytes >= SMALL_SEGMENT_BYTES or budget < 0:
                break
            wanted.append(seg)
        self._readahead.want(wanted)

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

__all__ = ["READ_ON", "AppendResult", "StagedSegment", "TopicLog", "dedup_keep_mask", "filter_layout"]
