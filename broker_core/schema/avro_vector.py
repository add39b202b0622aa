"""A NumPy decoder of Avro records, one field at a time across all rows of a column.

Avro's binary encoding of a record is its fields in order: zigzag varints for ``int``/``long`` and
lengths, little-endian IEEE floats, one byte per boolean, length-prefixed bytes and strings, a branch
index before a union's value, a symbol index for an enum.  Given every payload's start offset (the
Arrow binary column's offsets), the decoder keeps one read position per row and decodes field by
field for all rows at once: a varint is at most ten vectorised byte gathers, a string's bytes one
gather into a new Arrow buffer.  No Python runs per row.

Records of primitives, enums, nested records and ``["null", T]`` unions are supported; anything else
(arrays, maps, fixed, wider unions, recursive types) raises ``Unsupported`` and the caller falls back
to fastavro.  Schema resolution (writer to reader) is applied to the decoded columns: fields matched
by name or alias, missing ones filled with the reader's default, numbers and strings promoted by a
cast.  Data that does not decode cleanly (a position that does not end exactly at the payload's end)
raises ``Unsupported`` too, so the fastavro path reports the error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_FLOAT_TYPES = {"float": ("<f4", 4, pa.float32()), "double": ("<f8", 8, pa.float64())}


class Unsupported(Exception):
    """The schema or the data is outside what this decoder handles: use fastavro."""


class _Reader:
    def __init__(self, values: pa.Array, names: dict[str, Any]) -> None:
        n = len(values)
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4)
        raw = values.buffers()[2]
        data = np.frombuffer(raw, dtype=np.uint8) if raw is not None else np.zeros(0, np.uint8)
        # only the payloads' own bytes: a slice of a longer column (a read of part of a segment) shares
        # the whole column's data buffer, and copying or scanning all of it would cost by position
        first = int(offsets[0])
        self.data = np.concatenate([data[first: offsets[-1]], np.zeros(16, np.uint8)])  # reads past the end stay inside
        self.pos = offsets[:-1].astype(np.int64) - first
        self.ends = offsets[1:].astype(np.int64) - first
        self.names = names
        self.depth = 0

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """Zigzag-decoded varints at the rows' positions (positions advance).

        When every varint is one byte (string lengths, small numbers: most columns) one gather
        decodes them; otherwise byte position by byte position, ~7 NumPy calls each.  At a read's
        ~1,000 rows the calls, not the rows, are the cost.
        """
        p = self.pos[rows]
        first = self.data[np.minimum(p, len(self.data) - 1)]  # (bad data may point past the end)
        if not (first & 0x80).any():  # every varint is one byte
            self.pos[rows] = p + 1
            value = first.astype(np.int64)
            return (value >> 1) ^ -(value & 1)
        result = np.zeros(len(rows), np.uint64)
        length = np.zeros(len(rows), np.int64)
        active = np.ones(len(rows), bool)
        for k in range(10):
            byte = self.data[np.minimum(p + k, len(self.data) - 1)].astype(np.uint64)
            result |= np.where(active, (byte & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
            length += active
            active &= (byte & np.uint64(0x80)) != 0
            if not active.any():
                break
        else:
            raise Unsupported("a varint longer than 10 bytes")
        self.pos[rows] = p + length
        return (result >> np.uint64(1)).astype(np.int64) ^ -(result & np.uint64(1)).astype(np.int64)

    def fixed(self, rows: np.ndarray, width: int) -> np.ndarray:
        p = self.pos[rows]
        if len(p) and p.max() + width > len(self.data):
            raise Unsupported("read past the data")
        out = self.data[p[:, None] + np.arange(width)]
        self.pos[rows] = p + width
        return out

    def blob(self, rows: np.ndarray, arrow: pa.DataType) -> pa.Array:
        lengths = self.varint(rows)
        if len(lengths) and lengths.min() < 0:
            raise Unsupported("a negative length")
        starts = self.pos[rows]
        total = int(lengths.sum())
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if total:
            # the strings lie in row order and never overlap: mark their byte ranges and compress
            stops = starts + lengths
            if stops.max() > len(self.data):
                raise Unsupported("read past the data")
            marks = np.zeros(len(self.data) + 1, np.int8)
            marks[starts] += 1
            marks[stops] -= 1
            body = self.data[np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)]
        else:
            body = np.zeros(0, np.uint8)
        self.pos[rows] = starts + lengths
        if total >= 2**31:
            raise Unsupported("a column over 2 GiB")
        array = pa.Array.from_buffers(arrow, len(rows), [None, pa.py_buffer(offsets.astype(np.int32)),
                                                         pa.py_buffer(body)])
        if pa.types.is_string(arrow):
            try:
                array.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise Unsupported(f"invalid UTF-8: {exc}") from None
        return array

    def decode(self, schema: Any, rows: np.ndarray) -> pa.Array:
        """The column of ``schema`` values at the rows' positions."""
        if isinstance(schema, str) and schema in self.names:
            self.depth += 1
            if self.depth > 32:
                raise Unsupported("recursive types")
            try:
                return self.decode(self.names[schema], rows)
            finally:
                self.depth -= 1
        if isinstance(schema, list):
            return self._optional(schema, rows)
        kind = schema if isinstance(schema, str) else schema.get("type")
        if isinstance(kind, list | dict):
            return self.decode(kind, rows)
        if kind == "long":
            return pa.array(self.varint(rows), pa.int64())
        if kind == "int":
            wide = self.varint(rows)
            narrow = wide.astype(np.int32)  # (NumPy, not ``Array.cast``: at ~1,000 rows its call cost more)
            if not (narrow == wide).all():
                raise Unsupported("an int outside 32 bits")
            return pa.array(narrow, pa.int32())
        if kind in _FLOAT_TYPES:
            fmt, width, arrow = _FLOAT_TYPES[kind]
            return pa.array(self.fixed(rows, width).view(fmt).ravel(), arrow)
        if kind == "boolean":
            return pa.array(self.fixed(rows, 1).ravel() != 0, pa.bool_())
        if kind == "string":
            return self.blob(rows, pa.string())
        if kind == "bytes":
            return self.blob(rows, pa.binary())
        if kind == "null":
            return pa.nulls(len(rows))
        if kind == "enum":
            index = self.varint(rows)
            symbols = schema["symbols"]
            if len(index) and (index.min() < 0 or index.max() >= len(symbols)):
                raise Unsupported("an enum index out of range")
            return pa.array(symbols, pa.string()).take(pa.array(index))
        if kind == "record":
            fields = schema.get("fields", [])
            children = [self.decode(f["type"], rows) for f in fields]
            return pa.StructArray.from_arrays(children, names=[f["name"] for f in fields]) if fields \
                else pa.StructArray.from_arrays([], names=[])
        raise Unsupported(f"Avro type {kind!r}")

    def _optional(self, branches: list[Any], rows: np.ndarray) -> pa.Array:
        non_null = [i for i, b in enumerate(branches) if b != "null"]
        if len(non_null) != 1 or len(branches) > 2:
            raise Unsupported("a union of several types")
        branch = self.varint(rows)
        if len(branch) and (branch.min() < 0 or branch.max() >= len(branches)):
            raise Unsupported("a union branch out of range")
        present = branch == non_null[0]
        values = self.decode(branches[non_null[0]], rows[present])
        if present.all():
            return values
        take = np.full(len(rows), -1, np.int64)
        take[present] = np.arange(int(present.sum()))
        return values.take(pa.array(take, mask=take < 0))


def _names(schema: Any, out: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    if isinstance(schema, list):
        for branch in schema:
            _names(branch, out, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed"):
            ns = schema.get("namespace", namespace)
            out[schema["name"]] = schema
            if ns:
                out[f"{ns}.{schema['name']}"] = schema
            for f in schema.get("fields", []):
                _names(f["type"], out, ns)
        elif isinstance(kind, list | dict):
            _names(kind, out, namespace)
    return out


def _resolve(array: pa.Array, writer: Any, reader: Any, w_names: dict[str, Any], r_names: dict[str, Any],
             target: pa.DataType) -> pa.Array:
    """Project a column decoded with ``writer`` onto ``reader``'s Arrow type ``target``."""
    w, r = _strip(writer, w_names), _strip(reader, r_names)
    if isinstance(r, dict) and r.get("type") == "record":
        if not (isinstance(w, dict) and w.get("type") == "record"):
            raise Unsupported("a record read from a non-record")
        by_name = {f["name"]: i for i, f in enumerate(w.get("fields", []))}
        children = []
        for index, field in enumerate(r.get("fields", [])):
            child_type = target.field(index).type
            source = next((by_name[n] for n in [field["name"], *field.get("aliases", [])] if n in by_name), None)
            if source is None:
                if "default" not in field:
                    raise Unsupported(f"field {field['name']!r} has no default")
                children.append(pa.array([field["default"]] * len(array), child_type))
            else:
                children.append(_resolve(array.field(source), w["fields"][source]["type"], field["type"],
                                         w_names, r_names, child_type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if isinstance(r, dict) and r.get("type") == "enum":
        known = set(r.get("symbols", []))
        if isinstance(w, dict) and not set(w.get("symbols", [])) <= known:
            raise Unsupported("enum symbols the reader does not know")
    return array if array.type == target else array.cast(target)


def _strip(schema: Any, names: dict[str, Any]) -> Any:
    while True:
        if isinstance(schema, str) and schema in names:
            schema = names[schema]
        elif isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if len(branches) != 1:
                return schema
            schema = branches[0]
        elif isinstance(schema, dict) and isinstance(schema.get("type"), list | dict):
            schema = schema["type"]
        else:
            return schema


def decode_records(values: pa.Array, writer: Any, reader: Any, target: pa.DataType) -> pa.Array:
    """Decode non-null Avro payloads written with ``writer`` into ``reader``'s Arrow type ``target``."""
    w_names, r_names = _names(writer, {}), _names(reader, {})
    return _resolve(_decode_all(values, writer, w_names), writer, reader, w_names, r_names, target)


def decode_unresolved(values: pa.Array, schema: Any) -> pa.Array:
    """Decode non-null Avro payloads written with ``schema`` itself (no resolution): the column as the
    decoder builds it (records -> struct, enums -> symbol strings, ``["null", T]`` -> nullable T)."""
    return _decode_all(values, schema, _names(schema, {}))


def _decode_all(values: pa.Array, writer: Any, names: dict[str, Any]) -> pa.Array:
    source = _Reader(values, names)
    decoded = source.decode(writer, np.arange(len(values)))
    if not np.array_equal(source.pos, source.ends):
        raise Unsupported("payloads do not end where the writer's schema does")
    return decoded


__all__ = ["Unsupported", "decode_records", "decode_unresolved"]
