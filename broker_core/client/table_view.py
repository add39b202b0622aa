"""``TableView``: the latest value per key of a topic, kept up to date (the official ``pulsar.TableView``).

A table view is a ``readCompacted`` reader from the earliest position folded into a dict: the
compacted view supplies the latest value per key below the compaction horizon, the log the rest,
and a message with a null value (a tombstone) removes its key.  It reads through the reader's bulk
Arrow path (no ``Message`` object per row), so loading a view of 100,000 keys takes a fraction of a
second.  Messages without a key are ignored,
as in Pulsar.  ``Client.create_table_view`` returns once everything committed so far is loaded;
after that a daemon thread applies new messages as they arrive: at once for commits made in this
process (the log's in-process push), at the next poll for other processes' commits.

Listeners (``for_each_and_listen``, ``listen``) are called on that thread with ``(key, value)`` for
every update, and with ``(key, None)`` when a tombstone removes the key, as in the Java client.
Values are stored as payload bytes, with the schema version they were written under, and decoded
with the schema when handed out, like the official client does: a typed view resolves each value
from its writer's schema (``Schema.decode_message``), so values written before the topic's schema
evolved read as the view's schema says.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from broker_core.client.context import HandleOwner
from broker_core.client.reader import Reader
from broker_core.errors import AlreadyClosed, PulsarException
from broker_core.message import Schema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.storage.fork import created_before_fork
from broker_core.topic.watch import PollSchedule


class ViewClient(HandleOwner, Protocol):
    """The client as a table view sees it: it also makes the view's reader."""

    def create_reader(
        self, topic: str, start_message_id: MessageId, *, is_read_compacted: bool, reader_name: str | None
    ) -> Reader:
        """A reader of ``topic`` (the client's own method)."""


@dataclass(frozen=True, slots=True)
class _Stored:
    """One key's latest value as written: what a schema reads of a message (``EncodedMessage``)."""

    key: str
    payload: bytes
    version: bytes | None
    topic: str

    def data(self) -> bytes:
        return self.payload

    def has_null_value(self) -> bool:
        return False  # a null value removes its key: never stored

    def partition_key(self) -> str:
        return self.key

    def topic_name(self) -> str:
        return self.topic

    def schema_version(self) -> bytes:
        return self.version or b""


_LOG = logging.getLogger(__name__)
_READ_ROWS = 100_000  # rows per bulk read while catching up


class TableView:
    """A key -> latest value map of a topic. Create with ``Client.create_table_view``."""

    def __init__(self, client: ViewClient, topic: str, *, subscription_name: str | None, schema: Schema,
                 poll_interval_ms: int) -> None:
        self._client = client
        self._topic = topic
        self._subscription = subscription_name
        self._schema = schema
        schema.attach_client(client)  # so a typed schema can look up each value's writer schema
        self._poll_s = poll_interval_ms / 1000
        # between background polls: backs off while nothing arrives (``broker_core.topic.watch``)
        self._schedule = PollSchedule(self._poll_s, client._broker.config.new_entries_check_max_delay_millis / 1000)
        self._data: dict[str, _Stored] = {}
        self._chunks: dict[str, list[bytes]] = {}  # chunks of a message not read whole yet, by uuid
        self._listeners: list[Callable[[str, Any], None]] = []
        self._lock = threading.RLock()  # guards the map and listeners; held while applying a drain
        self._closed = False
        self._reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True,
                                            reader_name=f"table-view-{subscription_name or id(self)}")
        # wake on this process's commits to any partition (the reader's own waiting is per read_next)
        self._wake = threading.Event()
        broker = client._broker
        self._logs = [broker.topic_log(p) for p in broker.partitions(TopicName.parse(topic))]
        for log in self._logs:
            log.add_waiter(self._wake)
        try:
            self.refresh()
        except BaseException:
            self._closed = True
            for log in self._logs:
                log.remove_waiter(self._wake)
            self._reader.close()
            raise
        self._thread = threading.Thread(target=self._run, name=f"pubsub-table-view-{topic}", daemon=True)
        self._thread.start()

    # -- updates --------------------------------------------------------------------------------------

    def _apply(self, rows: pa.Table) -> None:
        """Fold raw rows (the reader's bulk path: no ``Message`` per row) into the map, in order."""
        keys = rows.column("key").to_pylist()
        values = rows.column("value").to_pylist()
        versions = rows.column("schema_version").to_pylist()
        if rows.column("num_chunks").null_count < rows.num_rows:
            keys, values, versions = self._join_chunks(rows, keys, values, versions)
        listeners = list(self._listeners)
        for key, data, version in zip(keys, values, versions, strict=True):
            if key is None:
                continue  # no key, no table entry (as in Pulsar)
            stored = None if data is None else _Stored(key, data, version, self._topic)
            if stored is None:
                self._data.pop(key, None)
            else:
                self._data[key] = stored
            for listener in listeners:
                try:
                    listener(key, None if stored is None else self._schema.decode_message(stored))
                except Exception:  # like the official client: a failing listener is logged, not fatal
                    _LOG.exception("table view listener on %s raised for key %r", self._topic, key)

    def _join_chunks(self, rows: pa.Table, keys: list[Any], values: list[Any],
                     versions: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """Replace a chunked message's chunks by its whole payload, at its last chunk's place (chunks
        of one message are consecutive, but may arrive in two reads)."""
        out_keys: list[Any] = []
        out_values: list[Any] = []
        out_versions: list[Any] = []
        uuids = rows.column("chunk_uuid").to_pylist()
        totals = rows.column("num_chunks").to_pylist()
        for key, value, version, chunk_uuid, total in zip(keys, values, versions, uuids, totals, strict=True):
            if total is None or total <= 1:
                out_keys.append(key)
                out_values.append(value)
                out_versions.append(version)
                continue
            pieces = self._chunks.setdefault(chunk_uuid, [])
            pieces.append(value or b"")
            if len(pieces) == total:
                del self._chunks[chunk_uuid]
                out_keys.append(key)
                out_values.append(b"".join(pieces))
                out_versions.append(version)
        return out_keys, out_values, out_versions

    def refresh(self) -> None:
        """Apply everything committed to the topic so far (other processes' commits included).

        ``create_table_view`` does this before returning; call it to read your own writes from other
        processes without waiting for the background poll.
        """
        self._check_open()
        self._refresh()

    def _refresh(self) -> bool:
        """``refresh``; True if anything was applied."""
        applied = False
        with self._lock:
            while True:
                rows = self._reader.read_batch(_READ_ROWS)
                if not rows.num_rows:  # the reader's bulk read returns nothing only when drained
                    return applied
                self._apply(rows)
                applied = True

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._schedule.interval_s)
            self._wake.clear()  # before draining: a commit landing meanwhile sets it again
            try:
                self._check_open()
                if self._refresh():
                    self._schedule.active()
                else:
                    self._schedule.idle()
            except AlreadyClosed:
                return
            except PulsarException:  # a storage hiccup: the next round retries
                _LOG.warning("table view on %s: refresh failed, retrying", self._topic, exc_info=True)

    # -- the official API -------------------------------------------------------------------------------

    def get(self, key: str) -> Any | None:
        """The latest value of ``key`` decoded with the schema, or None if the key is absent."""
        with self._lock:
            stored = self._data.get(key)
        return None if stored is None else self._schema.decode_message(stored)

    def for_each(self, callback: Callable[[str, Any], None]) -> None:
        """Call ``callback(key, value)`` for every entry (a consistent snapshot of the map)."""
        for key, value in self.items():
            callback(key, value)

    def for_each_and_listen(self, callback: Callable[[str, Any], None]) -> None:
        """``for_each``, then call ``callback`` on every later update, with no update missed or repeated
        in between (the map does not change while the existing entries are handed over)."""
        with self._lock:
            self.for_each(callback)
            self._listeners.append(callback)

    def listen(self, callback: Callable[[str, Any], None]) -> None:
        """Call ``callback(key, value)`` on every later update (``value`` None for a removal)."""
        with self._lock:
            self._listeners.append(callback)

    def close(self) -> None:
        """Stop updating the view and close its reader (the map's last contents stay readable)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        for log in self._logs:
            log.remove_waiter(self._wake)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with contextlib.suppress(PulsarException):
            self._reader.close()
        self._client._forget(self)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        """The keys, as a snapshot."""
        with self._lock:
            return list(self._data)

    def items(self) -> list[tuple[str, Any]]:
        """(key, decoded value) pairs, as a snapshot."""
        with self._lock:
            raw = list(self._data.items())
        return [(key, self._schema.decode_message(stored)) for key, stored in raw]

    def values(self) -> list[Any]:
        """The decoded values, as a snapshot."""
        return [value for _, value in self.items()]

    _created_before_fork = False  # set in a forked child (``client_core``)

    def _check_open(self) -> None:
        if self._closed:
            if self._created_before_fork:
                raise created_before_fork(f"table view on {self._topic}")
            raise AlreadyClosed(f"table view on {self._topic} is closed")

    def __str__(self) -> str:
        if self._subscription is None:
            return f"TableView(topic={self._topic})"
        return f"TableView(topic={self._topic}, subscription={self._subscription})"

    def __repr__(self) -> str:
        return self.__str__()


__all__ = ["TableView"]
