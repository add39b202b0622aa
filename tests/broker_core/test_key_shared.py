"""Key_Shared: the 4.x sticky hash variants, what all selectors share, and the STICKY selector.

Expected values are worked out by hand from Pulsar 4.x's rules (issue #16) and the seeds' examples,
never computed with the code under test.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import ConsumerBusy, InvalidConfiguration
from broker_core.hashing import (
    consistent_sticky_hash,
    consistent_sticky_hashes,
    murmur3_32_unsigned,
    range_sticky_hash,
    range_sticky_hashes,
    sticky_key_hash,
)
from broker_core.subscription.key_shared import (
    HASH_RANGE_SIZE,
    AutoSplitHashRangeSelector,
    ConsistentHashingSelector,
    KeySharedConsumer,
    KeySharedMode,
    KeySharedSelector,
    StickySelector,
    selector_for,
)

ORDER_KEY = "Order-3459134"
ORDER_MURMUR31 = 3112179635 - 2**31  # the seeds' murmur32 of ORDER_KEY, masked to 31 bits = 964695987
MAX31 = 2**31 - 1


def consumers(*names: str) -> list[KeySharedConsumer]:
    return [KeySharedConsumer(name, i) for i, name in enumerate(names)]


def seed_sticky() -> StickySelector:
    """The seeds' STICKY example: C1 = [0, 16384) + [32768, 49152), C2 = the other two quarters."""
    return StickySelector.build(
        [
            KeySharedConsumer("C1", 0, ((0, 16383), (32768, 49151))),
            KeySharedConsumer("C2", 1, ((16384, 32767), (49152, 65535))),
        ]
    )


def assert_vector_matches_scalar(selector: KeySharedSelector, hashes: list[int]) -> None:
    vector = selector.owner_of_hashes(np.array(hashes, dtype=np.int64))
    assert vector.dtype == np.int32
    assert vector.tolist() == [selector.owner_index(h) for h in hashes]
    names = [None if i < 0 else selector.consumers[i].name for i in vector.tolist()]
    assert names == [selector.owner(h) for h in hashes]


# --- the sticky hash of each selector ---------------------------------------------------------------


def test_seed_key_murmur() -> None:
    assert murmur3_32_unsigned(ORDER_KEY) == 3112179635
    assert sticky_key_hash(None, ORDER_KEY) == ORDER_MURMUR31 == 964695987


@pytest.mark.parametrize(
    ("murmur31", "consistent", "ranged"),
    [
        (0, 1, 1),  # consistent: 0 % 65535 + 1; ranged: 0 % 65536 = 0, moved to 1
        (1, 2, 1),
        (65534, 65535, 65534),
        (65535, 1, 65535),  # 65535 % 65535 = 0 -> 1
        (65536, 2, 1),  # ranged: 65536 % 65536 = 0 -> 1
        (131072, 3, 1),  # 131072 = 2 * 65535 + 2; ranged 0 -> 1
        (MAX31, 32768, 65535),  # 2147483647 = 32768 * 65535 + 32767; ranged: low 16 bits all ones
        (ORDER_MURMUR31, 20788, 6067),  # 964695987 = 14720 * 65535 + 20787; the seeds' slot 6067
    ],
)
def test_sticky_hash_variants(murmur31: int, consistent: int, ranged: int) -> None:
    assert consistent_sticky_hash(murmur31) == consistent
    assert range_sticky_hash(murmur31) == ranged
    assert consistent_sticky_hashes(np.array([murmur31])).tolist() == [consistent]
    assert range_sticky_hashes(np.array([murmur31])).tolist() == [ranged]


def test_sticky_hash_accepts_any_32_bit_form() -> None:
    # -1 as int32 is 0xFFFFFFFF; masked to 31 bits it is 2**31 - 1
    as_int32 = np.array([-1], dtype=np.int32)
    assert consistent_sticky_hashes(as_int32).tolist() == [32768]
    assert range_sticky_hashes(np.array([0xFFFFFFFF], dtype=np.uint32)).tolist() == [65535]


def test_empty_keys_count_as_absent() -> None:
    """The Python API cannot set an explicitly empty key (docs/DECISIONS.md): it hashes as NONE_KEY."""
    none_key = sticky_key_hash(None, None)
    assert none_key == murmur3_32_unsigned(b"NONE_KEY") & MAX31
    assert sticky_key_hash("", "") == sticky_key_hash(b"", None) == none_key


# --- what every selector shares -----------------------------------------------------------------------


def test_mode_values_match_official_client() -> None:
    assert KeySharedMode.AutoSplit == 0
    assert KeySharedMode.Sticky == 1
    for spelling in ("AUTO_SPLIT", "AutoSplit", "autosplit", 0, KeySharedMode.AutoSplit):
        assert KeySharedMode.coerce(spelling) is KeySharedMode.AutoSplit
    assert KeySharedMode.coerce("STICKY") is KeySharedMode.Sticky
    for bad in ("ROUND_ROBIN", 7):
        with pytest.raises(InvalidConfiguration, match="unknown Key_Shared mode"):
            KeySharedMode.coerce(bad)


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
    for selector in (AutoSplitHashRangeSelector(consumers("a", "b", "c")),
                     ConsistentHashingSelector(consumers("a", "b", "c"))):
        expected = selector.owner_of_hashes(unsigned & np.uint32(MAX31))
        assert selector.owner_of_hashes(unsigned).tolist() == expected.tolist()
        assert selector.owner_of_hashes(unsigned.view(np.int32)).tolist() == expected.tolist()
        assert_vector_matches_scalar(selector, (unsigned & np.uint32(MAX31)).tolist()[:50])
    with pytest.raises(InvalidConfiguration, match="integer array"):
        AutoSplitHashRangeSelector(consumers("a")).owner_of_hashes(np.array([1.5]))


@pytest.mark.parametrize("selector", [AutoSplitHashRangeSelector(), ConsistentHashingSelector(), StickySelector()])
def test_no_consumers_owns_nothing(selector: KeySharedSelector) -> None:
    assert selector.owner_of_hashes(np.array([0, 6067, MAX31])).tolist() == [-1, -1, -1]
    assert selector.owner(6067) is None
    assert selector.ranges() == {}


def test_duplicate_names_are_refused_where_ranges_are_by_name() -> None:
    for cls in (AutoSplitHashRangeSelector, StickySelector):
        with pytest.raises(ConsumerBusy, match="'a' is used twice"):
            cls.build([KeySharedConsumer("a", 0, ((0, 1),)), KeySharedConsumer("a", 1, ((2, 3),))])


def test_selector_for_picks_the_mapping() -> None:
    cs = consumers("a", "b")
    assert type(selector_for(KeySharedMode.AutoSplit, False, cs)) is AutoSplitHashRangeSelector
    assert type(selector_for("AUTO_SPLIT", True, cs)) is ConsistentHashingSelector
    small = selector_for(KeySharedMode.AutoSplit, False, cs, range_size=64)
    assert isinstance(small, AutoSplitHashRangeSelector) and small.range_size == 64
    sticky = [KeySharedConsumer("a", 0, ((0, 10),))]
    assert type(selector_for(KeySharedMode.Sticky, True, sticky)) is StickySelector
    assert type(selector_for(1, False, sticky)) is StickySelector


# --- STICKY -------------------------------------------------------------------------------------------


def test_sticky_seed_example() -> None:
    selector = seed_sticky()
    assert selector.owner(ORDER_MURMUR31) == "C1"  # slot 6067 lies in [0, 16383]
    assert selector.ranges() == {"C1": [(0, 16383), (32768, 49151)], "C2": [(16384, 32767), (49152, 65535)]}


def test_sticky_bounds_are_inclusive_and_uncovered_hashes_are_held_back() -> None:
    selector = StickySelector.build([KeySharedConsumer("a", 0, ((10, 20),)), KeySharedConsumer("b", 1, ((30, 30),))])
    murmurs = [9, 10, 20, 21, 29, 30, 31, 65536 + 10, 65536 + 30]
    assert [selector.owner(h) for h in murmurs] == [None, "a", "a", None, None, "b", None, "a", "b"]
    assert selector.select(15) == 0 and selector.select(25) == -1


def test_sticky_hash_zero_is_moved_to_one() -> None:
    only_zero = StickySelector.build([KeySharedConsumer("z", 0, ((0, 0),))])
    one = StickySelector.build([KeySharedConsumer("o", 0, ((1, 1),))])
    for murmur in (0, 65536, 2 * 65536):  # h % 65536 == 0 becomes 1
        assert only_zero.owner(murmur) is None
        assert one.owner(murmur) == "o"


def test_sticky_overlap_is_refused_and_nothing_changes() -> None:
    selector = StickySelector.build([KeySharedConsumer("a", 0, ((0, 100),))])
    with pytest.raises(ConsumerBusy, match=r"'b' range \[100, 200\] overlaps range \[0, 100\] of consumer 'a'"):
        selector.add(KeySharedConsumer("b", 1, ((150, 300), (100, 200))))
    assert [c.name for c in selector.consumers] == ["a"]
    assert selector.owner(150) is None and selector.owner(100) == "a"
    selector.add(KeySharedConsumer("b", 1, ((101, 200),)))  # touching, not overlapping
    assert selector.owner(101) == "b"


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ((), "declared no hash ranges"),
        (((5, 4),), r"range \[5, 4\]"),
        (((-1, 4),), r"range \[-1, 4\]"),
        (((0, 65536),), r"range \[0, 65536\]"),
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


@settings(max_examples=40, deadline=None)
@given(sticky_lists(), st.lists(st.integers(0, MAX31), min_size=1, max_size=100))
def test_sticky_owner_is_the_declaring_consumer(cs: list[KeySharedConsumer], hashes: list[int]) -> None:
    selector = StickySelector.build(cs)
    for h, owner in zip(hashes, selector.owner_of_hashes(np.array(hashes)).tolist(), strict=True):
        slot = h % HASH_RANGE_SIZE or 1
        declared = [i for i, c in enumerate(cs) if any(a <= slot <= b for a, b in c.sticky_ranges)]
        assert declared == ([owner] if owner >= 0 else [])
    assert_vector_matches_scalar(selector, hashes)
