"""Messages as the client hands them out, and the schemas that encode payloads.

A ``Message`` mirrors the official client's accessors (``data()``, ``value()``, ``properties()``,
``message_id()``...).  Messages are built from segment rows in bulk (``messages_from_rows``), one
Python object per message only at the point the API needs one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from broker_core.errors import PayloadTypeError
from broker_core.message_id import MessageId


class Schema(ABC):
    """Encodes values to payload bytes and back (the official client's schema hook)."""

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """Payload bytes of ``value``; ``PayloadTypeError`` if the value does not fit the schema."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value a payload encodes."""


class BytesSchema(Schema):
    """Payloads are bytes, unchanged; anything else is a ``TypeError``."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, bytes):
            raise PayloadTypeError(
                f"the bytes schema needs a bytes payload, got {type(value).__name__}; "
                "encode it first (e.g. text.encode('utf-8')) or use StringSchema"
            )
        return value

    def decode(self, data: bytes) -> Any:
        return data


class StringSchema(Schema):
    """Payloads are UTF-8 text."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise PayloadTypeError(f"the string schema needs a str payload, got {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return data.decode("utf-8")


@dataclass(slots=True, eq=False)
class Message:
    """A received message (the official client's ``Message`` accessors)."""

    _data: bytes | None
    _key: str | None
    _ordering_key: bytes | None
    _properties: dict[str, str]
    _producer_name: str | None
    _sequence_id: int | None
    _publish_time_ms: int
    _event_time_ms: int
    _deliver_at_ms: int | None
    _schema_version: bytes | None
    _message_id: MessageId
    _topic: str
    _redelivery_count: int = 0
    _schema: Schema | None = None
    _offset: int = -1
    _sticky_key_hash: int = 0
    _chunk_offsets: list[int] | None = None
    _source: int = -1  # index of the consumer's subscription part that delivered it

    def data(self) -> bytes:
        """The raw payload (b"" for a null-value tombstone; see ``has_null_value``)."""
        return self._data if self._data is not None else b""

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (None for a tombstone)."""
        if self._data is None:
            return None
        return self._schema.decode(self._data) if self._schema else self._data

    def has_null_value(self) -> bool:
        return self._data is None

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._key or ""

    def ordering_key(self) -> str:
        return self._ordering_key.decode("utf-8", "replace") if self._ordering_key else ""

    def publish_timestamp(self) -> int:
        """Publish time in ms since the epoch (taken when ``send`` was called)."""
        return self._publish_time_ms

    def event_timestamp(self) -> int:
        """Event time in ms, 0 when the producer set none (as in Pulsar)."""
        return self._event_time_ms

    def deliver_at_timestamp(self) -> int | None:
        return self._deliver_at_ms

    def message_id(self) -> MessageId:
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def schema_version(self) -> bytes:
        return self._schema_version or b""

    def producer_name(self) -> str:
        return self._producer_name or ""

    def sequence_id(self) -> int:
        return -1 if self._sequence_id is None else self._sequence_id

    def __repr__(self) -> str:
        size = "null" if self._data is None else f"{len(self._data)}B"
        return f"Message(id={self._message_id}, topic={self._topic!r}, key={self._key!r}, value={size})"


def _ms(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    ints = column.cast(pa.int64())
    return [None if v is None else v // 1000 for v in ints.to_pylist()]


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
) -> list[Message]:
    """Build ``Message`` objects from segment rows (one per row; chunks are not merged here)."""
    values = table.column("value").to_pylist()
    keys = table.column("key").to_pylist()
    ordering = table.column("ordering_key").to_pylist()
    props = table.column("properties").to_pylist()
    producers = table.column("producer_name").to_pylist()
    seqs = table.column("sequence_id").to_pylist()
    publish = _ms(table.column("publish_time"))
    event = _ms(table.column("event_time"))
    deliver = _ms(table.column("deliver_at"))
    versions = table.column("schema_version").to_pylist()
    hashes = table.column("sticky_key_hash").to_pylist()
    entry_list = [int(e) for e in entry_ids.tolist()]
    batch_list = [int(b) for b in batch_indexes.tolist()]
    offset_list = offsets.tolist()
    out: list[Message] = []
    for i in range(table.num_rows):
        out.append(
            Message(
                _data=values[i],
                _key=keys[i],
                _ordering_key=ordering[i],
                _properties=dict(props[i]) if props[i] else {},
                _producer_name=producers[i],
                _sequence_id=seqs[i],
                _publish_time_ms=publish[i] or 0,
                _event_time_ms=event[i] or 0,
                _deliver_at_ms=deliver[i],
                _schema_version=versions[i],
                _message_id=MessageId._trusted(partition, ledger_id, entry_list[i], batch_list[i]),
                _topic=topic,
                _schema=schema,
                _offset=offset_list[i],
                _sticky_key_hash=hashes[i],
            )
        )
    return out


__all__ = ["BytesSchema", "Message", "Schema", "StringSchema", "messages_from_rows"]
