"""The consumer: arguments, receiving, acknowledgment, redelivery, seek, topics, modes, clients."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from async_facade import BOTH_CLIENTS, any_client
from consumer_helpers import drain, values

from broker_core import (
    AlreadyClosed,
    BrokerConfig,
    Client,
    Consumer,
    ConsumerBatchReceivePolicy,
    ConsumerBusy,
    ConsumerType,
    CumulativeAcknowledgementNotAllowedError,
    InitialPosition,
    InvalidConfiguration,
    Message,
    MessageId,
    MultiplierRedeliveryBackoff,
    StringSchema,
    SubscriptionMode,
    Timeout,
)
from broker_core.clock import ManualClock

EARLIEST = InitialPosition.Earliest
WAIT_MS = 10_000  # generous bound for a message that must arrive
QUIET_MS = 300  # how long "nothing more arrives" is watched


def make_client(root: Path, *, clock: ManualClock | None = None, **config: Any) -> Client:
    return Client(str(root), broker_config=BrokerConfig(fsync_enabled=False, **config), clock=clock)


@pytest.fixture
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Client]:
    """The sync client; tests marked ``BOTH_CLIENTS`` also run on the asyncio client."""
    with any_client(request, Client, str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False)) as c:
        yield c


def send_all(client: Client, topic: str, values: list[str], **kwargs: Any) -> list[MessageId]:
    producer = client.create_producer(topic, **kwargs)
    ids = [producer.send(v.encode()) for v in values]
    producer.close()
    return ids


def receive_n(consumer: Consumer, n: int) -> list[Message]:
    return [consumer.receive(WAIT_MS) for _ in range(n)]




def subscribe(client: Client, topic: Any = "t", sub: str = "s", **kwargs: Any) -> Consumer:
    kwargs.setdefault("initial_position", EARLIEST)
    return client.subscribe(topic, sub, **kwargs)


# -- arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consumer_type": "Shared"},
        {"consumer_type": 1},
        {"receiver_queue_size": "10"},
        {"receiver_queue_size": -1},
        {"consumer_name": 5},
        {"unacked_messages_timeout_ms": 500},
        {"unacked_messages_timeout_ms": "1000"},
        {"negative_ack_redelivery_delay_ms": -1},
        {"negative_ack_redelivery_delay_ms": 1.5},
        {"initial_position": 1},
        {"properties": {"a": 1}},
        {"pattern_auto_discovery_period": 0},
        {"batch_receive_policy": {"max_num_message": 3}},
        {"dead_letter_policy": 3},
        {"priority_level": -1},
        {"priority_level": True},
        {"retry_enable": "yes"},
        {"subscription_mode": 1},
        {"negative_ack_backoff": 1000},
        {"message_listener": "not callable"},
        {"schema": "bytes"},
        {"start_message_id_inclusive": 1},
        {"batch_index_ack_enabled": None},
    ],
)
def test_wrongly_typed_arguments_raise_value_error(client: Client, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        client.subscribe("t", "s", **kwargs)


@BOTH_CLIENTS
@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden", "sp ace", "x" * 300, 5, None])
def test_bad_subscription_names_are_refused(client: Client, name: Any) -> None:
    with pytest.raises(ValueError):
        client.subscribe("t", name)


@BOTH_CLIENTS
@pytest.mark.parametrize("topic", [5, [], ["t", 3], "persistent://public", "a/../b"])
def test_bad_topics_are_refused(client: Client, topic: Any) -> None:
    with pytest.raises(ValueError):
        client.subscribe(topic, "s")


@BOTH_CLIENTS
def test_a_failed_subscribe_leaves_no_consumer_registered(client: Client) -> None:
    with pytest.raises(ValueError):
        client.subscribe("t", "s", unacked_messages_timeout_ms=10)
    consumer = subscribe(client, "t", "s")  # nothing was left behind to block an Exclusive consumer
    consumer.close()


@BOTH_CLIENTS
def test_cumulative_ack_refused_on_shared_and_key_shared(client: Client) -> None:
    send_all(client, "t", ["a"])
    for kind, sub in ((ConsumerType.Shared, "s1"), (ConsumerType.KeyShared, "s2")):
        consumer = subscribe(client, sub=sub, consumer_type=kind)
        msg = consumer.receive(WAIT_MS)
        with pytest.raises(CumulativeAcknowledgementNotAllowedError):
            consumer.acknowledge_cumulative(msg)
        consumer.close()


def test_receive_with_a_listener_is_refused(client: Client) -> None:
    consumer = subscribe(client, message_listener=lambda c, m: None)
    with pytest.raises(InvalidConfiguration):
        consumer.receive(10)
    consumer.close()


def test_receive_timeout_must_be_an_int(client: Client) -> None:
    consumer = subscribe(client)
    with pytest.raises(ValueError):
        consumer.receive("100")  # type: ignore[arg-type]
    consumer.close()


# -- receiving ------------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_identity_accessors(client: Client) -> None:
    consumer = client.subscribe("t", "sub-x", consumer_name="me")
    assert consumer.topic() == "persistent://public/default/t"
    assert consumer.subscription_name() == "sub-x"
    assert consumer.consumer_name() == "me"
    assert consumer.is_connected()
    consumer.close()
    assert not consumer.is_connected()
    consumer.close()  # idempotent


@BOTH_CLIENTS
def test_initial_position_earliest_and_latest(client: Client) -> None:
    send_all(client, "t", ["old"])
    earliest = client.subscribe("t", "e", initial_position=InitialPosition.Earliest)
    latest = client.subscribe("t", "l")  # Latest is the default
    send_all(client, "t", ["new"])
    assert values(receive_n(earliest, 2)) == ["old", "new"]
    assert values(receive_n(latest, 1)) == ["new"]
    assert drain(latest) == []
    earliest.close()
    latest.close()


@BOTH_CLIENTS
def test_initial_position_applies_only_when_the_subscription_is_created(client: Client) -> None:
    send_all(client, "t", ["a"])
    consumer = client.subscribe("t", "s")  # Latest: "a" is skipped
    consumer.close()
    send_all(client, "t", ["b"])
    again = client.subscribe("t", "s", initial_position=InitialPosition.Earliest)  # existing cursor wins
    assert values(drain(again)) == ["b"]
    again.close()


@BOTH_CLIENTS
def test_receive_timeout_raises_when_drained(client: Client) -> None:
    consumer = subscribe(client)
    with pytest.raises(Timeout):
        consumer.receive(50)
    send_all(client, "t", ["x"])
    assert consumer.receive(WAIT_MS).data() == b"x"
    with pytest.raises(Timeout):
        consumer.receive(0)
    consumer.close()


@BOTH_CLIENTS
def test_receive_without_timeout_waits_for_a_message(client: Client) -> None:
    consumer = subscribe(client)
    got: list[Message] = []
    thread = threading.Thread(target=lambda: got.append(consumer.receive()))
    thread.start()
    send_all(client, "t", ["late"])
    thread.join(WAIT_MS / 1000)
    assert not thread.is_alive()
    assert values(got) == ["late"]
    consumer.close()


@BOTH_CLIENTS
def test_close_wakes_a_blocked_receive(client: Client) -> None:
    consumer = subscribe(client)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            consumer.receive()
        except BaseException as exc:  # recorded for the assertion
            errors.append(exc)

    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()
    consumer.close()
    thread.join(WAIT_MS / 1000)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], AlreadyClosed)
    with pytest.raises(AlreadyClosed):
        consumer.receive(10)
    with pytest.raises(AlreadyClosed):
        consumer.acknowledge(MessageId.earliest)


@BOTH_CLIENTS
def test_message_accessors_and_schema(client: Client) -> None:
    producer = client.create_producer("t", schema=StringSchema())
    producer.send("héllo", properties={"k": "v"}, partition_key="pk", event_timestamp=42)
    producer.close()
    consumer = subscribe(client, schema=StringSchema())
    msg = consumer.receive(WAIT_MS)
    assert msg.value() == "héllo"
    assert msg.properties() == {"k": "v"}
    assert msg.partition_key() == "pk"
    assert msg.event_timestamp() == 42
    assert msg.topic_name() == "persistent://public/default/t"
    assert msg.redelivery_count() == 0
    consumer.close()


def test_sent_fields_of_each_row_of_a_read(client: Client) -> None:
    """What a message was sent with and is read back only on request (D104: kept with the read's rows)
    is each row's own: ordering key, producer name, sequence id, publish and event times."""
    producer = client.create_producer("t", producer_name="p1", batching_enabled=True,
                                      batching_max_publish_delay_ms=60_000)
    started_ms = int(time.time() * 1000)
    for i in range(300):
        producer.send_async(f"m{i}".encode(), None, ordering_key=f"ok{i % 7}" if i % 3 else None,
                            event_timestamp=1000 + i if i % 2 else None)
    producer.flush()
    producer.close()
    consumer = subscribe(client)
    msgs = receive_n(consumer, 300)
    assert [m.ordering_key() for m in msgs] == [f"ok{i % 7}" if i % 3 else "" for i in range(300)]
    assert [m.event_timestamp() for m in msgs] == [1000 + i if i % 2 else 0 for i in range(300)]
    assert [m.sequence_id() for m in msgs] == list(range(300))
    assert {m.producer_name() for m in msgs} == {"p1"}
    assert all(m.publish_timestamp() >= started_ms - 1000 for m in msgs)
    assert {m.deliver_at_timestamp() for m in msgs} == {None}
    consumer.close()


# -- acknowledgment ---------------------------------------------------------------------------------------


def test_acknowledge_persists_across_a_restart(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    send_all(client, "t", [f"m{i}" for i in range(6)])
    consumer = subscribe(client)
    msgs = receive_n(consumer, 6)
    for msg in msgs[::2]:
        consumer.acknowledge(msg)
    consumer.acknowledge(msgs[3].message_id())  # by id
    consumer.close()
    client.close()

    client = make_client(tmp_path)
    consumer = subscribe(client)
    again = drain(consumer)
    assert values(again) == ["m1", "m5"]
    assert [m.redelivery_count() for m in again] == [0, 0]  # a closed Exclusive consumer held no claims
    consumer.close()
    client.close()


@BOTH_CLIENTS
def test_acknowledge_cumulative(client: Client) -> None:
    send_all(client, "t", [f"m{i}" for i in range(5)])
    consumer = subscribe(client)
    msgs = receive_n(consumer, 5)
    consumer.acknowledge_cumulative(msgs[2])
    consumer.close()
    consumer = subscribe(client)
    assert values(drain(consumer)) == ["m3", "m4"]
    consumer.acknowledge_cumulative(MessageId.latest if False else consumer.get_last_message_id())
    consumer.close()
    consumer = subscribe(client)
    assert drain(consumer) == []
    consumer.close()


@BOTH_CLIENTS
def test_batch_index_ack_redelivers_only_the_unacked_messages_of_a_batch(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
    for i in range(4):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    producer.close()
    consumer = subscribe(client)
    msgs = receive_n(consumer, 4)
    ids = [m.message_id() for m in msgs]
    assert len({i.entry_id() for i in ids}) == 1  # one entry
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3]
    consumer.acknowledge(msgs[1])
    consumer.acknowledge(msgs[3])
    consumer.close()
    consumer = subscribe(client)
    assert values(drain(consumer)) == ["b0", "b2"]
    consumer.close()


@BOTH_CLIENTS
def test_negative_acknowledge_redelivers_with_a_growing_redelivery_count(client: Client) -> None:
    send_all(client, "t", ["a", "b"])
    consumer = subscribe(client, negative_ack_redelivery_delay_ms=0)
    first = consumer.receive(WAIT_MS)
    assert (first.data(), first.redelivery_count()) == (b"a", 0)
    consumer.negative_acknowledge(first)
    seen = []
    for _ in range(3):
        msg = consumer.receive(WAIT_MS)
        seen.append((msg.data(), msg.redelivery_count()))
        if msg.data() == b"a" and msg.redelivery_count() < 2:
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
    assert sorted(seen) == [(b"a", 1), (b"a", 2), (b"b", 0)]
    assert drain(consumer) == []  # no duplicates of messages still in the receiver queue
    consumer.close()


@pytest.mark.parametrize("kind", [ConsumerType.Exclusive, ConsumerType.Failover])
def test_nack_delay_holds_while_an_earlier_message_rewinds_the_read(
    client: Client, kind: ConsumerType
) -> None:
    send_all(client, "t", ["m0", "m1"])
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=1, max_delay_ms=3_600_000, multiplier=1e9)
    consumer = subscribe(client, consumer_type=kind, negative_ack_backoff=backoff)
    m0, m1 = receive_n(consumer, 2)
    consumer.negative_acknowledge(m1)  # count 0: back after 1 ms
    again = consumer.receive(WAIT_MS)
    assert (again.data(), again.redelivery_count()) == (b"m1", 1)
    consumer.negative_acknowledge(again)  # count 1: back after an hour
    consumer.negative_acknowledge(m0)  # count 0: back after 1 ms, rewinding the in-order read to m0
    back = consumer.receive(WAIT_MS)
    assert (back.data(), back.redelivery_count()) == (b"m0", 1)
    assert drain(consumer) == []  # m1 is not delivered before its own delay
    consumer.close()


@BOTH_CLIENTS
@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.KeyShared, ConsumerType.Failover])
def test_negative_acknowledge_other_types(client: Client, kind: ConsumerType) -> None:
    send_all(client, "t", ["a", "b", "c"])
    consumer = subscribe(client, consumer_type=kind, negative_ack_redelivery_delay_ms=10)
    msgs = receive_n(consumer, 3)
    consumer.negative_acknowledge(msgs[1].message_id())  # by id
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    again = consumer.receive(WAIT_MS)
    assert (again.data(), again.redelivery_count()) == (b"b", 1)
    consumer.acknowledge(again)
    assert drain(consumer) == []
    consumer.close()


_BACKOFF_CALLS: list[int] = []


class RecordingBackoff(MultiplierRedeliveryBackoff):
    def next_delay_ms(self, redelivery_count: int) -> int:
        _BACKOFF_CALLS.append(redelivery_count)
        return super().next_delay_ms(redelivery_count)


def test_negative_ack_backoff_is_asked_with_the_redelivery_count(client: Client) -> None:
    _BACKOFF_CALLS.clear()
    send_all(client, "t", ["a"])
    backoff = RecordingBackoff(min_delay_ms=1, max_delay_ms=20, multiplier=2.0)
    consumer = subscribe(client, consumer_type=ConsumerType.Shared, negative_ack_backoff=backoff,
                         negative_ack_redelivery_delay_ms=3_600_000)  # the backoff wins over the fixed delay
    counts = []
    for _ in range(3):
        msg = consumer.receive(WAIT_MS)
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    assert _BACKOFF_CALLS == [0, 1, 2]
    consumer.close()


@BOTH_CLIENTS
@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.Exclusive])
def test_ack_timeout_redelivers_unacknowledged_messages(client: Client, kind: ConsumerType) -> None:
    send_all(client, "t", ["a", "b"])
    consumer = subscribe(client, consumer_type=kind, unacked_messages_timeout_ms=1000)
    a, _ = receive_n(consumer, 2)
    consumer.acknowledge(a)
    again = consumer.receive(WAIT_MS)  # b comes back after the ack timeout
    assert (again.data(), again.redelivery_count()) == (b"b", 1)
    consumer.acknowledge(again)
    assert drain(consumer) == []
    consumer.close()


def test_ack_timeout_covers_batch_received_messages_until_acknowledged(client: Client) -> None:
    """``batch_receive`` takes a run of messages at once: each still gets its ack-timeout deadline, and
    an acknowledgment (single or cumulative) ends it."""
    send_all(client, "t", ["a", "b", "c", "d"])
    consumer = subscribe(client, unacked_messages_timeout_ms=1000,
                         batch_receive_policy=ConsumerBatchReceivePolicy(4, -1, WAIT_MS))
    batch = consumer.batch_receive()
    assert values(batch) == ["a", "b", "c", "d"]
    consumer.acknowledge_cumulative(batch[1])
    consumer.acknowledge(batch[3])
    again = consumer.receive(WAIT_MS)  # c alone comes back after the ack timeout
    assert (again.data(), again.redelivery_count()) == (b"c", 1)
    consumer.acknowledge(again)
    assert drain(consumer) == []
    consumer.close()


@BOTH_CLIENTS
def test_redeliver_unacknowledged_messages(client: Client) -> None:
    send_all(client, "t", ["a", "b", "c"])
    for kind, sub in ((ConsumerType.Exclusive, "ex"), (ConsumerType.Shared, "sh")):
        consumer = subscribe(client, sub=sub, consumer_type=kind)
        msgs = receive_n(consumer, 3)
        consumer.acknowledge(msgs[1])
        consumer.redeliver_unacknowledged_messages()
        again = drain(consumer, ack=True)
        assert sorted(values(again)) == ["a", "c"], kind
        assert {m.redelivery_count() for m in again} == {1}
        consumer.close()


@BOTH_CLIENTS
def test_cumulative_ack_forgets_only_what_it_covers(client: Client) -> None:
    """A cumulative ack of a message in the middle of what the consumer holds leaves the later ones
    unacknowledged (redelivered); one of the last message held forgets them all."""
    send_all(client, "t", [f"m{i}" for i in range(6)])
    consumer = subscribe(client)
    msgs = receive_n(consumer, 6)
    consumer.acknowledge_cumulative(msgs[2])
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 3)
    assert values(again) == ["m3", "m4", "m5"]
    assert [m.redelivery_count() for m in again] == [1, 1, 1]
    consumer.acknowledge_cumulative(again[-1])
    consumer.redeliver_unacknowledged_messages()
    assert drain(consumer) == []
    consumer.close()


def _fill_partitioned(client: Client, topic: str, *, partitions: int, count: int) -> None:
    """A partitioned topic holding messages ``m0``.. ``m{count-1}``, each with its own partition key."""
    client._broker.admin.create_partitioned_topic(topic, partitions)
    producer = client.create_producer(topic)
    for i in range(count):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    producer.close()


def test_cumulative_ack_on_a_partitioned_topic_covers_only_its_partition(client: Client) -> None:
    """The consumer keys what it holds by partition and offset together: a cumulative ack forgets
    the messages of its own partition up to it, and none of another partition's (even at lower offsets)."""
    _fill_partitioned(client, "pc", partitions=3, count=12)
    consumer = subscribe(client, "pc")
    by_partition: dict[int, list[Message]] = {}
    for msg in receive_n(consumer, 12):
        by_partition.setdefault(msg.message_id().partition(), []).append(msg)
    # the highest partition holding two or more, below which another holds some (keys route deterministically)
    partition = max(p for p, msgs in by_partition.items() if len(msgs) >= 2)
    assert min(by_partition) < partition
    held = by_partition[partition]
    consumer.acknowledge_cumulative(held[1])
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 10)
    assert sorted(values(again)) == sorted(f"m{i}" for i in range(12) if f"m{i}" not in values(held[:2]))
    for msg in again:
        consumer.acknowledge(msg)
    assert drain(consumer) == []
    consumer.close()


# -- seek ----------------------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_seek_by_message_id_is_exclusive_by_default(client: Client) -> None:
    ids = send_all(client, "t", ["m0", "m1", "m2", "m3"])
    consumer = subscribe(client)
    for msg in receive_n(consumer, 4):
        consumer.acknowledge(msg)
    consumer.seek(ids[1])
    assert values(drain(consumer)) == ["m2", "m3"]
    consumer.seek(MessageId.earliest)
    assert values(drain(consumer)) == ["m0", "m1", "m2", "m3"]
    consumer.close()


@BOTH_CLIENTS
def test_seek_by_message_id_inclusive(client: Client) -> None:
    ids = send_all(client, "t", ["m0", "m1", "m2"])
    consumer = subscribe(client, start_message_id_inclusive=True)
    receive_n(consumer, 3)
    consumer.seek(ids[1])
    assert values(drain(consumer)) == ["m1", "m2"]
    consumer.close()


@BOTH_CLIENTS
def test_seek_moves_the_durable_cursor_backwards_and_forwards(client: Client) -> None:
    ids = send_all(client, "t", ["m0", "m1", "m2", "m3"])
    consumer = subscribe(client)
    consumer.seek(ids[2])
    consumer.close()
    consumer = subscribe(client)
    assert values(drain(consumer)) == ["m3"]  # the seek was persisted
    consumer.seek(MessageId.latest)
    assert drain(consumer) == []
    consumer.close()


def test_seek_on_a_multi_topic_consumer_moves_only_the_ids_topic(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    client = make_client(tmp_path, clock=clock)
    ids1 = send_all(client, "t1", ["a0", "a1", "a2"])
    clock.advance(5)  # a distinct ledger id (creation time) for the second topic
    ids2 = send_all(client, "t2", ["b0", "b1", "b2"])
    assert ids1[0].ledger_id() != ids2[0].ledger_id()
    consumer = subscribe(client, ["t1", "t2"])
    for msg in receive_n(consumer, 6):
        consumer.acknowledge(msg)
    consumer.seek(ids1[0])
    assert values(drain(consumer, ack=True)) == ["a1", "a2"]
    consumer.seek(ids2[1])
    assert values(drain(consumer, ack=True)) == ["b2"]
    consumer.seek(MessageId.earliest)  # earliest and latest move every topic
    assert sorted(values(drain(consumer))) == ["a0", "a1", "a2", "b0", "b1", "b2"]
    consumer.close()
    client.close()


def test_seek_while_messages_are_being_dispatched(client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, block_if_queue_full=True)
    for i in range(1500):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    producer.close()
    for kind, sub in ((ConsumerType.Exclusive, "ex"), (ConsumerType.Shared, "sh")):
        consumer = subscribe(client, sub=sub, consumer_type=kind, receiver_queue_size=50)
        for round_no in range(15):
            for _ in range(round_no % 4):
                consumer.receive(WAIT_MS)
            consumer.seek(MessageId.earliest)
            assert consumer.receive(WAIT_MS).data() == b"m0", (kind, round_no)
        consumer.close()


def test_seek_by_timestamp_is_inclusive(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    client = make_client(tmp_path, clock=clock)
    producer = client.create_producer("t")
    producer.send(b"a")
    clock.advance(10)
    producer.send(b"b")
    producer.send(b"c")
    clock.advance(10)
    producer.send(b"d")
    producer.close()
    consumer = subscribe(client)
    receive_n(consumer, 4)
    consumer.seek(1_700_000_000_010)
    assert values(drain(consumer)) == ["b", "c", "d"]
    consumer.seek(1_700_000_000_011)
    assert values(drain(consumer)) == ["d"]
    consumer.seek(0)
    assert values(drain(consumer)) == ["a", "b", "c", "d"]
    with pytest.raises(ValueError):
        consumer.seek("yesterday")  # type: ignore[arg-type]
    consumer.close()
    client.close()


# -- unsubscribe ---------------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_unsubscribe_refused_while_another_consumer_is_connected(client: Client) -> None:
    send_all(client, "t", ["a"])
    c1 = subscribe(client, consumer_type=ConsumerType.Shared)
    c2 = subscribe(client, consumer_type=ConsumerType.Shared)
    with pytest.raises(ConsumerBusy):
        c1.unsubscribe()
    c2.close()
    c1.unsubscribe()
    assert not c1.is_connected()
    with pytest.raises(AlreadyClosed):
        c1.receive(10)
    # the subscription is gone: a new one starts at its initial position again
    send_all(client, "t", ["b"])
    fresh = client.subscribe("t", "s", consumer_type=ConsumerType.Shared)  # Latest
    assert drain(fresh) == []
    fresh.close()
    fresh = subscribe(client, sub="s2")
    assert values(drain(fresh)) == ["a", "b"]
    fresh.close()


@BOTH_CLIENTS
def test_unsubscribe_removes_the_cursor(client: Client) -> None:
    consumer = subscribe(client)
    consumer.unsubscribe()
    store = client._broker.cursor_store(client._broker.partitions("t")[0], "s")
    assert store.load()[1] is None


# -- batch receive and listeners -----------------------------------------------------------------------------


def test_batch_receive_respects_the_policy(client: Client) -> None:
    send_all(client, "t", [f"m{i}" for i in range(7)])
    policy = ConsumerBatchReceivePolicy(max_num_message=3, max_num_bytes=-1, timeout_ms=5_000)
    consumer = subscribe(client, batch_receive_policy=policy)
    got: list[Message] = []
    while len(got) < 6:
        batch = consumer.batch_receive()
        assert 1 <= len(batch) <= 3
        got.extend(batch)
    assert values(got) == [f"m{i}" for i in range(len(got))]
    consumer.close()


def test_batch_receive_byte_limit_and_timeout(client: Client) -> None:
    send_all(client, "t", ["aaaa", "bbbb", "cc", "dddddddddd"])
    policy = ConsumerBatchReceivePolicy(max_num_message=-1, max_num_bytes=6, timeout_ms=5_000)
    consumer = subscribe(client, batch_receive_policy=policy)
    receive_all = [consumer.batch_receive() for _ in range(3)]
    # never over the byte limit, except a first message that is bigger on its own
    assert [values(b) for b in receive_all] == [["aaaa"], ["bbbb", "cc"], ["dddddddddd"]]
    quick = subscribe(client, sub="empty", initial_position=InitialPosition.Latest,
                      batch_receive_policy=ConsumerBatchReceivePolicy(10, -1, 50))
    assert quick.batch_receive() == []  # the timeout ends an empty batch
    quick.close()
    consumer.close()


def test_batch_receive_without_timeout_waits_for_a_full_batch(client: Client) -> None:
    consumer = subscribe(client, batch_receive_policy=ConsumerBatchReceivePolicy(3, -1, -1))
    got: list[list[Message]] = []
    thread = threading.Thread(target=lambda: got.append(consumer.batch_receive()))
    thread.start()
    producer = client.create_producer("t")
    producer.send(b"1")
    producer.send(b"2")
    thread.join(QUIET_MS / 1000)
    assert thread.is_alive()  # two messages do not make a batch of three, and there is no timeout
    producer.send(b"3")
    producer.close()
    thread.join(WAIT_MS / 1000)
    assert not thread.is_alive()
    assert [values(b) for b in got] == [["1", "2", "3"]]
    consumer.close()


def test_batch_receive_policy_needs_a_limit() -> None:
    with pytest.raises(ValueError):
        ConsumerBatchReceivePolicy(-1, -1, -1)
    with pytest.raises(ValueError):
        ConsumerBatchReceivePolicy("3", 10, 10)  # type: ignore[arg-type]


def test_message_listener_gets_every_message(client: Client) -> None:
    got: list[str] = []
    done = threading.Event()

    def listener(consumer: Consumer, msg: Message) -> None:
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
        if len(got) == 5:
            done.set()

    consumer = subscribe(client, message_listener=listener)
    send_all(client, "t", [f"m{i}" for i in range(5)])
    assert done.wait(WAIT_MS / 1000)
    assert got == [f"m{i}" for i in range(5)]
    consumer.close()
    consumer = subscribe(client)
    assert drain(consumer) == []  # the listener's acks were flushed on close
    consumer.close()


def test_a_failing_listener_does_not_stop_the_consumer(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[str] = []
    done = threading.Event()

    def listener(consumer: Consumer, msg: Message) -> None:
        got.append(msg.data().decode())
        if msg.data() == b"boom":
            raise RuntimeError("listener bug")
        consumer.acknowledge(msg)
        done.set()

    consumer = subscribe(client, message_listener=listener)
    send_all(client, "t", ["boom", "fine"])
    assert done.wait(WAIT_MS / 1000)
    assert got == ["boom", "fine"]
    assert "listener bug" in caplog.text
    consumer.close()


def test_pause_and_resume_message_listener(client: Client) -> None:
    got: list[str] = []
    first = threading.Event()
    done = threading.Event()

    def listener(consumer: Consumer, msg: Message) -> None:
        got.append(msg.data().decode())
        first.set()
        if len(got) == 2:
            done.set()

    consumer = subscribe(client, message_listener=listener)
    consumer.pause_message_listener()
    send_all(client, "t", ["a", "b"])
    assert not first.wait(QUIET_MS / 1000)
    consumer.resume_message_listener()
    assert done.wait(WAIT_MS / 1000)
    assert got == ["a", "b"]
    consumer.close()


# -- several topics ------------------------------------------------------------------------------------------


@BOTH_CLIENTS
def test_multi_topic_subscription(client: Client) -> None:
    send_all(client, "t1", ["a1", "a2"])
    send_all(client, "t2", ["b1"])
    consumer = subscribe(client, ["t1", "t2"])
    msgs = receive_n(consumer, 3)
    assert sorted(values(msgs)) == ["a1", "a2", "b1"]
    by_topic = {m.data().decode(): m.topic_name() for m in msgs}
    assert by_topic["b1"] == "persistent://public/default/t2"
    for msg in msgs:
        consumer.acknowledge(msg)
    consumer.close()
    consumer = subscribe(client, ["t1", "t2"])
    assert drain(consumer) == []
    consumer.close()


@BOTH_CLIENTS
def test_partitioned_topic_subscription(client: Client) -> None:
    _fill_partitioned(client, "pt", partitions=3, count=9)
    consumer = subscribe(client, "pt")
    msgs = receive_n(consumer, 9)
    assert sorted(values(msgs)) == sorted(f"m{i}" for i in range(9))
    assert {m.message_id().partition() for m in msgs} <= {0, 1, 2}
    for msg in msgs:
        consumer.acknowledge(msg)
    assert drain(consumer) == []
    consumer.close()


@BOTH_CLIENTS
def test_regex_subscription_picks_up_a_topic_created_later(client: Client) -> None:
    send_all(client, "orders-1", ["o1"])
    send_all(client, "other", ["x"])
    consumer = subscribe(client, re.compile("persistent://public/default/orders-.*"),
                         pattern_auto_discovery_period=1)
    assert values(receive_n(consumer, 1)) == ["o1"]
    send_all(client, "orders-2", ["o2"])
    assert values(receive_n(consumer, 1)) == ["o2"]  # found by the next discovery round
    assert drain(consumer) == []
    consumer.close()


def test_regex_pattern_short_forms_are_in_public_default_or_the_named_namespace(client: Client) -> None:
    """As the official client reads short topic names: '<regex>' and 'tenant/namespace/<regex>'."""
    send_all(client, "orders-eu", ["eu"])
    send_all(client, "audit", ["audit"])
    for pattern, sub in ((re.compile("orders-.*"), "a"), (re.compile("public/default/orders-.*"), "b")):
        consumer = client.subscribe(pattern, sub, initial_position=EARLIEST)
        assert values(drain(consumer)) == ["eu"]
        consumer.close()


def test_regex_pattern_needs_a_namespace(client: Client) -> None:
    with pytest.raises(ValueError, match="must name its namespace"):
        client.subscribe(re.compile("default/orders-.*"), "s")


# -- subscription modes --------------------------------------------------------------------------------------


def cursor_dir(root: Path, topic: str = "t") -> Path:
    return root / "public" / "default" / "persistent" / topic / "_cursors"


def test_durable_subscription_writes_cursor_files(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    send_all(client, "t", ["a"])
    consumer = subscribe(client)
    consumer.acknowledge(consumer.receive(WAIT_MS))
    consumer.close()
    files = sorted((cursor_dir(tmp_path) / "s").glob("*.json"))
    assert files, list(tmp_path.rglob("*"))
    assert all(re.fullmatch(r"\d{20}\.json", f.name) for f in files)
    newest = json.loads(files[-1].read_text())
    assert newest["markDelete"] == 1  # the acknowledgment is on storage
    assert newest["consumers"] == {}  # and the closed consumer left
    assert newest["type"] == "Exclusive"
    client.close()


def test_non_durable_subscription_keeps_no_cursor_on_storage(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    send_all(client, "t", ["a", "b"])
    consumer = subscribe(client, subscription_mode=SubscriptionMode.NonDurable)
    first = consumer.receive(WAIT_MS)
    consumer.acknowledge(first)
    assert values([consumer.receive(WAIT_MS)]) == ["b"]
    consumer.close()
    assert not (cursor_dir(tmp_path) / "s").exists()
    # nothing was remembered: a new non-durable consumer starts from its initial position again
    consumer = subscribe(client, subscription_mode=SubscriptionMode.NonDurable)
    assert values(drain(consumer)) == ["a", "b"]
    consumer.close()
    client.close()


# -- chunking and several clients ----------------------------------------------------------------------------


def test_chunked_messages_arrive_whole(tmp_path: Path) -> None:
    client = make_client(tmp_path, max_message_size=1024)
    big = bytes(range(256)) * 20  # 5120 bytes: 5 chunks
    producer = client.create_producer("t", chunking_enabled=True)
    producer.send(b"small")
    producer.send(big)
    producer.send(b"tail")
    producer.close()
    for kind, sub in ((ConsumerType.Exclusive, "ex"), (ConsumerType.Shared, "sh")):
        consumer = subscribe(client, sub=sub, consumer_type=kind)
        msgs = receive_n(consumer, 3)
        assert [m.data() for m in msgs] == [b"small", big, b"tail"]
        consumer.acknowledge(msgs[1])
        consumer.acknowledge(msgs[0])
        consumer.close()
        consumer = subscribe(client, sub=sub, consumer_type=kind)
        assert [m.data() for m in drain(consumer)] == [b"tail"]  # the whole chunked message was acked
        consumer.close()
    client.close()


def test_chunked_message_nack_redelivers_it_whole(tmp_path: Path) -> None:
    client = make_client(tmp_path, max_message_size=100)
    big = b"x" * 350
    producer = client.create_producer("t", chunking_enabled=True)
    producer.send(big)
    producer.close()
    consumer = subscribe(client, consumer_type=ConsumerType.Shared, negative_ack_redelivery_delay_ms=0)
    msg = consumer.receive(WAIT_MS)
    consumer.negative_acknowledge(msg)
    again = consumer.receive(WAIT_MS)
    assert again.data() == big and again.redelivery_count() == 1
    consumer.acknowledge(again)
    assert drain(consumer) == []
    consumer.close()
    client.close()


def test_chunked_message_read_again_after_a_rewind_is_not_corrupted(tmp_path: Path) -> None:
    client = make_client(tmp_path, max_message_size=100)
    big = bytes(range(256)) * 8  # 21 chunks
    send_all(client, "t", ["m0"])
    producer = client.create_producer("t", chunking_enabled=True)
    producer.send(big)
    producer.close()
    send_all(client, "t", ["tail"])
    # a tiny receiver queue reads the chunks over several rounds; the nack rewinds the read meanwhile
    consumer = subscribe(client, receiver_queue_size=2, negative_ack_redelivery_delay_ms=0)
    consumer.negative_acknowledge(consumer.receive(WAIT_MS))
    got = drain(consumer, ack=True)
    assert sorted(m.data() for m in got) == sorted([b"m0", big, b"tail"])
    consumer.close()
    client.close()


def test_consumers_in_two_clients_of_one_process(tmp_path: Path) -> None:
    one = make_client(tmp_path)
    two = make_client(tmp_path)
    c1 = subscribe(one, consumer_type=ConsumerType.Shared, consumer_name="c1")
    c2 = subscribe(two, consumer_type=ConsumerType.Shared, consumer_name="c2")
    exclusive = subscribe(two, sub="solo")
    send_all(one, "t", [f"m{i}" for i in range(20)])
    assert values(receive_n(exclusive, 20)) == [f"m{i}" for i in range(20)]  # pushed to the other client
    got = drain(c1, ack=True) + drain(c2, ack=True)
    assert sorted(values(got)) == sorted(f"m{i}" for i in range(20))
    for handle in (c1, c2, exclusive):
        handle.close()
    one.close()
    two.close()


def test_client_close_closes_its_consumers(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumer = subscribe(client)
    client.close()
    assert not consumer.is_connected()
    other = make_client(tmp_path)
    again = subscribe(other)  # the Exclusive subscription was left
    again.close()
    other.close()
