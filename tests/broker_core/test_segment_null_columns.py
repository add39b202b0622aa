"""A small segment's columns that are null in every row are not decoded, and nothing else changes (D102).

``encode_segment`` records statistics (with null counts) for every column but the payload and the
properties map; ``decode_segment`` decodes only the columns whose null count is not the row count and
puts null arrays in place of the others.  These tests pin that the table is exactly what a full
read gives, for new files, for files written before D102 (no null counts: read whole) and for
files the shortcut must not trust.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from broker_core.log.segment import SEGMENT_SCHEMA, TIMESTAMP, _all_null_columns, decode_segment, encode_segment

_PROPERTIES = SEGMENT_SCHEMA.field("properties").type
_OPTIONAL = [f.name for f in SEGMENT_SCHEMA if f.nullable]


def _rows(n: int, *, filled: set[str], properties: object = None) -> pa.Table:
    """``n`` rows with the optional columns in ``filled`` holding values (with a null in the middle
    row when n > 2) and the other optional columns null throughout; ``properties`` as given."""
    def values(name: str, make: object) -> list[object]:
        out = [make(i) for i in range(n)] if callable(make) else [make] * n  # type: ignore[operator]
        if n > 2 and name != "value":
            out[1] = None
        return out if name in filled else [None] * n

    data = {
        "value": values("value", lambda i: f"v{i}".encode()),
        "key": values("key", lambda i: f"k{i}"),
        "ordering_key": values("ordering_key", lambda i: b"o"),
        "sticky_key_hash": pa.array(range(n), pa.int32()),
        "properties": pa.array([properties] * n, _PROPERTIES),
        "producer_name": values("producer_name", "p"),
        "sequence_id": pa.array(values("sequence_id", lambda i: i), pa.int64()),
        "publish_time": pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.int64()).cast(TIMESTAMP),
        "event_time": pa.array(values("event_time", lambda i: 5 + i), pa.int64()).cast(TIMESTAMP),
        "deliver_at": pa.array(values("deliver_at", lambda i: 9), pa.int64()).cast(TIMESTAMP),
        "schema_version": values("schema_version", bytes(8)),
        "chunk_uuid": values("chunk_uuid", "p-1-0a0b0c0d"),
        "chunk_id": pa.array(values("chunk_id", lambda i: i), pa.int32()),
        "num_chunks": pa.array(values("num_chunks", n), pa.int32()),
        "chunk_total_size_bytes": pa.array(values("chunk_total_size_bytes", 1000), pa.int64()),
    }
    return pa.Table.from_arrays([pa.array(data[f.name], f.type) if isinstance(data[f.name], list) else data[f.name]
                                 for f in SEGMENT_SCHEMA], schema=SEGMENT_SCHEMA)


def _full_read(data: pa.Buffer) -> pa.Table:
    """What ``decode_segment`` returned before D102: every column decoded, cast when types differ."""
    table = pq.read_table(pa.BufferReader(data), use_threads=False)
    return table if table.schema == SEGMENT_SCHEMA else table.cast(SEGMENT_SCHEMA)


def _same(got: pa.Table, expected: pa.Table) -> None:
    assert got.equals(expected)
    assert got.schema.equals(expected.schema, check_metadata=True)  # map field names and nullability too
    for name in got.column_names:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name


@pytest.mark.parametrize("filled", [set(), {"value", "producer_name", "sequence_id"}, {"key", "chunk_id"},
                                    set(_OPTIONAL)], ids=["none", "producer", "some", "all"])
@pytest.mark.parametrize("rows", [1, 3, 50])
@pytest.mark.parametrize("properties", [None, [], [("a", "1")]], ids=["null-map", "empty-map", "map"])
def test_a_segment_reads_the_same_as_a_full_read_whatever_is_null(filled: set[str], rows: int,
                                                                  properties: object) -> None:
    table = _rows(rows, filled=filled, properties=properties)
    data = encode_segment(table)
    _same(decode_segment(pa.BufferReader(data)), _full_read(data))
    assert decode_segment(pa.BufferReader(data)).to_pylist() == table.to_pylist()


def test_columns_null_in_every_row_are_found_from_the_statistics_and_the_map_never_is() -> None:
    reader = pq.ParquetReader()
    reader.open(pa.BufferReader(encode_segment(_rows(3, filled={"value", "producer_name", "sequence_id"}))))
    skipped = {SEGMENT_SCHEMA.field(i).name for i in _all_null_columns(reader.metadata)}
    assert skipped == {"key", "ordering_key", "event_time", "deliver_at", "schema_version", "chunk_uuid",
                       "chunk_id", "num_chunks", "chunk_total_size_bytes"}
    stats = reader.metadata.row_group(0)
    assert stats.column(0).statistics is None  # the payload: no min/max copied into the footer
    assert stats.column(4).statistics is None  # properties: a null count cannot tell null from {}


def test_a_segment_written_before_null_counts_were_recorded_is_read_whole() -> None:
    table = _rows(3, filled={"value", "producer_name", "sequence_id"})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none", row_group_size=1 << 20, store_schema=False,
                   use_dictionary=["key", "producer_name", "properties", "chunk_uuid"],
                   write_statistics=["publish_time", "sequence_id", "sticky_key_hash"])  # the pre-D102 writer
    data = sink.getvalue()
    reader = pq.ParquetReader()
    reader.open(pa.BufferReader(data))
    assert _all_null_columns(reader.metadata) == frozenset()
    _same(decode_segment(pa.BufferReader(data)), _full_read(data))


def test_a_file_whose_columns_have_other_names_is_not_trusted_by_position() -> None:
    """16 leaf columns in one row group but a null column under another name: read whole, and the
    cast to the segment schema refuses it, as before."""
    table = _rows(3, filled={"value"}).rename_columns([*SEGMENT_SCHEMA.names[:-1], "something_else"])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_statistics=True, store_schema=False)  # null counts for every column
    data = sink.getvalue()
    reader = pq.ParquetReader()
    reader.open(pa.BufferReader(data))
    assert SEGMENT_SCHEMA.get_field_index("chunk_total_size_bytes") not in _all_null_columns(reader.metadata)
    with pytest.raises(ValueError):
        decode_segment(pa.BufferReader(data))


def test_an_empty_segment_and_a_selection_of_columns_read_as_before() -> None:
    empty = encode_segment(SEGMENT_SCHEMA.empty_table())
    _same(decode_segment(pa.BufferReader(empty)), _full_read(empty))
    data = encode_segment(_rows(3, filled={"value"}))
    picked = decode_segment(pa.BufferReader(data), ["key", "publish_time"])
    assert picked.column_names == ["key", "publish_time"]
    assert picked.column("key").null_count == 3
