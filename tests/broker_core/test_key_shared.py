"""Key_Shared selectors: the seeds' examples, full coverage, stability and vectorised == scalar."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker_core.key_shared as ks
from broker_core.errors import ConsumerBusy, InvalidConfiguration
from broker_core.hashing import murmur3_32_hash, murmur3_32_unsigned, sticky_key_hash
from broker_core.key_shared import (
    HASH_RANGE_SIZE,
    RING_SIZE,
    AutoSplitHashRangeSelector,
    ConsistentHashingSelector,
    KeySharedConsumer,
    KeySharedMode,
    KeySharedSelector,
    StickySelector,
    selector_for,
)

ORDER_KEY = "Order-3459134"
QUARTERS = [(0, 16383), (16384, 32767), (32768, 49151), (49152, 65535)]


def consumers(*names: str) -> list[KeySharedConsumer]:
    return [KeySharedConsumer(name, i) for i, name in enumerate(names)]


def auto_split(*names: str) -> AutoSplitHashRangeSelector:
    return AutoSplitHashRangeSelector.build(consumers(*names))


def seed_sticky() -> StickySelector:
    return StickySelector.build(
        [
            KeySharedConsumer("C1", 0, ((0, 16383), (32768, 49151))),
            KeySharedConsumer("C2", 1, ((16384, 32767), (49152, 65535))),
        ]
    )


HASHES = st.lists(st.integers(0, RING_SIZE - 1), min_size=1, max_size=200)
NAMES = st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True)


@st.composite
def consumer_lists(draw: st.DrawFn) -> list[KeySharedConsumer]:
    names = draw(NAMES)
    orders = draw(st.permutations(range(len(names))))
    return [KeySharedConsumer(name, order) for name, order in zip(names, orders, strict=True)]


def assert_vector_matches_scalar(selector: KeySharedSelector, hashes: list[int]) -> None:
    vector = selector.owner_of_hashes(np.array(hashes, dtype=np.int64))
    assert vector.dtype == np.int32
    assert vector.tolist() == [selector.owner_index(h) for h in hashes]
    names = [None if i < 0 else selector.consumers[i].name for i in vector.tolist()]
    assert names == [selector.owner(h) for h in hashes]


# --- mode and inputs --------------------------------------------------------------------------------


def test_mode_values_match_official_client() -> None:
    assert KeySharedMode.AutoSplit == 0
    assert KeySharedMode.Sticky == 1
    assert HASH_RANGE_SIZE == 65536
    for spelling in ("AUTO_SPLIT", "AutoSplit", "autosplit", 0, KeySharedMode.AutoSplit):
        assert KeySharedMode.coerce(spelling) is KeySharedMode.AutoSplit
    assert KeySharedMode.coerce("STICKY") is KeySharedMode.Sticky
    for bad in ("ROUND_ROBIN", 7):
        with pytest.raises(InvalidConfiguration, match="unknown Key_Shared mode"):
            KeySharedMode.coerce(bad)


def test_seed_key_hash_and_slot() -> None:
    assert murmur3_32_unsigned(ORDER_KEY) == 3112179635
    assert 3112179635 % HASH_RANGE_SIZE == 6067
    # The 31-bit sticky hash has the same low 16 bits, hence the same slot.
    assert sticky_key_hash(None, ORDER_KEY) % HASH_RANGE_SIZE == 6067


def test_consumer_normalises_ranges_and_validates() -> None:
    consumer = KeySharedConsumer("c", 0, [[0, 9], [20, 29]])  # type: ignore[arg-type]
    assert consumer.sticky_ranges == ((0, 9), (20, 29))
    with pytest.raises(InvalidConfiguration, match="non-empty str"):
        KeySharedConsumer("", 0)
    with pytest.raises(InvalidConfiguration, match="join_order"):
        KeySharedConsumer("c", True)
    with pytest.raises(InvalidConfiguration, match="int pairs"):
        KeySharedConsumer("c", 0, ((1, 2, 3),))  # type: ignore[arg-type]


def test_every_hash_representation_gives_the_same_owner() -> None:
    unsigned = np.array([murmur3_32_unsigned(f"k{i}") for i in range(500)], dtype=np.uint32)
    for selector in (auto_split("a", "b", "c"), ConsistentHashingSelector.build(consumers("a", "b", "c"))):
        expected = selector.owner_of_hashes(unsigned & np.uint32(0x7FFFFFFF))
        assert selector.owner_of_hashes(unsigned).tolist() == expected.tolist()
        assert selector.owner_of_hashes(unsigned.view(np.int32)).tolist() == expected.tolist()
    with pytest.raises(InvalidConfiguration, match="integer array"):
        auto_split("a").owner_of_hashes(np.array([1.5]))


@pytest.mark.parametrize(
    "selector", [AutoSplitHashRangeSelector(), ConsistentHashingSelector(), StickySelector()]
)
def test_no_consumers_owns_nothing(selector: KeySharedSelector) -> None:
    assert selector.owner_of_hashes(np.array([0, 6067, RING_SIZE - 1])).tolist() == [-1, -1, -1]
    assert selector.owner(6067) is None
    assert selector.ranges() == {}


def test_duplicate_names_are_refused() -> None:
    for cls in (AutoSplitHashRangeSelector, ConsistentHashingSelector):
        with pytest.raises(ConsumerBusy, match="'a' is used twice"):
            cls.build([KeySharedConsumer("a", 0), KeySharedConsumer("a", 1)])


def test_selector_for_picks_the_mapping() -> None:
    cs = consumers("a", "b")
    assert type(selector_for(KeySharedMode.AutoSplit, False, cs)) is AutoSplitHashRangeSelector
    assert type(selector_for("AUTO_SPLIT", True, cs)) is ConsistentHashingSelector
    sticky = [KeySharedConsumer("a", 0, ((0, 10),))]
    assert type(selector_for(KeySharedMode.Sticky, True, sticky)) is StickySelector
    assert type(selector_for(1, False, sticky)) is StickySelector


# --- auto-split hash range --------------------------------------------------------------------------


def test_auto_split_seed_layouts_from_one_to_four_consumers() -> None:
    selector = AutoSplitHashRangeSelector()
    steps = [
        {"C1": [(0, 65535)]},
        {"C2": [(0, 32767)], "C1": [(32768, 65535)]},
        {"C3": [(0, 16383)], "C2": [(16384, 32767)], "C1": [(32768, 65535)]},
        {"C3": [QUARTERS[0]], "C2": [QUARTERS[1]], "C4": [QUARTERS[2]], "C1": [QUARTERS[3]]},
    ]
    for join_order, expected in enumerate(steps):
        selector.add(KeySharedConsumer(f"C{join_order + 1}", join_order))
        assert selector.ranges() == dict(sorted(expected.items()))
    assert selector.owner(sticky_key_hash(None, ORDER_KEY)) == "C3"
    assert selector.ranges() == auto_split("C1", "C2", "C3", "C4").ranges()


def test_auto_split_seed_merge_on_disconnect() -> None:
    selector = auto_split("C1", "C2", "C3", "C4")
    assert selector.remove("C4")  # merged into the region on its right (C1's)
    assert selector.ranges() == {"C1": [(32768, 65535)], "C2": [(16384, 32767)], "C3": [(0, 16383)]}
    assert selector.ranges() == auto_split("C1", "C2", "C3").ranges()
    assert selector.remove("C1")  # the rightmost region has no right neighbour: merged left, into C2
    assert selector.ranges() == {"C2": [(16384, 65535)], "C3": [(0, 16383)]}
    assert not selector.remove("C1")
    assert selector.remove("C2") and selector.remove("C3")
    assert selector.ranges() == {}


def test_auto_split_removal_touches_one_neighbour_only() -> None:
    selector = auto_split("C1", "C2", "C3", "C4")
    selector.remove("C2")
    assert selector.ranges() == {"C1": [(49152, 65535)], "C3": [(0, 16383)], "C4": [(16384, 49151)]}
    # Replaying joins (what a process without the history computes) gives another valid layout.
    assert auto_split("C1", "C3", "C4").ranges() == {
        "C1": [(32768, 65535)],
        "C3": [(16384, 32767)],
        "C4": [(0, 16383)],
    }


def test_auto_split_splits_merged_regions_at_their_middle() -> None:
    selector = auto_split("C1", "C2", "C3", "C4", "C5")  # C5 takes the lower half of C3's quarter
    assert selector.ranges()["C5"] == [(0, 8191)] and selector.ranges()["C3"] == [(8192, 16383)]
    selector.remove("C3")  # merges right: C2 = [8192, 32767], 24576 slots, now the largest
    selector.add(KeySharedConsumer("C6", 9))
    assert selector.ranges()["C6"] == [(8192, 20479)] and selector.ranges()["C2"] == [(20480, 32767)]
    # An odd region leaves the owner the larger upper half.
    assert ks._split_for([(0, 2, "a")], "b") == [(0, 0, "b"), (1, 2, "a")]


def test_auto_split_build_replays_in_join_order_and_indexes_the_given_list() -> None:
    given_list = [KeySharedConsumer("z", 2), KeySharedConsumer("x", 0), KeySharedConsumer("y", 1)]
    selector = AutoSplitHashRangeSelector.build(given_list)
    assert selector.consumers == tuple(given_list)
    assert selector.ranges() == {"z": [(0, 16383)], "x": [(32768, 65535)], "y": [(16384, 32767)]}
    assert selector.owner_of_hashes(np.array([5, 20000, 40000])).tolist() == [0, 2, 1]


def test_auto_split_refused_join_leaves_layout_alone() -> None:
    selector = auto_split("a", "b")
    before = selector.ranges()
    with pytest.raises(ConsumerBusy):
        selector.add(KeySharedConsumer("a", 5))
    assert selector.ranges() == before and [c.name for c in selector.consumers] == ["a", "b"]
    with pytest.raises(ConsumerBusy, match="single slot"):
        ks._split_for([(0, 0, "a")], "b")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9)), max_size=40), HASHES)
def test_auto_split_add_remove_keeps_one_region_each_covering_everything(
    ops: list[tuple[bool, int]], hashes: list[int]
) -> None:
    selector = AutoSplitHashRangeSelector()
    for join_order, (is_add, who) in enumerate(ops):
        name = f"c{who}"
        if is_add and name not in {c.name for c in selector.consumers}:
            selector.add(KeySharedConsumer(name, join_order))
        elif not is_add:
            selector.remove(name)
    spans = sorted(span for regions in selector.ranges().values() for span in regions)
    assert all(len(regions) == 1 for regions in selector.ranges().values())
    assert set(selector.ranges()) == {c.name for c in selector.consumers}
    if selector.consumers:
        assert spans[0][0] == 0 and spans[-1][1] == HASH_RANGE_SIZE - 1
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
        assert (selector.owner_of_hashes(np.array(hashes)) >= 0).all()
    assert_vector_matches_scalar(selector, hashes)


@settings(max_examples=60, deadline=None)
@given(consumer_lists(), HASHES, st.randoms())
def test_auto_split_covers_every_hash_and_ignores_list_order(
    cs: list[KeySharedConsumer], hashes: list[int], rnd: object
) -> None:
    selector = AutoSplitHashRangeSelector.build(cs)
    owners = selector.owner_of_hashes(np.array(hashes))
    assert ((owners >= 0) & (owners < len(cs))).all()
    shuffled = list(cs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert [selector.owner(h) for h in hashes] == [
        AutoSplitHashRangeSelector.build(shuffled).owner(h) for h in hashes
    ]
    assert_vector_matches_scalar(selector, hashes)


# --- consistent hashing -----------------------------------------------------------------------------

SEED_CONSUMER = "orders-aggregator-pod-2345-consumer"


def test_consistent_hashing_seed_point_names() -> None:
    assert murmur3_32_hash(f"{SEED_CONSUMER}1") == 1003084738
    assert murmur3_32_hash(f"{SEED_CONSUMER}2") == 373317202
    assert murmur3_32_hash(f"{SEED_CONSUMER}100") == 320276078
    points = ConsistentHashingSelector.build(consumers(SEED_CONSUMER)).points()[SEED_CONSUMER]
    assert len(points) == 100 and {1003084738, 373317202, 320276078} <= set(points)
    assert all(0 <= p < RING_SIZE for p in points)


def test_consistent_hashing_goes_clockwise_to_the_next_point_and_wraps() -> None:
    selector = ConsistentHashingSelector.build(consumers("a", "b", "c"))
    ring = sorted((p, name) for name, pts in selector.points().items() for p in pts)
    for position, (point, name) in enumerate(ring):
        assert selector.owner(point) == name  # a hash on a point belongs to that point
        previous = ring[position - 1][0] if position else -1
        assert selector.owner(previous + 1) == name
    assert selector.owner(ring[-1][0] + 1) == ring[0][1]  # past the last point: wrap to the first
    assert selector.owner(RING_SIZE - 1) == ring[0][1]


def test_consistent_hashing_collision_picks_hash_mod_count_in_join_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ks, "_ring_points", lambda name, count: (1000,))
    cs = [KeySharedConsumer("late", 1), KeySharedConsumer("early", 0)]
    selector = ConsistentHashingSelector(cs, points_per_consumer=1)
    assert [selector.owner(h) for h in (0, 1, 1000, 1001, 2000)] == [
        "early",
        "late",
        "early",
        "late",
        "early",
    ]
    assert_vector_matches_scalar(selector, [0, 1, 1000, 1001, 2000, RING_SIZE - 1])
    assert selector.ranges() == {"late": [(0, RING_SIZE - 1)], "early": [(0, RING_SIZE - 1)]}


def test_consistent_hashing_balances_three_consumers() -> None:
    selector = ConsistentHashingSelector.build(consumers("consumer-a", "consumer-b", "consumer-c"))
    hashes = np.random.default_rng(7).integers(0, RING_SIZE, size=100_000)
    shares = np.bincount(selector.owner_of_hashes(hashes), minlength=3) / len(hashes)
    assert shares.min() > 0.25 and shares.max() < 0.42, shares


def test_consistent_hashing_moves_keys_only_to_or_from_the_changed_consumer() -> None:
    hashes = np.random.default_rng(11).integers(0, RING_SIZE, size=50_000)
    before = ConsistentHashingSelector.build(consumers("a", "b", "c"))
    after = ConsistentHashingSelector.build(consumers("a", "b", "c", "d"))
    old, new = before.owner_of_hashes(hashes), after.owner_of_hashes(hashes)
    moved = old != new
    assert moved.any() and (new[moved] == 3).all()
    after.remove("d")
    assert (after.owner_of_hashes(hashes) == old).all()


def test_consistent_hashing_ranges_partition_the_ring() -> None:
    selector = ConsistentHashingSelector.build(consumers("a", "b", "c"))
    spans = sorted(span for regions in selector.ranges().values() for span in regions)
    assert spans[0][0] == 0 and spans[-1][1] == RING_SIZE - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    for name, regions in selector.ranges().items():
        assert all(selector.owner(start) == name and selector.owner(end) == name for start, end in regions)


def test_consistent_hashing_validates_points() -> None:
    for bad in (0, -1, True, 2.5):
        with pytest.raises(InvalidConfiguration, match="points_per_consumer"):
            ConsistentHashingSelector(points_per_consumer=bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(consumer_lists(), HASHES, st.randoms())
def test_consistent_hashing_covers_every_hash_and_ignores_list_order(
    cs: list[KeySharedConsumer], hashes: list[int], rnd: object
) -> None:
    selector = ConsistentHashingSelector.build(cs)
    owners = selector.owner_of_hashes(np.array(hashes))
    assert ((owners >= 0) & (owners < len(cs))).all()
    shuffled = list(cs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    reordered = ConsistentHashingSelector.build(shuffled)
    assert [selector.owner(h) for h in hashes] == [reordered.owner(h) for h in hashes]
    assert_vector_matches_scalar(selector, hashes)


# --- sticky -----------------------------------------------------------------------------------------


def test_sticky_seed_example() -> None:
    selector = seed_sticky()
    assert selector.owner(sticky_key_hash(None, ORDER_KEY)) == "C1"
    assert selector.owner(3112179635) == "C1"
    assert selector.ranges() == {"C1": [QUARTERS[0], QUARTERS[2]], "C2": [QUARTERS[1], QUARTERS[3]]}
    assert [selector.owner(q[0]) for q in QUARTERS] == ["C1", "C2", "C1", "C2"]
    assert [selector.owner(q[1]) for q in QUARTERS] == ["C1", "C2", "C1", "C2"]


def test_sticky_gap_has_no_owner() -> None:
    selector = StickySelector.build([KeySharedConsumer("a", 0, ((100, 199), (300, 300)))])
    hashes = [99, 100, 199, 200, 299, 300, 301, 65536 + 150]
    assert selector.owner_of_hashes(np.array(hashes)).tolist() == [-1, 0, 0, -1, -1, 0, -1, 0]
    assert_vector_matches_scalar(selector, hashes)


def test_sticky_overlap_between_consumers_is_refused_naming_both() -> None:
    with pytest.raises(
        ConsumerBusy, match=r"'late' range \[10, 20\] overlaps range \[0, 10\] of consumer 'early'"
    ):
        StickySelector.build(
            [KeySharedConsumer("late", 1, ((10, 20),)), KeySharedConsumer("early", 0, ((0, 10),))]
        )


def test_sticky_conflicting_join_is_reverted() -> None:
    selector = seed_sticky()
    with pytest.raises(ConsumerBusy, match="'C3'"):
        selector.add(KeySharedConsumer("C3", 2, ((16000, 17000),)))
    assert [c.name for c in selector.consumers] == ["C1", "C2"]
    selector.remove("C2")
    selector.add(KeySharedConsumer("C3", 2, ((16384, 20000),)))
    assert selector.owner(17000) == "C3" and selector.owner(30000) is None


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ((), "declared no hash ranges"),
        (((-1, 5),), r"range \[-1, 5\]"),
        (((0, 65536),), r"range \[0, 65536\]"),
        (((9, 3),), r"range \[9, 3\]"),
        (((0, 10), (10, 20)), "overlapping ranges"),
    ],
)
def test_sticky_invalid_ranges(ranges: tuple[tuple[int, int], ...], message: str) -> None:
    with pytest.raises(InvalidConfiguration, match=message):
        StickySelector.build([KeySharedConsumer("a", 0, ranges)])


@st.composite
def sticky_lists(draw: st.DrawFn) -> list[KeySharedConsumer]:
    cuts = sorted(draw(st.sets(st.integers(1, HASH_RANGE_SIZE - 1), min_size=1, max_size=12)))
    bounds = [0, *cuts, HASH_RANGE_SIZE]
    spans = [(a, b - 1) for a, b in itertools.pairwise(bounds)]
    spans = [s for s in spans if draw(st.booleans())] or spans[:1]  # leave gaps sometimes
    count = draw(st.integers(1, len(spans)))
    owners = [i % count for i in range(len(spans))]
    return [
        KeySharedConsumer(f"c{i}", i, tuple(s for s, o in zip(spans, owners, strict=True) if o == i))
        for i in range(count)
    ]


@settings(max_examples=60, deadline=None)
@given(sticky_lists(), HASHES)
def test_sticky_owner_is_the_declaring_consumer(cs: list[KeySharedConsumer], hashes: list[int]) -> None:
    selector = StickySelector.build(cs)
    for h, owner in zip(hashes, selector.owner_of_hashes(np.array(hashes)).tolist(), strict=True):
        slot = h % HASH_RANGE_SIZE
        declared = [i for i, c in enumerate(cs) if any(a <= slot <= b for a, b in c.sticky_ranges)]
        assert declared == ([owner] if owner >= 0 else [])
    assert_vector_matches_scalar(selector, hashes)
