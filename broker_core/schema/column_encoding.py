"""Typed Arrow columns to payloads: the sink side of the vectorised schema path.

``fit_problem`` says whether a column of some Arrow type can be written with a schema (naming the
first column path that cannot); ``encode_column`` encodes it: Avro through one ``fastavro`` writer
loop into a single buffer (the offsets become the binary column, no bytes object per row), JSON
through ``json.dumps`` per row, fixed-width numbers through one NumPy byte-swap.  ``avro_from_arrow``
derives an Avro record schema from a struct type, for registering a DataFrame's schema on a topic
that has none.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from broker_core.errors import PayloadTypeError, SchemaDefinitionError
from broker_core.schema.avro import parsed_avro, pretty
from broker_core.schema.info import RECORD_TYPES, SchemaInfo, SchemaType
from broker_core.schema.primitive import FIXED_WIDTH

_FITS: dict[str, tuple[Any, ...]] = {
    "boolean": (pa.types.is_boolean,),
    "int": (pa.types.is_int8, pa.types.is_int16, pa.types.is_int32, pa.types.is_uint8, pa.types.is_uint16),
    "long": (pa.types.is_integer,),
    "float": (pa.types.is_floating, pa.types.is_integer),
    "double": (pa.types.is_floating, pa.types.is_integer),
    "string": (pa.types.is_string, pa.types.is_large_string),
    "bytes": (pa.types.is_binary, pa.types.is_large_binary),
    "enum": (pa.types.is_string, pa.types.is_large_string),
    "fixed": (pa.types.is_binary, pa.types.is_fixed_size_binary),
}


def _names(schema: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema, list):
        for branch in schema:
            _names(branch, out)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed"):
            out[schema["name"]] = schema
            if schema.get("namespace"):
                out[f"{schema['namespace']}.{schema['name']}"] = schema
        for f in schema.get("fields", []):
            _names(f["type"], out)
        for key in ("items", "values"):
            if key in schema:
                _names(schema[key], out)
    return out


def _wraps_a_type(schema: dict[str, Any]) -> bool:
    """``{"type": <a type>}`` rather than a named or complex type of its own."""
    kind = schema.get("type")
    return not isinstance(kind, str | type(None)) or (kind in _FITS and kind not in ("enum", "fixed"))


def _deref(schema: Any, names: dict[str, Any]) -> tuple[Any, bool]:
    """(the non-null type, whether null is allowed)."""
    nullable = False
    while True:
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            nullable = nullable or len(branches) < len(schema)
            if len(branches) != 1:
                return schema, nullable
            schema = branches[0]
        elif isinstance(schema, str) and schema in names:
            schema = names[schema]
        elif isinstance(schema, dict) and _wraps_a_type(schema):
            schema = schema["type"]
        else:
            return schema, nullable


def _fit(arrow: pa.DataType, schema: Any, names: dict[str, Any], path: str) -> str | None:
    schema, _ = _deref(schema, names)
    if isinstance(schema, list):
        return f"column {path!r}: a union of several types cannot be written from a column"
    kind = schema if isinstance(schema, str) else schema.get("type")
    if pa.types.is_null(arrow):
        return None
    if kind in _FITS:
        if any(test(arrow) for test in _FITS[kind]):
            return None
        return f"column {path!r} is {arrow}, which does not fit the schema's {kind}"
    if kind == "record":
        if not pa.types.is_struct(arrow):
            return f"column {path!r} is {arrow}, but the schema has a record there"
        fields = {f["name"]: f for f in schema.get("fields", [])}
        for child in arrow:
            if child.name not in fields:
                return (f"column '{path}.{child.name}' is not in the topic's schema (fields: "
                        f"{', '.join(fields)})")
            problem = _fit(child.type, fields[child.name]["type"], names, f"{path}.{child.name}")
            if problem:
                return problem
        present = {child.name for child in arrow}
        for name, field in fields.items():
            if name not in present and "default" not in field and not _deref(field["type"], names)[1]:
                return f"column '{path}.{name}' is missing and the schema requires it (no default, not nullable)"
        return None
    if kind == "array":
        if not (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):
            return f"column {path!r} is {arrow}, but the schema has an array there"
        return _fit(arrow.value_type, schema["items"], names, f"{path}[]")
    if kind == "map":
        if not (pa.types.is_map(arrow) and pa.types.is_string(arrow.key_type)):
            return f"column {path!r} is {arrow}, but the schema has a map with string keys there"
        return _fit(arrow.item_type, schema["values"], names, f"{path}{{}}")
    return f"column {path!r}: schema type {kind!r} cannot be written from a column"


def fit_problem(arrow: pa.DataType, info: SchemaInfo, *, path: str = "value") -> str | None:
    """None if a column of ``arrow`` type can be encoded with ``info``, else which column does not fit."""
    if info.type in RECORD_TYPES:
        definition = info.parsed()
        return _fit(arrow, definition, _names(definition, {}), path)
    if info.type == SchemaType.STRING:
        return None if pa.types.is_string(arrow) else f"column {path!r} is {arrow}; the topic's schema is STRING"
    if info.type in FIXED_WIDTH:
        want = FIXED_WIDTH[info.type].arrow_type
        return None if arrow == want else f"column {path!r} is {arrow}; the topic's schema is {info.type.name} ({want})"
    if info.type == SchemaType.KEY_VALUE:
        return f"column {path!r}: KeyValue topics are written with the client (KeyValueSchema), not the sink"
    return None if pa.types.is_binary(arrow) else f"column {path!r} is {arrow}; the topic's schema is BYTES"


def _map_fixer(schema: Any, names: dict[str, Any]) -> Any:
    """A function turning Arrow's map cells (lists of pairs) into dicts, or None when no map is inside."""
    schema, _ = _deref(schema, names)
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "map":
        inner = _map_fixer(schema["values"], names)
        if inner is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: None if v is None else {k: inner(x) for k, x in v}
    if kind == "array":
        inner = _map_fixer(schema["items"], names)
        return None if inner is None else (lambda v: None if v is None else [inner(x) for x in v])
    if kind == "record":
        fixers = {f["name"]: fx for f in schema.get("fields", []) if (fx := _map_fixer(f["type"], names))}
        if not fixers:
            return None
        return lambda v: None if v is None else {k: (fixers[k](x) if k in fixers else x) for k, x in v.items()}
    return None


def _binary_from(buffer: bytes, offsets: list[int], valid: np.ndarray | None) -> pa.Array:
    n = len(offsets) - 1
    mask_buffer = None if valid is None else pa.array(valid).buffers()[1]
    nulls = 0 if valid is None else int(n - valid.sum())
    return pa.Array.from_buffers(pa.binary(), n, [mask_buffer, pa.py_buffer(np.asarray(offsets, np.int32)),
                                                   pa.py_buffer(buffer)], null_count=nulls)


def encode_column(values: pa.Array | pa.ChunkedArray, info: SchemaInfo) -> pa.Array:
    """Payloads of a typed column (null rows stay null: tombstones); ``PayloadTypeError`` on a bad row."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    problem = fit_problem(values.type, info)
    if problem:
        raise PayloadTypeError(problem)
    valid = None if values.null_count == 0 else np.asarray(values.is_valid().to_numpy(zero_copy_only=False))
    if info.type in FIXED_WIDTH:
        cls = FIXED_WIDTH[info.type]
        zero = pa.scalar(False if pa.types.is_boolean(values.type) else 0, values.type)  # under null rows
        numbers = values.fill_null(zero).to_numpy(zero_copy_only=False).astype(cls.numpy_dtype)
        width = numbers.dtype.itemsize
        return _binary_from(numbers.tobytes(), list(range(0, (len(values) + 1) * width, width)), valid)
    if info.type == SchemaType.STRING:
        return values.cast(pa.binary())
    if info.type not in RECORD_TYPES:
        return values
    definition = info.parsed()
    rows = values.to_pylist()
    fixer = _map_fixer(definition, _names(definition, {}))
    if fixer is not None:
        rows = [fixer(r) for r in rows]
    out = io.BytesIO()
    offsets = [0]
    append = offsets.append
    try:
        if info.type == SchemaType.AVRO:
            parsed = parsed_avro(info.definition)
            write = fastavro.schemaless_writer
            for row in rows:
                if row is not None:
                    write(out, parsed, row)
                append(out.tell())
        else:
            dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                     default=lambda b: b.decode("utf-8")).encode
            for row in rows:
                if row is not None:
                    out.write(dumps(row).encode("utf-8"))
                append(out.tell())
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise PayloadTypeError(f"row {len(offsets) - 1} of column 'value' does not fit the schema: {exc}") from None
    return _binary_from(out.getvalue(), offsets, valid)


def avro_from_arrow(arrow: pa.DataType, *, name: str = "value", path: str = "value") -> Any:
    """An Avro type for an Arrow type (struct -> record named after its path; every field nullable)."""
    simple = {pa.bool_(): "boolean", pa.int8(): "int", pa.int16(): "int", pa.int32(): "int", pa.int64(): "long",
              pa.float32(): "float", pa.float64(): "double", pa.string(): "string", pa.large_string(): "string",
              pa.binary(): "bytes", pa.large_binary(): "bytes"}
    if arrow in simple:
        return simple[arrow]
    if pa.types.is_struct(arrow):
        fields = [{"name": f.name, "type": ["null", avro_from_arrow(f.type, name=f"{name}_{f.name}",
                                                                     path=f"{path}.{f.name}")], "default": None}
                  for f in arrow]
        return {"type": "record", "name": name, "fields": fields}
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return {"type": "array", "items": ["null", avro_from_arrow(arrow.value_type, name=f"{name}_item",
                                                                   path=f"{path}[]")]}
    if pa.types.is_map(arrow) and pa.types.is_string(arrow.key_type):
        return {"type": "map", "values": ["null", avro_from_arrow(arrow.item_type, name=f"{name}_value",
                                                                  path=f"{path}{{}}")]}
    raise SchemaDefinitionError(f"column {path!r} of type {arrow} has no Avro type; cast it (e.g. timestamps to "
                                "long) or encode the value yourself")


def record_info(arrow: pa.DataType, *, schema_type: SchemaType = SchemaType.AVRO) -> SchemaInfo:
    """The SchemaInfo of a struct column's derived Avro record."""
    definition = avro_from_arrow(arrow)
    if not isinstance(definition, dict):
        raise SchemaDefinitionError("only a struct column derives a record schema")
    return SchemaInfo(schema_type, schema_type.name, pretty(definition))


__all__ = ["avro_from_arrow", "encode_column", "fit_problem", "record_info"]
