"""Telling from a segment file's bytes that its Parquet schema is exactly the one this library writes.

A reader that skips a tiny segment's all-null columns (D102) must know that the file's leaf column
``i`` is the segment column it expects there; asking pyarrow for each chunk's ``path_in_schema``
cost ~0.4 us a column (a C++ ``stringstream`` per name), ~4 us a segment in a drain of 3-message
segments.  A Parquet footer is a Thrift ``FileMetaData`` whose first fields are the format version
and the schema (every column's name, type and repetition), encoded the same way by the same writer
for the same columns; what follows, from the row count on, differs between files.  So the footers
of two segments of different row counts written by ``encode_segment`` share a prefix that ends just
after the schema, and a file whose footer starts with that prefix has that version and schema,
byte for byte (D111).  A file that does not (another writer, another pyarrow version) is checked
column by column as before; the check never trusts less than it did.
"""

from __future__ import annotations

_MAGIC = b"PAR1"
_TAIL_BYTES = 8  # a Parquet file ends with the footer's length (4 bytes, little endian) and the magic


def footer_start(data: bytes) -> int | None:
    """Where the footer of the Parquet file ``data`` starts, or None if ``data`` does not end as a
    Parquet file with a plain (unencrypted) footer does."""
    if len(data) < 2 * _TAIL_BYTES or not data.endswith(_MAGIC):
        return None
    start = len(data) - _TAIL_BYTES - int.from_bytes(data[-_TAIL_BYTES:-4], "little")
    return start if start >= len(_MAGIC) else None


def schema_prefix(one: bytes, other: bytes, names: list[str]) -> bytes | None:
    """The bytes the footers of two files of the same writer and schema but different row counts
    share (the version and the schema), or None when that prefix does not name every column in
    ``names`` (then it does not hold the schema, and no file is trusted by it)."""
    starts = footer_start(one), footer_start(other)
    if starts[0] is None or starts[1] is None:
        return None
    first, second = one[starts[0]:], other[starts[1]:]
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    prefix = first[:length]
    return prefix if all(name.encode() in prefix for name in names) else None


def has_schema(data: bytes, prefix: bytes | None) -> bool:
    """True when the footer of the Parquet file ``data`` starts with ``prefix`` (``schema_prefix``)."""
    if prefix is None:
        return False
    start = footer_start(data)
    return start is not None and data.startswith(prefix, start)


__all__ = ["footer_start", "has_schema", "schema_prefix"]
