"""The reader: a non-durable cursor kept in memory, over one topic's partitions.

A reader never registers anywhere, so it never holds back retention.  It reads a partition in
slices of ``receiver_queue_size`` messages (Arrow, vectorised), turns them into ``Message`` objects,
and reassembles chunked messages.  When it is drained it waits on an event that the same process's
commits set (push) and otherwise polls the next log version every ``poll_interval_ms``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from broker_core.client.args import check_seek_target, check_type
from broker_core.client.context import HandleOwner
from broker_core.client.topic_gone import GONE_ERRORS, deleted_error
from broker_core.crypto import ENCRYPTION_PROPERTY, MessageDecryptor, Outcome
from broker_core.errors import (
    AlreadyClosed,
    CryptoError,
    InvalidConfiguration,
    PulsarException,
    Timeout,
    TopicDeleted,
)
from broker_core.log.snapshot import Snapshot
from broker_core.message import Message, Schema, messages_from_rows
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.storage.fork import created_before_fork
from broker_core.topic.compacted_view import CompactedTopic, ViewSlice
from broker_core.topic.topic_log import TopicLog
from broker_core.topic.watch import PollSchedule

_log = logging.getLogger(__name__)


class _Partition:
    __slots__ = ("chunks", "compacted", "index", "log", "name", "position")

    def __init__(self, index: int, name: TopicName, log: TopicLog, *, read_compacted: bool = False) -> None:
        self.index = index
        self.name = name
        self.log = log
        self.position = 0
        self.chunks: dict[str, list[Message]] = {}
        # readCompacted: below the compaction horizon, read the compacted view instead of the log
        self.compacted = CompactedTopic(log) if read_compacted else None

    def view_slice(self, max_rows: int, snapshot: Snapshot) -> ViewSlice | None:
        """readCompacted below the horizon: the view's next rows; otherwise None (read the log)."""
        return None if self.compacted is None else self.compacted.read(self.position, max_rows, snapshot)


class Reader:
    """Reads a topic from a chosen position. Create with ``Client.create_reader``."""

    def __init__(
        self,
        client: HandleOwner,
        topic: TopicName,
        partitions: list[TopicName],
        *,
        start_message_id: MessageId,
        start_message_id_inclusive: bool,
        receiver_queue_size: int,
        reader_name: str,
        schema: Schema,
        reader_listener: Callable[[Reader, Message], None] | None,
        poll_interval_ms: int,
        read_compacted: bool = False,
        decryptor: MessageDecryptor | None = None,
    ) -> None:
        self._client = client
        self._topic = topic
        self._partitioned = len(partitions) > 1 or partitions[0] != topic
        self._name = reader_name
        self._schema = schema
        self._inclusive = start_message_id_inclusive
        self._queue_size = receiver_queue_size
        self._poll_s = poll_interval_ms / 1000
        # between polls of a drained reader: backs off while nothing arrives (``broker_core.topic.watch``)
        self._schedule = PollSchedule(self._poll_s, client._broker.config.new_entries_check_max_delay_millis / 1000)
        self._parts = [
            _Partition(i if self._partitioned else -1, p, client._lookup_log(p),
                       read_compacted=read_compacted)
            for i, p in enumerate(partitions)
        ]
        self._buffer: deque[Message] = deque()
        self._decryptor = decryptor or MessageDecryptor(None, None)  # encrypted messages: broker_core/crypto.py
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        self._next_part = 0
        for part in self._parts:
            part.log.add_waiter(self._wake)
        self._position_at(start_message_id)
        self._listener_thread: threading.Thread | None = None
        if reader_listener is not None:
            self._listener_thread = threading.Thread(
                target=self._listen, args=(reader_listener,), name=f"pubsub-reader-{reader_name}", daemon=True
            )
            self._listener_thread.start()

    # -- positioning ----------------------------------------------------------------------------------

    def _position_at(self, msg_id: MessageId) -> None:
        if not isinstance(msg_id, MessageId):
            raise InvalidConfiguration(f"expected a MessageId, got {type(msg_id).__name__} {msg_id!r}")
        special = msg_id in (MessageId.earliest, MessageId.latest)
        if self._partitioned and not special:
            raise InvalidConfiguration(
                f"a reader on partitioned topic {self._topic} can start or seek only at MessageId.earliest, "
                f"MessageId.latest or a publish timestamp, not {msg_id}; create the reader on the partition "
                f"({self._topic}-partition-{msg_id.partition()}) to position it at a message id"
            )
        with self._lock:
            self._buffer.clear()
            for part in self._parts:
                part.chunks.clear()
                part.position = part.log.offset_for_message_id(msg_id, inclusive=self._inclusive)
                if part.compacted is not None and msg_id == MessageId.earliest:
                    # the view may still hold messages retention removed from the log
                    part.position = part.compacted.earliest(part.log.snapshot())

    def seek(self, message_id: MessageId | int) -> None:
        """Reposition at a message id (the start rules apply) or a publish timestamp in ms (inclusive)."""
        self._check_open()
        check_seek_target(message_id, "message_id")
        if isinstance(message_id, int):
            with self._lock:
                self._buffer.clear()
                for part in self._parts:
                    part.chunks.clear()
                    part.position = part.log.offset_for_publish_time(message_id)
        else:
            self._position_at(message_id)

    # -- reading ----------------------------------------------------------------------------------------

    def topic(self) -> str:
        return str(self._topic)

    def is_connected(self) -> bool:
        return not self._closed

    _created_before_fork = False  # set in a forked child (``client_core``)

    def _check_open(self) -> None:
        if self._closed:
            if self._created_before_fork:
                raise created_before_fork(f"reader {self._name!r} on {self._topic}")
            raise AlreadyClosed(f"reader {self._name!r} on {self._topic} is closed")

    def _stop_if_deleted(self, exc: BaseException) -> None:
        """After a read failed with ``exc``: if the topic was deleted, close and raise ``TopicDeleted``
        (once: a closed reader raises ``AlreadyClosed`` from then on); else let ``exc`` through."""
        gone = deleted_error((p.log for p in self._parts), topic=str(self._topic), what=f"reader {self._name!r}")
        if gone is None:
            raise exc
        self.close()
        raise gone from None

    def _fetch(self) -> bool:
        """Fill the buffer from the next partition with data; False if every partition is drained."""
        n = len(self._parts)
        for step in range(n):
            part = self._parts[(self._next_part + step) % n]
            snap = part.log.snapshot()
            if snap.deleted:  # its deletion has begun: nothing more will come
                raise TopicDeleted(f"topic {part.name} is being deleted", topic=str(part.name))
            piece = part.view_slice(self._queue_size, snap)
            if piece is not None and not len(piece.offsets):
                part.position, piece = piece.end, None  # nothing more in the view: on to the log
            if piece is not None:  # below the compaction horizon: the compacted view's rows
                table, offsets, entries, batches, part.position = (
                    piece.rows, piece.offsets, piece.entry_ids, piece.batch_indexes, piece.end)
                self._next_part = (self._next_part + step + 1) % n
            else:
                if part.position < snap.first_offset:
                    part.position = snap.first_offset  # retention removed what we had not read yet
                if part.position >= snap.next_offset:
                    continue
                end = min(part.position + self._queue_size, snap.next_offset)
                table, offsets, part.position = part.log.read_until(part.position, end, snapshot=snap)
                self._next_part = (self._next_part + step + 1) % n
                if not len(offsets):
                    continue
                entries, batches = part.log.ids_for_offsets(offsets, snapshot=snap)
            msgs = messages_from_rows(
                table, offsets, entries, batches, ledger_id=snap.ledger_id, partition=part.index,
                topic=str(part.name) if self._partitioned else str(self._topic), schema=self._schema,
            )
            self._buffer.extend(self._open_encrypted(_assemble_chunks(part, table, msgs)))
            if self._buffer:
                return True
        return bool(self._buffer)

    def _open_encrypted(self, msgs: list[Message]) -> list[Message]:
        """Decrypt what was encrypted; DISCARD drops a message that cannot be, FAIL (HOLD) puts its
        ``CryptoError`` in its place, which ``read_next`` raises (the reader has moved past it)."""
        if not any(msg._properties and ENCRYPTION_PROPERTY in msg._properties for msg in msgs):
            return msgs
        out: list[Any] = []
        for msg in msgs:
            if msg._properties and ENCRYPTION_PROPERTY in msg._properties:
                outcome = self._decryptor.open(msg)
                if outcome is Outcome.DISCARD:
                    continue
                if outcome is Outcome.HOLD:
                    out.append(self._decryptor.last_error)
                    continue
            out.append(msg)
        return out

    def _pop(self) -> Message:
        item: Any = self._buffer.popleft()
        if isinstance(item, CryptoError):
            raise item
        return item

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; waits up to ``timeout_millis`` (forever if None), else ``Timeout``."""
        if timeout_millis is not None:
            check_type(int, timeout_millis, "timeout_millis")
        # A wait is real time even under an injected (manual) clock: nothing else would end it.
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            self._check_open()
            try:
                with self._lock:
                    if self._buffer or self._fetch():
                        self._schedule.active()
                        return self._pop()
                self._wake.clear()
                with self._lock:  # a commit may have landed between the fetch and the clear
                    if self._buffer or self._fetch():
                        self._schedule.active()
                        return self._pop()
            except GONE_ERRORS as exc:
                self._stop_if_deleted(exc)
            wait = self._schedule.interval_s
            self._schedule.idle()
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Timeout(f"no message on {self._topic} within {timeout_millis} ms", topic=str(self._topic))
                wait = min(wait, remaining)
            self._wake.wait(wait)

    def read_batch(self, max_messages: int = 10_000) -> pa.Table:
        """Up to ``max_messages`` raw rows (segment columns plus ``partition``, ``offset``,
        ``entry_id``, ``batch_index``) as one Arrow table, without waiting.

        This is the bulk path: no ``Message`` objects are built.  Chunked messages are returned as
        their chunks (``chunk_*`` columns say how to join them).
        """
        self._check_open()
        check_type(int, max_messages, "max_messages")
        pieces = []
        with self._lock:
            if self._buffer:
                raise InvalidConfiguration(
                    "read_batch cannot be mixed with read_next while read_next has buffered messages"
                )
            remaining = max_messages
            for part in self._parts:
                try:
                    snap = part.log.snapshot()
                except GONE_ERRORS as exc:
                    self._stop_if_deleted(exc)
                piece = part.view_slice(remaining, snap)
                if piece is not None and not len(piece.offsets):
                    part.position, piece = piece.end, None  # nothing more in the view: on to the log
                if piece is not None:  # below the compaction horizon: the compacted view's rows
                    table, offsets, entries, batches, part.position = (
                        piece.rows, piece.offsets, piece.entry_ids, piece.batch_indexes, piece.end)
                else:
                    part.position = max(part.position, snap.first_offset)
                    end = min(part.position + remaining, snap.next_offset)
                    if end <= part.position:
                        continue
                    table, offsets, part.position = part.log.read_until(part.position, end, snapshot=snap)
                    entries, batches = part.log.ids_for_offsets(offsets, snapshot=snap)
                n = table.num_rows
                table = (table.append_column("partition", pa.array(np.full(n, part.index, dtype=np.int32)))
                         .append_column("offset", pa.array(offsets))
                         .append_column("entry_id", pa.array(entries))
                         .append_column("batch_index", pa.array(batches)))
                pieces.append(table)
                remaining -= n
                if remaining <= 0:
                    break
        if not pieces:
            from broker_core.log.segment import SEGMENT_SCHEMA

            schema = (SEGMENT_SCHEMA.append(pa.field("partition", pa.int32())).append(pa.field("offset", pa.int64()))
                      .append(pa.field("entry_id", pa.int64())).append(pa.field("batch_index", pa.int32())))
            return schema.empty_table()
        return pa.concat_tables(pieces)

    def has_message_available(self) -> bool:
        """Whether ``read_next`` would return without waiting for a new publish."""
        self._check_open()
        with self._lock:
            if self._buffer:
                return True
            for part in self._parts:
                try:
                    snap = part.log.snapshot()
                except GONE_ERRORS as exc:
                    self._stop_if_deleted(exc)
                if part.compacted is not None:
                    if part.compacted.available(part.position, snap):
                        return True
                elif max(part.position, snap.first_offset) < snap.next_offset:
                    return True
        return False

    def close(self) -> None:
        """Close the reader; a blocked ``read_next`` wakes and raises ``AlreadyClosed``."""
        if self._closed:
            return
        self._closed = True
        for part in self._parts:
            part.log.remove_waiter(self._wake)
        self._wake.set()
        self._client._forget(self)

    def _listen(self, listener: Callable[[Reader, Message], None]) -> None:
        """Hand each message to ``listener``; damaged storage goes to the application once.

        No call of the application's is there to raise a read error from, so, as a listener consumer
        does (D83), the error goes to ``threading.excepthook`` once; the thread then keeps trying at
        the idle backoff's cap (quietly while the error stays the same), so a repaired topic resumes.
        A listener that raises is logged and the reader moves on, as the official client does.
        """
        reported: str | None = None
        wait_ms = int(self._schedule.max_s * 1000) or 1
        while not self._closed:
            try:
                msg = self.read_next(timeout_millis=wait_ms)  # close() wakes it
            except (Timeout, AlreadyClosed):
                continue
            except TopicDeleted:
                return  # the reader closed itself: its topic is gone
            except PulsarException as damage:
                if str(damage) != reported:
                    reported = str(damage)
                    threading.excepthook(threading.ExceptHookArgs(
                        (type(damage), damage, damage.__traceback__, threading.current_thread())))
                self._wake.wait(wait_ms / 1000)  # close() sets it
                continue
            reported = None
            try:
                listener(self, msg)
            except Exception:
                _log.exception("reader listener of reader %r on %s raised", self._name, self._topic)

    def __iter__(self) -> Any:
        while self.has_message_available():
            yield self.read_next()


def _assemble_chunks(part: _Partition, table: pa.Table, msgs: list[Message]) -> list[Message]:
    """Pass ordinary messages through; join chunks into whole messages once all have arrived."""
    num_chunks = table.column("num_chunks")
    if num_chunks.null_count == table.num_rows:
        return msgs
    uuids = table.column("chunk_uuid").to_pylist()
    totals = num_chunks.to_pylist()
    out: list[Message] = []
    for msg, chunk_uuid, total in zip(msgs, uuids, totals, strict=True):
        if total is None:
            out.append(msg)
            continue
        pieces = part.chunks.setdefault(chunk_uuid, [])
        pieces.append(msg)
        if len(pieces) == total:
            del part.chunks[chunk_uuid]
            last = pieces[-1]
            last._data = b"".join(p._data or b"" for p in pieces)
            out.append(last)
    return out


__all__ = ["Reader"]
