"""Pulsar's rate, counter and backlog fields of topic stats (``broker.stats_fields``, ``subscription.activity``):
values checked against a topic filled with known messages, read at chosen moments (``now_ms``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from moto_s3 import Root

from broker_core import BrokerConfig, Client, InitialPosition
from broker_core.broker.stats import topic_stats
from broker_core.naming import TopicName
from broker_core.subscription import activity
from broker_core.subscription.cursor import ConsumerType, new_cursor

T = "persistent://public/default/t"


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_topic_stats_carry_pulsar_rates_counters_and_backlog_age(client: Client) -> None:
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(T, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())  # one segment each
    received = [consumer.receive(timeout_millis=10_000) for _ in range(5)]
    before_ack = now_ms()
    for msg in received[:4]:
        consumer.acknowledge(msg)
    consumer.close()  # flushes the acknowledgments
    after_ack = now_ms()
    broker = client._broker
    snap = broker.topic_log(TopicName.parse(T), create=False).snapshot()

    at = after_ack + 1
    stats = topic_stats(broker, T, now_ms=at)
    part = stats["partitions"][T]
    sub = part["subscriptions"]["s"]
    assert stats["msgInCounter"] == part["msgInCounter"] == 10
    assert part["msgRateIn"] == pytest.approx(10 / 60)
    assert part["msgThroughputIn"] == pytest.approx(sum(s.size_bytes for s in snap.segments) / 60)
    assert sub["msgRateOut"] == pytest.approx(4 / 60) and part["msgRateOut"] == pytest.approx(4 / 60)
    assert sub["msgThroughputOut"] == pytest.approx(4 / 60 * part["storageSize"] / 10)
    assert before_ack <= sub["lastAckedTimestamp"] <= after_ack
    assert sub["lastConsumedTimestamp"] >= sub["lastAckedTimestamp"]
    assert sub["msgBacklog"] == 6
    assert sub["backlogSize"] == part["backlogSize"] == sum(s.size_bytes for s in snap.segments[4:])
    oldest_unacked = received[4].publish_timestamp()
    assert sub["earliestMsgPublishTimeInBacklog"] == oldest_unacked
    assert part["earliestMsgPublishTimeInBacklogs"] == stats["earliestMsgPublishTimeInBacklogs"] == oldest_unacked
    assert part["oldestBacklogMessageAgeSeconds"] == (at - oldest_unacked) // 1000

    # two minutes later nothing happened within the window: rates are zero, the backlog grew older
    later = topic_stats(broker, T, now_ms=at + 120_000)
    part = later["partitions"][T]
    assert part["msgRateIn"] == part["msgRateOut"] == later["msgRateIn"] == 0
    assert part["msgInCounter"] == 10
    assert part["oldestBacklogMessageAgeSeconds"] == (at + 120_000 - oldest_unacked) // 1000
    assert part["subscriptions"]["s"]["lastAckedTimestamp"] == sub["lastAckedTimestamp"]


def test_an_empty_backlog_reports_zero_age_and_size(client: Client) -> None:
    producer = client.create_producer(T, batching_enabled=False)
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    producer.send(b"x")
    consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    part = topic_stats(client._broker, T)["partitions"][T]
    sub = part["subscriptions"]["s"]
    assert sub["msgBacklog"] == sub["backlogSize"] == sub["earliestMsgPublishTimeInBacklog"] == 0
    assert part["oldestBacklogMessageAgeSeconds"] == part["backlogSize"] == 0


def test_activity_points_bucket_prune_and_give_windowed_rates() -> None:
    before = new_cursor("s", ConsumerType.Shared, 0)
    doc: dict[str, object] | None = None
    t0 = 1_000_000
    for i in range(100):  # one ack every 100 ms for 10 s: two buckets
        after = new_cursor("s", ConsumerType.Shared, i + 1)
        doc = {"activity": activity.stamp(doc, activity.counts(before), after, t0 + 100 * i)}
        before = after
    stamped = doc["activity"]  # type: ignore[index]
    assert len(stamped["points"]) == 2 and stamped["points"][-1][1] == 100
    assert activity.read(doc, t0 + 10_000).msg_rate_out == pytest.approx(100 / 60)
    assert activity.read(doc, t0 + 200_000).msg_rate_out == 0
    # much later, one more ack: the old points fold into the base, the rate counts only the new one
    after = new_cursor("s", ConsumerType.Shared, 101)
    later = {"activity": activity.stamp(doc, activity.counts(before), after, t0 + 300_000)}
    assert later["activity"]["base"] == [100, 0] and len(later["activity"]["points"]) == 1
    assert activity.read(later, t0 + 300_001).msg_rate_out == pytest.approx(1 / 60)
    assert activity.read(later, t0 + 300_001).last_acked_ms == t0 + 300_000
