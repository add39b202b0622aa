"""Failover: the active consumer per partition (seeds' examples) and its invariants."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import InvalidConfiguration
from broker_core.failover import FailoverConsumer, active_consumer


def same_priority(*names: str) -> list[FailoverConsumer]:
    return [FailoverConsumer(name, 0, join_order) for join_order, name in enumerate(names)]


def assignment(consumers: list[FailoverConsumer], partitions: int) -> list[str | None]:
    return [active_consumer(consumers, partition_index=p, partitioned=True) for p in range(partitions)]


def test_seed_two_partitions_four_consumers() -> None:
    consumers = same_priority("Consumer A", "Consumer B", "Consumer C", "Consumer D")
    assert assignment(consumers, 2) == ["Consumer A", "Consumer B"]
    # A and B disconnect: C takes P0 and D takes P1.
    assert assignment(consumers[2:], 2) == ["Consumer C", "Consumer D"]


def test_seed_nine_partitions_three_consumers() -> None:
    consumers = same_priority("Consumer A", "Consumer B", "Consumer C")
    assert assignment(consumers, 9) == ["Consumer A", "Consumer B", "Consumer C"] * 3


def test_seed_non_partitioned_goes_to_first_subscriber() -> None:
    consumers = same_priority("Consumer A", "Consumer B")
    assert active_consumer(consumers, partition_index=0, partitioned=False) == "Consumer A"
    assert active_consumer(consumers[1:], partition_index=0, partitioned=False) == "Consumer B"


def test_partitioned_orders_by_name_not_by_join_order() -> None:
    consumers = same_priority("c", "a", "b")
    assert assignment(consumers, 3) == ["a", "b", "c"]
    assert active_consumer(consumers, partition_index=-1, partitioned=False) == "c"


def test_lower_priority_level_wins() -> None:
    consumers = [FailoverConsumer("a", 1, 0), FailoverConsumer("b", 1, 1), FailoverConsumer("z", 0, 2)]
    assert assignment(consumers, 4) == ["z"] * 4
    assert active_consumer(consumers, partition_index=0, partitioned=False) == "z"
    more = [*consumers, FailoverConsumer("y", 0, 3)]
    assert assignment(more, 4) == ["y", "z", "y", "z"]
    assert active_consumer(more, partition_index=0, partitioned=False) == "z"


def test_no_consumer_no_active() -> None:
    assert active_consumer([], partition_index=0, partitioned=True) is None
    assert active_consumer([], partition_index=0, partitioned=False) is None


def test_validation() -> None:
    with pytest.raises(InvalidConfiguration, match="partition_index"):
        active_consumer(same_priority("a"), partition_index=-1, partitioned=True)
    with pytest.raises(InvalidConfiguration, match="priority_level"):
        FailoverConsumer("a", -1, 0)
    with pytest.raises(InvalidConfiguration, match="join_order"):
        FailoverConsumer("a", 0, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="non-empty str"):
        FailoverConsumer("", 0, 0)
    with pytest.raises(InvalidConfiguration, match="expected FailoverConsumer"):
        active_consumer(["a"], partition_index=0, partitioned=True)  # type: ignore[list-item]


@st.composite
def consumer_sets(draw: st.DrawFn) -> list[FailoverConsumer]:
    names = draw(st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    orders = draw(st.permutations(range(len(names))))
    return [
        FailoverConsumer(name, draw(st.integers(0, 2)), order)
        for name, order in zip(names, orders, strict=True)
    ]


@given(consumer_sets(), st.integers(1, 20), st.randoms())
def test_one_active_per_partition_spread_evenly_and_order_independent(
    consumers: list[FailoverConsumer], partitions: int, rnd: object
) -> None:
    best = min(c.priority_level for c in consumers)
    candidates = {c.name for c in consumers if c.priority_level == best}
    active = assignment(consumers, partitions)
    assert set(active) <= candidates
    counts = Counter(active)
    per_candidate = [counts.get(name, 0) for name in candidates]
    assert max(per_candidate) - min(per_candidate) <= 1
    shuffled = list(consumers)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert assignment(shuffled, partitions) == active
    single = active_consumer(consumers, partition_index=0, partitioned=False)
    assert single == active_consumer(shuffled, partition_index=0, partitioned=False)
    assert single == min((c for c in consumers if c.name in candidates), key=lambda c: c.join_order).name
