"""Schemas of single values: bytes, UTF-8 text, booleans, integers and floats.

The fixed-width encodings are Pulsar's (big-endian, IEEE 754 for floats, one byte 0/1 for booleans),
so a payload written by a Pulsar client with ``Schema.INT64`` decodes here and back.  Each schema
also names its Arrow type and NumPy big-endian dtype, which the Arrow column codecs use to decode a
whole column at once (``broker_core/schema/columns.py``).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import pyarrow as pa

from broker_core.errors import PayloadTypeError
from broker_core.schema.base import Schema
from broker_core.schema.info import SchemaInfo, SchemaType


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

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(SchemaType.BYTES, "BYTES")


class StringSchema(Schema):
    """Payloads are UTF-8 text."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise PayloadTypeError(f"the string schema needs a str payload, got {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return data.decode("utf-8")

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(SchemaType.STRING, "STRING")


class _FixedWidthSchema(Schema):
    """A fixed-width big-endian number (subclasses set the struct format and types)."""

    schema_type: ClassVar[SchemaType]
    fmt: ClassVar[str]
    python_types: ClassVar[tuple[type, ...]] = (int,)
    arrow_type: ClassVar[pa.DataType]
    numpy_dtype: ClassVar[str]

    def encode(self, value: Any) -> bytes:
        if (isinstance(value, bool) and bool not in self.python_types) or not isinstance(value, self.python_types):
            raise PayloadTypeError(
                f"{type(self).__name__} needs {' or '.join(t.__name__ for t in self.python_types)}, "
                f"got {type(value).__name__} {value!r}"
            )
        try:
            return struct.pack(self.fmt, value)
        except struct.error as exc:
            raise PayloadTypeError(f"{type(self).__name__} cannot hold {value!r}: {exc}") from None

    def decode(self, data: bytes) -> Any:
        size = struct.calcsize(self.fmt)
        if len(data) != size:
            raise PayloadTypeError(f"{type(self).__name__} payloads are {size} bytes, got {len(data)}")
        return struct.unpack(self.fmt, data)[0]

    def schema_info(self) -> SchemaInfo:
        return SchemaInfo(self.schema_type, self.schema_type.name)


class BooleanSchema(_FixedWidthSchema):
    schema_type = SchemaType.BOOLEAN
    fmt = ">?"
    python_types = (bool,)
    arrow_type = pa.bool_()
    numpy_dtype = "?"


class Int8Schema(_FixedWidthSchema):
    schema_type = SchemaType.INT8
    fmt = ">b"
    arrow_type = pa.int8()
    numpy_dtype = ">i1"


class Int16Schema(_FixedWidthSchema):
    schema_type = SchemaType.INT16
    fmt = ">h"
    arrow_type = pa.int16()
    numpy_dtype = ">i2"


class Int32Schema(_FixedWidthSchema):
    schema_type = SchemaType.INT32
    fmt = ">i"
    arrow_type = pa.int32()
    numpy_dtype = ">i4"


class Int64Schema(_FixedWidthSchema):
    schema_type = SchemaType.INT64
    fmt = ">q"
    arrow_type = pa.int64()
    numpy_dtype = ">i8"


class FloatSchema(_FixedWidthSchema):
    schema_type = SchemaType.FLOAT
    fmt = ">f"
    python_types = (float, int)
    arrow_type = pa.float32()
    numpy_dtype = ">f4"


class DoubleSchema(_FixedWidthSchema):
    schema_type = SchemaType.DOUBLE
    fmt = ">d"
    python_types = (float, int)
    arrow_type = pa.float64()
    numpy_dtype = ">f8"


FIXED_WIDTH: dict[SchemaType, type[_FixedWidthSchema]] = {
    cls.schema_type: cls
    for cls in (BooleanSchema, Int8Schema, Int16Schema, Int32Schema, Int64Schema, FloatSchema, DoubleSchema)
}


__all__ = [
    "FIXED_WIDTH", "BooleanSchema", "BytesSchema", "DoubleSchema", "FloatSchema", "Int8Schema", "Int16Schema",
    "Int32Schema", "Int64Schema", "StringSchema",
]
