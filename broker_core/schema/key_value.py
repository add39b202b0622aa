"""``KeyValueSchema``: a key and a value, each with its own schema (the shape change-data-capture writes).

Two encodings, as in Pulsar:

- ``INLINE``: the payload is ``[int32 key length][key bytes][int32 value length][value bytes]``
  (big-endian lengths; -1 for a null part).
- ``SEPARATED``: the payload is the value alone and the key's encoding travels as the message key,
  base64-encoded (Pulsar's ``partitionKeyB64Encoded``), so the key also routes and compacts.
"""

from __future__ import annotations

import base64
import enum
import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker_core.errors import PayloadTypeError, SchemaDefinitionError
from broker_core.schema.avro import AvroSchema, writer_of
from broker_core.schema.base import Schema
from broker_core.schema.info import SchemaInfo, SchemaType

if TYPE_CHECKING:
    from broker_core.schema.base import EncodedMessage

_LENGTH = struct.Struct(">i")
ENCODING_PROPERTY = "kv.encoding.type"


class KeyValueEncodingType(enum.Enum):
    """Where a KeyValue's key travels."""

    INLINE = "INLINE"
    SEPARATED = "SEPARATED"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A key and a value (either may be None)."""

    key: Any
    value: Any


def _encode_part(schema: Schema, part: Any) -> bytes | None:
    return None if part is None else schema.encode(part)


class KeyValueSchema(Schema):
    """Encodes ``KeyValue(key, value)`` with ``key_schema`` and ``value_schema``.

    Args:
        key_schema: schema of the key.
        value_schema: schema of the value.
        key_value_encoding_type: ``INLINE`` (default, as in Pulsar) or ``SEPARATED``.
    """

    def __init__(self, key_schema: Schema, value_schema: Schema,
                 key_value_encoding_type: KeyValueEncodingType = KeyValueEncodingType.INLINE) -> None:
        for name, part in (("key_schema", key_schema), ("value_schema", value_schema)):
            if not isinstance(part, Schema) or isinstance(part, KeyValueSchema):
                raise SchemaDefinitionError(f"KeyValueSchema {name} must be a (non-KeyValue) Schema, got {part!r}")
        if not isinstance(key_value_encoding_type, KeyValueEncodingType):
            raise SchemaDefinitionError(
                f"key_value_encoding_type must be a KeyValueEncodingType, got {key_value_encoding_type!r}"
            )
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.encoding = key_value_encoding_type
        self.separated_key = key_value_encoding_type is KeyValueEncodingType.SEPARATED

    def schema_info(self) -> SchemaInfo:
        key, value = self.key_schema.schema_info(), self.value_schema.schema_info()
        definition = json.dumps({"key": key.to_json(), "value": value.to_json()}, sort_keys=True)
        return SchemaInfo(SchemaType.KEY_VALUE, "KeyValue", definition, {ENCODING_PROPERTY: self.encoding.value})

    def attach_client(self, client: Any) -> None:
        super().attach_client(client)
        self.key_schema.attach_client(client)
        self.value_schema.attach_client(client)

    def _check(self, value: Any) -> KeyValue:
        if not isinstance(value, KeyValue):
            raise PayloadTypeError(f"KeyValueSchema encodes KeyValue(key, value), got {type(value).__name__}")
        return value

    def encode(self, value: Any) -> bytes:
        kv = self._check(value)
        encoded_value = _encode_part(self.value_schema, kv.value)
        if self.encoding is KeyValueEncodingType.SEPARATED:
            return encoded_value if encoded_value is not None else b""
        encoded_key = _encode_part(self.key_schema, kv.key)
        out = bytearray()
        for part in (encoded_key, encoded_value):
            out += _LENGTH.pack(-1 if part is None else len(part))
            out += part or b""
        return bytes(out)

    def encode_separated(self, value: Any) -> tuple[str | None, bytes | None]:
        """SEPARATED: the key's encoding, base64, as the message key; a None value is a null-value message
        (a tombstone, which is what compaction and change-data-capture deletes expect)."""
        kv = self._check(value)
        encoded = _encode_part(self.key_schema, kv.key)
        key = None if encoded is None else base64.b64encode(encoded).decode("ascii")
        return key, _encode_part(self.value_schema, kv.value)

    def decode(self, data: bytes) -> Any:
        if self.encoding is KeyValueEncodingType.SEPARATED:
            return KeyValue(None, self.value_schema.decode(data))
        key_bytes, value_bytes = split_inline(data)
        return KeyValue(None if key_bytes is None else self.key_schema.decode(key_bytes),
                        None if value_bytes is None else self.value_schema.decode(value_bytes))

    def decode_message(self, msg: EncodedMessage) -> Any:
        writer = writer_of(self, msg)
        key_writer = value_writer = None
        if writer is not None:
            parts = writer.parsed()
            key_writer, value_writer = SchemaInfo.from_json(parts["key"]), SchemaInfo.from_json(parts["value"])
        if self.encoding is KeyValueEncodingType.SEPARATED:
            key_text = msg.partition_key()
            key_bytes = base64.b64decode(key_text) if key_text else None
            value_bytes: bytes | None = None if msg.has_null_value() else msg.data()
        else:
            key_bytes, value_bytes = split_inline(msg.data())
        return KeyValue(_decode_part(self.key_schema, key_bytes, key_writer),
                        _decode_part(self.value_schema, value_bytes, value_writer))


def _decode_part(schema: Schema, data: bytes | None, writer: SchemaInfo | None) -> Any:
    if data is None:
        return None
    if isinstance(schema, AvroSchema):
        return schema.decode_with(data, writer)
    return schema.decode(data)


def split_inline(data: bytes) -> tuple[bytes | None, bytes | None]:
    """The key and value bytes of an INLINE payload (None for a part written as null)."""
    parts: list[bytes | None] = []
    pos = 0
    for _ in range(2):
        if pos + 4 > len(data):
            raise PayloadTypeError(f"KeyValue INLINE payload of {len(data)} bytes is truncated")
        (length,) = _LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0:
            parts.append(None)
            continue
        if pos + length > len(data):
            raise PayloadTypeError(f"KeyValue INLINE payload of {len(data)} bytes is truncated")
        parts.append(data[pos:pos + length])
        pos += length
    return parts[0], parts[1]


__all__ = ["ENCODING_PROPERTY", "KeyValue", "KeyValueEncodingType", "KeyValueSchema", "split_inline"]
