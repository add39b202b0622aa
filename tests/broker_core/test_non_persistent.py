"""Non-persistent topics: in-memory delivery inside one process, with Pulsar's four subscription types.

A non-persistent message reaches only the consumers and readers connected *in this process* when it
is sent (any ``Client`` of the same root shares the topics), is never written under the root, and is
dropped by a subscription with no consumer.  A second process naming the same topic has a topic of
its own: ``test_another_process_on_the_same_root_has_a_topic_of_its_own`` pins that down.
"""

from __future__ import annotations

import contextlib
import os
import re
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from processes import run_python

from broker_core import (
    Admin,
    AlreadyClosed,
    BrokerConfig,
    Client,
    ConsumerBatchReceivePolicy,
    ConsumerBusy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    CumulativeAcknowledgementNotAllowedError,
    InitialPosition,
    InvalidConfiguration,
    KeySharedMode,
    MessageId,
    MessageTooBig,
    NamespaceNotFound,
    OperationNotSupported,
    PartitionsRoutingMode,
    ProducerAccessMode,
    ProducerBusy,
    ProducerFenced,
    RegexSubscriptionMode,
    Result,
    StringSchema,
    SubscriptionMode,
    Timeout,
    TopicName,
    TopicNotFound,
)
from broker_core.client.non_persistent import (
    NonPersistentConsumer,
    NonPersistentProducer,
    NonPersistentReader,
)
from broker_core.hashing import range_sticky_hash, sticky_key_hash
from broker_core.non_persistent import NON_PERSISTENT_LEDGER_ID, NonPersistentTopic, registry_for
from broker_core.subscription.failover import FailoverConsumer, active_consumer
from broker_core.subscription.key_shared import AutoSplitHashRangeSelector, ConsistentHashingSelector, KeySharedConsumer

NP = "non-persistent://public/default/"
WAIT_MS = 2000  # a message that is coming arrives well within this
QUIET_MS = 300  # how long "nothing arrives" is watched for


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    c = Client(str(tmp_path))
    try:
        yield c
    finally:
        c.close()


def _stats(client: Client, topic: str) -> dict[str, Any]:
    np_topic = registry_for(client._broker.io.root_uri).get(TopicName.parse(topic))
    assert np_topic is not None
    return np_topic.stats()


def _drain(consumer: Any, *, timeout_ms: int = QUIET_MS) -> list[bytes]:
    out: list[bytes] = []
    while True:
        try:
            msg = consumer.receive(timeout_ms)
        except Timeout:
            return out
        out.append(msg.data())


def _files(root: Path) -> dict[str, int]:
    """Every path under ``root`` (walked), with file sizes (-1 for directories)."""
    found: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            found[os.path.relpath(os.path.join(dirpath, d), root)] = -1
        for f in filenames:
            path = os.path.join(dirpath, f)
            found[os.path.relpath(path, root)] = os.path.getsize(path)
    return found


# -- delivery within the process ------------------------------------------------------------------


def test_message_reaches_a_consumer_of_another_client_in_the_same_process(tmp_path: Path) -> None:
    sender, receiver = Client(str(tmp_path)), Client(tmp_path.as_uri())
    try:
        consumer = receiver.subscribe(NP + "t", "sub")
        producer = sender.create_producer(NP + "t", producer_name="p1")
        assert isinstance(producer, NonPersistentProducer) and isinstance(consumer, NonPersistentConsumer)
        msg_id = producer.send(b"hello", properties={"a": "b"}, partition_key="k", ordering_key="ok",
                               event_timestamp=1234)
        msg = consumer.receive(WAIT_MS)
        assert msg.data() == b"hello"
        assert msg.message_id() == msg_id == MessageId(partition=-1, ledger_id=NON_PERSISTENT_LEDGER_ID,
                                                       entry_id=0, batch_index=-1)
        assert msg.topic_name() == NP + "t"
        assert (msg.properties(), msg.partition_key(), msg.ordering_key()) == ({"a": "b"}, "k", "ok")
        assert (msg.producer_name(), msg.sequence_id(), msg.event_timestamp()) == ("p1", 0, 1234)
        assert msg.redelivery_count() == 0 and msg.publish_timestamp() > 0
        assert producer.send(b"again").entry_id() == 1  # entry ids count the topic's messages
        assert producer.last_sequence_id() == 1
        assert consumer.topic() == NP + "t" and producer.topic() == NP + "t"
    finally:
        sender.close()
        receiver.close()


def test_a_listener_is_pushed_the_message_during_the_send(tmp_path: Path) -> None:
    got = threading.Event()
    received: list[bytes] = []

    def listener(consumer: Any, msg: Any) -> None:
        received.append(msg.data())
        consumer.acknowledge(msg)
        got.set()

    sender, receiver = Client(str(tmp_path)), Client(str(tmp_path))
    try:
        receiver.subscribe(NP + "push", "sub", message_listener=listener)
        start = time.monotonic()
        sender.create_producer(NP + "push").send(b"x")
        assert got.wait(WAIT_MS / 1000)
        assert time.monotonic() - start < 1.0
        assert received == [b"x"]
    finally:
        sender.close()
        receiver.close()


def test_nothing_is_written_under_the_root(tmp_path: Path) -> None:
    admin = Admin.open(str(tmp_path))
    admin.create_partitioned_topic(NP + "parts", 2)  # metadata only: this is the one thing stored
    client = Client(str(tmp_path))
    before = _files(tmp_path)
    try:
        for kind in ConsumerType:
            client.subscribe(NP + "w", f"sub-{kind.name}", consumer_type=kind)
        client.subscribe(NP + "parts", "sub")
        reader = client.create_reader(NP + "w", MessageId.earliest)
        producer = client.create_producer(NP + "w", batching_enabled=True)
        parts = client.create_producer(NP + "parts")
        for i in range(50):
            producer.send(f"m{i}".encode(), partition_key=f"k{i % 5}")
            parts.send(b"p")
        producer.flush()
        assert sum(1 for _ in reader) == 50
    finally:
        client.close()
    assert _files(tmp_path) == before
    assert not any(part == "non-persistent" for path in before for part in Path(path).parts[3:])


def test_a_consumer_that_subscribes_after_the_send_gets_nothing(client: Client) -> None:
    producer = client.create_producer(NP + "late")
    producer.send(b"before anyone listened")
    consumer = client.subscribe(NP + "late", "sub", initial_position=InitialPosition.Earliest)
    reader = client.create_reader(NP + "late", MessageId.earliest)
    with pytest.raises(Timeout):
        consumer.receive(QUIET_MS)
    assert not reader.has_message_available()
    producer.send(b"after")
    assert consumer.receive(WAIT_MS).data() == b"after"
    assert reader.read_next(WAIT_MS).data() == b"after"


def test_a_subscription_whose_consumers_left_drops_messages(client: Client) -> None:
    first = client.subscribe(NP + "gone", "sub")
    producer = client.create_producer(NP + "gone")
    first.close()
    producer.send(b"lost")
    second = client.subscribe(NP + "gone", "sub")
    with pytest.raises(Timeout):
        second.receive(QUIET_MS)
    assert _stats(client, NP + "gone")["msgInCounter"] == 1


def test_every_subscription_and_every_reader_gets_the_message(client: Client) -> None:
    subs = [client.subscribe(NP + "fan", f"sub-{i}") for i in range(3)]
    readers = [client.create_reader(NP + "fan", MessageId.latest) for _ in range(2)]
    client.create_producer(NP + "fan").send(b"x")
    for consumer in subs:
        assert consumer.receive(WAIT_MS).data() == b"x"
    for reader in readers:
        assert reader.read_next(WAIT_MS).data() == b"x"


# -- the four subscription types ------------------------------------------------------------------


def test_exclusive_refuses_a_second_consumer_until_the_first_leaves(client: Client) -> None:
    first = client.subscribe(NP + "ex", "sub", consumer_type=ConsumerType.Exclusive)
    with pytest.raises(ConsumerBusy, match="exclusive"):
        client.subscribe(NP + "ex", "sub", consumer_type=ConsumerType.Exclusive)
    with pytest.raises(ConsumerBusy, match="Exclusive"):
        client.subscribe(NP + "ex", "sub", consumer_type=ConsumerType.Shared)
    producer = client.create_producer(NP + "ex")
    producer.send(b"one")
    assert first.receive(WAIT_MS).data() == b"one"
    first.close()
    second = client.subscribe(NP + "ex", "sub", consumer_type=ConsumerType.Shared)  # the type may change now
    producer.send(b"two")
    assert second.receive(WAIT_MS).data() == b"two"


def test_consumer_names_are_unique_per_subscription(client: Client) -> None:
    client.subscribe(NP + "names", "sub", consumer_type=ConsumerType.Shared, consumer_name="c")
    with pytest.raises(ConsumerBusy, match="unique"):
        client.subscribe(NP + "names", "sub", consumer_type=ConsumerType.Shared, consumer_name="c")


def test_failover_delivers_to_the_ring_pick_then_fails_over(client: Client) -> None:
    failover = ConsumerType.Failover
    names = ["z-first", "a-second"]
    pick = active_consumer([FailoverConsumer(n, 0, i) for i, n in enumerate(names)], partition_index=0,
                           partitioned=False, topic_name=NP + "fo")
    assert pick is not None
    first = client.subscribe(NP + "fo", "sub", consumer_type=failover, consumer_name=pick)
    standby = client.subscribe(NP + "fo", "sub", consumer_type=failover,
                               consumer_name=next(n for n in names if n != pick))
    producer = client.create_producer(NP + "fo")
    producer.send(b"1")
    assert first.receive(WAIT_MS).data() == b"1"
    with pytest.raises(Timeout):
        standby.receive(QUIET_MS)
    assert _stats(client, NP + "fo")["subscriptions"]["sub"]["activeConsumer"] == pick
    first.close()
    producer.send(b"2")
    assert standby.receive(WAIT_MS).data() == b"2"


def test_failover_prefers_the_highest_priority(client: Client) -> None:
    low = client.subscribe(NP + "prio", "sub", consumer_type=ConsumerType.Failover, priority_level=1)
    high = client.subscribe(NP + "prio", "sub", consumer_type=ConsumerType.Failover, priority_level=0)
    client.create_producer(NP + "prio").send(b"x")
    assert high.receive(WAIT_MS).data() == b"x"
    with pytest.raises(Timeout):
        low.receive(QUIET_MS)


def test_failover_spreads_partitions_over_consumers_by_name(tmp_path: Path) -> None:
    Admin.open(str(tmp_path)).create_partitioned_topic(NP + "fop", 4)
    client = Client(str(tmp_path))
    try:
        b = client.subscribe(NP + "fop", "sub", consumer_type=ConsumerType.Failover, consumer_name="b")
        a = client.subscribe(NP + "fop", "sub", consumer_type=ConsumerType.Failover, consumer_name="a")
        for i in range(4):
            client.create_producer(f"{NP}fop-partition-{i}").send(str(i).encode())
        # partition i goes to the i % 2-th consumer by name, whatever the join order
        assert sorted(m.message_id().partition() for m in (a.receive(WAIT_MS), a.receive(WAIT_MS))) == [0, 2]
        assert sorted(m.message_id().partition() for m in (b.receive(WAIT_MS), b.receive(WAIT_MS))) == [1, 3]
    finally:
        client.close()


def test_shared_round_robins_in_join_order(client: Client) -> None:
    consumers = [client.subscribe(NP + "rr", "sub", consumer_type=ConsumerType.Shared) for _ in range(3)]
    producer = client.create_producer(NP + "rr")
    for i in range(9):
        producer.send(str(i).encode())
    for index, consumer in enumerate(consumers):
        assert _drain(consumer) == [str(i).encode() for i in range(index, 9, 3)]


def test_shared_skips_a_full_consumer_and_prefers_higher_priority(client: Client) -> None:
    small = client.subscribe(NP + "full", "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=1)
    big = client.subscribe(NP + "full", "sub", consumer_type=ConsumerType.Shared)
    producer = client.create_producer(NP + "full")
    for i in range(4):
        producer.send(str(i).encode())
    assert _drain(small) == [b"0"]
    assert _drain(big) == [b"1", b"2", b"3"]

    first = client.subscribe(NP + "tiers", "sub", consumer_type=ConsumerType.Shared, priority_level=1)
    second = client.subscribe(NP + "tiers", "sub", consumer_type=ConsumerType.Shared, priority_level=0,
                              receiver_queue_size=2)
    producer = client.create_producer(NP + "tiers")
    for i in range(4):
        producer.send(str(i).encode())
    assert _drain(second) == [b"0", b"1"]  # the higher priority level fills first
    assert _drain(first) == [b"2", b"3"]


def _keyed(producer: Any, keys: list[str], rounds: int = 3) -> None:
    for r in range(rounds):
        for key in keys:
            producer.send(f"{key}/{r}".encode(), partition_key=key)


def _owners(consumers: dict[str, Any]) -> dict[str, str]:
    """key -> the consumer that received it (asserting each key went to one consumer, in order)."""
    owners: dict[str, str] = {}
    for name, consumer in consumers.items():
        per_key: dict[str, list[str]] = {}
        for data in _drain(consumer):
            key, r = data.decode().split("/")
            per_key.setdefault(key, []).append(r)
        for key, rounds in per_key.items():
            assert key not in owners, f"{key} went to {owners.get(key)} and {name}"
            assert rounds == sorted(rounds)
            owners[key] = name
    return owners


def test_key_shared_auto_split_sends_each_key_to_its_range_owner(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(subscription_key_shared_use_consistent_hashing=False))
    names = ["k1", "k2", "k3"]
    consumers = {n: client.subscribe(NP + "ks", "sub", consumer_type=ConsumerType.KeyShared, consumer_name=n)
                 for n in names}
    producer = client.create_producer(NP + "ks")
    keys = [f"key-{i}" for i in range(40)]
    _keyed(producer, keys)
    selector = AutoSplitHashRangeSelector([KeySharedConsumer(n, i) for i, n in enumerate(names)])
    owners = _owners(consumers)
    assert owners == {k: selector.owner(sticky_key_hash(None, k)) for k in keys}
    assert len(set(owners.values())) == 3

    consumers.pop("k2").close()  # its range merges into a neighbour's, as in Pulsar
    selector.remove("k2")
    _keyed(producer, keys, rounds=1)
    assert _owners(consumers) == {k: selector.owner(sticky_key_hash(None, k)) for k in keys}
    client.close()


def test_key_shared_sticky_ranges_and_unowned_hashes(client: Client) -> None:
    def sticky(ranges: list[tuple[int, int]], name: str) -> Any:
        policy = ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=ranges)
        return client.subscribe(NP + "sticky", "sub", consumer_type=ConsumerType.KeyShared,
                                consumer_name=name, key_shared_policy=policy)

    low = sticky([(0, 32767)], "low")
    with pytest.raises(ConsumerBusy, match="overlaps"):
        sticky([(30000, 40000)], "clash")
    producer = client.create_producer(NP + "sticky")
    keys = [f"key-{i}" for i in range(40)]
    _keyed(producer, keys, rounds=1)
    owned = [k for k in keys if range_sticky_hash(sticky_key_hash(None, k)) <= 32767]
    assert sorted(_owners({"low": low})) == sorted(owned)
    assert _stats(client, NP + "sticky")["subscriptions"]["sub"]["msgDropCount"] == len(keys) - len(owned)

    high = sticky([(32768, 65535)], "high")
    _keyed(producer, keys, rounds=1)
    assert _owners({"low": low, "high": high}) == {k: "low" if k in owned else "high" for k in keys}
    with pytest.raises(ConsumerBusy, match="mode"):
        client.subscribe(NP + "sticky", "sub", consumer_type=ConsumerType.KeyShared)


def test_key_shared_consistent_hashing_follows_the_broker_setting(tmp_path: Path) -> None:
    # the consumer's client has another configuration, yet shares the root's topics
    config = BrokerConfig(subscription_key_shared_use_consistent_hashing=True)
    ring = Client(str(tmp_path), broker_config=config)
    plain = Client(str(tmp_path), broker_config=BrokerConfig(subscription_key_shared_use_consistent_hashing=False))
    try:
        names = ["c1", "c2"]
        consumers = {
            n: ring.subscribe(NP + "ring", "sub", consumer_type=ConsumerType.KeyShared, consumer_name=n)
            for n in names
        }
        keys = [f"key-{i}" for i in range(40)]
        _keyed(plain.create_producer(NP + "ring"), keys)
        selector = ConsistentHashingSelector([KeySharedConsumer(n, i) for i, n in enumerate(names)])
        assert _owners(consumers) == {k: selector.owner(sticky_key_hash(None, k)) for k in keys}
    finally:
        ring.close()
        plain.close()


# -- receiver queues --------------------------------------------------------------------------------


def test_a_full_receiver_queue_drops_messages(client: Client) -> None:
    consumer = client.subscribe(NP + "q", "sub", receiver_queue_size=2)
    reader = client.create_reader(NP + "q", MessageId.latest, receiver_queue_size=3)
    producer = client.create_producer(NP + "q")
    for i in range(5):
        producer.send(str(i).encode())
    assert _drain(consumer) == [b"0", b"1"]
    assert [m.data() for m in reader] == [b"0", b"1", b"2"]
    stats = _stats(client, NP + "q")
    assert stats["subscriptions"]["sub"]["msgDropCount"] == 3
    assert stats["readerMsgDropCount"] == 2
    producer.send(b"5")  # room again
    assert consumer.receive(WAIT_MS).data() == b"5"


def test_batch_receive_and_a_paused_listener(client: Client) -> None:
    policy = ConsumerBatchReceivePolicy(max_num_message=3, timeout_ms=200)
    consumer = client.subscribe(NP + "batch", "sub", batch_receive_policy=policy)
    producer = client.create_producer(NP + "batch")
    for i in range(4):
        producer.send(str(i).encode())
    assert [m.data() for m in consumer.batch_receive()] == [b"0", b"1", b"2"]
    assert [m.data() for m in consumer.batch_receive()] == [b"3"]

    got: list[bytes] = []
    listening = client.subscribe(NP + "paused", "sub", message_listener=lambda c, m: got.append(m.data()))
    listening.pause_message_listener()
    client.create_producer(NP + "paused").send(b"held")
    time.sleep(0.3)
    assert got == []
    listening.resume_message_listener()
    deadline = time.monotonic() + WAIT_MS / 1000
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [b"held"]
    with pytest.raises(InvalidConfiguration, match="message_listener"):
        listening.receive(10)


# -- acknowledgments and redelivery ---------------------------------------------------------------


def test_acks_forget_and_redelivery_comes_from_the_consumers_memory(client: Client) -> None:
    consumer = client.subscribe(NP + "ack", "sub", negative_ack_redelivery_delay_ms=0)
    producer = client.create_producer(NP + "ack")
    for i in range(3):
        producer.send(str(i).encode())
    m0, m1, _ = (consumer.receive(WAIT_MS) for _ in range(3))
    consumer.acknowledge(m0)
    consumer.acknowledge(m0.message_id())  # twice, or an unknown id: accepted, nothing to do
    consumer.negative_acknowledge(m1)
    again = consumer.receive(WAIT_MS)
    assert (again.data(), again.redelivery_count(), again.message_id()) == (b"1", 1, m1.message_id())
    consumer.redeliver_unacknowledged_messages()  # m2 and the redelivered m1
    both = [consumer.receive(WAIT_MS), consumer.receive(WAIT_MS)]
    assert sorted((m.data(), m.redelivery_count()) for m in both) == [(b"1", 2), (b"2", 1)]
    with pytest.raises(InvalidConfiguration, match="Message or MessageId"):
        consumer.acknowledge("nope")  # type: ignore[arg-type]


def test_cumulative_ack_forgets_everything_up_to_the_message(client: Client) -> None:
    consumer = client.subscribe(NP + "cum", "sub", consumer_type=ConsumerType.Failover)
    producer = client.create_producer(NP + "cum")
    for i in range(4):
        producer.send(str(i).encode())
    msgs = [consumer.receive(WAIT_MS) for _ in range(4)]
    consumer.acknowledge_cumulative(msgs[2].message_id())
    consumer.redeliver_unacknowledged_messages()
    assert _drain(consumer) == [b"3"]

    shared = client.subscribe(NP + "cum", "shared", consumer_type=ConsumerType.Shared)
    producer.send(b"x")
    with pytest.raises(CumulativeAcknowledgementNotAllowedError):
        shared.acknowledge_cumulative(shared.receive(WAIT_MS))


def test_a_shared_nack_is_dispatched_again_on_the_subscription(client: Client) -> None:
    c1 = client.subscribe(NP + "nack", "sub", consumer_type=ConsumerType.Shared,
                          negative_ack_redelivery_delay_ms=0)
    c2 = client.subscribe(NP + "nack", "sub", consumer_type=ConsumerType.Shared)
    client.create_producer(NP + "nack").send(b"x")
    msg = c1.receive(WAIT_MS)
    c1.negative_acknowledge(msg)
    again = c2.receive(WAIT_MS)  # round-robin moved on to c2
    assert (again.data(), again.redelivery_count()) == (b"x", 1)


def test_ack_timeout_redelivers(client: Client) -> None:
    consumer = client.subscribe(NP + "timeout", "sub", unacked_messages_timeout_ms=1000)
    client.create_producer(NP + "timeout").send(b"x")
    first = consumer.receive(WAIT_MS)
    start = time.monotonic()
    again = consumer.receive(3000)
    assert time.monotonic() - start >= 0.8
    assert (again.data(), again.redelivery_count()) == (first.data(), 1)
    consumer.acknowledge(again)


# -- readers ----------------------------------------------------------------------------------------


def test_readers_start_at_the_next_message_and_cannot_seek(client: Client) -> None:
    producer = client.create_producer(NP + "r")
    producer.send(b"old")
    earliest = client.create_reader(NP + "r", MessageId.earliest)
    latest = client.create_reader(NP + "r", MessageId.latest, schema=StringSchema())
    assert isinstance(earliest, NonPersistentReader)
    assert not earliest.has_message_available()
    producer.send(b"new")
    assert earliest.has_message_available()
    assert earliest.read_next(WAIT_MS).data() == b"new"
    assert latest.read_next(WAIT_MS).value() == "new"
    with pytest.raises(Timeout):
        earliest.read_next(QUIET_MS)
    with pytest.raises(OperationNotSupported, match="seek"):
        earliest.seek(MessageId.earliest)
    with pytest.raises(OperationNotSupported, match="seek"):
        earliest.seek(0)
    with pytest.raises(OperationNotSupported, match=r"MessageId\.earliest or"):
        client.create_reader(NP + "r", MessageId(ledger_id=0, entry_id=0))
    assert earliest.topic() == NP + "r" and earliest.is_connected()


def test_reader_listener_and_close_wakes_a_blocked_read(client: Client) -> None:
    got = threading.Event()
    client.create_reader(NP + "rl", MessageId.latest, reader_listener=lambda r, m: got.set())
    blocked = client.create_reader(NP + "rl", MessageId.latest)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            blocked.read_next()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    time.sleep(0.1)
    blocked.close()
    thread.join(WAIT_MS / 1000)
    assert not thread.is_alive() and isinstance(errors[0], AlreadyClosed)
    client.create_producer(NP + "rl").send(b"x")
    assert got.wait(WAIT_MS / 1000)


# -- partitioned non-persistent topics -------------------------------------------------------------


def test_partitioned_topics_route_like_persistent_ones(tmp_path: Path) -> None:
    Admin.open(str(tmp_path)).create_partitioned_topic(NP + "p", 3)
    client = Client(str(tmp_path))
    try:
        names = [f"{NP}p-partition-{i}" for i in range(3)]
        assert client.get_topic_partitions(NP + "p") == names
        assert client.get_topic_partitions(NP + "flat") == [NP + "flat"]
        consumer = client.subscribe(NP + "p", "sub")
        reader = client.create_reader(NP + "p", MessageId.earliest)
        producer = client.create_producer(NP + "p")
        ids = [producer.send(b"rr") for _ in range(6)]
        assert sorted(i.partition() for i in ids) == [0, 0, 1, 1, 2, 2]
        keyed = {producer.send(b"k", partition_key="same").partition() for _ in range(5)}
        assert len(keyed) == 1
        msgs = [consumer.receive(WAIT_MS) for _ in range(11)]
        assert {m.topic_name() for m in msgs} <= set(names)
        assert all(m.topic_name() == names[m.message_id().partition()] for m in msgs)
        assert sum(1 for _ in reader) == 11
        mode = PartitionsRoutingMode.UseSinglePartition
        single = client.create_producer(NP + "p", message_routing_mode=mode)
        assert len({single.send(b"s").partition() for _ in range(5)}) == 1
        custom = client.create_producer(NP + "p", message_router=lambda msg, n: 2)
        assert custom.send(b"c").partition() == 2
    finally:
        client.close()


def test_auto_creation_off_needs_a_partitioned_topic(tmp_path: Path) -> None:
    Admin.open(str(tmp_path)).create_partitioned_topic(NP + "made", 1)
    client = Client(str(tmp_path), broker_config=BrokerConfig(allow_auto_topic_creation=False))
    auto = Client(str(tmp_path))
    try:
        with pytest.raises(TopicNotFound, match="allowAutoTopicCreation"):
            client.create_producer(NP + "unknown")
        assert client.create_producer(NP + "made").send(b"x").partition() == 0
        with pytest.raises(NamespaceNotFound):
            auto.subscribe("non-persistent://public/nowhere/t", "sub")
    finally:
        client.close()
        auto.close()


# -- producers ----------------------------------------------------------------------------------------


def test_send_async_delivers_and_calls_back_before_returning(client: Client) -> None:
    consumer = client.subscribe(NP + "async", "sub")
    producer = client.create_producer(NP + "async", batching_enabled=True,
                                      batching_max_publish_delay_ms=10_000)
    results: list[tuple[Result, MessageId | None]] = []
    producer.send_async(b"x", lambda res, msg_id: results.append((res, msg_id)))
    assert results == [(Result.Ok, MessageId(partition=-1, ledger_id=0, entry_id=0, batch_index=-1))]
    assert consumer.receive(WAIT_MS).data() == b"x"  # batching settings do not hold messages back

    def boom(res: Result, msg_id: MessageId | None) -> None:
        raise RuntimeError("callback bug")

    producer.send_async(b"y", boom)  # logged, not raised into the caller
    assert consumer.receive(WAIT_MS).data() == b"y"
    producer.send_async(b"z", None)
    producer.flush()
    assert consumer.receive(WAIT_MS).data() == b"z"


def test_producer_refusals(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=10))
    try:
        with pytest.raises(OperationNotSupported, match="chunking"):
            client.create_producer(NP + "t", chunking_enabled=True)
        producer = client.create_producer(NP + "t")
        with pytest.raises(OperationNotSupported, match="delayed delivery"):
            producer.send(b"x", deliver_after=timedelta(seconds=1))
        with pytest.raises(OperationNotSupported, match="delayed delivery"):
            producer.send(b"x", deliver_at=int(time.time() * 1000) + 1000)
        with pytest.raises(MessageTooBig, match="cannot chunk"):
            producer.send(b"x" * 11)
        with pytest.raises(TypeError):
            producer.send("text")
        with pytest.raises(InvalidConfiguration, match="partition_key"):
            producer.send(b"x", partition_key=1)  # type: ignore[arg-type]
        producer.close()
        assert not producer.is_connected()
        with pytest.raises(AlreadyClosed):
            producer.send(b"x")
    finally:
        client.close()


def test_access_modes_apply_among_the_producers_of_the_process(client: Client) -> None:
    shared = client.create_producer(NP + "am", producer_name="shared")
    with pytest.raises(ProducerBusy, match="unique"):
        client.create_producer(NP + "am", producer_name="shared")
    with pytest.raises(ProducerFenced):  # an exclusive newcomer is fenced, as by Pulsar's broker
        client.create_producer(NP + "am", access_mode=ProducerAccessMode.Exclusive)
    fencer = client.create_producer(NP + "am", producer_name="fencer",
                                    access_mode=ProducerAccessMode.ExclusiveWithFencing)
    with pytest.raises(ProducerFenced):
        shared.send(b"x")
    assert not shared.is_connected()
    with pytest.raises(ProducerBusy):
        client.create_producer(NP + "am", access_mode=ProducerAccessMode.Shared)

    waited: list[Any] = []
    wait_mode = ProducerAccessMode.WaitForExclusive
    thread = threading.Thread(target=lambda: waited.append(
        client.create_producer(NP + "am", producer_name="waiter", access_mode=wait_mode)))
    thread.start()
    time.sleep(0.2)
    assert not waited
    fencer.close()
    thread.join(WAIT_MS / 1000)
    assert waited and waited[0].producer_name() == "waiter"
    consumer = client.subscribe(NP + "am", "sub")
    waited[0].send(b"mine")
    assert consumer.receive(WAIT_MS).data() == b"mine"


# -- consumers: refusals and leaving ----------------------------------------------------------------


def test_consumer_refusals(client: Client) -> None:
    consumer = client.subscribe(NP + "c", "sub", subscription_mode=SubscriptionMode.NonDurable)
    dead_letters = ConsumerDeadLetterPolicy(3)
    for call, what in (
        (lambda: consumer.seek(MessageId.earliest), "seek"),
        (lambda: consumer.seek(0), "seek"),
        (consumer.get_last_message_id, "get_last_message_id"),
        (lambda: consumer.reconsume_later(None, 10), "reconsume_later"),  # type: ignore[arg-type]
        (lambda: client.subscribe(NP + "c", "d", dead_letter_policy=dead_letters), "dead letter"),
        (lambda: client.subscribe(NP + "c", "retry", retry_enable=True), "retry"),
        (lambda: client.subscribe([NP + "c", "persistent://public/default/c"], "mixed"), "all persistent"),
    ):
        with pytest.raises(OperationNotSupported, match=what):
            call()
    with pytest.raises(InvalidConfiguration, match="NonPersistentOnly"):
        client.subscribe(re.compile(NP + "c.*"), "pat")
    with pytest.raises(InvalidConfiguration, match="PersistentOnly"):
        client.subscribe(re.compile("persistent://public/default/c.*"), "pat",
                         regex_subscription_mode=RegexSubscriptionMode.NonPersistentOnly)


def test_unsubscribe_is_refused_while_others_are_connected(client: Client) -> None:
    a = client.subscribe(NP + "u", "sub", consumer_type=ConsumerType.Shared)
    b = client.subscribe(NP + "u", "sub", consumer_type=ConsumerType.Shared)
    with pytest.raises(ConsumerBusy, match="still connected"):
        a.unsubscribe()
    b.close()
    a.unsubscribe()
    assert not a.is_connected()
    assert "sub" not in _stats(client, NP + "u")["subscriptions"]
    with pytest.raises(AlreadyClosed):
        a.receive(10)


def test_closing_wakes_receive_and_the_client_closes_every_handle(tmp_path: Path) -> None:
    client = Client(str(tmp_path))
    consumer = client.subscribe(NP + "close", "sub")
    producer = client.create_producer(NP + "close")
    reader = client.create_reader(NP + "close", MessageId.latest)
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            consumer.receive()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    time.sleep(0.1)
    client.close()
    thread.join(WAIT_MS / 1000)
    assert not thread.is_alive() and isinstance(errors[0], AlreadyClosed)
    assert not (consumer.is_connected() or producer.is_connected() or reader.is_connected())
    assert _stats(client, NP + "close")["subscriptions"] == {}  # every consumer left


def test_a_list_of_topics_and_a_pattern_with_discovery(client: Client) -> None:
    listed = client.subscribe([NP + "l1", NP + "l2"], "sub")
    client.create_producer(NP + "l1").send(b"1")
    client.create_producer(NP + "l2").send(b"2")
    assert sorted(_drain(listed)) == [b"1", b"2"]

    early = client.create_producer(NP + "pat-a")  # a topic this process uses is discoverable
    consumer = client.subscribe(re.compile(NP + "pat-.*"), "sub",
                                regex_subscription_mode=RegexSubscriptionMode.NonPersistentOnly,
                                pattern_auto_discovery_period=1)
    early.send(b"a")
    assert consumer.receive(WAIT_MS).data() == b"a"
    later = client.create_producer(NP + "pat-b")
    deadline = time.monotonic() + 5
    got = None
    while got is None and time.monotonic() < deadline:
        later.send(b"b")  # dropped until the consumer discovers the topic
        with contextlib.suppress(Timeout):
            got = consumer.receive(100)
    assert got is not None and got.topic_name() == NP + "pat-b"


# -- across processes ------------------------------------------------------------------------------


def test_another_process_on_the_same_root_has_a_topic_of_its_own(tmp_path: Path) -> None:
    """Non-persistent topics are process-local: there is no broker to relay through and nothing is
    stored, so a message another process sends to the same topic name never arrives here (and ours
    never arrive there).  Pulsar's own non-persistent topics lose messages across a broker restart
    in the same way; use a persistent topic to talk across processes."""
    client = Client(str(tmp_path))
    try:
        consumer = client.subscribe(NP + "xproc", "sub")
        reader = client.create_reader(NP + "xproc", MessageId.latest)
        child = textwrap.dedent(f"""
            from broker_core import Client, MessageId
            client = Client({str(tmp_path)!r})
            reader = client.create_reader({NP + 'xproc'!r}, MessageId.latest)
            print(client.create_producer({NP + 'xproc'!r}).send(b'from the child').to_admin_string())
            print(reader.read_next(5000).data().decode())  # its own message, published in its process
            client.close()
        """)
        out = run_python("-c", child)
        assert out.stdout.split() == ["0:0:-1:-1", "from", "the", "child"]
        with pytest.raises(Timeout):
            consumer.receive(QUIET_MS)
        assert not reader.has_message_available()
        assert client.create_producer(NP + "xproc").send(b"ours").entry_id() == 0  # ids are per process
        assert consumer.receive(WAIT_MS).data() == b"ours"
    finally:
        client.close()


# -- the in-process "broker" ------------------------------------------------------------------------


def test_one_registry_per_root_and_only_non_persistent_topics(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, other = Client(str(tmp_path / "a")), Client(str(tmp_path / "b"))
    try:
        consumer = other.subscribe(NP + "same-name", "sub")
        one.create_producer(NP + "same-name").send(b"elsewhere")
        with pytest.raises(Timeout):
            consumer.receive(QUIET_MS)
        assert registry_for(one._broker.io.root_uri) is not registry_for(other._broker.io.root_uri)
        assert registry_for(one._broker.io.root_uri).topics() == [TopicName.parse(NP + "same-name")]
    finally:
        one.close()
        other.close()
    with pytest.raises(InvalidConfiguration, match="persistent"):
        NonPersistentTopic(TopicName.parse("persistent://public/default/x"))
