"""The Arrow schema of a segment file and the Parquet encoding of segments.

A segment is one Parquet file holding consecutive messages of one internal topic.  Its columns are
fixed (DESIGN.md section 4); the message's offset is *not* stored in the file: it is the segment's
base offset (assigned at commit time, kept in the log's ``add.tags``) plus the row index, so a
file never needs rewriting after a lost commit race.

Compression is the file's Parquet codec; readers learn it from the file itself.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from broker_core.errors import BrokerPersistenceError, ReadError, SegmentCorrupted, SegmentTooLarge
from broker_core.log.segment_bounds import Oversized, check_declared, check_decoded
from broker_core.log.segment_footer import has_schema, schema_prefix
from broker_core.storage import FileIO

if TYPE_CHECKING:
    from broker_core.log.segment_ref import SegmentRef

TIMESTAMP = pa.timestamp("us", tz="UTC")

SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("value", pa.binary()),  # null = tombstone, distinct from b""
        pa.field("key", pa.string()),  # partition key
        pa.field("ordering_key", pa.binary()),
        pa.field("sticky_key_hash", pa.int32(), nullable=False),  # 31-bit murmur3 (Key_Shared)
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("producer_name", pa.string()),
        pa.field("sequence_id", pa.int64()),
        pa.field("publish_time", TIMESTAMP, nullable=False),
        pa.field("event_time", TIMESTAMP),
        pa.field("deliver_at", TIMESTAMP),
        pa.field("schema_version", pa.binary()),
        pa.field("chunk_uuid", pa.string()),
        pa.field("chunk_id", pa.int32()),
        pa.field("num_chunks", pa.int32()),
        pa.field("chunk_total_size_bytes", pa.int64()),
    ]
)
"""Columns of every segment file, in order."""


class CompressionType(enum.IntEnum):
    """The official client's compression names; each maps to a Parquet codec."""

    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


_PARQUET_CODEC = {
    CompressionType.NONE: "none",
    CompressionType.LZ4: "lz4",
    CompressionType.ZLib: "gzip",
    CompressionType.ZSTD: "zstd",
    CompressionType.SNAPPY: "snappy",
}


def parquet_codec(compression: CompressionType) -> str:
    """The pyarrow Parquet codec name for a compression type."""
    return _PARQUET_CODEC[CompressionType(compression)]


def new_segment_name(compression: CompressionType) -> str:
    """A fresh segment file name, ``part-<32 hex>[.<codec>].parquet``, relative to the topic directory.

    Every segment gets a name never used before because ``write_new`` refuses a collision and a
    segment is never rewritten in place.  The codec suffix is informational only: readers learn
    the codec from the Parquet file (``docs/PROTOCOL.md`` section 2).
    """
    suffix = "" if compression == CompressionType.NONE else "." + CompressionType(compression).name.lower()
    return f"part-{uuid.uuid4().hex}{suffix}.parquet"


_SEGMENT_NAME = re.compile(r"^part-[0-9a-f]{32}(?:\.(lz4|zlib|zstd|snappy))?\.parquet$")
_CODEC_BY_SUFFIX = {c.name.lower(): c for c in CompressionType if c != CompressionType.NONE}


def codec_of(path: str) -> CompressionType | None:
    """The codec in a name ``new_segment_name`` made (None: not a segment name this library writes).

    Jobs use it to tell our segments from foreign files (vacuum) and to keep a run's codec (merging).
    """
    match = _SEGMENT_NAME.match(path)
    if match is None:
        return None
    return CompressionType.NONE if match.group(1) is None else _CODEC_BY_SUFFIX[match.group(1)]


def _delta_type(arrow_type: pa.DataType) -> object:
    if pa.types.is_binary(arrow_type):
        return "binary"
    if pa.types.is_string(arrow_type):
        return "string"
    if pa.types.is_int32(arrow_type):
        return "integer"
    if pa.types.is_int64(arrow_type):
        return "long"
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_map(arrow_type):
        return {
            "type": "map",
            "keyType": _delta_type(arrow_type.key_type),
            "valueType": _delta_type(arrow_type.item_type),
            "valueContainsNull": True,
        }
    raise TypeError(f"no Delta type for {arrow_type}")


def delta_schema_string(schema: pa.Schema = SEGMENT_SCHEMA) -> str:
    """The ``metaData.schemaString`` (Delta StructType JSON) of the segment schema."""
    fields = [
        {"name": f.name, "type": _delta_type(f.type), "nullable": f.nullable, "metadata": {}} for f in schema
    ]
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


# Columns whose values repeat (names, keys): dictionary encoding pays off.  Payloads rarely repeat,
# and trying a dictionary on them first is the most expensive part of encoding a large segment.
_DICTIONARY_COLUMNS = ["key", "producer_name", "properties", "chunk_uuid"]

# Statistics (and with them each column chunk's null count) for every column but the payload and the
# properties map.  The three that readers use to skip rows were the only ones before D102; the null
# counts of the others let a reader skip decoding a column that is null in every row of the file
# (``_all_null_columns``): in a backlog of tiny segments most of the 16 leaf columns are, and each
# costs ~6 us of decode.  The payload is left out because its min/max would copy payloads into the
# footer; the map because a leaf's null count cannot tell a null map from an empty one.
_STATISTICS_COLUMNS = [f.name for f in SEGMENT_SCHEMA if f.name not in ("value", "properties")]


def encode_segment(table: pa.Table, *, compression: CompressionType = CompressionType.NONE) -> pa.Buffer:
    """Encode a table that already has ``SEGMENT_SCHEMA`` as Parquet (a buffer, not copied to bytes).

    One row group per ~1M rows keeps reads streaming while small segments stay one group.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression=parquet_codec(compression),
        row_group_size=1 << 20,
        use_dictionary=_DICTIONARY_COLUMNS,
        write_statistics=_STATISTICS_COLUMNS,
        store_schema=False,
    )
    return sink.getvalue()


# Below this size a segment is decoded on the calling thread without pre-buffering: for a file of a
# few rows, ``read_table``'s dataset machinery, the thread pool hand-offs and the coalesced pre-read
# cost 2-4x the decode itself, and consumers of a trickle of tiny commits read thousands of such
# files a second (``benchmarks/bench_trickle.py``).  Large segments keep the parallel column decode.
SMALL_SEGMENT_BYTES = 1 << 20


def decode_segment(source: pa.NativeFile, columns: list[str] | None = None, *,
                   max_message_bytes: int | None = None) -> pa.Table:
    """Read a segment back with exactly ``SEGMENT_SCHEMA`` types (or the chosen columns).
    ``max_message_bytes``: refuse (``Oversized``) a file whose footer declares more than messages
    of that size can take, before decompressing it (``segment_bounds``)."""
    if source.size() < SMALL_SEGMENT_BYTES and columns is None:
        return widen(decode_segment_narrow(source, max_message_bytes=max_message_bytes))
    if max_message_bytes is not None:
        check_declared(pq.read_metadata(source), max_message_bytes)
    if source.size() < SMALL_SEGMENT_BYTES:
        # by name: Parquet numbers leaf columns, and the properties map has two
        table = pq.ParquetFile(source, pre_buffer=False).read(columns, use_threads=False).select(columns)
    else:
        table = pq.read_table(source, columns=columns, use_threads=True)
    target = SEGMENT_SCHEMA if columns is None else pa.schema([SEGMENT_SCHEMA.field(c) for c in columns])
    if table.schema != target:
        table = table.cast(target)
    return table


def decode_segment_narrow(source: pa.NativeFile, *, data: bytes | None = None,
                          max_message_bytes: int | None = None) -> pa.Table:
    """A segment's rows, possibly without the columns its footer shows null in every row (D102):
    ``widen`` puts those back.  Callers that gather many tiny segments (``read_range``) concatenate
    the narrow tables and widen the result once, instead of inserting nine null columns into every
    segment's table and concatenating sixteen columns of one-segment chunks (D111).  ``data``: the
    file's bytes, when the caller holds them (``source`` reads them): a footer whose schema is
    byte for byte the one ``encode_segment`` writes needs no per-column name check.
    ``max_message_bytes``: as for ``decode_segment``."""
    if source.size() >= SMALL_SEGMENT_BYTES:
        return decode_segment(source, max_message_bytes=max_message_bytes)
    # ``ParquetReader`` is what ``ParquetFile`` wraps; ``ParquetFile`` adds a per-file walk of the
    # schema's nested paths (a third of a tiny file's decode) that reading every column never needs
    reader = pq.ParquetReader()
    reader.open(source, pre_buffer=False)
    if max_message_bytes is not None:
        check_declared(reader.metadata, max_message_bytes)
    skipped = _all_null_columns(reader.metadata, known_schema=data is not None and has_schema(data, _written_schema()))
    if skipped:
        return _read_without(reader, skipped)
    table = reader.read_all(use_threads=False)
    if table.schema != SEGMENT_SCHEMA:
        table = table.cast(SEGMENT_SCHEMA)
    return table


def _leaf_columns() -> list[list[int]]:
    """The Parquet leaf column numbers of each ``SEGMENT_SCHEMA`` column (the map has two)."""
    leaves: list[list[int]] = []
    for f in SEGMENT_SCHEMA:
        first = leaves[-1][-1] + 1 if leaves else 0
        leaves.append([first, first + 1] if pa.types.is_map(f.type) else [first])
    return leaves


_LEAVES = _leaf_columns()
_NUM_LEAVES = _LEAVES[-1][-1] + 1
# columns a file's statistics may show null in every row: nullable, one leaf (a map's null count
# counts empty maps too), and not the payload (no statistics, see ``_STATISTICS_COLUMNS``)
_SKIPPABLE = [(i, _LEAVES[i][0], f.name) for i, f in enumerate(SEGMENT_SCHEMA)
              if f.name in _STATISTICS_COLUMNS and f.nullable]


def _all_null_columns(metadata: pq.FileMetaData, *, known_schema: bool = False) -> frozenset[int]:
    """Columns (``SEGMENT_SCHEMA`` positions) that the footer's statistics show null in every row.

    Only for a one-row-group file with the segment's number of leaf columns, and only a column
    chunk with the expected name (anything else is read whole, as before; ``metadata.schema``
    would check more but costs as much as decoding three columns), unless ``known_schema`` says
    the file's schema is the one ``encode_segment`` writes (``segment_footer``); a column chunk
    without a null count (files written before D102 had statistics for three columns only) is
    decoded."""
    rows = metadata.num_rows
    if metadata.num_row_groups != 1 or metadata.num_columns != _NUM_LEAVES or rows == 0:
        return frozenset()
    group = metadata.row_group(0)
    nulls = []
    for i, leaf, name in _SKIPPABLE:
        chunk = group.column(leaf)
        stats = chunk.statistics  # ``null_count`` is None when the chunk has none
        if stats is not None and stats.null_count == rows and (known_schema or chunk.path_in_schema == name):
            nulls.append(i)
    return frozenset(nulls)


@functools.cache
def _written_schema() -> bytes | None:
    """The footer prefix that holds the schema ``encode_segment`` writes (``segment_footer``): taken
    once from two encoded tables of one and two rows."""
    def rows(n: int) -> pa.Table:
        return pa.Table.from_arrays([pa.nulls(n, f.type) if f.nullable else pa.array([0] * n).cast(f.type)
                                     for f in SEGMENT_SCHEMA], schema=SEGMENT_SCHEMA)
    return schema_prefix(encode_segment(rows(1)).to_pybytes(), encode_segment(rows(2)).to_pybytes(),
                         [leaf.name for leaf in SEGMENT_SCHEMA])


class _Plan:
    """How to read a segment whose columns ``skipped`` are all null: which leaves to decode and the
    schema of what they decode to."""

    __slots__ = ("leaves", "read_schema")

    def __init__(self, skipped: frozenset[int]) -> None:
        kept = [i for i in range(len(SEGMENT_SCHEMA)) if i not in skipped]
        self.leaves = [leaf for i in kept for leaf in _LEAVES[i]]
        self.read_schema = pa.schema([SEGMENT_SCHEMA.field(i) for i in kept])


_PLANS: dict[frozenset[int], _Plan] = {}
_MAX_PLANS = 256  # distinct sets of null columns kept; a backlog has few


def _read_without(reader: pq.ParquetReader, skipped: frozenset[int]) -> pa.Table:
    """Decode only the columns not in ``skipped`` (the decoded columns keep the file's own fields, a
    map's entry names included), for about half a tiny segment's decode (D102); ``widen`` turns the
    result into the same table as a full read."""
    plan = _PLANS.get(skipped)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[skipped] = _Plan(skipped)
    table = reader.read_all(column_indices=plan.leaves, use_threads=False)
    if table.schema != plan.read_schema:
        table = table.cast(plan.read_schema)
    return table


_FIELD_POSITIONS = {f.name: i for i, f in enumerate(SEGMENT_SCHEMA)}
_NULLS: dict[tuple[int, int], pa.ChunkedArray] = {}  # (column, rows) -> a shared one-chunk null column
_MAX_NULLS = 1024
_MAX_SHARED_NULL_ROWS = 64  # a segment's row count: shared; a window's (one widen per read): made anew


def widen(table: pa.Table) -> pa.Table:
    """``table`` (a narrow segment table, or several concatenated) with ``SEGMENT_SCHEMA``'s missing
    columns put back as nulls, each at its position with the schema's field: the same table as a
    full read.  The null columns are shared per row count (Arrow arrays are immutable); inserted one
    by one in position order, ~5 us less than ``Table.from_arrays`` over all sixteen (D108)."""
    if table.num_columns == len(SEGMENT_SCHEMA):
        return table
    present = {_FIELD_POSITIONS[name] for name in table.column_names}
    rows = table.num_rows
    for i in range(len(SEGMENT_SCHEMA)):
        if i in present:
            continue
        nulls = _NULLS.get((i, rows))
        if nulls is None:
            nulls = pa.chunked_array([pa.nulls(rows, SEGMENT_SCHEMA.field(i).type)])
            if rows <= _MAX_SHARED_NULL_ROWS:
                if len(_NULLS) >= _MAX_NULLS:
                    _NULLS.clear()
                _NULLS[(i, rows)] = nulls
        table = table.add_column(i, SEGMENT_SCHEMA.field(i), nulls)
    return table


def read_segment_checked(io: FileIO, topic_path: str, seg: SegmentRef, *, narrow: bool = False,
                         max_message_bytes: int | None = None) -> pa.Table:
    """A live segment's rows (with ``narrow``, possibly without its all-null columns: see
    ``decode_segment_narrow``), or ``SegmentCorrupted`` naming the file when it is missing, cannot be
    decoded (truncated, overwritten) or holds another number of rows than its ``add`` records (its
    offsets would then be wrong).  The message says what to do: restore the file, or set it aside
    with ``pubsub topics check --repair`` (its messages are then recorded as lost).

    ``max_message_bytes`` (``maxMessageSize``; None: unbounded): ``SegmentTooLarge`` when the file's
    footer declares, or its decoded rows hold, a message bigger than that (``segment_bounds``, D125)."""
    path = f"{topic_path}/{seg.path}"
    try:
        source, data = _open(io, path, seg)
        table = decode_segment_narrow(source, data=data, max_message_bytes=max_message_bytes)
        if max_message_bytes is not None:
            check_decoded(table, max_message_bytes)
        if not narrow:
            table = widen(table)
    except Oversized as exc:
        raise _too_large(path, seg, str(exc), max_message_bytes) from None
    except BrokerPersistenceError:
        # existence is checked only when opening fails: a ``stat`` (an object store's HEAD) before
        # every open cost a fifth of decoding a tiny segment (``benchmarks/bench_trickle.py``)
        if not io.exists(path):
            raise _damaged(path, seg, "is missing") from None
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise _damaged(path, seg, f"is unreadable ({exc})") from exc
    if table.num_rows != seg.num_records:
        raise _damaged(path, seg, f"holds {table.num_rows} rows, its log entry says {seg.num_records}")
    return table


def _open(io: FileIO, path: str, seg: SegmentRef) -> tuple[pa.NativeFile, bytes | None]:
    """A small local segment is read into memory (``read_bytes``, which follows no link):
    ``open_input``'s memory map costs a ``stat``, an ``mmap`` and an ``munmap`` per file, more than
    the whole file's bytes are worth, and decoding from a file handle issues a read per column and a
    ``stat`` (``pa.OSFile``'s directory check) besides: one read of the known size took ~10% off a
    tiny segment's decode (D94).  A file of another size than recorded is decoded as it is, so that
    what such a file holds (and the error about it) does not depend on this.  Returns the file to
    decode and, when they are the size its ``add`` records, its bytes."""
    if seg.size_bytes < SMALL_SEGMENT_BYTES and io.is_local:
        try:
            data = io.read_bytes(path)  # no link followed (``SymlinkRefused``, docs/PROTOCOL.md)
        except ReadError as exc:  # a directory in its place, an I/O error: as a decode failure
            raise _damaged(path, seg, f"is unreadable ({exc})") from exc
        if data is None:
            raise BrokerPersistenceError(f"segment file {path!r} is missing", path=path)
        return pa.BufferReader(data), (data if len(data) == seg.size_bytes else None)
    return io.open_input(path), None


def _too_large(path: str, seg: SegmentRef, problem: str, max_message_bytes: int | None) -> SegmentTooLarge:
    return SegmentTooLarge(
        f"segment {path!r} (offsets {seg.base_offset}..{seg.end_offset - 1}) {problem}; the read delivers none of "
        "it.  If its messages are genuine, raise maxMessageSize (broker configuration) and read again; "
        "otherwise run `pubsub topics check TOPIC --repair --execute` to set it aside (its messages are then "
        "recorded as lost)",
        path=path, offset=seg.base_offset, max_message_size=max_message_bytes,
    )


def _damaged(path: str, seg: SegmentRef, problem: str) -> SegmentCorrupted:
    return SegmentCorrupted(
        f"segment {path!r} (offsets {seg.base_offset}..{seg.end_offset - 1}) {problem}; restore the file from a "
        "backup, or run `pubsub topics check TOPIC --repair --execute` to set it aside (its messages are then "
        "recorded as lost)",
        path=path, offset=seg.base_offset,
    )


__all__ = [
    "SEGMENT_SCHEMA",
    "TIMESTAMP",
    "CompressionType",
    "codec_of",
    "decode_segment",
    "decode_segment_narrow",
    "delta_schema_string",
    "encode_segment",
    "new_segment_name",
    "parquet_codec",
    "read_segment_checked",
    "widen",
]
