"""How big a message may be, counted the same way by the writers that enforce it and the readers that
check a segment before trusting it with their memory.

A message's size is its payload plus its key, ordering key and properties (names and values): what
every copy of it costs a reader.  ``maxMessageSize`` bounds that (D126).  A chunk of a chunked message
is a row whose payload is one piece of the whole; written here, a chunk with its key and properties
fits the limit too, but chunks written before D126 could hold a payload of the full limit *plus*
their properties, so readers accept a chunk row whose payload and whose other fields are each within
the limit (``too_large_rows``).

Readers cannot trust a segment file: a few kilobytes of zstd may inflate to gigabytes.  Two checks
(D125):

- before decoding, the Parquet footer's uncompressed byte count of each row group against what its
  rows may hold at most (``declared_excess``): one footer field per row group, so it costs nothing on
  the hot path, and it stops a file written by any honest Parquet writer before its pages are
  inflated.  A forged footer may understate its pages (the sizes are the file's own claims);
- after decoding, the decoded table's size against the same allowance, in any column, then each
  row's size (``decoded_excess``; both skipped when the whole table is within one message's limit,
  which is every segment of small messages).  This one cannot be lied to, but the memory is spent by
  then: it keeps an oversized row from being cached or delivered, not from being decoded.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DEFAULT_MAX_MESSAGE_BYTES = 5 * 1024 * 1024
"""``maxMessageSize``'s default (the broker's; ``BrokerConfig.max_message_size``)."""

# What a row may take in the file besides its payload, key, ordering key and properties (eight fixed
# width columns, lengths, levels, producer name, schema version, chunk id): far less than this.
_ROW_OVERHEAD_BYTES = 4096
# Page headers, dictionaries and statistics of a row group: far less than this.
_GROUP_OVERHEAD_BYTES = 1 << 20


class Oversized(Exception):
    """A segment holds, or its footer declares, a message bigger than allowed (the reason is the
    message); ``read_segment_checked`` turns it into ``SegmentTooLarge`` naming the file."""


def check_declared(metadata: pq.FileMetaData, max_message_bytes: int) -> None:
    """``Oversized`` when ``declared_excess`` finds something."""
    problem = declared_excess(metadata, max_message_bytes)
    if problem is not None:
        raise Oversized(problem)


def check_decoded(table: pa.Table, max_message_bytes: int) -> None:
    """``Oversized`` when ``decoded_excess`` finds something."""
    problem = decoded_excess(table, max_message_bytes)
    if problem is not None:
        raise Oversized(problem)


def row_allowance_bytes(max_message_bytes: int) -> int:
    """The most a row may take in a segment file: a chunk written before D126 may hold a payload of the
    full limit and, besides it, a key and properties up to the limit."""
    return 2 * max_message_bytes + _ROW_OVERHEAD_BYTES


def declared_excess(metadata: pq.FileMetaData, max_message_bytes: int) -> str | None:
    """Why the footer's sizes show a message bigger than allowed (None: they do not)."""
    allowance = row_allowance_bytes(max_message_bytes)
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        declared = group.total_byte_size
        if declared > group.num_rows * allowance + _GROUP_OVERHEAD_BYTES:
            return (f"declares {declared} bytes uncompressed for {group.num_rows} row(s) in row group {index}, "
                    f"more than messages of maxMessageSize={max_message_bytes} can hold")
    return None


def metadata_size(key: str | None, ordering_key: str | bytes | None, properties: dict[str, str] | None) -> int:
    """The bytes a message's key, ordering key and properties (names and values) count, UTF-8 encoded,
    towards ``maxMessageSize`` (a producer's check of one message)."""
    size = 0
    if key is not None:
        size += len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass"))
    if ordering_key is not None:
        size += len(ordering_key) if isinstance(ordering_key, bytes) else len(ordering_key.encode("utf-8"))
    if properties:
        for name, value in properties.items():
            size += len(name.encode("utf-8")) + len(value.encode("utf-8"))
    return size


def _lengths(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per-row byte lengths of a binary or string column (null: 0)."""
    lengths = pc.binary_length(column).fill_null(0)
    return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)


def _property_lengths(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Per-row byte lengths of a properties map's names and values (null or empty map: 0)."""
    maps = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(maps) == 0:
        return np.zeros(0, dtype=np.int64)
    # ``keys``/``items`` are every entry of the array's buffers, a slice's or not: its offsets index them
    entry = _lengths(maps.keys) + _lengths(maps.items)
    sums = np.concatenate([[0], np.cumsum(entry)])
    offsets = np.asarray(maps.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.asarray(sums[offsets[1:]] - sums[offsets[:-1]], dtype=np.int64)


def metadata_bytes(table: pa.Table) -> np.ndarray:
    """Per row: the bytes of the key, ordering key and properties (the columns the table has)."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    names = table.column_names
    for name in ("key", "ordering_key"):
        if name in names:
            total += _lengths(table.column(name))
    if "properties" in names:
        total += _property_lengths(table.column("properties"))
    return total


def value_bytes(table: pa.Table) -> np.ndarray:
    """Per row: the payload's bytes (a tombstone: 0)."""
    return _lengths(table.column("value")) if "value" in table.column_names else np.zeros(table.num_rows, np.int64)


def too_large_rows(table: pa.Table, max_message_bytes: int, *, value: np.ndarray | None = None) -> np.ndarray:
    """Indexes of the rows (segment rows) bigger than a message may be; chunks as the module says.
    ``value``: ``value_bytes(table)``, when the caller has it."""
    value = value_bytes(table) if value is None else value
    meta = metadata_bytes(table)
    over = value + meta > max_message_bytes
    if over.any() and "chunk_uuid" in table.column_names:
        chunk = np.asarray(table.column("chunk_uuid").is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        over &= ~(chunk & (value <= max_message_bytes) & (meta <= max_message_bytes))
    return np.nonzero(over)[0]


def decoded_excess(table: pa.Table, max_message_bytes: int) -> str | None:
    """Why a decoded segment holds a message bigger than allowed (None: it does not)."""
    # every buffer of every row together is within the limit: no row can exceed it.  ~8 us on a freshly
    # decoded tiny segment (``nbytes``, which tells shared and sliced buffers apart, costs ~20)
    total = table.get_total_buffer_size()
    if total <= max_message_bytes:
        return None
    if total > table.num_rows * row_allowance_bytes(max_message_bytes) + _GROUP_OVERHEAD_BYTES:
        # what the footer check bounds, in any column (a forged footer may have understated it)
        return (f"decodes to {total} bytes for {table.num_rows} row(s), more than messages of "
                f"maxMessageSize={max_message_bytes} can hold")
    value = value_bytes(table)
    names = table.column_names
    metadata_buffers = sum(table.column(name).get_total_buffer_size()
                           for name in ("key", "ordering_key", "properties") if name in names)
    if (int(value.max()) if len(value) else 0) + metadata_buffers <= max_message_bytes:
        return None  # the biggest payload with every row's key and properties: ~1 ms less a 100k-row segment
    rows = too_large_rows(table, max_message_bytes, value=value)
    if not len(rows):
        return None
    first = int(rows[0])
    size = int(value[first] + metadata_bytes(table.slice(first, 1))[0])
    return (f"holds a message of {size} bytes (row {first}), more than maxMessageSize={max_message_bytes} "
            "allows")


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Oversized",
    "check_declared",
    "check_decoded",
    "declared_excess",
    "decoded_excess",
    "metadata_bytes",
    "metadata_size",
    "row_allowance_bytes",
    "too_large_rows",
    "value_bytes",
]
