"""Failover: the active consumer per partition (seeds' examples) and its invariants, and the
redelivery counts of what a switch hands from the old active consumer to the new one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import mmh3
import pytest
from consumer_helpers import crash, drain
from hypothesis import given
from hypothesis import strategies as st

from broker_core import BrokerConfig, Client, Consumer, ConsumerType, InitialPosition
from broker_core.clock import ManualClock
from broker_core.errors import BrokerPersistenceError, InvalidConfiguration
from broker_core.subscription.failover import FailoverConsumer, active_consumer

EPOCH_MS = 1_700_000_000_000
WAIT_MS = 10_000
QUIET_MS = 300


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


def mmh31(text: str) -> int:
    return mmh3.hash(text.encode(), 0, signed=False) & 0x7FFFFFFF


def ring_reference(names: list[str], topic: str) -> str:
    """The 4.x rule written out independently: sorted names mark murmur(name + j), j < 100, a later
    name overwriting a collision; the topic goes to the first point at or above murmur(topic)."""
    ring: dict[int, str] = {}
    for name in sorted(names):
        for j in range(100):
            ring[mmh31(f"{name}{j}")] = name
    above = [p for p in sorted(ring) if p >= mmh31(topic)]
    return ring[above[0] if above else min(ring)]


def test_pulsar_worked_example_four_partitions() -> None:
    assert assignment(same_priority("1", "2"), 4) == ["1", "2", "1", "2"]
    assert assignment(same_priority("1", "2", "3"), 4) == ["1", "2", "3", "1"]


def test_non_partitioned_topic_follows_the_name_ring() -> None:
    topic = "persistent://public/default/t"
    for names in (["Consumer A", "Consumer B"], ["first", "second", "third"], ["c1", "c2", "c3"], ["solo"]):
        expected = ring_reference(names, topic)
        assert active_consumer(same_priority(*names), partition_index=0, partitioned=False,
                               topic_name=topic) == expected
    # different topics spread over the same consumers (the seeds' "multiple non-partitioned topics")
    chosen = {active_consumer(same_priority("a", "b"), partition_index=0, partitioned=False,
                              topic_name=f"persistent://public/default/t{i}") for i in range(20)}
    assert chosen == {"a", "b"}


@given(st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=5, unique=True),
       st.text("xyz/:", min_size=1, max_size=12))
def test_non_partitioned_matches_the_rule(names: list[str], topic: str) -> None:
    active = active_consumer(same_priority(*names), partition_index=0, partitioned=False, topic_name=topic)
    assert active == ring_reference(names, topic)


def test_partitioned_orders_by_name_not_by_join_order() -> None:
    consumers = same_priority("c", "a", "b")
    assert assignment(consumers, 3) == ["a", "b", "c"]


def test_lower_priority_level_wins() -> None:
    consumers = [FailoverConsumer("a", 1, 0), FailoverConsumer("b", 1, 1), FailoverConsumer("z", 0, 2)]
    assert assignment(consumers, 4) == ["z"] * 4
    assert active_consumer(consumers, partition_index=0, partitioned=False, topic_name="t") == "z"
    more = [*consumers, FailoverConsumer("y", 0, 3)]
    assert assignment(more, 4) == ["y", "z", "y", "z"]


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
    with pytest.raises(InvalidConfiguration, match="topic_name"):
        active_consumer(same_priority("a"), partition_index=0, partitioned=False, topic_name=None)  # type: ignore[arg-type]
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
    single = active_consumer(consumers, partition_index=0, partitioned=False, topic_name="t")
    assert single == active_consumer(shuffled, partition_index=0, partitioned=False, topic_name="t")
    assert single in candidates


# -- a switch hands the old active consumer's unacked messages over: one redelivery per switch ---------------


def make_client(root: Path, clock: ManualClock | None = None, **config: Any) -> Client:
    return Client(str(root), broker_config=BrokerConfig(fsync_enabled=False, **config), clock=clock)


def failover(client: Client, name: str, **kwargs: Any) -> Consumer:
    return client.subscribe("t", "s", consumer_type=ConsumerType.Failover, consumer_name=name,
                            initial_position=InitialPosition.Earliest, **kwargs)


def receive(consumer: Consumer, n: int) -> list[tuple[str, int]]:
    return [(m.data().decode(), m.redelivery_count()) for m in (consumer.receive(WAIT_MS) for _ in range(n))]




def redelivery_counts(client: Client) -> dict[int, int]:
    cursor = client._broker.cursor_store(client._broker.partitions("t")[0], "s").load()[1]
    return dict(cursor.redelivery)


def send(client: Client, *values: str) -> None:
    producer = client.create_producer("t")
    for value in values:
        producer.send(value.encode())
    producer.close()


def test_switch_on_close_counts_one_redelivery_per_switch(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    # on topic t the name ring makes "third" active, then "second" once it left, then "first"
    third, second, first = (failover(client, name) for name in ("first", "second", "third"))
    send(client, "0", "1", "2")
    assert receive(first, 3) == [("0", 0), ("1", 0), ("2", 0)]  # received, never acknowledged
    first.close()
    assert receive(second, 3) == [("0", 1), ("1", 1), ("2", 1)]
    second.close()
    assert receive(third, 3) == [("0", 2), ("1", 2), ("2", 2)]
    assert redelivery_counts(client) == {0: 2, 1: 2, 2: 2}
    third.close()
    client.close()


def test_switch_on_lease_expiry_counts_one_redelivery_per_switch(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock, consumer_lease_ms=300)
    # on topic t the name ring prefers "second" over "first", and "first" over "y"
    first, second = failover(client, "second"), failover(client, "first")
    send(client, "0", "1", "2")
    assert receive(first, 3) == [("0", 0), ("1", 0), ("2", 0)]
    crash(first)  # stops renewing, holding all three unacknowledged
    clock.advance(1_000)
    assert receive(second, 3) == [("0", 1), ("1", 1), ("2", 1)]
    # a third consumer joins only now, so that moving the clock expires nobody but the crashed one
    third = failover(client, "y")
    crash(second)
    clock.advance(1_000)
    assert receive(third, 3) == [("0", 2), ("1", 2), ("2", 2)]
    assert drain(third) == []
    third.close()
    client.close()


def test_only_the_active_consumer_asks_for_redelivery(tmp_path: Path) -> None:
    """An old active consumer that lost the subscription to a higher-priority one still holds what it
    received; its redelivery requests must not count again what the new one was handed (Pulsar ignores
    them: only the active consumer may ask for a resend)."""
    client = make_client(tmp_path)
    old = failover(client, "old", priority_level=1)
    send(client, "0", "1", "2")
    assert receive(old, 3) == [("0", 0), ("1", 0), ("2", 0)]
    new = failover(client, "new", priority_level=0)  # a smaller level is a higher priority: it takes over
    assert receive(new, 3) == [("0", 1), ("1", 1), ("2", 1)]
    old.redeliver_unacknowledged_messages()
    with old._tick_lock:  # commit the request now rather than at the old consumer's next tick
        old._commit_redeliveries()
    assert redelivery_counts(client) == {0: 1, 1: 1, 2: 1}
    assert drain(old) == []
    new.redeliver_unacknowledged_messages()
    assert sorted(receive(new, 3)) == [("0", 2), ("1", 2), ("2", 2)]
    assert drain(new) == []
    new.close()
    old.close()
    client.close()


def test_a_failed_claim_commit_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The active consumer records what it reads before delivering it; when that commit fails, the
    same messages are read again at the next round instead of being skipped."""
    client = make_client(tmp_path)
    send(client, "0", "1", "2")
    consumer = failover(client, "only", receiver_queue_size=1)  # rounds of one message
    part = consumer._parts[0]
    real = part.claim_in_order
    failures = {"left": 2}

    def flaky(offsets: list[int], *, now_ms: int) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise BrokerPersistenceError("storage hiccup")
        return real(offsets, now_ms=now_ms)

    with consumer._tick_lock:
        monkeypatch.setattr(part, "claim_in_order", flaky)
    assert receive(consumer, 3) == [("0", 0), ("1", 0), ("2", 0)]
    assert failures["left"] == 0
    consumer.close()
    client.close()
