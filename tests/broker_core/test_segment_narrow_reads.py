"""A read of many tiny segments widens once: the cache keeps segments without their all-null columns
(D111), and what a read returns is still exactly the concatenation of full reads.

``TopicLog.segment_rows`` may leave out the columns a segment's footer shows null in every row;
``read_range`` concatenates such narrow pieces and puts the null columns back once for the whole
read, or widens each piece first when the pieces lack different columns.  These tests pin that the
rows, the schema (field names, nullability, the map's entry names) and every damage report are what
the per-segment full read gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from log_helpers import TOPIC_DIR, open_topic, producer_table, segment_table
from moto_s3 import Root

from broker_core.errors import SegmentCorrupted
from broker_core.log.segment import SEGMENT_SCHEMA, decode_segment, encode_segment, widen
from broker_core.topic.topic_log import TopicLog


def _full_read(topic: TopicLog, start: int, end: int) -> pa.Table:
    """Every segment in [start, end) decoded whole by pyarrow (no shortcut), sliced and concatenated."""
    pieces = []
    for seg in topic.snapshot().segments:
        lo, hi = max(start, seg.base_offset), min(end, seg.end_offset)
        if lo >= hi:
            continue
        whole = pq.read_table(topic.io.open_input(f"{TOPIC_DIR}/{seg.path}"), use_threads=False)
        whole = whole if whole.schema == SEGMENT_SCHEMA else whole.cast(SEGMENT_SCHEMA)
        pieces.append(whole.slice(lo - seg.base_offset, hi - lo))
    return pa.concat_tables(pieces)


def _same(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema.equals(expected.schema, check_metadata=True)  # names, nullability, map entries
    assert got.to_pylist() == expected.to_pylist()


def _mixed_topic(root: Any) -> TopicLog:
    """Segments that leave out different columns: plain sends, keyed sends with properties, one with
    empty maps, and one written whole without null counts (as before D102)."""
    topic = open_topic(root, fsync=False)
    topic.append(producer_table("p", [0, 1, 2]), layout=[3])
    topic.append(producer_table("p", [3, 4, 5]), layout=[3])
    topic.append(segment_table([{"value": b"k", "key": "k1", "properties": {"a": "1"}, "event_time": 7},
                                {"value": None, "key": "k2", "properties": {}}]), layout=[2])
    topic.append(segment_table([{"value": b"e", "properties": {}}]), layout=[1])
    topic.append(producer_table("q", [6, 7]), layout=[2])
    return topic


def test_a_read_of_segments_alike_is_widened_once_and_equals_full_reads(tmp_path: Path) -> None:
    topic = open_topic(tmp_path, fsync=False)
    for i in range(20):
        topic.append(producer_table("p", [3 * i, 3 * i + 1, 3 * i + 2]), layout=[3])
    narrow = topic.segment_rows(topic.snapshot().segments[0])
    assert narrow.num_columns < len(SEGMENT_SCHEMA)  # the cache keeps the segment narrow ...
    _same(topic.segment_table(topic.snapshot().segments[0]), _full_read(topic, 0, 3))  # ... callers never see it
    for start, end in [(0, 60), (1, 59), (4, 5), (30, 60)]:
        table, offsets = topic.read(start, end)
        _same(table, _full_read(topic, start, end))
        assert offsets.tolist() == list(range(start, end))


def test_a_read_of_segments_that_lack_different_columns_equals_full_reads(any_root: Root) -> None:
    topic = _mixed_topic(any_root.url)
    end = topic.snapshot().next_offset
    for start in range(end):
        table, _ = topic.read(start, end)
        _same(table, _full_read(topic, start, end))
    table, _ = topic.read(0, end)
    assert table.column("properties").to_pylist()[6:9] == [[("a", "1")], [], []]  # empty maps stay empty


def test_widen_puts_back_each_missing_column_with_the_schema_field() -> None:
    data = encode_segment(producer_table("p", [1, 2, 3]))
    whole = decode_segment(pa.BufferReader(data))
    narrow = whole.select([name for name in SEGMENT_SCHEMA.names  # (never the map: D102)
                           if name in ("value", "properties") or whole.column(name).null_count < 3])
    assert narrow.num_columns == 6  # (seven leaves: the map has two)
    _same(widen(narrow), whole)
    assert widen(whole) is whole
    longer = pa.concat_tables([narrow] * 100)  # a whole read's length: null columns made for it
    _same(widen(longer), pa.concat_tables([whole] * 100))


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_read_meeting_a_damaged_segment_in_the_middle_delivers_the_rows_before_it(
        tmp_path: Path, damage: str) -> None:
    topic = open_topic(tmp_path, fsync=False)
    for i in range(6):
        topic.append(producer_table("p", [3 * i, 3 * i + 1, 3 * i + 2]), layout=[3])
    victim = topic.snapshot().segments[3]
    path = tmp_path / TOPIC_DIR / victim.path
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-9])
    else:
        path.unlink()
    fresh = TopicLog(topic.io, TOPIC_DIR)  # nothing cached
    table, offsets, stop = fresh.read_until(0, 18)
    assert (offsets.tolist(), stop) == (list(range(9)), 9)
    _same(table, _full_read(topic, 0, 9))
    with pytest.raises(SegmentCorrupted, match=rf"{victim.path}.*offsets 9..11\).*--repair") as caught:
        fresh.read_until(stop, 18)
    assert caught.value.context["offset"] == 9
    with pytest.raises(SegmentCorrupted, match=victim.path):
        fresh.read(0, 18)
