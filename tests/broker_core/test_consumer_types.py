"""Subscription types end to end: Exclusive, Failover, Shared, Key_Shared, and delayed delivery."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from consumer_helpers import crash, drain, values
from processes import child_env

from broker_core import (
    BrokerConfig,
    Client,
    Consumer,
    ConsumerBusy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    Timeout,
)
from broker_core.clock import ManualClock
from broker_core.errors import ConsumerAssignException
from broker_core.hashing import sticky_key_hash
from broker_core.subscription.failover import FailoverConsumer, active_consumer
from broker_core.subscription.key_shared import (
    ConsistentHashingSelector,
    KeySharedConsumer,
)

EPOCH_MS = 1_700_000_000_000
WAIT_MS = 10_000
QUIET_MS = 300
EARLIEST = InitialPosition.Earliest


def make_client(root: Path, *, clock: ManualClock | None = None, **config: Any) -> Client:
    return Client(str(root), broker_config=BrokerConfig(fsync_enabled=False, **config), clock=clock)


def subscribe(client: Client, kind: ConsumerType, name: str, *, topic: str = "t", sub: str = "s",
              **kwargs: Any) -> Consumer:
    kwargs.setdefault("initial_position", EARLIEST)
    return client.subscribe(topic, sub, consumer_type=kind, consumer_name=name, **kwargs)





def cursor_of(client: Client, topic: str = "t", sub: str = "s", partition: int = 0) -> Any:
    return client._broker.cursor_store(client._broker.partitions(topic)[partition], sub).load()[1]


# -- Exclusive -------------------------------------------------------------------------------------------


def test_exclusive_refuses_a_second_consumer(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    first = subscribe(client, ConsumerType.Exclusive, "one")
    with pytest.raises(ConsumerBusy):
        subscribe(client, ConsumerType.Exclusive, "two")
    with pytest.raises(ConsumerBusy):  # another type while the exclusive one is connected
        subscribe(client, ConsumerType.Shared, "three")
    other = make_client(tmp_path)
    with pytest.raises(ConsumerBusy):  # another client of the same root
        subscribe(other, ConsumerType.Exclusive, "four")
    first.close()
    second = subscribe(other, ConsumerType.Exclusive, "four")  # free again once the first left
    second.close()
    other.close()
    client.close()


def test_exclusive_keeps_order_per_partition(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    client._broker.admin.create_partitioned_topic("pt", 3)
    producer = client.create_producer("pt", batching_enabled=True, batching_max_messages=4)
    for i in range(60):
        producer.send_async(f"{i}".encode(), None, partition_key=f"k{i % 7}")
    producer.flush()
    producer.close()
    consumer = subscribe(client, ConsumerType.Exclusive, "solo", topic="pt")
    msgs = [consumer.receive(WAIT_MS) for _ in range(60)]
    by_partition: dict[int, list[int]] = defaultdict(list)
    for msg in msgs:
        by_partition[msg.message_id().partition()].append(int(msg.data()))
    assert sorted(int(m.data()) for m in msgs) == list(range(60))
    assert len(by_partition) > 1
    for seq in by_partition.values():
        assert seq == sorted(seq)
    assert drain(consumer) == []
    consumer.close()
    client.close()


# -- Failover -----------------------------------------------------------------------------------------------


def test_failover_active_consumer_per_partition_and_takeover_on_close(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    client._broker.admin.create_partitioned_topic("pt", 2)
    consumers = {name: subscribe(client, ConsumerType.Failover, name, topic="pt") for name in ("b", "a")}
    members = [FailoverConsumer("b", 0, 0), FailoverConsumer("a", 0, 1)]
    expected = {p: active_consumer(members, partition_index=p, partitioned=True) for p in (0, 1)}
    assert expected == {0: "a", 1: "b"}
    producer = client.create_producer("pt")
    for i in range(20):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    got = {name: drain(c) for name, c in consumers.items()}
    for name, msgs in got.items():
        assert {m.message_id().partition() for m in msgs} == {p for p, n in expected.items() if n == name}
        for msg in msgs[:3]:
            consumers[name].acknowledge(msg)
    assert sum(len(m) for m in got.values()) == 20
    # "a" leaves: "b" becomes active on partition 0 too, from a's acknowledged position
    unacked_of_a = sorted(values(got["a"][3:]), key=int)
    consumers["a"].close()
    for i in range(20, 24):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    producer.close()
    later = drain(consumers["b"])
    p0 = [int(m.data()) for m in later if m.message_id().partition() == 0]
    assert sorted(p0[: len(unacked_of_a)]) == [int(v) for v in unacked_of_a]
    assert p0 == sorted(p0)  # in order per partition
    assert all(int(v) >= 20 for v in values([m for m in later if m.message_id().partition() == 1]))
    consumers["b"].close()
    client.close()


def test_failover_non_partitioned_name_ring_picks_the_active(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    standby = subscribe(client, ConsumerType.Failover, "zz")
    # Pulsar 4.x: the ring of the names' murmur points, against murmur("persistent://public/default/t"),
    # picks "aa" although it joined second (test_failover.py checks the rule itself)
    first = subscribe(client, ConsumerType.Failover, "aa")
    producer = client.create_producer("t")
    for i in range(5):
        producer.send(f"{i}".encode())
    assert values(drain(first, ack=True)) == [f"{i}" for i in range(5)]
    assert drain(standby) == []
    first.close()
    producer.send(b"5")
    producer.close()
    assert values(drain(standby)) == ["5"]
    standby.close()
    client.close()


def test_failover_standby_takes_over_when_the_active_lease_expires(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, consumer_lease_ms=300)
    active = subscribe(client, ConsumerType.Failover, "second")  # the name ring's pick on topic t
    standby = subscribe(client, ConsumerType.Failover, "first")
    producer = client.create_producer("t")
    for i in range(4):
        producer.send(f"{i}".encode())
    received = [active.receive(WAIT_MS) for _ in range(4)]
    active.acknowledge(received[0])
    active._flush_acks()
    crash(active)  # stops renewing; "1".."3" were received but never acknowledged
    assert drain(standby) == []  # the lease has not run out yet (the clock did not move)
    clock.advance(1_000)
    got = [standby.receive(WAIT_MS) for _ in range(3)]
    assert values(got) == ["1", "2", "3"]
    assert "second" not in cursor_of(client).consumers
    producer.send(b"4")
    producer.close()
    assert values(drain(standby)) == ["4"]
    standby.close()
    client.close()


# -- Shared -------------------------------------------------------------------------------------------------


def test_shared_consumers_get_disjoint_messages_covering_everything(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumers = [subscribe(client, ConsumerType.Shared, f"c{i}", receiver_queue_size=4) for i in range(3)]
    producer = client.create_producer("t")
    total = 90
    for i in range(total):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    producer.close()
    got: dict[str, list[str]] = {}

    def run(consumer: Consumer) -> None:
        got[consumer.consumer_name()] = values(drain(consumer, ack=True))

    threads = [threading.Thread(target=run, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    everything = [v for vs in got.values() for v in vs]
    assert sorted(everything, key=int) == [str(i) for i in range(total)]  # each exactly once
    assert sum(1 for vs in got.values() if vs) >= 2  # small receiver queues spread the work
    for consumer in consumers:
        consumer.close()
    client.close()


def test_shared_closed_consumers_unacked_messages_go_to_the_others(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    leaving = subscribe(client, ConsumerType.Shared, "leaving")
    producer = client.create_producer("t")
    for i in range(6):
        producer.send(f"{i}".encode())
    held = [leaving.receive(WAIT_MS) for _ in range(6)]
    leaving.acknowledge(held[0])
    staying = subscribe(client, ConsumerType.Shared, "staying")
    assert drain(staying) == []  # everything is claimed by "leaving"
    leaving.close()
    again = drain(staying, ack=True)
    assert sorted(values(again)) == ["1", "2", "3", "4", "5"]
    assert {m.redelivery_count() for m in again} == {1}
    producer.send(b"6")
    producer.close()
    assert values(drain(staying)) == ["6"]
    staying.close()
    client.close()


def test_shared_expired_consumers_claims_are_redelivered(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, consumer_lease_ms=300)
    dead = subscribe(client, ConsumerType.Shared, "dead")
    producer = client.create_producer("t")
    for i in range(3):
        producer.send(f"{i}".encode())
    producer.close()
    held = [dead.receive(WAIT_MS) for _ in range(3)]
    assert sorted(values(held)) == ["0", "1", "2"]
    crash(dead)
    alive = subscribe(client, ConsumerType.Shared, "alive")
    assert drain(alive) == []
    clock.advance(1_000)
    again = [alive.receive(WAIT_MS) for _ in range(3)]
    assert sorted(values(again)) == ["0", "1", "2"]
    assert [m.redelivery_count() for m in again] == [1, 1, 1]
    alive.close()
    client.close()


_KILLED_WORKER = textwrap.dedent(
    """
    import sys
    from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition
    client = Client(sys.argv[1], broker_config=BrokerConfig(fsync_enabled=False, consumer_lease_ms=1500))
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, consumer_name="doomed",
                                initial_position=InitialPosition.Earliest)
    for _ in range(3):
        consumer.receive(10000)
    print("held", flush=True)
    sys.stdin.read()  # hold the messages unacked until killed
    """
)


def test_shared_messages_of_a_killed_process_are_redelivered(tmp_path: Path) -> None:
    client = make_client(tmp_path, consumer_lease_ms=1500)
    producer = client.create_producer("t")
    for i in range(3):
        producer.send(f"{i}".encode())
    producer.close()
    worker = subprocess.Popen([sys.executable, "-c", _KILLED_WORKER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=child_env(), text=True)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "held"
        survivor = subscribe(client, ConsumerType.Shared, "survivor")
        assert drain(survivor) == []
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    again = [survivor.receive(WAIT_MS) for _ in range(3)]  # once the dead consumer's lease ran out
    assert sorted(values(again)) == ["0", "1", "2"]
    assert {m.redelivery_count() for m in again} == {1}
    survivor.close()
    client.close()


# -- delayed delivery ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.KeyShared])
def test_delayed_delivery_strict_is_held_back_and_never_early(tmp_path: Path, kind: ConsumerType) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, is_delayed_delivery_deliver_at_time_strict=True)
    delayed = subscribe(client, kind, "delayed", sub="d")
    exclusive = subscribe(client, ConsumerType.Exclusive, "ex", sub="e")
    producer = client.create_producer("t")
    producer.send(b"later", deliver_after=timedelta(seconds=10), partition_key="k")
    producer.send(b"at", deliver_at=EPOCH_MS + 5_000, partition_key="j")
    producer.send(b"now", partition_key="k")
    producer.close()
    assert values(drain(exclusive)) == ["later", "at", "now"]  # Exclusive ignores the delay
    assert values(drain(delayed, ack=True)) == ["now"]
    clock.advance(4_999)
    assert drain(delayed) == []
    clock.advance(1)
    assert values(drain(delayed, ack=True)) == ["at"]
    clock.advance(4_999)
    assert drain(delayed) == []
    clock.advance(1)
    msg = delayed.receive(WAIT_MS)
    assert msg.data() == b"later"
    assert msg.deliver_at_timestamp() == EPOCH_MS + 10_000
    delayed.acknowledge(msg)
    for consumer in (delayed, exclusive):
        consumer.close()
    client.close()


@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.KeyShared])
def test_delayed_delivery_non_strict_is_due_one_tick_early(tmp_path: Path, kind: ConsumerType) -> None:
    """Pulsar's default: a message is due once deliverAt <= now + delayedDeliveryTickTimeMillis."""
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, delayed_delivery_tick_time_millis=1_000)
    delayed = subscribe(client, kind, "delayed", sub="d")
    producer = client.create_producer("t")
    producer.send(b"later", deliver_at=EPOCH_MS + 10_000, partition_key="k")
    producer.send(b"at", deliver_at=EPOCH_MS + 5_000, partition_key="j")
    producer.send(b"within-a-tick", deliver_at=EPOCH_MS + 1_000, partition_key="m")
    producer.close()
    assert values(drain(delayed, ack=True)) == ["within-a-tick"]  # 1000 <= 0 + 1000: not held at all
    clock.advance(3_999)  # 5000 <= 3999 + 1000 is false
    assert drain(delayed) == []
    clock.advance(1)  # 5000 <= 4000 + 1000
    assert values(drain(delayed, ack=True)) == ["at"]
    clock.advance(5_000)  # now 9000: 10000 <= 9000 + 1000
    assert values(drain(delayed, ack=True)) == ["later"]
    delayed.close()
    client.close()


def test_delayed_delivery_disabled_delivers_at_once(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, delayed_delivery_enabled=False)
    consumer = subscribe(client, ConsumerType.Shared, "c")
    producer = client.create_producer("t")
    producer.send(b"later", deliver_after=timedelta(hours=1))
    producer.close()
    assert values(drain(consumer)) == ["later"]
    consumer.close()
    client.close()


# -- Key_Shared ----------------------------------------------------------------------------------------------


def keys_split(owner_of: Any, count: int = 40) -> tuple[list[str], list[str]]:
    """Keys owned by "a" and by "b" under ``owner_of(key) -> name``, a few of each."""
    mine: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(count):
        key = f"key-{i}"
        mine[owner_of(key)].append(key)
    assert mine["a"] and mine["b"]
    return mine["a"][:3], mine["b"][:3]


def test_key_shared_join_mid_stream_keeps_per_key_order_and_single_owner(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    a = subscribe(client, ConsumerType.KeyShared, "a")
    selector = ConsistentHashingSelector([KeySharedConsumer("a", 0), KeySharedConsumer("b", 1)])  # 4.x default
    keys_a, keys_b = keys_split(lambda k: selector.owner(sticky_key_hash(None, k)))
    keys = keys_a + keys_b
    producer = client.create_producer("t")

    def send(seqs: range) -> None:
        for seq in seqs:
            for key in keys:
                producer.send(f"{key}:{seq}".encode(), partition_key=key)

    send(range(0, 3))
    first = [a.receive(WAIT_MS) for _ in range(3 * len(keys))]  # a holds everything, unacked
    b = subscribe(client, ConsumerType.KeyShared, "b")
    send(range(3, 6))
    assert drain(b) == []  # b's keys are draining: a still holds older messages of them
    second_a = drain(a)
    assert {v.split(":")[0] for v in values(second_a)} == set(keys_a)  # a keeps only its own keys
    for msg in first + second_a:
        a.acknowledge(msg)
    second_b = drain(b, ack=True)
    assert {v.split(":")[0] for v in values(second_b)} == set(keys_b)
    send(range(6, 8))
    producer.close()
    third_a, third_b = drain(a, ack=True), drain(b, ack=True)
    assert {v.split(":")[0] for v in values(third_a)} == set(keys_a)
    assert {v.split(":")[0] for v in values(third_b)} == set(keys_b)
    per_key: dict[str, list[int]] = defaultdict(list)
    for msg in first + second_a + second_b + third_a + third_b:
        key, seq = msg.data().decode().split(":")
        per_key[key].append(int(seq))
    assert per_key == {key: list(range(8)) for key in keys}  # every key complete and in order
    a.close()
    b.close()
    client.close()


def test_key_shared_each_key_on_one_consumer_at_a_time(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumers = [subscribe(client, ConsumerType.KeyShared, f"c{i}", receiver_queue_size=5) for i in range(3)]
    producer = client.create_producer("t")
    for i in range(60):
        producer.send_async(f"k{i % 6}:{i}".encode(), None, partition_key=f"k{i % 6}")
    producer.flush()
    producer.close()
    holder: dict[str, tuple[str, int]] = {}  # key -> (consumer, unacked count)
    per_key: dict[str, list[int]] = defaultdict(list)
    received = 0
    quiet_rounds = 0
    round_no = 0
    while received < 60 and quiet_rounds < 20:
        round_no += 1
        progressed = False
        for consumer in consumers:
            try:
                msg = consumer.receive(20)
            except Timeout:
                continue
            progressed = True
            received += 1
            key, seq = msg.data().decode().split(":")
            owner, count = holder.get(key, (consumer.consumer_name(), 0))
            me = consumer.consumer_name()
            assert owner == me, f"{key} is held by {owner} and {me}"
            holder[key] = (owner, count + 1)
            per_key[key].append(int(seq))
            if (round_no + received) % 3:  # ack most at once, hold some for a while
                consumer.acknowledge(msg)
                holder[key] = (owner, holder[key][1] - 1)
                if holder[key][1] == 0:
                    del holder[key]
            else:
                held = getattr(consumer, "_test_held", [])
                held.append(msg)
                consumer._test_held = held  # type: ignore[attr-defined]
        if not progressed:
            quiet_rounds += 1
            for consumer in consumers:  # release the held ones so blocked keys can move
                for msg in getattr(consumer, "_test_held", []):
                    consumer.acknowledge(msg)
                    key = msg.data().decode().split(":")[0]
                    owner, count = holder[key]
                    holder[key] = (owner, count - 1)
                    if count == 1:
                        del holder[key]
                consumer._test_held = []  # type: ignore[attr-defined]
    assert received == 60
    assert {k: v for k, v in per_key.items()} == {f"k{j}": list(range(j, 60, 6)) for j in range(6)}
    for consumer in consumers:
        consumer.close()
    client.close()


def test_key_shared_leaving_consumer_hands_its_keys_over_in_order(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    a = subscribe(client, ConsumerType.KeyShared, "a")
    b = subscribe(client, ConsumerType.KeyShared, "b")
    selector = ConsistentHashingSelector([KeySharedConsumer("a", 0), KeySharedConsumer("b", 1)])  # 4.x default
    keys_a, keys_b = keys_split(lambda k: selector.owner(sticky_key_hash(None, k)))
    producer = client.create_producer("t")
    for seq in range(3):
        for key in keys_a + keys_b:
            producer.send(f"{key}:{seq}".encode(), partition_key=key)
    held_by_b = drain(b)
    assert {v.split(":")[0] for v in values(held_by_b)} == set(keys_b)
    b.acknowledge(held_by_b[0])
    b.close()  # the rest of b's messages go back, and its keys move to a
    for seq in range(3, 5):
        for key in keys_b:
            producer.send(f"{key}:{seq}".encode(), partition_key=key)
    producer.close()
    got = drain(a, ack=True)
    per_key: dict[str, list[int]] = defaultdict(list)
    for msg in got:
        key, number = msg.data().decode().split(":")
        per_key[key].append(int(number))
    first_key, first_seq = held_by_b[0].data().decode().split(":")
    for key in keys_b:
        expected = [s for s in range(5) if (key, str(s)) != (first_key, first_seq)]
        assert per_key[key] == expected  # in order, and nothing b acknowledged
    for key in keys_a:
        assert per_key[key] == [0, 1, 2]
    redelivered = {m.data().decode() for m in got if m.redelivery_count() == 1}
    assert redelivered == set(values(held_by_b[1:]))
    a.close()
    client.close()


def test_failover_priority_level_beats_join_order(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    low = subscribe(client, ConsumerType.Failover, "low", priority_level=1)
    high = subscribe(client, ConsumerType.Failover, "high", priority_level=0)
    producer = client.create_producer("t")
    producer.send(b"x")
    producer.close()
    assert values(drain(high, ack=True)) == ["x"]
    assert drain(low) == []
    low.close()
    high.close()
    client.close()


def test_key_shared_out_of_order_delivery_does_not_wait(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    policy = ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
    a = subscribe(client, ConsumerType.KeyShared, "a", key_shared_policy=policy)
    selector = ConsistentHashingSelector([KeySharedConsumer("a", 0), KeySharedConsumer("b", 1)])  # 4.x default
    keys_a, keys_b = keys_split(lambda k: selector.owner(sticky_key_hash(None, k)))
    producer = client.create_producer("t")
    for key in keys_a + keys_b:
        producer.send(f"{key}:0".encode(), partition_key=key)
    held = drain(a)
    assert len(held) == 6
    b = subscribe(client, ConsumerType.KeyShared, "b", key_shared_policy=policy)
    for key in keys_a + keys_b:
        producer.send(f"{key}:1".encode(), partition_key=key)
    producer.close()
    assert sorted(values(drain(b))) == sorted(f"{k}:1" for k in keys_b)  # no draining wait
    a.close()
    b.close()
    client.close()


def test_key_shared_sticky_ranges(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    low = ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(0, 32767)])
    high = ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)])
    c_low = subscribe(client, ConsumerType.KeyShared, "low", key_shared_policy=low)
    c_high = subscribe(client, ConsumerType.KeyShared, "high", key_shared_policy=high)
    overlap = ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(30000, 40000)])
    with pytest.raises(ConsumerBusy):
        subscribe(client, ConsumerType.KeyShared, "overlap", key_shared_policy=overlap)
    with pytest.raises(ConsumerBusy):  # AUTO_SPLIT cannot join a STICKY subscription
        subscribe(client, ConsumerType.KeyShared, "auto")
    producer = client.create_producer("t")
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"key-{i}")
    producer.close()
    for consumer, (lo, hi) in ((c_low, (0, 32767)), (c_high, (32768, 65535))):
        msgs = drain(consumer, ack=True)
        assert msgs
        for msg in msgs:
            slot = sticky_key_hash(None, msg.partition_key()) % 65536
            assert lo <= slot <= hi
    assert "overlap" not in cursor_of(client).consumers  # the refused consumer left no trace
    c_low.close()
    c_high.close()
    client.close()


def test_key_shared_auto_split_refuses_a_consumer_when_no_range_can_split(tmp_path: Path) -> None:
    client = make_client(tmp_path, subscription_key_shared_use_consistent_hashing=False,
                         subscription_key_shared_auto_split_range_size=2)
    a, b = (subscribe(client, ConsumerType.KeyShared, name) for name in ("a", "b"))
    before = cursor_of(client)
    # rangeSize 2: a holds end key 2, b split it at 2 - 1 = 1; both ranges now have one slot
    assert before.key_shared["autoSplitEndKeys"] == [[1, "b"], [2, "a"]]
    with pytest.raises(ConsumerAssignException, match="'c' cannot join"):
        subscribe(client, ConsumerType.KeyShared, "c")
    after = cursor_of(client)
    assert set(after.consumers) == {"a", "b"} and after.key_shared == before.key_shared
    b.close()  # b's range joins a's above it
    assert cursor_of(client).key_shared["autoSplitEndKeys"] == [[2, "a"]]
    subscribe(client, ConsumerType.KeyShared, "c").close()
    a.close()
    client.close()


def test_key_shared_consistent_hashing(tmp_path: Path) -> None:
    client = make_client(tmp_path, subscription_key_shared_use_consistent_hashing=True)
    consumers = {name: subscribe(client, ConsumerType.KeyShared, name) for name in ("a", "b")}
    selector = ConsistentHashingSelector([KeySharedConsumer("a", 0), KeySharedConsumer("b", 1)])
    producer = client.create_producer("t")
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"key-{i}")
    producer.close()
    total = 0
    for name, consumer in consumers.items():
        msgs = drain(consumer, ack=True)
        total += len(msgs)
        for msg in msgs:
            assert selector.owner(sticky_key_hash(None, msg.partition_key())) == name
    assert total == 40
    assert "regions" not in cursor_of(client).key_shared
    for consumer in consumers.values():
        consumer.close()
    client.close()


def test_key_shared_consistent_hashing_replica_points_setting(tmp_path: Path) -> None:
    client = make_client(tmp_path, subscription_key_shared_use_consistent_hashing=True,
                         subscription_key_shared_consistent_hashing_replica_points=3)
    consumers = {name: subscribe(client, ConsumerType.KeyShared, name) for name in ("a", "b")}
    members = [KeySharedConsumer("a", 0), KeySharedConsumer("b", 1)]
    three = ConsistentHashingSelector(members, points_per_consumer=3)
    hundred = ConsistentHashingSelector(members)
    keys = [f"key-{i}" for i in range(40)]
    assert any(three.owner(sticky_key_hash(None, k)) != hundred.owner(sticky_key_hash(None, k)) for k in keys)
    producer = client.create_producer("t")
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    producer.close()
    for name, consumer in consumers.items():
        for msg in drain(consumer, ack=True):
            assert three.owner(sticky_key_hash(None, msg.partition_key())) == name
    for consumer in consumers.values():
        consumer.close()
    client.close()


def test_key_shared_ordering_key_wins_over_partition_key(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumers = {name: subscribe(client, ConsumerType.KeyShared, name) for name in ("a", "b")}
    producer = client.create_producer("t")
    for i in range(20):
        producer.send(f"{i}".encode(), partition_key=f"pk-{i}", ordering_key="same")
    producer.close()
    got = {name: values(drain(c, ack=True)) for name, c in consumers.items()}
    assert sorted(len(v) for v in got.values()) == [0, 20]  # one ordering key: one consumer, in order
    assert next(v for v in got.values() if v) == [str(i) for i in range(20)]
    for consumer in consumers.values():
        consumer.close()
    client.close()
