"""``JsonSchema``: records encoded as JSON objects (stdlib ``json``), described by an Avro schema.

Pulsar describes a JSON topic's records with an Avro schema too, so compatibility checks are the
same as for Avro.  Reading is tolerant the way Avro resolution is: fields the reader does not know
are ignored and fields the writer did not send take the reader's defaults.  Enums travel as their
values and bytes as UTF-8 text, as Pulsar's Python client writes them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from broker_core.errors import PayloadTypeError
from broker_core.schema.avro import AvroSchema, writer_of
from broker_core.schema.info import SchemaInfo, SchemaType

if TYPE_CHECKING:
    from broker_core.schema.base import EncodedMessage


class JsonSchema(AvroSchema):
    """JSON records: ``JsonSchema(MyRecord)`` (or ``JsonSchema(None, schema_definition=...)`` for dicts)."""

    schema_type = SchemaType.JSON

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(SchemaType.JSON, "JSON", self._text)

    def encode(self, value: Any) -> bytes:
        if self._record_cls is not None:
            if not isinstance(value, self._record_cls):
                raise PayloadTypeError(
                    f"JsonSchema({self._record_cls.__name__}) cannot encode a {type(value).__name__}; "
                    f"send a {self._record_cls.__name__} instance"
                )
            datum = value._to_datum(json=True)
        elif isinstance(value, dict):
            datum = value
        else:
            raise PayloadTypeError(f"JsonSchema without a record class encodes dicts, got {type(value).__name__}")
        try:
            return json.dumps(datum, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise PayloadTypeError(f"value is not JSON-serialisable: {exc}") from None

    def decode(self, data: bytes) -> Any:
        try:
            datum = json.loads(data)
        except ValueError as exc:
            raise PayloadTypeError(f"payload is not JSON: {exc}") from None
        if self._record_cls is None:
            return datum
        if not isinstance(datum, dict):
            raise PayloadTypeError(f"JSON payload is a {type(datum).__name__}, not an object")
        return self._record_cls._from_datum(datum)

    def decode_with(self, data: bytes, writer: SchemaInfo | None) -> Any:
        if writer is not None and writer.type != SchemaType.JSON:
            raise PayloadTypeError(f"message was written with a {writer.type.name} schema; "
                                   "it cannot be read with JsonSchema")
        return self.decode(data)

    def decode_message(self, msg: EncodedMessage) -> Any:
        return self.decode_with(msg.data(), writer_of(self, msg))


__all__ = ["JsonSchema"]
