"""Reading segments back: the fast path for a backlog of tiny segments keeps every damage report.

A drain of thousands of tiny segments reads each file once; the read path therefore opens without a
``stat`` (an object store's HEAD) first, keeps each cached segment's size with it, and turns a claim
of one ascending run of rows into a slice.  These tests pin that the shortcuts change no answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from log_helpers import TOPIC_DIR, open_topic, producer_table
from moto_s3 import Root

from broker_core.client.subscription_part import _rows_at
from broker_core.errors import SegmentCorrupted
from broker_core.topic.topic_log import TopicLog


def _topic_with_segments(root: Any, count: int) -> TopicLog:
    topic = open_topic(root, fsync=False)
    for i in range(count):
        topic.append(producer_table("p", [3 * i, 3 * i + 1, 3 * i + 2]), layout=[3])
    return topic


class _NoExists:
    """A FileIO that fails the test if anything asks whether a file exists."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def exists(self, path: str) -> bool:
        raise AssertionError(f"exists({path!r}) on the read path of a healthy segment")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_healthy_segment_is_read_without_asking_whether_it_exists(tmp_path: Path) -> None:
    topic = _topic_with_segments(tmp_path, 3)
    reader = TopicLog(_NoExists(topic.io), TOPIC_DIR)  # type: ignore[arg-type]
    table, offsets = reader.read(0, 9)
    assert offsets.tolist() == list(range(9))
    assert table.column("sequence_id").to_pylist() == list(range(9))


def test_a_missing_segment_is_reported_as_missing_on_both_backends(any_root: Root) -> None:
    topic = _topic_with_segments(any_root.url, 3)
    victim = topic.snapshot().segments[1]
    topic.io.delete(f"{TOPIC_DIR}/{victim.path}")
    with pytest.raises(SegmentCorrupted, match=r"is missing.*--repair") as caught:
        topic.read(0, 9)
    assert caught.value.context["offset"] == 3
    _, offsets, stop = topic.read_until(0, 9)  # the good rows before the damage are still read
    assert (offsets.tolist(), stop) == ([0, 1, 2], 3)


def test_a_directory_in_place_of_a_segment_is_unreadable_not_a_raw_os_error(tmp_path: Path) -> None:
    topic = _topic_with_segments(tmp_path, 2)
    victim = tmp_path / TOPIC_DIR / topic.snapshot().segments[0].path
    victim.unlink()
    victim.mkdir()
    with pytest.raises(SegmentCorrupted, match=r"is unreadable.*--repair"):
        topic.read(0, 6)


def _replace_segment_file(root: Path, topic: TopicLog, index: int, data: bytes) -> None:
    (root / TOPIC_DIR / topic.snapshot().segments[index].path).write_bytes(data)


def test_a_segment_file_shorter_than_its_add_is_unreadable(tmp_path: Path) -> None:
    topic = _topic_with_segments(tmp_path, 3)
    victim = tmp_path / TOPIC_DIR / topic.snapshot().segments[1].path
    _replace_segment_file(tmp_path, topic, 1, victim.read_bytes()[:-9])  # a truncated copy
    with pytest.raises(SegmentCorrupted, match=r"offsets 3..5\) is unreadable.*--repair"):
        topic.read(0, 9)
    _, offsets, stop = topic.read_until(0, 9)
    assert (offsets.tolist(), stop) == ([0, 1, 2], 3)


def test_a_segment_file_of_another_size_than_its_add_is_decoded_as_it_is(tmp_path: Path) -> None:
    """One read of the recorded size is the fast path; a file that is longer (another valid segment
    copied over it) is still decoded whole, so the row-count check names what it holds."""
    topic = _topic_with_segments(tmp_path, 3)
    other = _topic_with_segments(tmp_path / "other", 1)
    other.append(producer_table("q", list(range(40))), layout=[40])
    bigger = other.snapshot().segments[1]
    assert bigger.size_bytes > topic.snapshot().segments[1].size_bytes
    _replace_segment_file(tmp_path, topic, 1, (tmp_path / "other" / TOPIC_DIR / bigger.path).read_bytes())
    with pytest.raises(SegmentCorrupted, match=r"holds 40 rows, its log entry says 3"):
        topic.read(0, 9)
    table, _ = topic.read(6, 9)  # the segments around it read as before
    assert table.column("sequence_id").to_pylist() == [6, 7, 8]


def test_the_segment_cache_charges_each_entry_once_and_stays_within_its_budget(tmp_path: Path) -> None:
    topic = _topic_with_segments(tmp_path, 12)
    one = topic.segment_table(topic.snapshot().segments[0])
    one_bytes = one.get_total_buffer_size()
    topic._cache.clear()
    topic._cache.budget_bytes = 6 * one_bytes
    for _ in range(2):  # the second pass evicts and re-reads: the running total must stay exact
        table, _ = topic.read(0, 36)
        assert table.column("sequence_id").to_pylist() == list(range(36))
        sizes = topic._cache.entry_sizes()
        assert topic._cache.size_bytes == sum(sizes.values())
        assert all(size == topic._cache.get(path).get_total_buffer_size() for path, size in sizes.items())
        assert topic._cache.size_bytes <= 6 * one_bytes
        assert len(topic._cache) >= topic._cache.always_kept


@pytest.mark.parametrize("index", [[], [0], [2, 3, 4, 5], [0, 2], [5, 4], [1, 1, 2], list(range(9))])
def test_rows_at_is_take_whether_or_not_the_rows_are_one_run(index: list[int]) -> None:
    pieces = [pa.table({"x": [3 * i, 3 * i + 1, 3 * i + 2]}) for i in range(3)]
    table = pa.concat_tables(pieces)  # three chunks, as a window of three tiny segments
    wanted = np.asarray(index, dtype=np.int64)
    assert _rows_at(table, wanted).column("x").to_pylist() == table.take(pa.array(wanted)).column("x").to_pylist()


def test_rows_at_every_row_in_order_is_the_table_itself() -> None:
    """An in-order read wants every row it read: no slice (a walk of every column's chunks)."""
    table = pa.concat_tables([pa.table({"x": [3 * i, 3 * i + 1, 3 * i + 2]}) for i in range(3)])
    assert _rows_at(table, np.arange(9, dtype=np.int64)) is table
    assert _rows_at(table, np.arange(1, 9, dtype=np.int64)).column("x").to_pylist() == list(range(1, 9))
