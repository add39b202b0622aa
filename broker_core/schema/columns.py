"""Whole columns of payloads to typed Arrow columns and back: the vectorised schema path.

Used by the Spark source and sink (``spark_pubsub/typed_values.py``) and meant for any bulk reader
(the native scan): ``decode_column`` turns the binary ``value`` column of a segment batch into a
column of the reader's Arrow type, each row decoded with the schema version it was written with
(its ``schema_version`` cell) and resolved to the reader's schema; ``encode_column`` does the
reverse for a sink.

- AVRO: records of primitives, enums, nested records and optional fields are decoded by NumPy,
  one field at a time across all rows (``avro_vector.py``), then resolved to the reader's schema
  column by column.  Other records (arrays, maps, wide unions) go to fastavro: the payloads of one
  writer version are concatenated into one in-memory Avro object container read by
  ``fastavro.reader`` in one call, and ``pa.array`` builds the struct column.
- JSON: pyarrow's JSON reader parses the payloads as newline-delimited JSON against the reader's
  Arrow schema (raw newlines can only be whitespace in JSON, so they are blanked first); records
  with enums, maps or bytes (which JSON spells its own way) are parsed row by row instead.  A JSON
  enum travels as its Python value, so its column holds that value as JSON text.
- Fixed-width primitives: one NumPy ``frombuffer`` of the concatenated payloads.
- STRING: a zero-copy cast.  KEY_VALUE: ``struct<key, value>`` of the two parts.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from broker_core.errors import PayloadTypeError, SchemaDefinitionError
from broker_core.schema.avro import parsed_avro
from broker_core.schema.avro_vector import Unsupported, decode_records
from broker_core.schema.info import RECORD_TYPES, SchemaInfo, SchemaType
from broker_core.schema.key_value import ENCODING_PROPERTY, split_inline
from broker_core.schema.primitive import FIXED_WIDTH
from broker_core.schema.registry import version_of

WriterOf = Callable[[int], "SchemaInfo | None"]

_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}


# -- types ------------------------------------------------------------------------------------------------


def avro_arrow_type(schema: Any, names: dict[str, Any] | None = None, path: str = "value") -> pa.DataType:
    """The Arrow type of an Avro schema (records -> struct, enums -> string, ``["null", T]`` -> T)."""
    names = {} if names is None else names
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in names:
            return avro_arrow_type(names[schema], names, path)
        raise SchemaDefinitionError(f"{path}: Avro type {schema!r} has no column type (recursive or unknown)")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SchemaDefinitionError(
                f"{path}: a union of {branches} has no single column type; read with valueFormat=binary"
            )
        return avro_arrow_type(branches[0], names, path)
    kind = schema.get("type")
    if kind in _AVRO_PRIMITIVES or isinstance(kind, list | dict):
        return avro_arrow_type(kind, names, path)
    if kind == "record":
        name = schema.get("name", "")
        full = f"{schema['namespace']}.{name}" if schema.get("namespace") and "." not in name else name
        names = {**names, name: _Pending(path), full: _Pending(path)}
        return pa.struct([pa.field(f["name"], avro_arrow_type(f["type"], names, f"{path}.{f['name']}"))
                          for f in schema.get("fields", [])])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(avro_arrow_type(schema["items"], names, f"{path}[]"))
    if kind == "map":
        return pa.map_(pa.string(), avro_arrow_type(schema["values"], names, f"{path}{{}}"))
    raise SchemaDefinitionError(f"{path}: Avro type {kind!r} has no column type")


class _Pending(dict[str, str]):
    """A record being converted: a reference back to it is recursion, which columns cannot hold."""

    def __init__(self, path: str) -> None:
        super().__init__(type=f"recursive record at {path}")


def arrow_type(info: SchemaInfo) -> pa.DataType:
    """The Arrow type of a value column typed by ``info`` (binary for untyped schemas)."""
    if info.type in RECORD_TYPES:
        return avro_arrow_type(info.parsed())
    if info.type == SchemaType.STRING:
        return pa.string()
    if info.type in FIXED_WIDTH:
        return FIXED_WIDTH[info.type].arrow_type
    if info.type == SchemaType.KEY_VALUE:
        key, value = _kv_parts(info)
        return pa.struct([pa.field("key", arrow_type(key)), pa.field("value", arrow_type(value))])
    return pa.binary()


def _kv_parts(info: SchemaInfo) -> tuple[SchemaInfo, SchemaInfo]:
    parts = info.parsed()
    return SchemaInfo.from_json(parts["key"]), SchemaInfo.from_json(parts["value"])


# -- decoding ----------------------------------------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_bytes(data: bytes) -> bytes:
    return _zigzag(len(data)) + data


_SYNC = b"pubsub-typed-col"  # 16 bytes; any value works inside one in-memory container


def _container(writer_definition: str, data: bytes, count: int) -> bytes:
    """An Avro object container holding ``count`` concatenated datums written with ``writer_definition``."""
    meta = (_zigzag(2) + _avro_bytes(b"avro.schema") + _avro_bytes(writer_definition.encode())
            + _avro_bytes(b"avro.codec") + _avro_bytes(b"null") + _zigzag(0))
    return b"Obj\x01" + meta + _SYNC + _zigzag(count) + _zigzag(len(data)) + data + _SYNC


def _renamed_writer(writer: SchemaInfo, reader: SchemaInfo) -> str:
    """The writer's definition with its top-level record named as the reader's (see avro.writer_for_reader)."""
    w, r = writer.parsed(), reader.parsed()
    if isinstance(w, dict) and isinstance(r, dict) and w.get("type") == "record":
        w = {**w, "name": r.get("name", w.get("name"))}
        w.pop("namespace", None)
        if "namespace" in r:
            w["namespace"] = r["namespace"]
    return json.dumps(w)


def _concat(values: pa.Array) -> bytes:
    """The payload bytes of a binary array with no nulls, concatenated (no copy per row)."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    if len(values) == 0:
        return b""
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1, offset=values.offset * 4)
    return values.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]


def _decode_avro(values: pa.Array, writer: SchemaInfo, reader: SchemaInfo, target: pa.DataType) -> pa.Array:
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    try:
        return decode_records(values, writer.parsed(), reader.parsed(), target)
    except Unsupported:
        pass  # arrays, maps, wide unions, or bad data: fastavro decodes (or reports) it
    reader_schema = None if writer.same_as(reader) else parsed_avro(reader.definition)
    container = _container(_renamed_writer(writer, reader), _concat(values), len(values))
    try:
        records = list(fastavro.reader(io.BytesIO(container), reader_schema=reader_schema))
    except Exception as exc:  # fastavro raises several exception types for bad data or resolution
        raise PayloadTypeError(f"Avro payloads do not decode with the writer's schema: {exc}") from None
    return pa.array(records, type=target)


def _json_native(schema: Any, names: dict[str, Any]) -> bool:
    """Can pyarrow's JSON reader parse this type (no enums, maps or bytes, which JSON spells its own way)?"""
    if isinstance(schema, list):
        return all(_json_native(b, names) for b in schema)
    if isinstance(schema, str):
        if schema in names:
            return _json_native(names[schema], names)
        return schema in ("null", "boolean", "int", "long", "float", "double", "string")
    kind = schema.get("type")
    if kind == "record":
        names = {**names, schema.get("name", ""): {"type": "null"}}
        return all(_json_native(f["type"], names) for f in schema.get("fields", []))
    if kind == "array":
        return _json_native(schema["items"], names)
    return _json_native(kind, names) if isinstance(kind, str | list) else False


def _jsonable(value: Any, arrow: pa.DataType) -> Any:
    """A parsed JSON value shaped for ``pa.array`` (enum values as text, bytes from text)."""
    if value is None:
        return None
    if pa.types.is_struct(arrow):
        if not isinstance(value, dict):
            raise PayloadTypeError(f"JSON value {value!r} is not an object")
        return {f.name: _jsonable(value.get(f.name), f.type) for f in arrow}
    if pa.types.is_list(arrow):
        return [_jsonable(v, arrow.value_type) for v in value]
    if pa.types.is_map(arrow):
        return {k: _jsonable(v, arrow.item_type) for k, v in value.items()}
    if pa.types.is_string(arrow) and not isinstance(value, str):
        return json.dumps(value)  # a JSON enum travels as its value
    if pa.types.is_binary(arrow) and isinstance(value, str):
        return value.encode("utf-8")
    return value


def _decode_json(values: pa.Array, reader: SchemaInfo, target: pa.DataType) -> pa.Array:
    return _with_defaults(_parse_json(values, reader, target), reader.parsed())


def _with_defaults(decoded: pa.Array, definition: Any) -> pa.Array:
    """Fill the reader's defaults into top-level fields a JSON writer left out.

    Only fields whose type is not nullable: there a null can only mean "absent" (JSON resolution
    fills the default, as Avro resolution does for a field the writer's schema lacks).
    """
    if not (pa.types.is_struct(decoded.type) and isinstance(definition, dict)):
        return decoded
    children = []
    for index, field in enumerate(decoded.type):
        child = decoded.field(index)
        spec = next((f for f in definition.get("fields", []) if f["name"] == field.name), None)
        nullable = spec is None or (isinstance(spec["type"], list) and "null" in spec["type"])
        if spec is not None and not nullable and spec.get("default") is not None and child.null_count:
            child = pc.fill_null(child, pa.scalar(spec["default"], field.type))
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(decoded.type), mask=decoded.is_null())


def _parse_json(values: pa.Array, reader: SchemaInfo, target: pa.DataType) -> pa.Array:
    if not (pa.types.is_struct(target) and _json_native(reader.parsed(), {})):
        try:
            rows = [_jsonable(json.loads(v), target) for v in values.to_pylist()]
            return pa.array(rows, type=target)
        except (ValueError, TypeError, pa.ArrowInvalid) as exc:
            raise PayloadTypeError(f"JSON payloads do not fit the schema: {exc}") from None
    blanked = pc.replace_substring(values.cast(pa.binary()), b"\n", b" ")
    text = b"\n".join(blanked.to_pylist()) + b"\n"  # one Python join over the whole batch
    options = pajson.ParseOptions(explicit_schema=pa.schema(list(target)), unexpected_field_behavior="ignore")
    try:
        table = pajson.read_json(io.BytesIO(text), parse_options=options,
                                 read_options=pajson.ReadOptions(block_size=max(1 << 20, len(text) + 1)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise PayloadTypeError(f"JSON payloads do not fit the schema: {exc}") from None
    if table.num_rows != len(values):
        raise PayloadTypeError(f"{len(values)} JSON payloads parsed as {table.num_rows} rows")
    return pa.StructArray.from_arrays([table.column(i).combine_chunks() for i in range(table.num_columns)],
                                      fields=list(target))


def _decode_fixed(values: pa.Array, info: SchemaInfo) -> pa.Array:
    cls = FIXED_WIDTH[info.type]
    width = np.dtype(cls.numpy_dtype).itemsize
    lengths = pc.binary_length(values).to_numpy(zero_copy_only=False)
    if len(values) and (lengths != width).any():
        raise PayloadTypeError(f"{info.type.name} payloads are {width} bytes; found one of "
                               f"{int(lengths[lengths != width][0])}")
    numbers = np.frombuffer(_concat(values), dtype=cls.numpy_dtype)
    return pa.array(numbers.astype(numbers.dtype.newbyteorder("=")), type=cls.arrow_type)


def _decode_same_version(values: pa.Array, writer: SchemaInfo, reader: SchemaInfo, target: pa.DataType,
                         keys: pa.Array | None) -> pa.Array:
    """Decode non-null payloads all written with ``writer``."""
    if reader.type != writer.type:
        raise PayloadTypeError(f"rows written with a {writer.type.name} schema cannot be read as {reader.type.name}")
    if reader.type == SchemaType.AVRO:
        return _decode_avro(values, writer, reader, target)
    if reader.type == SchemaType.JSON:
        return _decode_json(values, reader, target)
    if reader.type == SchemaType.STRING:
        return values.cast(pa.string())
    if reader.type in FIXED_WIDTH:
        return _decode_fixed(values, reader)
    if reader.type == SchemaType.KEY_VALUE:
        return _decode_key_value(values, writer, reader, target, keys)
    return values


def _decode_key_value(values: pa.Array, writer: SchemaInfo, reader: SchemaInfo, target: pa.DataType,
                      keys: pa.Array | None) -> pa.Array:
    import base64

    r_key, r_value = _kv_parts(reader)
    w_key, w_value = _kv_parts(writer)
    if reader.props.get(ENCODING_PROPERTY) == "SEPARATED":
        key_bytes = [None if k is None else base64.b64decode(k)
                     for k in (keys.to_pylist() if keys is not None else [None] * len(values))]
        value_bytes: list[bytes | None] = values.to_pylist()
    else:
        split = [split_inline(v) for v in values.to_pylist()]
        key_bytes = [k for k, _ in split]
        value_bytes = [v for _, v in split]
    parts = []
    for raw, w, r, field in ((key_bytes, w_key, r_key, target.field("key")),
                             (value_bytes, w_value, r_value, target.field("value"))):
        array = pa.array(raw, pa.binary())
        parts.append(decode_column(array, None, reader=r, writer_of=_constant(w), default_writer=w)
                     .cast(field.type))
    return pa.StructArray.from_arrays(parts, fields=list(target))


def _constant(info: SchemaInfo) -> WriterOf:
    return lambda _version: info


def decode_column(
    values: pa.Array | pa.ChunkedArray,
    versions: pa.Array | pa.ChunkedArray | None,
    *,
    reader: SchemaInfo,
    writer_of: WriterOf,
    default_writer: SchemaInfo | None = None,
    keys: pa.Array | pa.ChunkedArray | None = None,
) -> pa.Array:
    """Decode a binary ``value`` column to ``arrow_type(reader)``.

    Args:
        values: payloads; null (a tombstone) stays null.
        versions: the ``schema_version`` column (8-byte big-endian; null = written without a schema).
        reader: the schema to read as.
        writer_of: the registered schema of a version number (None if unknown).
        default_writer: the writer of rows without a version (default: ``reader``).
        keys: the message keys (KeyValue SEPARATED carries its key there).
    """
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if isinstance(versions, pa.ChunkedArray):
        versions = versions.combine_chunks()
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    target = arrow_type(reader)
    n = len(values)
    present = pc.is_valid(values)
    if versions is None or versions.null_count == len(versions):
        groups: dict[bytes | None, np.ndarray] = {None: np.arange(n)}
    else:
        codes = pc.dictionary_encode(versions)
        indices = codes.indices.to_numpy(zero_copy_only=False)
        groups = {}
        for code, raw in enumerate(codes.dictionary.to_pylist()):
            groups[raw] = np.nonzero(indices == code)[0]
        if versions.null_count:
            groups[None] = np.nonzero(pc.is_null(versions).to_numpy(zero_copy_only=False))[0]
    pieces: list[pa.Array] = []
    positions: list[np.ndarray] = []
    present_np = present.to_numpy(zero_copy_only=False)
    for raw, rows in groups.items():
        rows = rows[present_np[rows]]
        if not len(rows):
            continue
        writer = default_writer or reader if raw is None else writer_of(version_of(raw))
        if writer is None:
            raise PayloadTypeError(f"schema version {version_of(raw or b'')} is not in the topic's registry")
        if len(rows) == n:  # the common case: one version, no tombstones; no copy of the payloads
            part_values, part_keys = values, keys
        else:
            take = pa.array(rows)
            part_values, part_keys = values.take(take), None if keys is None else keys.take(take)
        pieces.append(_decode_same_version(part_values, writer, reader, target, part_keys))
        positions.append(rows)
    if not pieces:
        return pa.nulls(n, target)
    if len(pieces) == 1 and len(positions[0]) == n:
        return pieces[0]
    order = np.concatenate(positions)
    inverse = np.full(n, -1, dtype=np.int64)
    inverse[order] = np.arange(len(order))
    merged = pa.concat_arrays([p.cast(target) for p in pieces])
    return merged.take(pa.array(inverse, mask=inverse < 0))


__all__ = ["WriterOf", "arrow_type", "avro_arrow_type", "decode_column"]
