"""One consumer's view of one internal topic of its subscription: registration, dispatch, acks.

The consumer keeps one ``SubscriptionPart`` per internal topic it consumes.  Each part talks to the
cursor through a store (durable: ``CursorStore`` on storage; non-durable: ``MemoryCursorStore``)
and decides, with ``broker_core.subscription.dispatch``, which offsets this consumer may take next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from broker_core.client.segment_values import SegmentValues
from broker_core.errors import SubscriptionNotFound
from broker_core.log.snapshot import Snapshot
from broker_core.message import Message, Schema, messages_from_rows
from broker_core.naming import TopicName
from broker_core.subscription import lease_holder
from broker_core.subscription.cursor import ConsumerType, Cursor, new_cursor
from broker_core.subscription.dispatch import Window, cursor_selector, key_shared_candidates, shared_candidates
from broker_core.subscription.failover import FailoverConsumer, active_consumer
from broker_core.subscription.ranges import RangeSet
from broker_core.topic.topic_log import TopicLog

_SCAN_ROWS = 50_000  # rows examined per dispatch round, bounds the work behind a stuck message
_FIRST_SCAN_ROWS = 2_048  # a claim reads at most this much first and widens (x4) only while it finds too little
_MIN_SCAN_ROWS = 256  # ... and at least this much, else what it may take: draining a backlog, a claim then
# takes its whole window, so each row is read once and the claimed rows are the window's table itself
# (a window of twice the limit read every row twice and sliced a table of hundreds of tiny segments'
# chunks for each claim, ~10 us per segment: D108)


class Store(Protocol):
    def load(self, *, max_age_s: float = 0.0) -> tuple[int, Cursor | None]: ...

    def written_here(self, version: int) -> bool: ...

    def update(self, fn: Callable[[Cursor | None], Cursor | None]) -> Cursor | None: ...

    def add_waiter(self, event: threading.Event) -> None: ...

    def remove_waiter(self, event: threading.Event) -> None: ...


class MemoryCursorStore:
    """A non-durable subscription's cursor: in memory, seen by this consumer only."""

    def __init__(self) -> None:
        self._cursor: Cursor | None = None
        self._version = -1
        self._lock = threading.Lock()

    def load(self, *, max_age_s: float = 0.0) -> tuple[int, Cursor | None]:
        return self._version, self._cursor

    def written_here(self, version: int) -> bool:
        return True  # nobody else sees this cursor

    def update(self, fn: Callable[[Cursor | None], Cursor | None]) -> Cursor | None:
        with self._lock:
            current = None if self._cursor is None else Cursor.from_json(self._cursor.to_json())
            new = fn(current)
            if new is not None:
                self._cursor, self._version = new, self._version + 1
            return self._cursor

    def add_waiter(self, event: threading.Event) -> None:
        return None

    def remove_waiter(self, event: threading.Event) -> None:
        return None


class SubscriptionPart:
    """This consumer on one internal topic."""

    def __init__(
        self,
        *,
        name: TopicName,
        display_topic: str,
        partition: int,
        log: TopicLog,
        store: Store,
        subscription: str,
        consumer_name: str,
        sub_type: ConsumerType,
        priority_level: int,
        key_shared: dict[str, Any] | None,
        schema: Schema,
    ) -> None:
        self.name = name
        self.display_topic = display_topic
        self.partition = partition
        self.log = log
        self.store = store
        self.subscription = subscription
        self.consumer_name = consumer_name
        self._joined = False  # counted as open in ``lease_holder`` (from before its join commits)
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.key_shared = key_shared or {}
        self.schema = schema
        self.read_pos = -1  # Exclusive/Failover: next offset to read while active
        self.active = False
        self.chunks: dict[str, list[Message]] = {}
        self._claimed_rows: tuple[pa.Table, np.ndarray] | None = None  # the last claim's window rows
        self._segment_values = SegmentValues(log, schema, display_topic)

    # -- membership ----------------------------------------------------------------------------------

    def join(
        self, *, now_ms: int, lease_ms: int, initial_offset: Callable[[], int], auto_create: bool,
        takeover: bool = False, in_process: bool = False,
    ) -> Cursor:
        """Register this consumer on the cursor.  ``in_process``: the consumer lives and renews in this
        process only (a ``Client`` consumer), so its lease records this process as its holder and may
        be released once the process is gone; a Spark query's lease (renewed from whichever worker
        runs) records none and is always waited out (docs/DECISIONS.md D137)."""
        sticky = [list(r) for r in self.key_shared.get("stickyRanges", [])]
        policy = {k: v for k, v in self.key_shared.items() if k != "stickyRanges"} or None

        def fn(cursor: Cursor | None) -> Cursor:
            if cursor is None:
                if not auto_create:
                    raise SubscriptionNotFound(
                        f"subscription {self.subscription!r} does not exist on {self.name} and "
                        "allowAutoSubscriptionCreation is off; create it first",
                        subscription=self.subscription,
                    )
                cursor = new_cursor(self.subscription, self.sub_type, initial_offset())
            # a lease whose holder provably cannot use it any more (closed here, or its process on this
            # machine died) is not waited out: after a crash, or a damaged newest cursor version that
            # fell back to a version still holding it (docs/DECISIONS.md D137)
            cursor.release_leases(lambda e: bool(e.holder) and lease_holder.is_gone(e.holder, self._lease_key(e.name)),
                                  keep=self.consumer_name if takeover else None)
            cursor.add_consumer(
                self.consumer_name, self.sub_type, now_ms=now_ms, lease_ms=lease_ms,
                priority_level=self.priority_level, sticky_ranges=sticky, key_shared=policy, takeover=takeover,
                holder=lease_holder.this_holder() if in_process else None,
            )
            if self.sub_type == ConsumerType.KeyShared:
                self.selector(cursor, now_ms)  # refuses overlapping sticky ranges before committing
            return cursor

        first = in_process and not self._joined
        if first:  # before the commit: a lease of ours must never look abandoned to another join here
            lease_holder.opening(self._lease_key(self.consumer_name))
            self._joined = True
        try:
            cursor = self.store.update(fn)
        except BaseException:
            if first:
                self.closed_locally()
            raise
        assert cursor is not None
        return cursor

    def renew(self, *, now_ms: int, lease_ms: int) -> bool:
        """Extend the lease; False when we had been expired (the caller re-joins)."""
        alive = {"ok": True}

        def fn(cursor: Cursor | None) -> Cursor | None:
            if cursor is None or not cursor.renew(self.consumer_name, now_ms=now_ms, lease_ms=lease_ms):
                alive["ok"] = False
                return None
            cursor.expire_consumers(now_ms)
            return cursor

        self.store.update(fn)
        return alive["ok"]

    def leave(self) -> None:
        def fn(cursor: Cursor | None) -> Cursor | None:
            if cursor is None or self.consumer_name not in cursor.consumers:
                return None
            cursor.remove_consumer(self.consumer_name)
            return cursor

        try:
            self.store.update(fn)
        finally:
            self.closed_locally()

    def closed_locally(self) -> None:
        """This consumer is closed in this process (left, unsubscribed, or its join failed): a lease of
        its still on storage may be released by the next join (``lease_holder.is_gone``)."""
        if self._joined:
            self._joined = False
            lease_holder.closed(self._lease_key(self.consumer_name))

    def _lease_key(self, name: str) -> str:
        io = getattr(self.log, "io", None)  # (an in-memory log of the model tests has none)
        where = f"{getattr(self.log, 'path', self.name)}/{self.subscription}"
        return lease_holder.lease_key(getattr(io, "root_uri", ""), where, name)

    # -- who delivers what ---------------------------------------------------------------------------

    def selector(self, cursor: Cursor, now_ms: int) -> tuple[Any, list[str]]:
        return cursor_selector(cursor, now_ms)

    def is_active(self, cursor: Cursor, now_ms: int) -> bool:
        """Exclusive: always; Failover: the elected consumer of this partition."""
        if self.sub_type == ConsumerType.Exclusive:
            return True
        live = cursor.live_consumers(now_ms)
        consumers = [FailoverConsumer(c.name, c.priority_level, c.join_order) for c in live.values()]
        chosen = active_consumer(consumers, partition_index=max(self.partition, 0), partitioned=self.partition >= 0,
                                  topic_name=str(self.name))
        return chosen == self.consumer_name

    def window(self, start: int, end: int) -> tuple[Window, pa.Table, np.ndarray]:
        # claims are by offset: rows after damage wait.  A consumer decodes on this thread, with no
        # readahead (no ``read_ahead_to``): with a tiny segment's decode down to ~100 us, a second
        # decoding thread's GIL hand-offs cost more than the overlap saved (D102, reversing D77)
        table, offsets, _ = self.log.read_until(start, end)
        deliver = table.column("deliver_at").cast(pa.int64())
        deliver_ms = np.where(deliver.is_null().to_numpy(zero_copy_only=False), -1,
                              deliver.fill_null(0).to_numpy(zero_copy_only=False) // 1000)
        chunk_id = table.column("chunk_id").fill_null(0).to_numpy(zero_copy_only=False)
        num_chunks = table.column("num_chunks").fill_null(0).to_numpy(zero_copy_only=False)
        window = Window(
            offsets=offsets,
            hashes=table.column("sticky_key_hash").to_numpy(zero_copy_only=False).astype(np.int64),
            deliver_at_ms=deliver_ms.astype(np.int64),
            continuation=chunk_id > 0,
            num_chunks=num_chunks.astype(np.int32),
        )
        return window, table, offsets

    def claim(
        self, *, now_ms: int, limit: int, delayed_enabled: bool, max_offset: int | None = None,
        deliver_ahead_ms: int = 0, cursor_max_age_s: float = 0.0, snapshot: Snapshot | None = None,
    ) -> tuple[list[int], Cursor | None]:
        """Claim up to ``limit`` offsets (Shared / Key_Shared) below ``max_offset`` if given;
        returns them and the new cursor.  Delayed messages count as due ``deliver_ahead_ms`` early.
        ``cursor_max_age_s``: the cursor that plans the read may be that old (``CursorStore.load``);
        the claim itself commits against the latest one.  ``snapshot``: the log state to claim from
        (the dispatcher's poll of this round: polling again would cost an object store a round trip);
        by default the log is polled."""
        _, cursor = self.store.load(max_age_s=cursor_max_age_s)
        if cursor is None:
            return [], None
        snap = self.log.snapshot() if snapshot is None else snapshot
        start = max(cursor.mark_delete, snap.first_offset)
        end = min(snap.next_offset, start + _SCAN_ROWS)
        if max_offset is not None:
            end = min(end, max_offset)
        if start >= end:
            return [], cursor
        # Read [start, stop) with stop widening from _FIRST_SCAN_ROWS (x4) up to ``end`` only while the
        # window yields fewer than ``limit`` offsets.  Whether a row may be claimed depends only on the
        # cursor and on earlier rows (Key_Shared blockers are earlier messages of the same key), so the
        # first ``limit`` candidates of a window are the first ``limit`` of any wider one: the result
        # is the same as scanning [start, end) at once, without re-reading a long backlog every claim.
        # The rows from markDelete up to the first offset that is neither acknowledged nor held (by
        # anyone for Shared; by this consumer for Key_Shared, where others' claims block later
        # messages of their keys) cannot be claimed and block nothing: the window starts after them,
        # so a claim reads only the new segments instead of everything since markDelete.
        skip = min(_covered_until(cursor, start, self._holders(cursor)), end)
        windows: dict[tuple[int, int], tuple[Window, pa.Table, np.ndarray]] = {}

        def window_to(first: int, stop: int) -> Window:
            if (first, stop) not in windows:
                windows[first, stop] = self.window(first, stop)
            return windows[first, stop][0]

        taken: dict[str, Any] = {"offsets": [], "window": (start, start)}

        def search(latest: Cursor) -> tuple[np.ndarray, tuple[int, int]]:
            """The offsets to claim against ``latest`` and the window they were found in."""
            owner_of: Any = None
            if self.sub_type != ConsumerType.Shared:
                selector, names = self.selector(latest, now_ms)
                allow_out_of_order = bool(latest.key_shared.get("allowOutOfOrder", False))
                owner_of = selector.owner_of_hashes
            # another commit may have released part of the skipped rows: then scan from markDelete
            first = skip if _covered_until(latest, start, self._holders(latest)) >= skip else start
            stop = min(end, first + min(_FIRST_SCAN_ROWS, max(_MIN_SCAN_ROWS, limit)))
            while True:
                if first >= stop:
                    return np.empty(0, dtype=np.int64), (first, stop)
                window = window_to(first, stop)
                if owner_of is None:
                    chosen = shared_candidates(latest, window, now_ms=now_ms, delayed_enabled=delayed_enabled,
                                               limit=limit, deliver_ahead_ms=deliver_ahead_ms)
                else:
                    chosen = key_shared_candidates(
                        latest, window, consumer=self.consumer_name, hash_owner=owner_of(window.hashes),
                        owner_names=names, now_ms=now_ms, delayed_enabled=delayed_enabled,
                        allow_out_of_order=allow_out_of_order, limit=limit, deliver_ahead_ms=deliver_ahead_ms,
                    )
                if len(chosen) >= limit or stop >= end:
                    return chosen, (first, stop)
                stop = min(end, first + 4 * (stop - first))

        def fn(latest: Cursor | None) -> Cursor | None:
            if latest is None or self.consumer_name not in latest.consumers:
                taken["offsets"] = []
                return None
            latest.expire_consumers(now_ms)
            if self.consumer_name not in latest.consumers:
                taken["offsets"] = []
                return None
            chosen, taken["window"] = search(latest)
            taken["offsets"] = chosen.tolist()
            if not taken["offsets"]:
                return None
            latest.claim(self.consumer_name, taken["offsets"])
            return latest

        # Read the segments before the commit: ``fn`` runs under the cursor store's lock, which the
        # acknowledgment flush needs too, and it almost always finds the same windows read here.
        if self.consumer_name in cursor.consumers:
            search(cursor)
        new_cursor_state = self.store.update(fn)
        if taken["offsets"]:
            _, table, offsets = windows[taken["window"]]
            self._claimed_rows = (table, offsets)  # messages_for turns the claim into messages from these
        return taken["offsets"], new_cursor_state

    def claim_in_order(self, offsets: list[int], *, now_ms: int) -> tuple[list[int], Cursor | None]:
        """Failover: record in the cursor what the active consumer is about to deliver.

        The commit is made only while this consumer is the elected one in the newest cursor, so a
        consumer that just lost the subscription delivers nothing more, and what it was handed stays
        recorded for the next active consumer to take over, counted once (``Cursor.claim_in_order``).

        Returns:
            The offsets taken and the cursor after the commit (its redelivery counts go on the
            messages); ``([], None)`` when this consumer is not the active one, or not registered.
        """
        result: dict[str, Any] = {"taken": [], "active": False}

        def fn(latest: Cursor | None) -> Cursor | None:
            result["taken"], result["active"] = [], False
            if latest is None or self.consumer_name not in latest.consumers:
                return None
            latest.expire_consumers(now_ms)
            if self.consumer_name not in latest.consumers or not self.is_active(latest, now_ms):
                return None
            result["active"] = True
            result["taken"] = latest.claim_in_order(self.consumer_name, offsets)
            return latest if result["taken"] else None

        cursor = self.store.update(fn)
        if not result["active"]:
            return [], None
        return result["taken"], cursor

    def _holders(self, cursor: Cursor) -> list[RangeSet]:
        """Claims whose rows a dispatch window may leave out (see ``claim``)."""
        if self.sub_type == ConsumerType.Shared:
            return list(cursor.claims.values())
        mine = cursor.claims.get(self.consumer_name)
        return [] if mine is None else [mine]

    def next_due_ms(self, cursor: Cursor, now_ms: int) -> int | None:
        """The earliest future deliver-at among unacked messages in the scan window (for timers)."""
        snap = self.log.log.cached_snapshot()
        start = max(cursor.mark_delete, snap.first_offset)
        end = min(snap.next_offset, start + _SCAN_ROWS)
        if start >= end:
            return None
        window, _, _ = self.window(start, end)
        pending = (window.deliver_at_ms > now_ms) & ~cursor.is_acked(window.offsets)
        return int(window.deliver_at_ms[pending].min()) if pending.any() else None

    # -- turning offsets into messages -----------------------------------------------------------

    def messages_for(self, offsets: list[int], cursor: Cursor | None, *, source: int = -1) -> list[Message]:
        """Messages at ``offsets`` (ascending), chunks joined, redelivery counts from the cursor;
        ``source``: the consumer's index of this part, set on each message as it is built (D112)."""
        if not offsets:
            return []
        wanted = np.asarray(offsets, dtype=np.int64)
        claimed, self._claimed_rows = self._claimed_rows, None
        table = None
        if claimed is not None:  # the rows the claim just read (segments never change once committed)
            table, all_offsets = claimed
            index = np.searchsorted(all_offsets, wanted)
            inside = (index < len(all_offsets)).all()
            if not inside or not (all_offsets[np.minimum(index, len(all_offsets) - 1)] == wanted).all():
                table = None
        if table is None:
            table, all_offsets = self.log.read(offsets[0], offsets[-1] + 1)  # (no readahead: see ``window``)
            index = np.searchsorted(all_offsets, wanted)
            found = index < len(all_offsets)
            found[found] = all_offsets[index[found]] == wanted[found]
            if not found.all():  # an offset no live segment holds (a hole left by a repair) is no message
                index = index[found]
                if not len(index):
                    return []
        rows = _rows_at(table, index)
        chosen = all_offsets[index]
        entries, batches = self.log.ids_for_offsets(chosen)
        snap = self.log.log.cached_snapshot()
        msgs = messages_from_rows(rows, chosen, entries, batches, ledger_id=snap.ledger_id,
                                  partition=self.partition, topic=self.display_topic, schema=self.schema,
                                  source=source, decoded_rows_for=self._segment_values.source_for)
        counts = cursor.redelivery if cursor is not None else {}
        if counts:  # (most reads redeliver nothing: no pass over the messages then)
            for msg in msgs:
                msg._redelivery_count = counts.get(msg._offset, 0)
        return self._join_chunks(rows, msgs)

    def _join_chunks(self, rows: pa.Table, msgs: list[Message]) -> list[Message]:
        if rows.column("num_chunks").null_count == rows.num_rows:
            return msgs
        out: list[Message] = []
        for msg, chunk_uuid, total in zip(msgs, rows.column("chunk_uuid").to_pylist(),
                                           rows.column("num_chunks").to_pylist(), strict=True):
            if total is None or total <= 1:
                out.append(msg)
                continue
            pieces = self.chunks.setdefault(chunk_uuid, [])
            if any(p._offset == msg._offset for p in pieces):
                continue  # read again after a rewind (nack, ack timeout): this chunk is buffered already
            pieces.append(msg)
            if len(pieces) == total:
                del self.chunks[chunk_uuid]
                last = pieces[-1]
                last._data = b"".join(p._data or b"" for p in pieces)
                last._chunk_offsets = [p._offset for p in pieces]
                out.append(last)
        return out


def _rows_at(table: pa.Table, index: np.ndarray) -> pa.Table:
    """``table.take(index)``, but a slice (no copy) when ``index`` is one ascending run, as a claim of
    a backlog is: ``take`` over the thousands of chunks of a window of tiny segments cost ~14 us per
    chunk, a slice costs nothing per row.  All the rows are the table itself: slicing walks every
    column's chunks (~8 us per tiny segment of a window), and an in-order read wants every row."""
    if len(index) and int(index[-1]) - int(index[0]) == len(index) - 1 and (np.diff(index) == 1).all():
        if index[0] == 0 and len(index) == table.num_rows:
            return table
        return table.slice(int(index[0]), len(index))
    return table.take(pa.array(index))


def _covered_until(cursor: Cursor, start: int, holders: list[RangeSet]) -> int:
    """The first offset at or after ``start`` that is neither acknowledged nor in ``holders``."""
    pos = max(start, cursor.mark_delete)
    for s, e in sorted(r for rs in (cursor.acked, *holders) for r in rs.to_json()):
        if s > pos:
            break
        pos = max(pos, e)
    return pos


__all__ = ["MemoryCursorStore", "Store", "SubscriptionPart"]
