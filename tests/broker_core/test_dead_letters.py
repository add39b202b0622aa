"""Dead letter and retry letter topics, implemented by the consumer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from consumer_helpers import drain
from records import V1, V2

from broker_core import (
    BrokerConfig,
    Client,
    Consumer,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    InitialPosition,
    NotAllowedError,
    Timeout,
)
from broker_core import schema as m
from broker_core.client.dead_letters import (
    DELAY_TIME,
    ORIGIN_MESSAGE_ID,
    ORIGIN_MESSAGE_IDY_TIME,
    REAL_TOPIC,
    RECONSUMETIMES,
    letter_topics,
    pulsar_id_string,
    reconsume_properties,
)
from broker_core.clock import ManualClock
from broker_core.message_id import MessageId

EPOCH_MS = 1_700_000_000_000
WAIT_MS = 10_000
QUIET_MS = 300
EARLIEST = InitialPosition.Earliest
TOPIC = "persistent://public/default/t"
DLQ = f"{TOPIC}-s-DLQ"
RETRY = f"{TOPIC}-s-RETRY"


def pulsar_form(message_id: MessageId) -> str:
    """Pulsar's MessageId.toString() for a message outside a batch: ledger:entry:partition."""
    assert message_id.batch_index() == -1
    return f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.partition()}"


def make_client(root: Path, *, clock: ManualClock | None = None, **config: Any) -> Client:
    return Client(str(root), broker_config=BrokerConfig(fsync_enabled=False, **config), clock=clock)



def send(client: Client, topic: str, *payloads: bytes, **kwargs: Any) -> list[Any]:
    producer = client.create_producer(topic)
    ids = [producer.send(p, **kwargs) for p in payloads]
    producer.close()
    return ids


# -- policy objects ------------------------------------------------------------------------------------


def test_dead_letter_policy_arguments() -> None:
    policy = ConsumerDeadLetterPolicy(3, "dlq", "init", retry_letter_topic="retry")
    assert (policy.max_redeliver_count, policy.dead_letter_topic, policy.initial_subscription_name,
            policy.retry_letter_topic) == (3, "dlq", "init", "retry")
    for bad in (0, -1, "3", 2.0, True):
        with pytest.raises(ValueError):
            ConsumerDeadLetterPolicy(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ConsumerDeadLetterPolicy(1, dead_letter_topic=5)  # type: ignore[arg-type]


# -- dead letter topic ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ConsumerType.Shared, ConsumerType.KeyShared])
def test_nacked_message_is_delivered_max_plus_one_times_then_dead_lettered(
    tmp_path: Path, kind: ConsumerType
) -> None:
    client = make_client(tmp_path)
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="init")
    consumer = client.subscribe("t", "s", consumer_type=kind, initial_position=EARLIEST,
                                dead_letter_policy=policy, negative_ack_redelivery_delay_ms=0)
    poison_id, _ = send(client, "t", b"poison", b"fine", properties={"p": "1"}, partition_key="k")
    deliveries = []
    while True:
        try:
            msg = consumer.receive(QUIET_MS)
        except Timeout:
            break
        if msg.data() == b"poison":
            deliveries.append(msg.redelivery_count())
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
    assert deliveries == [0, 1, 2]
    consumer.close()

    # the dead letter was published before anyone subscribed, and the initial subscription kept it
    dlq = client.subscribe(DLQ, "init")  # Latest, but the subscription exists at the earliest position
    dead = dlq.receive(WAIT_MS)
    assert dead.data() == b"poison"
    props = dead.properties()
    assert props[REAL_TOPIC] == TOPIC
    assert props[ORIGIN_MESSAGE_ID] == pulsar_form(poison_id)
    assert props["p"] == "1"
    assert dead.partition_key() == "k"
    assert drain(dlq) == []
    dlq.close()

    # and the original was acknowledged
    again = client.subscribe("t", "s", consumer_type=kind, dead_letter_policy=policy)
    assert drain(again) == []
    again.close()
    client.close()


def test_custom_dead_letter_topic_gets_its_initial_subscription(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    policy = ConsumerDeadLetterPolicy(1, dead_letter_topic="graveyard", initial_subscription_name="keeper")
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                dead_letter_policy=policy, negative_ack_redelivery_delay_ms=0)
    send(client, "t", b"poison")
    for expected in (0, 1):
        msg = consumer.receive(WAIT_MS)
        assert msg.redelivery_count() == expected
        consumer.negative_acknowledge(msg)
    assert drain(consumer) == []
    consumer.close()
    keeper = client.subscribe("graveyard", "keeper")  # Latest: only the initial subscription has it
    dead = keeper.receive(WAIT_MS)
    assert dead.data() == b"poison"
    assert dead.properties()[REAL_TOPIC] == TOPIC
    keeper.close()
    client.close()


def test_message_redelivered_past_the_limit_by_dying_consumers_is_dead_lettered(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=1)
    send(client, "t", b"unlucky")

    def subscribe() -> Consumer:
        return client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                dead_letter_policy=policy)

    for expected in (0, 1):  # each consumer leaves without acknowledging: a redelivery each time
        consumer = subscribe()
        assert consumer.receive(WAIT_MS).redelivery_count() == expected
        consumer.close()
    consumer = subscribe()
    assert drain(consumer) == []  # redelivery count 2 > 1: straight to the DLQ
    consumer.close()
    reader = client.subscribe(DLQ, "check", initial_position=EARLIEST)
    assert [m.data() for m in drain(reader)] == [b"unlucky"]
    reader.close()
    consumer = subscribe()
    assert drain(consumer) == []  # acknowledged on the original subscription
    consumer.close()
    client.close()


def test_ack_timeout_counts_towards_the_dead_letter_limit(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=1)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                dead_letter_policy=policy, unacked_messages_timeout_ms=1000)
    send(client, "t", b"slow")
    assert consumer.receive(WAIT_MS).redelivery_count() == 0
    assert consumer.receive(WAIT_MS).redelivery_count() == 1  # after the ack timeout
    dlq = client.subscribe(DLQ, "check", initial_position=EARLIEST)
    assert dlq.receive(WAIT_MS).data() == b"slow"  # after the second timeout
    assert drain(consumer) == []
    dlq.close()
    consumer.close()
    client.close()


# -- retry letter topic --------------------------------------------------------------------------------------


def test_reconsume_later_needs_retry_enabled(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    send(client, "t", b"x")
    msg = consumer.receive(WAIT_MS)
    with pytest.raises(NotAllowedError):
        consumer.reconsume_later(msg, 1000)
    consumer.close()
    retrying = client.subscribe("t", "s2", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True)
    msg = retrying.receive(WAIT_MS)
    with pytest.raises(ValueError):
        retrying.reconsume_later(msg, "1000")  # type: ignore[arg-type]
    retrying.close()
    client.close()


def test_retry_letter_topic_round_trip_then_dead_letter(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock, is_delayed_delivery_deliver_at_time_strict=True)
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=2)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True, dead_letter_policy=policy)
    (origin_id,) = send(client, "t", b"job", properties={"user": "u1"})
    msg = consumer.receive(WAIT_MS)
    assert msg.topic_name() == TOPIC
    for attempt in (1, 2):
        consumer.reconsume_later(msg, 1_000, {"attempt": str(attempt)})
        assert drain(consumer) == []  # not before the delay
        clock.advance(999)
        assert drain(consumer) == []
        clock.advance(1)
        msg = consumer.receive(WAIT_MS)
        assert msg.topic_name() == RETRY
        assert msg.data() == b"job"
        props = msg.properties()
        assert props[RECONSUMETIMES] == str(attempt)
        assert props[DELAY_TIME] == "1000"
        assert props[REAL_TOPIC] == TOPIC
        assert props[ORIGIN_MESSAGE_ID] == pulsar_form(origin_id)
        assert props["user"] == "u1" and props["attempt"] == str(attempt)
    consumer.reconsume_later(msg, 1_000)  # a third reconsume exceeds max_redeliver_count=2
    clock.advance(5_000)
    assert drain(consumer) == []
    dlq = client.subscribe(DLQ, "check", initial_position=EARLIEST)
    dead = dlq.receive(WAIT_MS)
    assert dead.data() == b"job"
    assert dead.properties()[REAL_TOPIC] == TOPIC
    assert dead.properties()[ORIGIN_MESSAGE_ID] == pulsar_form(origin_id)
    dlq.close()
    consumer.close()
    again = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, retry_enable=True,
                             dead_letter_policy=policy)
    assert drain(again) == []  # the original and every retry copy were acknowledged
    again.close()
    client.close()


def test_custom_retry_letter_topic(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    policy = ConsumerDeadLetterPolicy(5, retry_letter_topic="my-retries")
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True, dead_letter_policy=policy)
    send(client, "t", b"job")
    consumer.reconsume_later(consumer.receive(WAIT_MS), 0)
    msg = consumer.receive(WAIT_MS)
    assert msg.topic_name() == "persistent://public/default/my-retries"
    assert msg.properties()[RECONSUMETIMES] == "1"
    consumer.acknowledge(msg)
    consumer.close()
    client.close()


def test_retry_without_a_policy_dead_letters_after_sixteen_reconsumes(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True)
    send(client, "t", b"job")
    msg = consumer.receive(WAIT_MS)
    for attempt in range(1, 17):
        consumer.reconsume_later(msg, 0)
        msg = consumer.receive(WAIT_MS)
        assert msg.properties()[RECONSUMETIMES] == str(attempt)
    consumer.reconsume_later(msg, 0)
    assert drain(consumer) == []
    consumer.close()
    dlq = client.subscribe(DLQ, "check", initial_position=EARLIEST)
    assert [m.data() for m in drain(dlq)] == [b"job"]
    dlq.close()
    client.close()


def test_retry_without_a_policy_limits_negative_acks_too(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True, negative_ack_redelivery_delay_ms=0)
    send(client, "t", b"job")
    counts = []
    while True:
        try:
            msg = consumer.receive(QUIET_MS)
        except Timeout:
            break
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == list(range(17))  # the Java client's default limit of 16 redeliveries
    consumer.close()
    dlq = client.subscribe(DLQ, "check", initial_position=EARLIEST)
    assert [m.data() for m in drain(dlq)] == [b"job"]
    dlq.close()
    client.close()


# -- Pulsar 4.x: reconsume properties and topic names ----------------------------------------------------


def test_pulsar_message_id_string() -> None:
    assert pulsar_id_string(MessageId(partition=-1, ledger_id=7, entry_id=3)) == "7:3:-1"
    assert pulsar_id_string(MessageId(partition=2, ledger_id=7, entry_id=3, batch_index=4)) == "7:3:2:4"


def test_reconsume_properties_first_time() -> None:
    props, times = reconsume_properties({"user": "u1"}, real_topic=TOPIC, message_id="7:3:-1", delay_ms=1500,
                                        custom={"attempt": "1"})
    assert times == 1
    assert props == {"user": "u1", REAL_TOPIC: TOPIC, ORIGIN_MESSAGE_ID: "7:3:-1",
                     ORIGIN_MESSAGE_IDY_TIME: "7:3:-1", "attempt": "1", RECONSUMETIMES: "1", DELAY_TIME: "1500"}


def test_reconsume_properties_keep_the_origin_and_count_up() -> None:
    earlier = {REAL_TOPIC: "persistent://public/default/first", ORIGIN_MESSAGE_ID: "1:1:-1",
               ORIGIN_MESSAGE_IDY_TIME: "1:1:-1", RECONSUMETIMES: "4", DELAY_TIME: "10", "k": "old"}
    props, times = reconsume_properties(earlier, real_topic=TOPIC, message_id="9:9:-1", delay_ms=-20,
                                        custom={"k": "new"})
    assert times == 5
    assert props[REAL_TOPIC] == "persistent://public/default/first"  # present: kept
    assert props[ORIGIN_MESSAGE_ID] == props[ORIGIN_MESSAGE_IDY_TIME] == "1:1:-1"
    assert props["k"] == "new"  # the caller's properties override
    assert props[RECONSUMETIMES] == "5"
    assert props[DELAY_TIME] == "0"  # a negative delay counts as none


def test_reconsume_later_writes_the_legacy_origin_key_and_a_negative_delay_is_not_deferred(tmp_path: Path) -> None:
    clock = ManualClock(EPOCH_MS)
    client = make_client(tmp_path, clock=clock)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True)
    (origin_id,) = send(client, "t", b"job")
    consumer.reconsume_later(consumer.receive(WAIT_MS), -5_000)
    again = consumer.receive(WAIT_MS)  # due at once: the clock never moved
    assert again.topic_name() == RETRY
    props = again.properties()
    assert props[ORIGIN_MESSAGE_IDY_TIME] == props[ORIGIN_MESSAGE_ID] == pulsar_form(origin_id)
    assert (props[RECONSUMETIMES], props[DELAY_TIME]) == ("1", "0")
    consumer.acknowledge(again)
    consumer.close()
    client.close()


def test_default_letter_topic_names(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    broker = client._broker
    names = letter_topics(broker, f"{TOPIC}-partition-3", "s", None, retry_enabled=True)
    assert (names.retry, names.dead_letter) == (RETRY, DLQ)  # the partitioned topic's name
    policy = ConsumerDeadLetterPolicy(3, "my-dlq", retry_letter_topic="my-retry")
    named = letter_topics(broker, TOPIC, "s", policy, retry_enabled=True)
    assert (named.retry, named.dead_letter) == ("my-retry", "my-dlq")
    client.close()


def test_legacy_letter_topics_are_used_when_they_exist(tmp_path: Path) -> None:
    client = make_client(tmp_path)
    legacy_retry = "persistent://public/default/s-RETRY"
    legacy_dlq = "persistent://public/default/s-DLQ"
    send(client, legacy_retry, b"old")  # a retry topic left by Pulsar before 2.8's naming
    names = letter_topics(client._broker, TOPIC, "s", None, retry_enabled=True)
    assert (names.retry, names.dead_letter) == (legacy_retry, DLQ)
    send(client, legacy_dlq, b"old")
    assert letter_topics(client._broker, TOPIC, "s", None, retry_enabled=True).dead_letter == legacy_dlq
    # without retry the legacy names are not looked for; explicit names always win
    assert letter_topics(client._broker, TOPIC, "s", None, retry_enabled=False).dead_letter == DLQ
    policy = ConsumerDeadLetterPolicy(3, retry_letter_topic="mine")
    assert letter_topics(client._broker, TOPIC, "s", policy, retry_enabled=True) == type(names)("mine", legacy_dlq)
    consumer = client.subscribe("t", "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST,
                                retry_enable=True)
    send(client, "t", b"job")
    msg = consumer.receive(WAIT_MS)
    consumer.reconsume_later(msg, 0)
    values = sorted(m.data() for m in drain(consumer))
    assert values == [b"job", b"old"]  # the consumer reads the legacy retry topic (old and new)
    consumer.close()
    client.close()


# -- letters keep the writer schema of the original -------------------------------------------------------


def test_dead_and_retry_letters_keep_the_writer_schema_version(tmp_path: Path) -> None:
    """A letter carries the schema version of its original: a V1 message stays V1 on the letter topic
    even after the topic evolved to V2, so a V2 reader of the letter topic resolves it (defaults and all)."""
    client = make_client(tmp_path)
    client.create_producer("t", schema=m.AvroSchema(V1)).send(V1(id=1, name="old"))
    client.create_producer("t", schema=m.AvroSchema(V2)).send(V2(id=2, name="new", score=2.0))
    consumer = client.subscribe("t", "s", schema=m.AvroSchema(V2), consumer_type=ConsumerType.Shared,
                                initial_position=EARLIEST, retry_enable=True,
                                dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=1),
                                negative_ack_redelivery_delay_ms=0)
    old, new = consumer.receive(WAIT_MS), consumer.receive(WAIT_MS)
    assert (old.value(), new.value()) == (V2(id=1, name="old", score=0.5), V2(id=2, name="new", score=2.0))
    consumer.reconsume_later(old, 0)  # the V1 message to the retry topic
    consumer.negative_acknowledge(new)  # the V2 one: redelivered once, then to the dead letter topic
    for msg in drain(consumer):  # its redelivery, and the retry copy of the V1 one
        if msg.value().id == 2:
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
    drain(consumer, ack=True)
    consumer.close()
    registry = client._broker.schemas
    for letters, original, expected in ((RETRY, old, V2(id=1, name="old", score=0.5)),
                                        (DLQ, new, V2(id=2, name="new", score=2.0))):
        reader = client.subscribe(letters, "check", schema=m.AvroSchema(V2), initial_position=EARLIEST)
        letter = reader.receive(WAIT_MS)
        assert letter.value() == expected
        written = registry.lookup(letters, letter.schema_version())
        assert written is not None and written.same_as(registry.lookup(TOPIC, original.schema_version()))
        reader.close()
    client.close()
