"""RangeSet: sorted disjoint half-open ranges, checked against a plain Python set of offsets."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.subscription.ranges import RangeSet

OFFSET = st.integers(min_value=0, max_value=200)
SPAN = st.tuples(OFFSET, st.integers(min_value=0, max_value=40)).map(lambda p: (p[0], p[0] + p[1]))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SPAN),
        st.tuples(st.just("remove"), SPAN),
        st.tuples(st.just("add_offsets"), st.lists(OFFSET, max_size=15)),
        st.tuples(st.just("remove_offsets"), st.lists(OFFSET, max_size=15)),
        # cursors pass numpy arrays (acks arrive as arrays of offsets, in any order, with repeats)
        st.tuples(st.just("add_offsets"), st.lists(OFFSET, max_size=15).map(lambda v: np.array(v, np.int64))),
        st.tuples(st.just("remove_offsets"), st.lists(OFFSET, max_size=15).map(lambda v: np.array(v, np.int64))),
        st.tuples(st.just("remove_below"), OFFSET),
    ),
    max_size=40,
)


def apply(rs: RangeSet, model: set[int], op: str, arg: Any) -> None:
    if op == "add":
        start, end = arg
        rs.add(start, end)
        model.update(range(start, end))
    elif op == "remove":
        start, end = arg
        rs.remove(start, end)
        model.difference_update(range(start, end))
    elif op == "add_offsets":
        rs.add_offsets(arg)
        model.update(int(o) for o in arg)
    elif op == "remove_offsets":
        rs.remove_offsets(arg)
        model.difference_update(int(o) for o in arg)
    else:
        rs.remove_below(arg)
        model.difference_update(range(0, arg))


def check_invariants(rs: RangeSet, model: set[int]) -> None:
    pairs = rs.to_json()
    # sorted, disjoint, non-touching (touching ranges are merged), non-empty
    for s, e in pairs:
        assert s < e
    for (_, e1), (s2, _) in itertools.pairwise(pairs):
        assert e1 < s2, pairs
    assert set(rs.offsets()) == model
    assert rs.count() == len(model)
    assert bool(rs) == bool(model)
    assert rs.first_start() == (min(model) if model else None)
    probe = np.arange(-2, 260, dtype=np.int64)
    expected = np.array([int(o) in model for o in probe])
    assert (rs.contains_array(probe) == expected).all()
    for o in (-1, 0, 5, 120, 239, 240, 241):
        assert (o in rs) == (o in model)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_rangeset_matches_a_set_model(ops: list[tuple[str, Any]]) -> None:
    rs = RangeSet()
    model: set[int] = set()
    for op, arg in ops:
        apply(rs, model, op, arg)
        check_invariants(rs, model)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_json_round_trip_and_copy_are_independent(ops: list[tuple[str, Any]]) -> None:
    rs = RangeSet()
    model: set[int] = set()
    for op, arg in ops:
        apply(rs, model, op, arg)
    again = RangeSet(rs.to_json())
    assert again == rs
    clone = rs.copy()
    assert clone == rs
    clone.add(1000, 1001)
    assert 1000 not in rs and 1000 in clone
    assert rs != clone


@settings(max_examples=150, deadline=None)
@given(st.lists(SPAN, max_size=12))
def test_constructor_merges_overlapping_and_touching_input(spans: list[tuple[int, int]]) -> None:
    model: set[int] = set()
    for s, e in spans:
        model.update(range(s, e))
    rs = RangeSet([list(p) for p in spans])
    check_invariants(rs, model)


def test_touching_ranges_merge_and_gaps_stay() -> None:
    rs = RangeSet()
    rs.add(0, 5)
    rs.add(5, 10)
    assert rs.to_json() == [[0, 10]]
    rs.add(12, 15)
    assert rs.to_json() == [[0, 10], [12, 15]]
    rs.add(10, 12)
    assert rs.to_json() == [[0, 15]]
    rs.remove(3, 4)
    assert rs.to_json() == [[0, 3], [4, 15]]
    rs.add(7, 7)  # empty: no-op
    rs.remove(9, 2)  # reversed: no-op
    assert rs.to_json() == [[0, 3], [4, 15]]


def test_add_offsets_collapses_runs() -> None:
    rs = RangeSet()
    rs.add_offsets([9, 3, 4, 5, 3, 20, 10])
    assert rs.to_json() == [[3, 6], [9, 11], [20, 21]]
    rs.add_offsets([])
    assert rs.to_json() == [[3, 6], [9, 11], [20, 21]]


@pytest.mark.parametrize("offsets", [
    [3, 4, 5, 9, 10, 20],  # ascending and distinct, as acknowledgments one by one arrive: no sort
    [3, 4, 4, 5, 9, 10, 10, 20],  # ascending with repeats: deduplicated
    [20, 10, 9, 5, 4, 3],  # descending
    [7],
])
def test_add_offsets_in_any_order_gives_the_same_runs(offsets: list[int]) -> None:
    expected = [[3, 6], [9, 11], [20, 21]] if len(offsets) > 1 else [[7, 8]]
    for as_given in (offsets, np.array(offsets, np.int64)):
        rs = RangeSet()
        rs.add_offsets(as_given)
        assert rs.to_json() == expected
        rs.remove_offsets(as_given)
        assert rs.to_json() == []


def test_contains_array_on_empty_set_and_large_offsets() -> None:
    assert not RangeSet().contains_array(np.array([0, 1, 2], dtype=np.int64)).any()
    rs = RangeSet([[2**40, 2**40 + 3]])
    got = rs.contains_array(np.array([2**40 - 1, 2**40, 2**40 + 2, 2**40 + 3], dtype=np.int64))
    assert got.tolist() == [False, True, True, False]


def test_remove_below_an_empty_set_and_below_the_first_range() -> None:
    rs = RangeSet()
    rs.remove_below(10)
    assert not rs
    rs.add(20, 30)
    rs.remove_below(10)
    assert rs.to_json() == [[20, 30]]
    rs.remove_below(25)
    assert rs.to_json() == [[25, 30]]
