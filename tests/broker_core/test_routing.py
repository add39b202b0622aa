"""Partition routing: keyed messages by hash, keyless ones by the routing mode."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.clock import ManualClock
from broker_core.errors import InvalidConfiguration
from broker_core.hashing import HashingScheme, java_string_hash, murmur3_32_hash
from broker_core.producer import routing
from broker_core.producer.routing import (
    CustomRouter,
    MessageRouter,
    PartitionsRoutingMode,
    RoundRobinRouter,
    SinglePartitionRouter,
    partition_for_key,
    partitions_for_keys,
)

KEYS = st.lists(st.one_of(st.none(), st.just(""), st.text(max_size=12)), max_size=60)
SCHEMES = st.sampled_from(list(HashingScheme))


def test_routing_mode_values_match_official() -> None:
    assert PartitionsRoutingMode.UseSinglePartition == 0
    assert PartitionsRoutingMode.RoundRobinDistribution == 1
    assert PartitionsRoutingMode.CustomPartition == 2


def test_partition_for_key_is_hash_mod_n() -> None:
    assert partition_for_key("Order-3459134", 65536, HashingScheme.Murmur3_32Hash) == 6067
    assert partition_for_key("hello", 7, HashingScheme.JavaStringHash) == 99162322 % 7
    assert partition_for_key("k", 5, "Murmur3_32Hash") == murmur3_32_hash("k") % 5
    assert partition_for_key("k", 1) == 0


@given(KEYS, st.integers(1, 50), SCHEMES)
def test_partitions_for_keys_matches_per_key(
    keys: list[str | None], count: int, scheme: HashingScheme
) -> None:
    result = partitions_for_keys(pa.array(keys, type=pa.string()), count, scheme)
    assert result.dtype == np.int32
    expected = [partition_for_key(k, count, scheme) if k else -1 for k in keys]
    assert result.tolist() == expected


@given(st.lists(st.text(max_size=6), max_size=40), st.integers(1, 9), SCHEMES)
def test_choose_per_message_matches_the_hash_when_keys_repeat(keys: list[str], count: int,
                                                              scheme: HashingScheme) -> None:
    router = SinglePartitionRouter(count, scheme=scheme, partition=0)
    expected = [partition_for_key(k, count, scheme) if k else 0 for k in keys]
    assert [router.choose(k) for k in keys + keys] == expected + expected  # the second round is remembered


def test_choose_remembers_a_bounded_number_of_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routing, "KEY_CACHE_ENTRIES", 8)
    router = RoundRobinRouter(7, scheme=HashingScheme.Murmur3_32Hash)
    keys = [f"key-{i}" for i in range(30)] * 3
    assert [router.choose(k) for k in keys] == [partition_for_key(k, 7, HashingScheme.Murmur3_32Hash) for k in keys]
    assert 0 < len(router._partition_of) <= 8


def test_partitions_for_keys_chunked_and_dictionary() -> None:
    keys = ["a", None, "", "b", "a"]
    expected = [java_string_hash("a") % 3, -1, -1, java_string_hash("b") % 3, java_string_hash("a") % 3]
    chunked = pa.chunked_array([pa.array(keys[:2], pa.string()), pa.array(keys[2:], pa.string())])
    assert partitions_for_keys(chunked, 3).tolist() == expected
    assert partitions_for_keys(pa.array(keys).dictionary_encode(), 3).tolist() == expected
    assert partitions_for_keys(pa.array([None, None]), 3).tolist() == [-1, -1]


def test_keyed_distribution_is_roughly_uniform() -> None:
    keys = pa.array([f"user-{i}" for i in range(40_000)])
    for scheme in HashingScheme:
        counts = Counter(partitions_for_keys(keys, 8, scheme).tolist())
        assert sorted(counts) == list(range(8))
        assert max(counts.values()) < 1.1 * 5_000 and min(counts.values()) > 0.9 * 5_000


# --- round robin ----------------------------------------------------------------------------------


def test_round_robin_without_batching_cycles_per_message() -> None:
    router = RoundRobinRouter(4, start_index=2)
    assert router.routing_mode is PartitionsRoutingMode.RoundRobinDistribution
    assert [router.choose(None) for _ in range(6)] == [2, 3, 0, 1, 2, 3]
    assert router.choose("") == 0  # an empty key is no key
    # keyed messages do not advance the keyless counter
    assert router.choose("k") == partition_for_key("k", 4)
    assert router.choose(None) == 1


def test_round_robin_with_batching_switches_on_the_time_boundary() -> None:
    clock = ManualClock(start_ms=1_000)
    router = RoundRobinRouter(3, batching_enabled=True, partition_switch_ms=10, clock=clock, start_index=1)
    first = (1_000 // 10 + 1) % 3
    assert {router.choose(None) for _ in range(5)} == {first}
    clock.advance(9)
    assert router.choose(None) == first
    clock.advance(1)
    assert router.choose(None) == (first + 1) % 3
    clock.advance(20)
    assert router.choose(None) == first
    assert router.choose("key") == partition_for_key("key", 3)


def test_round_robin_switch_interval_is_at_least_one_ms() -> None:
    clock = ManualClock()
    router = RoundRobinRouter(5, batching_enabled=True, partition_switch_ms=0, clock=clock, start_index=0)
    assert router.partition_switch_ms == 1
    seen = []
    for _ in range(5):
        seen.append(router.choose(None))
        clock.advance(1)
    assert seen == [0, 1, 2, 3, 4]


def test_round_robin_random_start_is_in_range() -> None:
    starts = {RoundRobinRouter(3).choose(None) for _ in range(60)}
    assert starts <= {0, 1, 2} and len(starts) > 1


@given(KEYS, st.integers(1, 9), st.integers(0, 20), SCHEMES)
def test_round_robin_bulk_equals_per_message(
    keys: list[str | None], count: int, start: int, scheme: HashingScheme
) -> None:
    one_by_one = RoundRobinRouter(count, scheme=scheme, start_index=start)
    bulk = RoundRobinRouter(count, scheme=scheme, start_index=start)
    expected = [one_by_one.choose(key) for key in keys]
    assert bulk.choose_many(pa.array(keys, type=pa.string())).tolist() == expected
    # both routers' counters end in the same place
    assert bulk.choose(None) == one_by_one.choose(None)


def test_round_robin_bulk_with_batching_puts_keyless_rows_together() -> None:
    clock = ManualClock(start_ms=50)
    router = RoundRobinRouter(4, batching_enabled=True, partition_switch_ms=25, clock=clock, start_index=0)
    result = router.choose_many(pa.array([None, "k", "", None]))
    assert result.tolist() == [2, partition_for_key("k", 4), 2, 2]


# --- single partition -----------------------------------------------------------------------------


def test_single_partition_is_stable() -> None:
    router = SinglePartitionRouter(5)
    assert router.routing_mode is PartitionsRoutingMode.UseSinglePartition
    chosen = router.choose(None)
    assert 0 <= chosen < 5 and chosen == router.partition
    assert {router.choose(None) for _ in range(20)} == {chosen}
    assert set(router.choose_many(pa.array([None] * 10, type=pa.string())).tolist()) == {chosen}


@given(KEYS, st.integers(1, 9), st.data())
def test_single_partition_bulk_equals_per_message(
    keys: list[str | None], count: int, data: st.DataObject
) -> None:
    router = SinglePartitionRouter(count, partition=data.draw(st.integers(0, count - 1)), scheme=1)
    expected = [router.choose(key) for key in keys]
    assert router.choose_many(pa.array(keys, type=pa.string())).tolist() == expected


# --- custom ---------------------------------------------------------------------------------------


def test_custom_router_calls_user_code() -> None:
    calls: list[tuple[object, int]] = []

    def route(message: object, count: int) -> int:
        calls.append((message, count))
        return len(str(message)) % count

    router = CustomRouter(3, route)
    assert router.routing_mode is PartitionsRoutingMode.CustomPartition
    assert router.choose("abcd") == 1
    assert router.choose(None, message="xy") == 2
    assert router.choose_many(pa.array(["a", None])).tolist() == [1, 1]
    assert router.choose_many(pa.array(["a", "b"]), messages=["", "ab"]).tolist() == [0, 2]
    assert calls[:2] == [("abcd", 3), ("xy", 3)]


@pytest.mark.parametrize("bad", [3, -1, 1.0, "1", None, True, np.int64(7)])
def test_custom_router_rejects_bad_results(bad: object) -> None:
    router = CustomRouter(3, lambda message, count: bad)  # type: ignore[arg-type, return-value]
    with pytest.raises(InvalidConfiguration, match="custom message router returned") as info:
        router.choose("k")
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)


def test_custom_router_accepts_numpy_ints() -> None:
    assert CustomRouter(3, lambda message, count: np.int64(2)).choose(None) == 2  # type: ignore[arg-type, return-value]


def test_custom_router_bad_arguments() -> None:
    with pytest.raises(InvalidConfiguration, match="callable"):
        CustomRouter(3, 5)  # type: ignore[arg-type]
    router = CustomRouter(3, lambda message, count: 0)
    with pytest.raises(InvalidConfiguration, match="must match"):
        router.choose_many(pa.array(["a"]), messages=[1, 2])
    with pytest.raises(InvalidConfiguration, match="pyarrow Array"):
        router.choose_many(["a"])


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -3, 1.5, "2", True, None])
def test_bad_partition_counts(count: object) -> None:
    for build in (
        lambda: RoundRobinRouter(count),  # type: ignore[arg-type]
        lambda: SinglePartitionRouter(count),  # type: ignore[arg-type]
        lambda: CustomRouter(count, lambda m, n: 0),  # type: ignore[arg-type]
        lambda: partition_for_key("k", count),  # type: ignore[arg-type]
        lambda: partitions_for_keys(pa.array(["k"]), count),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidConfiguration, match="num_partitions"):
            build()


def test_other_bad_arguments() -> None:
    with pytest.raises(InvalidConfiguration, match="partition must be in"):
        SinglePartitionRouter(3, partition=3)
    with pytest.raises(InvalidConfiguration, match="partition_switch_ms"):
        RoundRobinRouter(3, partition_switch_ms=-1)
    with pytest.raises(InvalidConfiguration, match="now_ms"):
        RoundRobinRouter(3, clock=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="unknown hashing scheme"):
        RoundRobinRouter(3, scheme=9)
    with pytest.raises(InvalidConfiguration, match="message key"):
        RoundRobinRouter(3).choose(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfiguration, match="string"):
        RoundRobinRouter(3).choose_many(pa.array([1, 2]))


def test_routers_are_message_routers() -> None:
    routers: list[MessageRouter] = [
        RoundRobinRouter(2),
        SinglePartitionRouter(2),
        CustomRouter(2, lambda m, n: 1),
    ]
    assert all(router.num_partitions == 2 for router in routers)
    assert all(router.choose_many(pa.array([], type=pa.string())).tolist() == [] for router in routers)
