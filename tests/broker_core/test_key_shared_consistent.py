"""Consistent-hashing Key_Shared selector (Pulsar 4.x): points, name indexes, collisions, ranges.

Ring points are computed here with ``mmh3`` directly from the rule (``name\\0nameIndex\\0i``,
``murmur & 0x7fffffff) % 65535 + 1``), independently of the selector's own code.
"""

from __future__ import annotations

import itertools

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import InvalidConfiguration
from broker_core.subscription.key_shared import ConsistentHashingSelector, KeySharedConsumer


def point(text: str) -> int:
    return (mmh3.hash(text.encode(), 0, signed=False) & 0x7FFFFFFF) % 65535 + 1


def points_of(name: str, name_index: int, count: int) -> set[int]:
    return {point(f"{name}\0{name_index}\0{i}") for i in range(count)}


def ring(*names: str, points: int = 100) -> ConsistentHashingSelector:
    return ConsistentHashingSelector([KeySharedConsumer(n, i) for i, n in enumerate(names)], points_per_consumer=points)


def test_pulsar_worked_example_three_points_three_consumers() -> None:
    selector = ring("consumer1", "consumer2", "consumer3", points=3)
    assert selector.ranges() == {
        "consumer1": [(14359, 18366), (29991, 39817), (52980, 60442)],
        "consumer2": [(1, 6668), (39818, 52979), (60443, 63679), (65184, 65535)],
        "consumer3": [(6669, 14358), (18367, 29990), (63680, 65183)],
    }
    # a sticky hash goes to the first point at or above it, wrapping past 65183 to the lowest point
    expected = {1: "consumer2", 6668: "consumer2", 6669: "consumer3", 14359: "consumer1",
                18366: "consumer1", 65183: "consumer3", 65184: "consumer2", 65535: "consumer2"}
    assert {h: selector.consumers[selector.select(h)].name for h in expected} == expected


def test_stored_murmur_is_reduced_before_lookup() -> None:
    selector = ring("consumer1", "consumer2", "consumer3", points=3)
    # murmur 14358 -> 14358 % 65535 + 1 = 14359 (consumer1); murmur 14357 -> 14358 (consumer3)
    assert selector.owner(14358) == "consumer1"
    assert selector.owner(14357) == "consumer3"
    assert selector.owner(65534) == "consumer2"  # -> 65535, past the last point: wraps


def test_points_follow_name_and_name_index() -> None:
    selector = ring("a", "b", points=5)
    assert set(selector.points()["a"]) == points_of("a", 0, 5)
    assert set(selector.points()["b"]) == points_of("b", 0, 5)


def test_same_named_consumers_get_distinct_name_indexes() -> None:
    first, second = KeySharedConsumer("same", 0), KeySharedConsumer("same", 1)
    selector = ConsistentHashingSelector([first, second], points_per_consumer=10)
    assert selector.name_indexes == (0, 1)
    assert set(selector.points()["same"]) == points_of("same", 0, 10) | points_of("same", 1, 10)
    owners = selector.owner_of_hashes(np.arange(0, 65535, 97))
    assert set(owners.tolist()) == {0, 1}  # both instances own keys: they do not share points
    # the first leaves: the second keeps index 1; a newcomer of that name takes the free index 0
    assert selector.remove_consumer(first)
    assert selector.name_indexes == (1,)
    selector.add(KeySharedConsumer("same", 2))
    assert selector.name_indexes == (1, 0)


def test_a_consumer_that_rejoins_gets_its_points_back() -> None:
    selector = ring("a", "b", "c", points=20)
    before = selector.ranges()
    selector.remove("b")
    assert "b" not in selector.ranges()
    selector.add(KeySharedConsumer("b", 3))
    assert selector.ranges() == before


def _colliding_names() -> tuple[str, str, int]:
    """Two names whose single points collide (found with mmh3 directly, not with the selector)."""
    seen: dict[int, str] = {}
    for n in itertools.count():
        name = f"n{n}"
        p = point(f"{name}\0{0}\0{0}")
        if p in seen:
            return seen[p], name, p
        seen[p] = name
    raise AssertionError("unreachable")


def test_collision_first_arrival_keeps_the_point_and_the_next_is_promoted() -> None:
    early, late, shared = _colliding_names()
    # the later arrival joins first in list order but has the larger join_order: arrival decides
    selector = ConsistentHashingSelector(
        [KeySharedConsumer(late, 5), KeySharedConsumer(early, 2), KeySharedConsumer("zz", 9)], points_per_consumer=1
    )
    assert selector.consumers[selector.select(shared)].name == early
    assert late not in [n for n, spans in selector.ranges().items() if spans]  # it holds no point
    selector.remove(early)
    assert selector.consumers[selector.select(shared)].name == late


def test_moves_only_keys_of_the_consumer_that_comes_or_goes() -> None:
    hashes = np.arange(1, 65536, 7)
    before = ring("a", "b", "c", points=50)
    after = ring("a", "b", "c", "d", points=50)
    was = [before.consumers[i].name for i in before.select_many(hashes).tolist()]
    now = [after.consumers[i].name for i in after.select_many(hashes).tolist()]
    assert all(w == n or n == "d" for w, n in zip(was, now, strict=True))
    assert any(n == "d" for n in now)


def test_ranges_cover_1_to_65535_exactly_once() -> None:
    spans = sorted(s for found in ring("x", "y", "z").ranges().values() for s in found)
    assert spans[0][0] == 1 and spans[-1][1] == 65535
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "100"])
def test_replica_points_are_validated(bad: object) -> None:
    with pytest.raises(InvalidConfiguration, match="ReplicaPoints"):
        ConsistentHashingSelector(points_per_consumer=bad)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text("abcd", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
       st.lists(st.integers(1, 65535), min_size=1, max_size=60))
def test_owner_is_the_first_point_at_or_above_the_hash(names: list[str], hashes: list[int]) -> None:
    selector = ring(*names, points=8)
    marks: dict[int, str] = {}
    for name in names:  # arrival order: the first to mark a point keeps it
        for p in points_of(name, 0, 8):
            marks.setdefault(p, name)
    ordered = sorted(marks)
    for h, owner in zip(hashes, selector.select_many(np.array(hashes)).tolist(), strict=True):
        at = next((p for p in ordered if p >= h), ordered[0])
        assert selector.consumers[owner].name == marks[at]
