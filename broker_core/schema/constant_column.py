"""Whether an Arrow column holds one value in every row, cheaply.

A read's schema versions and producer names are almost always one value for the whole read.  The
messages built from it share one Python object for such a column, and a batch of Avro payloads all
written with the reader's own schema decodes at once.  ``pc.unique`` answers the question too, but
costs ~80 us at a read's ~1,000 rows (a hash table per call); equal-width binary values compared as
one NumPy matrix cost a few microseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def constant_value(column: pa.Array | pa.ChunkedArray) -> tuple[bool, Any]:
    """``(True, value)`` when every row of a non-empty ``column`` is ``value`` (None: every row is
    null), else ``(False, None)``."""
    n = len(column)
    nulls = column.null_count
    if n == 0 or (nulls and nulls != n):
        return False, None
    if nulls:
        return True, None
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            return _by_hashing(column)
        column = column.chunk(0)
    if column.type.id not in _BINARY_TYPE_IDS:
        return _by_hashing(column)
    # equal values have equal lengths: the offsets step by the first value's length, and the bytes
    # are that value repeated (compared as Python bytes: one C call each, no NumPy call overhead)
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1, offset=column.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    width = int(offsets[1]) - start
    if end - start != n * width:
        return False, None
    if width:  # (else every value is empty)
        if offsets.tobytes() != np.arange(start, end + 1, width, dtype=np.int32).tobytes():
            return False, None
        values = memoryview(data_buffer)[start:end].tobytes()  # (as bytes: a memoryview of Arrow's signed
        # bytes compares with bytes item by item, ~500 times slower)
        if values != values[:width] * n:
            return False, None
    return True, column[0].as_py()


def distinct_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The distinct values of ``column`` (``constant_value`` first: almost always just one)."""
    constant, value = constant_value(column)
    return [value] if constant else pc.unique(column).to_pylist()


def _by_hashing(column: pa.Array | pa.ChunkedArray) -> tuple[bool, Any]:
    distinct = pc.unique(column)
    return (True, distinct[0].as_py()) if len(distinct) == 1 else (False, None)


_BINARY_TYPE_IDS = frozenset({pa.binary().id, pa.string().id})

__all__ = ["constant_value", "distinct_values"]
