"""The decoded-segment cache keeps the most recent entries within its byte and entry budgets."""

from __future__ import annotations

import pyarrow as pa

from broker_core.topic.segment_cache import SegmentCache


def _table(rows: int) -> pa.Table:
    return pa.table({"x": pa.array(range(rows), type=pa.int64())})


def test_least_recently_used_goes_first_once_over_budget() -> None:
    cache = SegmentCache(budget_bytes=3 * 8 * 100, always_kept=1)
    for name in "abc":
        cache.put(name, _table(100))
    assert cache.get("a") is not None  # a is now the most recent; b is the oldest
    cache.put("d", _table(100))
    assert cache.get("b") is None
    assert [cache.get(n) is not None for n in "acd"] == [True, True, True]


def test_always_kept_entries_stay_whatever_their_size() -> None:
    cache = SegmentCache(budget_bytes=0, always_kept=2)
    cache.put("a", _table(1000))
    cache.put("b", _table(1000))
    assert cache.get("a") is not None and cache.get("b") is not None
    cache.put("c", _table(1))
    assert cache.get("a") is None and cache.get("b") is not None and cache.get("c") is not None


def test_entry_count_is_bounded() -> None:
    cache = SegmentCache(budget_bytes=1 << 30, always_kept=1, max_entries=3)
    for name in "abcde":
        cache.put(name, _table(1))
    assert [n for n in "abcde" if cache.get(n) is not None] == ["c", "d", "e"]
