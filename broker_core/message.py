"""Messages as the client hands them out (the schemas that encode payloads live in ``broker_core.schema``).

A ``Message`` mirrors the official client's accessors (``data()``, ``value()``, ``properties()``,
``message_id()``...).  Messages are built from segment rows in bulk (``messages_from_rows``), one
Python object per message only at the point the API needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import islice, repeat
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from broker_core.message_id import MessageId
from broker_core.schema.base import Schema
from broker_core.schema.constant_column import constant_value, distinct_values
from broker_core.schema.primitive import BytesSchema, StringSchema

if TYPE_CHECKING:
    from broker_core.crypto import EncryptionContext


class Message:
    """A received message (the official client's ``Message`` accessors).

    What a message was sent with and few applications read (ordering key, producer name, sequence
    id, publish/event/deliver-at times) is one ``_sent`` tuple, or for a message read from a segment
    (``messages_from_rows``) its row of the ``RowBatch``, converted when first asked for: a received
    message is then built with ten values instead of twenty-one, and is a smaller object for the
    garbage collector to scan while it waits in a receiver queue.
    """

    __slots__ = ("_batch", "_chunk_offsets", "_data", "_encryption", "_key", "_message_id", "_offset", "_properties",
                 "_redelivery_count", "_row", "_schema", "_schema_version", "_sent", "_source", "_sticky_key_hash",
                 "_topic")

    _data: bytes | None
    _key: str | None
    _properties: Mapping[str, str]  # read-only: replaced, never changed in place (``_NO_PROPERTIES``)
    _schema_version: bytes | None
    _message_id: MessageId | None  # None: built by ``message_id()`` from ``_batch``
    _topic: str
    _redelivery_count: int
    _schema: Schema | None
    _offset: int
    _sticky_key_hash: int
    _chunk_offsets: list[int] | None
    _source: int  # index of the consumer's subscription part that delivered it
    _encryption: EncryptionContext | None  # set when the message arrived encrypted
    _batch: RowBatch | None  # the rows read with this one (lazy id, values decoded together)
    _row: int  # this message's row in ``_batch``
    _sent: _Sent | None  # None: the row ``_row`` of ``_batch`` holds it

    def __init__(self, _data: bytes | None, _key: str | None, _ordering_key: bytes | None,
                 _properties: Mapping[str, str], _producer_name: str | None, _sequence_id: int | None,
                 _publish_time_ms: int, _event_time_ms: int, _deliver_at_ms: int | None, _schema_version: bytes | None,
                 _message_id: MessageId | None, _topic: str, _redelivery_count: int = 0, _schema: Schema | None = None,
                 _offset: int = -1, _sticky_key_hash: int = 0, _chunk_offsets: list[int] | None = None,
                 _source: int = -1, _encryption: EncryptionContext | None = None) -> None:
        self._data = _data
        self._key = _key
        self._properties = _properties
        self._schema_version = _schema_version
        self._message_id = _message_id
        self._topic = _topic
        self._redelivery_count = _redelivery_count
        self._schema = _schema
        self._offset = _offset
        self._sticky_key_hash = _sticky_key_hash
        self._chunk_offsets = _chunk_offsets
        self._source = _source
        self._encryption = _encryption
        self._batch = None
        self._row = 0
        self._sent = (_ordering_key, _producer_name, _sequence_id, _publish_time_ms, _event_time_ms, _deliver_at_ms)

    def _sent_fields(self) -> _Sent:
        sent = self._sent
        if sent is None:
            assert self._batch is not None
            sent = self._sent = self._batch.sent(self._row)
        return sent

    def data(self) -> bytes:
        """The raw payload (b"" for a null-value tombstone; see ``has_null_value``)."""
        return self._data if self._data is not None else b""

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (None for a tombstone).

        A typed schema decodes with the schema version the message was written with, resolved to
        its own (``Schema.decode_message``).
        """
        batch = self._batch
        # decoded with the whole segment read, once (a second call decodes afresh), unless the payload
        # was replaced since (decrypted, chunks joined)
        if batch is not None and batch.payloads[self._row] is self._data:
            record_at = batch.record_at
            if record_at is not None:  # (``RowBatch.value`` inline: the path of every message of a decoded read)
                return record_at(self._row)
            value = batch.value(self._row)
            if value is not _UNDECODED:
                return value
        schema = self._schema
        if self._data is None:  # a KeyValue SEPARATED tombstone still has its key
            return schema.decode_message(self) if schema is not None and schema.separated_key else None
        return schema.decode_message(self) if schema else self._data

    def has_null_value(self) -> bool:
        return self._data is None

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._key or ""

    def ordering_key(self) -> str:
        ordering_key = self._sent_fields()[0]
        return ordering_key.decode("utf-8", "replace") if ordering_key else ""

    def publish_timestamp(self) -> int:
        """Publish time in ms since the epoch (taken when ``send`` was called)."""
        return self._sent_fields()[3]

    def event_timestamp(self) -> int:
        """Event time in ms, 0 when the producer set none (as in Pulsar)."""
        return self._sent_fields()[4]

    def deliver_at_timestamp(self) -> int | None:
        return self._sent_fields()[5]

    def message_id(self) -> MessageId:
        msg_id = self._message_id
        if msg_id is None:  # built on first use from the segment read it came with
            assert self._batch is not None
            msg_id = self._message_id = self._batch.message_id(self._row)
        return msg_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def schema_version(self) -> bytes:
        return self._schema_version or b""

    def producer_name(self) -> str:
        return self._sent_fields()[1] or ""

    def sequence_id(self) -> int:
        sequence_id = self._sent_fields()[2]
        return -1 if sequence_id is None else sequence_id

    def encryption_context(self) -> EncryptionContext | None:
        """How the message was encrypted end to end (``broker_core/crypto.py``), None if it was not."""
        return self._encryption

    def __repr__(self) -> str:
        size = "null" if self._data is None else f"{len(self._data)}B"
        return f"Message(id={self.message_id()}, topic={self._topic!r}, key={self._key!r}, value={size})"


_Sent = tuple[bytes | None, str | None, int | None, int, int, int | None]  # see ``Message._sent``
_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})  # what most received messages carry: one shared,
# read-only object, not an empty dict per message that the garbage collector tracks in the receiver queue
_UNDECODED = object()  # ``RowBatch.value``: no value from the batch, decode the message alone
_MIN_BATCH_ROWS = 256  # below this, decoding message by message is cheaper than one vectorised pass
# (the NumPy pass costs ~0.2 ms whatever the size: at 100 rows it is slower than fastavro per message,
# from ~250 rows on faster, at 500 rows ~0.8 us a row against ~1.6 us for fastavro and a record)


class RowBatch:
    """What the messages built from one segment read share, and compute only when asked.

    ``message_id()`` builds a message's ``MessageId`` from the batch's entry and batch-index lists
    (most applications acknowledge the ``Message`` and never look at its id).  ``Message.value()``
    of any message of the batch decodes every payload at once with the schema's ``decode_values``
    (Avro: NumPy over the Arrow column, no per-message fastavro call) and takes its own value; each
    value is handed out once, so a second ``value()`` decodes afresh and two calls never share an
    object.  When the schema cannot decode the batch exactly as message by message would (another
    writer version, tombstones, chunks, bad data), or has no batch decoder (``schema`` None here),
    every message decodes alone.
    """

    __slots__ = ("_column", "_decoded_rows", "_entries", "_ids", "_indexes", "_schema", "_sent_rows", "_table",
                 "_values", "_versions", "ledger_id", "partition", "payloads", "record_at", "topic")

    def __init__(self, payloads: list[bytes | None], entries: np.ndarray, indexes: np.ndarray, *, ledger_id: int,
                 partition: int, topic: str, schema: Schema | None, table: pa.Table,
                 versions: list[bytes | None] | None = None,
                 decoded_rows: Callable[[], Any] | None = None) -> None:
        self.payloads = payloads  # the messages' own ``_data`` objects: a replaced payload is not in here
        self._entries = entries  # as arrays until the first ``message_id`` (most reads never ask: D112)
        self._indexes = indexes
        self._ids: tuple[list[int], list[int]] | None = None
        self.ledger_id = ledger_id
        self.partition = partition
        self.topic = topic
        self._schema = schema
        self._column: pa.ChunkedArray | None = table.column("value") if schema is not None else None
        # the rows' distinct schema versions (None: not known yet, found when the batch decodes)
        self._versions: list[bytes | None] | None = versions
        # these rows of their segment's decoded payloads (``client/segment_values.py``), if it has them
        self._decoded_rows = decoded_rows
        self._values: dict[int, Any] | None = None if schema is not None else {}
        self._table = table  # the rows themselves: what ``sent`` converts when first asked
        self._sent_rows: list[_Sent] | None = None
        self.record_at: Callable[[int], Any] | None = None  # a row's new value (``decode_values`` gave one)

    def message_id(self, row: int) -> MessageId:
        ids = self._ids
        if ids is None:  # (two threads may both convert: the same lists either way)
            ids = self._ids = (self._entries.tolist(), self._indexes.tolist())
        return MessageId._trusted(self.partition, self.ledger_id, ids[0][row], ids[1][row], self.topic)

    def sent(self, row: int) -> _Sent:
        """``Message._sent`` of ``row``: every row's converted at the first call (most reads never ask)."""
        rows = self._sent_rows
        if rows is None:
            table = self._table
            rows = self._sent_rows = list(islice(zip(
                _values(table, "ordering_key"), _shared_values(table, "producer_name"), _values(table, "sequence_id"),
                _ms(table, "publish_time", 0), _ms(table, "event_time", 0), _ms(table, "deliver_at", None),
                strict=False,  # (a ``repeat`` of a constant column is endless: ``islice`` bounds the rows)
            ), table.num_rows))
        return rows[row]

    def value(self, row: int) -> Any:
        """The decoded value of ``row`` (once), or ``_UNDECODED``."""
        record_at = self.record_at
        if record_at is not None:  # the schema builds a new value of the row at every call
            return record_at(row)
        values = self._values
        if values is None:
            column, self._column = self._column, None
            decoded = None
            if self._schema is not None and column is not None:
                rows = None if self._decoded_rows is None else self._decoded_rows()
                self._decoded_rows = None  # (it holds the consumer's part)
                if rows is not None:
                    decoded = self._schema.values_of(rows)
                else:
                    versions = self._versions
                    if versions is None:
                        versions = distinct_values(self._table.column("schema_version"))
                    decoded = self._schema.decode_values(column.combine_chunks(), versions, self.topic)
            if callable(decoded):
                self.record_at = decoded
                return decoded(row)
            # by row, so that taking one is a single ``pop`` (atomic: two threads never get the same datum)
            values = self._values = dict(enumerate(decoded)) if decoded is not None else {}
        datum = values.pop(row, _UNDECODED)
        if datum is _UNDECODED:
            return datum
        assert self._schema is not None
        return self._schema.value_of_datum(datum)


def _values(table: pa.Table, name: str) -> Iterable[Any]:
    """A column as Python values; an all-null column (most optional fields) is ``repeat(None)``, no
    conversion and no list (``messages_from_rows`` maps over the columns, bounded by the row range)."""
    column = table.column(name)
    if column.null_count == len(column):
        return repeat(None)
    return column.to_pylist()


def _shared_values(table: pa.Table, name: str) -> Iterable[Any]:
    """``_values`` of a column that mostly holds one value for a whole read (the producer name, the
    schema version): then ``repeat`` of one Python object, not one per row."""
    column = table.column(name)
    constant, value = constant_value(column)
    return repeat(value) if constant else column.to_pylist()


def _ms(table: pa.Table, name: str, null: int | None) -> Iterable[int | None]:
    """A timestamp column (us) as whole milliseconds, ``null`` where it is null."""
    column = table.column(name)
    if column.null_count == len(column):
        return repeat(null)
    ints = column.cast(pa.int64())
    if column.null_count == 0:
        return (ints.to_numpy() // 1000).tolist()
    return [null if v is None else v // 1000 for v in ints.to_pylist()]


def _properties(table: pa.Table) -> Iterable[Mapping[str, str]]:
    column = table.column("properties")
    if column.null_count == len(column):
        return repeat(_NO_PROPERTIES)
    return [dict(prop) if prop else _NO_PROPERTIES for prop in column.to_pylist()]


def messages_from_rows(
    table: pa.Table,
    offsets: np.ndarray,
    entry_ids: np.ndarray,
    batch_indexes: np.ndarray,
    *,
    ledger_id: int,
    partition: int,
    topic: str,
    schema: Schema | None = None,
    source: int = -1,
    decoded_rows_for: Callable[[np.ndarray], Callable[[], Any] | None] | None = None,
) -> list[Message]:
    """Build ``Message`` objects from segment rows (one per row; chunks are not merged here).

    This runs once per received message, so it converts each column in one call and builds the
    ``Message`` objects with one C-level ``map`` over the columns (a column null in every row, and a
    constant one, is a ``repeat`` of one value): no Python bytecode per row besides ``_received``.
    What most applications never ask for is left to the shared ``RowBatch``: the ``MessageId``
    (built by ``message_id()``), the sent fields (``RowBatch.sent``) and the decoded value (decoded
    for the whole batch by the first ``value()``; ``decoded_rows_for``, asked only for a batch that
    decodes: where to take it from instead, the rows' slice of their segment's decoded payloads,
    ``SegmentValues.source_for``).
    """
    values = table.column("value").to_pylist()
    n = len(values)
    decodes = schema is not None and schema.batch_decodes and n >= _MIN_BATCH_ROWS
    one_version, version = constant_value(table.column("schema_version"))  # (almost always: one writer)
    batch = RowBatch(values, entry_ids, batch_indexes, ledger_id=ledger_id, partition=partition,
                     topic=topic, schema=schema if decodes else None, table=table,
                     versions=[version] if one_version else None,
                     decoded_rows=decoded_rows_for(offsets) if decodes and decoded_rows_for is not None else None)
    hashes = table.column("sticky_key_hash")  # (never null: written by every producer)
    return list(map(
        _received, values, _values(table, "key"), _properties(table),
        repeat(version) if one_version else table.column("schema_version").to_pylist(),
        repeat(topic), repeat(schema), offsets.tolist(),
        hashes.to_pylist() if hashes.null_count == 0 else [h or 0 for h in hashes.to_pylist()],
        repeat(batch), range(n), repeat(source),
    ))


_new = object.__new__


def _received(data: bytes | None, key: str | None, properties: Mapping[str, str], version: bytes | None, topic: str,
              schema: Schema | None, offset: int, sticky_key_hash: int, batch: RowBatch, row: int,
              source: int) -> Message:
    """A ``Message`` of row ``row`` of ``batch`` (``Message.__init__`` without the sent fields, which
    stay in the batch until asked for)."""
    msg = _new(Message)
    msg._data = data
    msg._key = key
    msg._properties = properties
    msg._schema_version = version
    msg._message_id = None
    msg._topic = topic
    msg._redelivery_count = 0
    msg._schema = schema
    msg._offset = offset
    msg._sticky_key_hash = sticky_key_hash
    msg._chunk_offsets = None
    msg._source = source
    msg._encryption = None
    msg._batch = batch
    msg._row = row
    msg._sent = None
    return msg


__all__ = ["BytesSchema", "Message", "RowBatch", "Schema", "StringSchema", "messages_from_rows"]
