"""``AvroSchema``: records encoded with Avro's binary encoding through ``fastavro``.

The payload is Avro's schemaless binary encoding of one datum (no container header), as Pulsar
writes it.  A message written under an older (or newer) schema version is decoded with the writer's
schema, looked up in the topic's registry by the message's version, and resolved to this schema by
Avro's resolution rules (fields matched by name, defaults filled in, promotions applied).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa
from fastavro._read_common import SchemaResolutionError

from broker_core.errors import PayloadTypeError, PulsarException, SchemaDefinitionError, SchemaNotFound
from broker_core.schema.avro_encode import RecordEncoder
from broker_core.schema.avro_vector import decode_unresolved
from broker_core.schema.base import Schema
from broker_core.schema.info import SchemaInfo, SchemaType
from broker_core.schema.record import Record, _plan

_write = fastavro.schemaless_writer
_SET_DICT = object.__setattr__  # a decoded datum becomes a record's __dict__ (``Record.__setattr__`` checks one field)
_read = fastavro.schemaless_reader

if TYPE_CHECKING:
    from broker_core.schema.base import EncodedMessage


@lru_cache(maxsize=512)
def parsed_avro(definition: str) -> Any:
    """fastavro's parsed form of an Avro schema's JSON text (cached: definitions are immutable)."""
    try:
        return fastavro.parse_schema(json.loads(definition), named_schemas={})
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise SchemaDefinitionError(f"not a valid Avro schema: {exc}; definition: {definition[:200]}") from None


@lru_cache(maxsize=512)
def writer_for_reader(writer_definition: str, reader_definition: str) -> Any:
    """The writer's parsed schema with its top-level record renamed to the reader's.

    Avro resolution matches records by name; a record class renamed between versions keeps its
    data, as in Pulsar's client, so only the top-level name is aligned.
    """
    writer, reader = json.loads(writer_definition), json.loads(reader_definition)
    if isinstance(writer, dict) and isinstance(reader, dict) and writer.get("type") == "record":
        writer["name"] = reader.get("name", writer.get("name"))
        if "namespace" in reader:
            writer["namespace"] = reader["namespace"]
        else:
            writer.pop("namespace", None)
    return parsed_avro(json.dumps(writer))


def pretty(definition: Any) -> str:
    """The definition text as Pulsar's Python client renders it (``json.dumps(..., indent=True)``)."""
    return json.dumps(definition, indent=True)


class AvroSchema(Schema):
    """Avro records: ``AvroSchema(MyRecord)`` or ``AvroSchema(None, schema_definition={...})`` (dicts).

    Args:
        record_cls: a ``Record`` subclass; values sent must be instances of it, values received are.
        schema_definition: an Avro schema as a dict, when there is no record class; values are dicts.
    """

    schema_type = SchemaType.AVRO

    def __init__(self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None) -> None:
        if record_cls is None and schema_definition is None:
            raise SchemaDefinitionError(f"{type(self).__name__} needs a Record class or a schema_definition")
        if record_cls is not None and not (isinstance(record_cls, type) and issubclass(record_cls, Record)):
            raise SchemaDefinitionError(f"{type(self).__name__} needs a Record subclass, got {record_cls!r}")
        self._record_cls = record_cls
        self._definition = record_cls.schema() if record_cls is not None else schema_definition
        self._text = pretty(self._definition)
        self._parsed = parsed_avro(self._text)
        # a record class of plain fields (no enums, no nested records: the common case): ``encode`` takes a
        # record's own __dict__ as the datum, and a decoded datum becomes a record's __dict__
        plain = record_cls is not None and not _plan(record_cls, "to_avro") and not _plan(record_cls, "from_avro")
        self._plain_cls = record_cls if plain else None
        # the decoded fields of a batch (one list each, in schema order) -> a function from a row to a new record
        self._records_of_columns = _record_builder(record_cls, self._definition) if plain else None
        # whole batches of payloads decode in NumPy (``decode_values``) unless logical types are involved,
        # which fastavro turns into Python objects (datetimes, decimals) and the vectorised decoder does not
        self.batch_decodes = self.schema_type is SchemaType.AVRO and '"logicalType"' not in self._text

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(self.schema_type, self.schema_type.name, self._text)

    def _datum(self, value: Any) -> Any:
        if self._record_cls is not None:
            if not isinstance(value, self._record_cls):
                raise PayloadTypeError(
                    f"{type(self).__name__}({self._record_cls.__name__}) cannot encode a {type(value).__name__}; "
                    f"send a {self._record_cls.__name__} instance"
                )
            return value._to_datum(json=False)
        if not isinstance(value, dict):
            raise PayloadTypeError(f"{type(self).__name__} without a record class encodes dicts, got "
                                   f"{type(value).__name__}")
        return value

    def encode(self, value: Any) -> bytes:
        return self._encode_datum(value.__dict__ if type(value) is self._plain_cls else self._datum(value))

    def deferred_encoder(self) -> RecordEncoder | None:
        """Whole batches encoded at once (``avro_encode``) for a record class of plain fields; None
        otherwise (``encode`` per send).  A new encoder per producer (no state is shared)."""
        if self._plain_cls is None or self.schema_type is not SchemaType.AVRO or type(self).encode is not \
                AvroSchema.encode:
            return None
        encoder = RecordEncoder.for_definition(self._definition, self._encode_datum)
        return None if encoder is None else encoder.deferring(self._plain_cls, self.encode)

    def _encode_datum(self, datum: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            _write(buffer, self._parsed, datum)
        except (ValueError, TypeError, AttributeError) as exc:
            raise PayloadTypeError(f"value does not fit the Avro schema {self._definition_name()}: {exc}") from None
        return buffer.getvalue()

    def _definition_name(self) -> str:
        return str(self._definition.get("name")) if isinstance(self._definition, dict) else "?"

    def _result(self, datum: Any) -> Any:
        return self._record_cls._from_datum(datum, trusted=True) if self._record_cls is not None else datum

    def decode(self, data: bytes) -> Any:
        return self._result(_read(io.BytesIO(data), self._parsed, None))

    def decode_batch(self, payloads: pa.Array, versions: list[bytes | None], topic: str) -> pa.Array | None:
        """A whole column of payloads (a segment, or one read of it) decoded at once, or None when this
        batch must be decoded message by message (the results would not be the same).

        The NumPy decoder (``avro_vector``, the one the Spark source uses) runs only
        when every payload is non-null and was written with this very schema (no resolution): those
        rows give exactly what fastavro gives.  Anything else (other writer versions, tombstones,
        chunks, ciphertext, bad data) returns None, and each message then decodes with fastavro and
        reports its own error, as before.
        """
        if not self.batch_decodes or payloads.null_count or payloads.type != pa.binary():
            return None
        for version in versions:
            try:
                writer = None if version is None else writer_info(self, topic, version)
            except PulsarException:
                return None
            if writer is not None and writer.definition != self._text:
                return None
        try:
            return decode_unresolved(payloads, _definition_json(self._text))
        except Exception:  # Unsupported, or anything else: each message decodes alone, or reports its own
            return None  # error, exactly as without this shortcut

    def values_of(self, column: pa.Array) -> list[Any] | Callable[[int], Any]:
        if self._records_of_columns is not None and pa.types.is_struct(column.type):
            # the fields as one list each, a record built by ``value()`` from its row of them: no object per
            # row until asked for (a tuple per row was one more allocation for the collector to count, and
            # records built ahead would wait in the receiver queue and be scanned by every full collection)
            return self._records_of_columns(*(column.field(i).to_pylist() for i in range(column.type.num_fields)))
        return super().values_of(column)

    def value_of_datum(self, datum: Any) -> Any:
        """The value of one datum of ``decode_values`` (a record is built only when asked for: records
        built ahead for a whole batch would live long enough to be scanned by every GC generation)."""
        cls = self._plain_cls
        if cls is not None:
            record = cls.__new__(cls)
            _SET_DICT(record, "__dict__", datum)
            return record
        return self._record_cls._from_datum(datum, trusted=True) if self._record_cls is not None else datum

    def decode_with(self, data: bytes, writer: SchemaInfo | None) -> Any:
        """Decode a payload written with ``writer`` (None: this very schema), resolved to this schema."""
        if writer is None or writer.definition == self._text:
            return self.decode(data)
        if writer.type != self.schema_type:
            raise PayloadTypeError(f"message was written with a {writer.type.name} schema; "
                                   f"it cannot be read with {type(self).__name__}")
        parsed = writer_for_reader(writer.definition, self._text)
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(data), parsed, self._parsed)
        except SchemaResolutionError as exc:
            raise PayloadTypeError(
                f"the writer's schema cannot be resolved to {self._definition_name()}: {exc}") from None
        return self._result(datum)

    def decode_message(self, msg: EncodedMessage) -> Any:
        return self.decode_with(msg.data(), writer_of(self, msg))


def writer_of(schema: Schema, msg: EncodedMessage) -> SchemaInfo | None:
    """The schema a message was written with (None when it carries no version or no registry is attached)."""
    return writer_info(schema, msg.topic_name(), msg.schema_version())


def writer_info(schema: Schema, topic: str, version: bytes) -> SchemaInfo | None:
    """The schema registered as ``version`` of ``topic`` (None: no version, or no registry attached).

    Versions are immutable, so each (topic, version) is looked up once per schema object.
    """
    if not version or schema._lookup is None:
        return None
    key = (topic, version)
    cache = schema.__dict__.setdefault("_writers", {})
    info = cache.get(key)
    if info is not None:
        return info
    info = cache[key] = schema._lookup(*key)
    if info is None:
        del cache[key]
        raise SchemaNotFound(
            f"schema version {int.from_bytes(version, 'big')} of {topic} is not in its registry "
            "(was the schema deleted?)", topic=topic, version=int.from_bytes(version, "big"),
        )
    return info


def _record_builder(record_cls: type[Record] | None,
                    definition: Any) -> Callable[..., Callable[[int], Record]] | None:
    """A function from a batch's decoded fields (one list each, in schema order) to a function from a
    row's index to a new record of ``record_cls`` of that row; generated once per schema so that it
    fills the record's own ``__dict__`` by one item store per field (``dict(zip())`` costs twice as
    much, and a whole new dict set with ``object.__setattr__`` ~80 ns more a record than filling the
    one a fresh instance has: D112); field names enter the source only as string literals."""
    if record_cls is None or not isinstance(definition, dict) or not definition.get("fields"):
        return None
    names = [field["name"] for field in definition["fields"]]
    if not all(isinstance(name, str) for name in names):
        return None
    columns = ", ".join(f"field{index}" for index in range(len(names)))
    stores = "".join(f"        values[{name!r}] = field{index}[row]\n" for index, name in enumerate(names))
    source = (f"def records_of_columns({columns}):\n"
              "    def record_at(row):\n        record = new(cls)\n        values = record.__dict__\n"
              f"{stores}        return record\n"
              "    return record_at\n")
    scope: dict[str, Any] = {"new": record_cls.__new__, "cls": record_cls}
    exec(compile(source, f"<Avro record builder of {record_cls.__name__}>", "exec"), scope)
    builder: Callable[..., Callable[[int], Record]] = scope["records_of_columns"]
    return builder


@lru_cache(maxsize=64)
def _definition_json(text: str) -> Any:
    """An Avro definition as the JSON the vectorised decoder walks (treat as read-only: it is shared)."""
    return json.loads(text)



__all__ = ["AvroSchema", "parsed_avro", "pretty", "writer_for_reader", "writer_info", "writer_of"]
