"""Auto-split hash-range Key_Shared selector (Pulsar 4.x): end keys, split, leave, range size.

Layouts are worked out by hand from the rules: the first consumer's end key is ``rangeSize``; a
newcomer splits the largest range (lower on ties) at ``end - ((end - below) >> 1)`` and takes the
lower part; a leaver's range joins the upper neighbour, the top range goes to the lower neighbour.
"""

from __future__ import annotations

import numpy as np
import pytest

from broker_core.errors import ConsumerAssignException, ConsumerBusy, InvalidConfiguration
from broker_core.subscription.key_shared import AutoSplitHashRangeSelector, KeySharedConsumer, end_keys_from_regions


def auto(*names: str, range_size: int = 65536) -> AutoSplitHashRangeSelector:
    return AutoSplitHashRangeSelector([KeySharedConsumer(n, i) for i, n in enumerate(names)], range_size=range_size)


FOUR = ("consumer1", "consumer2", "consumer3", "consumer4")


def test_pulsar_worked_example_range_size_64() -> None:
    selector = auto(*FOUR, range_size=64)
    # consumer1: 64; consumer2: 64 - 32 = 32; consumer3: ties (32 each) -> lower: 32 - 16 = 16;
    # consumer4: the largest is (32, 64]: 64 - 16 = 48
    assert selector.end_keys == [(16, "consumer3"), (32, "consumer2"), (48, "consumer4"), (64, "consumer1")]
    assert selector.ranges() == {
        "consumer1": [(49, 64)], "consumer2": [(17, 32)], "consumer3": [(0, 16)], "consumer4": [(33, 48)],
    }


@pytest.mark.parametrize(
    ("murmur31", "owner"),
    [
        (0, "consumer3"),  # range hash 0 -> 1, slot 1
        (16, "consumer3"),  # end keys are inclusive
        (17, "consumer2"),
        (48, "consumer4"),
        (49, "consumer1"),
        (63, "consumer1"),  # slot 63 <= end key 64
        (64, "consumer3"),  # range hash 64, slot 64 % 64 = 0
        (65536 + 40, "consumer4"),  # range hash 40
        (65536, "consumer3"),  # range hash 0 -> 1
    ],
)
def test_slot_is_range_hash_modulo_range_size(murmur31: int, owner: str) -> None:
    assert auto(*FOUR, range_size=64).owner(murmur31) == owner


def test_seed_layout_with_default_range_size() -> None:
    selector = auto("C1", "C2", "C3", "C4")
    assert selector.ranges() == {
        "C1": [(49153, 65536)], "C2": [(16385, 32768)], "C3": [(0, 16384)], "C4": [(32769, 49152)],
    }
    assert selector.owner(3112179635 - 2**31) == "C3"  # the seeds' Order-3459134: slot 6067
    assert selector.owner(16384) == "C3" and selector.owner(16385) == "C2"


def test_leave_joins_the_upper_neighbour_and_the_top_goes_to_the_lower() -> None:
    middle = auto(*FOUR, range_size=64)
    assert middle.remove("consumer2")  # (16, 32] joins consumer4's range above
    assert middle.ranges() == {"consumer1": [(49, 64)], "consumer3": [(0, 16)], "consumer4": [(17, 48)]}
    top = auto(*FOUR, range_size=64)
    assert top.remove("consumer1")  # the top range: consumer4 below takes end key 64
    assert top.end_keys == [(16, "consumer3"), (32, "consumer2"), (64, "consumer4")]
    assert top.owner(63) == "consumer4"
    lowest = auto(*FOUR, range_size=64)
    assert lowest.remove("consumer3")  # [0, 16] joins consumer2: [0, 32]
    assert lowest.ranges()["consumer2"] == [(0, 32)]
    assert not lowest.remove("nobody")


def test_join_after_leaves_splits_the_largest_range() -> None:
    selector = auto(*FOUR, range_size=64)
    selector.remove("consumer2")  # consumer4 now holds (16, 48], size 32
    selector.add(KeySharedConsumer("consumer5", 9))  # 48 - (32 >> 1) = 32
    assert selector.end_keys == [(16, "consumer3"), (32, "consumer5"), (48, "consumer4"), (64, "consumer1")]


def test_more_consumers_than_slots_is_a_consumer_assign_exception() -> None:
    selector = auto("a", "b", range_size=2)  # a: 2; b: 2 - 1 = 1 -> ranges [0, 1] and [2, 2]
    assert selector.ranges() == {"a": [(2, 2)], "b": [(0, 1)]}
    with pytest.raises(ConsumerAssignException, match="'c' cannot join") as caught:
        selector.add(KeySharedConsumer("c", 2))
    assert isinstance(caught.value, ConsumerBusy)
    assert selector.end_keys == [(1, "b"), (2, "a")] and len(selector.consumers) == 2


@pytest.mark.parametrize("bad", [0, 1, 3, 6, 65535, True, "64", 2.0])
def test_range_size_must_be_a_power_of_two(bad: object) -> None:
    with pytest.raises(InvalidConfiguration, match="power of two"):
        AutoSplitHashRangeSelector(range_size=bad)  # type: ignore[arg-type]


def test_stored_layout_with_a_lapsed_consumer_holds_its_range_back() -> None:
    live = [KeySharedConsumer("consumer1", 0), KeySharedConsumer("consumer3", 2)]
    stored = [(16, "consumer3"), (32, "consumer2"), (64, "consumer1")]
    selector = AutoSplitHashRangeSelector.from_end_keys(live, stored, range_size=64)
    assert [selector.owner(h) for h in (5, 20, 40)] == ["consumer3", None, "consumer1"]


def test_legacy_regions_convert_to_end_keys() -> None:
    regions = [[32768, 65535, "a"], [0, 16383, "c"], [16384, 32767, "b"]]
    assert end_keys_from_regions(regions) == [(16384, "c"), (32768, "b"), (65536, "a")]


def test_vector_and_scalar_agree() -> None:
    selector = auto(*FOUR, range_size=64)
    hashes = list(range(0, 200))
    assert selector.owner_of_hashes(np.array(hashes)).tolist() == [selector.owner_index(h) for h in hashes]
