"""A segment whose footer holds byte for byte the schema ``encode_segment`` writes skips the per-column
name check of its all-null columns; any other file is checked column by column as before (D111)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from log_helpers import producer_table, segment_table

from broker_core.log.segment import (
    SEGMENT_SCHEMA,
    _written_schema,
    decode_segment,
    decode_segment_narrow,
    encode_segment,
)
from broker_core.log.segment_footer import footer_start, has_schema, schema_prefix


def _bytes(table: pa.Table, **options: object) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)  # type: ignore[arg-type]
    return sink.getvalue().to_pybytes()


_KEYED = segment_table([{"value": b"x", "key": "k", "properties": {"a": "b"}, "event_time": 3}])


@pytest.mark.parametrize("table", [producer_table("p", [1]), producer_table("p", list(range(50))), _KEYED],
                         ids=["one-row", "fifty-rows", "keyed"])
def test_what_encode_segment_writes_has_the_written_schema(table: pa.Table) -> None:
    data = encode_segment(table).to_pybytes()
    assert has_schema(data, _written_schema())
    assert decode_segment_narrow(pa.BufferReader(data), data=data).to_pylist() == \
        decode_segment_narrow(pa.BufferReader(data)).to_pylist()


def test_a_file_with_a_column_under_another_name_is_not_trusted_by_its_footer() -> None:
    table = producer_table("p", [1, 2, 3]).rename_columns([*SEGMENT_SCHEMA.names[:-1], "something_else"])
    data = _bytes(table, write_statistics=True, store_schema=False)
    assert not has_schema(data, _written_schema())
    with pytest.raises(ValueError):  # read whole, and the cast to the segment schema refuses it
        decode_segment_narrow(pa.BufferReader(data), data=data)
    with pytest.raises(ValueError):
        decode_segment(pa.BufferReader(data))


def test_other_types_or_truncated_bytes_are_not_the_written_schema() -> None:
    table = producer_table("p", [1, 2, 3])
    as_int32 = table.set_column(6, pa.field("sequence_id", pa.int32()), table.column("sequence_id").cast(pa.int32()))
    assert not has_schema(_bytes(as_int32, store_schema=False), _written_schema())
    data = encode_segment(table).to_pybytes()
    assert footer_start(data[:-1]) is None and not has_schema(data[:-1], _written_schema())
    assert footer_start(b"PAR1") is None
    assert not has_schema(data, None)


def test_the_prefix_must_hold_every_column_name() -> None:
    one = encode_segment(producer_table("p", [1])).to_pybytes()
    two = encode_segment(producer_table("p", [1, 2])).to_pybytes()
    prefix = schema_prefix(one, two, SEGMENT_SCHEMA.names)
    assert prefix is not None and prefix == _written_schema()
    assert schema_prefix(one, two, [*SEGMENT_SCHEMA.names, "not_a_column"]) is None
    assert schema_prefix(one, b"not parquet", SEGMENT_SCHEMA.names) is None
