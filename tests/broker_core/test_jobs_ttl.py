"""Message TTL: durable subscriptions acknowledge messages older than the TTL, delayed ones included."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from jobs_worker import T, append, files_of, log_of, make_broker, set_cursor

from broker_core import (
    BrokerConfig,
    Client,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    SubscriptionNotFound,
    Timeout,
    TopicNotFound,
)
from broker_core.broker.broker import Broker
from broker_core.clock import ManualClock
from broker_core.jobs import run_retention, run_ttl
from broker_core.jobs.ttl import acknowledge_ranges
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor, new_cursor
from broker_core.subscription.ranges import RangeSet

NOW = 1_800_000_000_000
S = 1000


def cursor_of(broker: Broker, sub: str, topic: str = T) -> Cursor:
    cursor = broker.cursor_store(TopicName.parse(topic), sub).load()[1]
    assert cursor is not None
    return cursor


def test_unacknowledged_messages_older_than_the_ttl_are_acknowledged(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for age_s in (500, 400, 300, 200, 100):  # five segments of five messages
        append(broker, publish_ms=NOW - age_s * S)
    set_cursor(broker, "behind", 0, acked=[[7, 9]])
    set_cursor(broker, "middle", 12)
    set_cursor(broker, "ahead", 23)
    result = run_ttl(broker, T, now_ms=NOW, ttl_seconds=250).result_for(T)
    assert result.cutoff_ms == NOW - 250 * S
    by_sub = {s.subscription: s for s in result.subscriptions}
    assert (by_sub["behind"].expired_messages, by_sub["behind"].mark_delete_after) == (
        13,
        15,
    )  # 0..14 minus 7, 8
    assert (by_sub["middle"].expired_messages, by_sub["middle"].mark_delete_after) == (3, 15)
    assert (by_sub["ahead"].expired_messages, by_sub["ahead"].mark_delete_after) == (0, 23)
    assert [cursor_of(broker, s).mark_delete for s in ("behind", "middle", "ahead")] == [15, 15, 23]
    assert result.changed
    # TTL deletes nothing; retention then retires what every subscription acknowledged
    assert log_of(broker).snapshot().first_offset == 0
    assert run_retention(broker, T, now_ms=NOW).result_for(T).first_offset == 15


def test_expiry_is_exact_per_message_inside_a_segment(tmp_path: Path) -> None:
    """Publish times are not monotonic across producers: one segment mixes old and new messages."""
    broker = make_broker(tmp_path)
    log = log_of(broker)
    from log_helpers import producer_table

    ages = [900, 10, 800, 20, 700, 5]
    table = producer_table("p", range(6), publish_ms=[NOW - a * S for a in ages])
    log.append(table, layout=[-6])
    set_cursor(broker, "s", 0, acked=[[4, 5]])
    run_ttl(broker, T, now_ms=NOW, ttl_seconds=60)
    cursor = cursor_of(broker, "s")
    assert cursor.mark_delete == 1 and cursor.acked.to_json() == [[2, 3], [4, 5]]


def test_delayed_messages_expire_too(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    client = Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False), clock=clock)
    consumer = client.subscribe(
        T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
    )
    producer = client.create_producer(T, batching_enabled=False)
    producer.send(b"delayed", deliver_after=timedelta(hours=2))
    producer.send(b"now")
    msg = consumer.receive(5000)
    assert msg.data() == b"now"
    consumer.acknowledge(msg)
    consumer.close()
    clock.advance(3600 * S)  # an hour later: the delayed message is due in another hour, but TTL is 30 min
    result = run_ttl(client._broker, T, now_ms=clock.now_ms(), ttl_seconds=1800).result_for(T)
    assert result.expired_messages == 1
    clock.advance(2 * 3600 * S)
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared)
    with pytest.raises(Timeout):
        consumer.receive(300)  # it was acknowledged by expiry and is never delivered
    consumer.close()
    client.close()


def test_ttl_precedence_broker_namespace_topic_argument(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, ttl_duration_default_in_seconds=1000)
    other = "persistent://public/default/other"
    for topic in (T, other):
        for age_s in (1500, 800, 300, 50):
            append(broker, 1, publish_ms=NOW - age_s * S, topic=topic)
        set_cursor(broker, "s", 0, topic=topic)

    def expire(topic: str = T, **kwargs: Any) -> int:
        return run_ttl(broker, topic, now_ms=NOW, **kwargs).result_for(topic).expired_messages

    assert expire(dry_run=True) == 1  # broker default: 1000 s
    broker.policies.set_namespace_policies("public/default", {"messageTTLInSeconds": 600})
    assert expire(dry_run=True) == 2
    broker.policies.set_topic_policies(T, {"messageTTLInSeconds": 100})
    assert expire(dry_run=True) == 3
    assert expire(other, dry_run=True) == 2
    assert expire(dry_run=True, ttl_seconds=0) == 0  # explicit argument wins; 0 switches expiry off
    broker.policies.set_topic_policies(T, {"messageTTLInSeconds": 0})
    assert expire() == 0
    assert expire(ttl_seconds=10) == 4
    assert cursor_of(broker, "s").mark_delete == 4


def test_one_subscription_only_and_unknown_subscriptions(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    append(broker, publish_ms=NOW - 100 * S)
    set_cursor(broker, "a", 0)
    set_cursor(broker, "b", 0)
    summary = run_ttl(broker, T, now_ms=NOW, ttl_seconds=10, subscription="a")
    assert [s.subscription for s in summary.result_for(T).subscriptions] == ["a"]
    assert (cursor_of(broker, "a").mark_delete, cursor_of(broker, "b").mark_delete) == (5, 0)
    before = files_of(tmp_path)
    with pytest.raises(SubscriptionNotFound, match="'nope'"):
        run_ttl(broker, T, now_ms=NOW, ttl_seconds=10, subscription="nope")
    with pytest.raises(InvalidConfiguration, match="subscription name"):
        run_ttl(broker, T, now_ms=NOW, ttl_seconds=10, subscription="../x")
    for bad in (-1, "60", True):
        with pytest.raises(InvalidConfiguration, match="ttl_seconds"):
            run_ttl(broker, T, now_ms=NOW, ttl_seconds=bad)
    with pytest.raises(InvalidConfiguration, match="messageTTLInSeconds"):
        broker.policies.set_topic_policies(T, {"messageTTLInSeconds": -5})
    with pytest.raises(TopicNotFound):
        run_ttl(broker, "persistent://public/default/missing", ttl_seconds=10)
    assert files_of(tmp_path) == before


def test_dry_run_and_idempotence(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    for age_s in (300, 200, 100):
        append(broker, publish_ms=NOW - age_s * S)
    set_cursor(broker, "s", 2, acked=[[6, 8]])
    before = files_of(tmp_path)
    dry = run_ttl(broker, T, now_ms=NOW, ttl_seconds=150, dry_run=True)
    assert dry.result_for(T).expired_messages == 6 and not dry.changed  # 2..5, 8, 9
    assert files_of(tmp_path) == before
    done = run_ttl(broker, T, now_ms=NOW, ttl_seconds=150)
    assert done.result_for(T).expired_messages == 6 and done.changed
    after = files_of(tmp_path)
    again = run_ttl(broker, T, now_ms=NOW, ttl_seconds=150)
    assert again.result_for(T).expired_messages == 0 and not again.changed
    assert files_of(tmp_path) == after


def test_acknowledging_ranges_releases_claims_and_redelivery_counts() -> None:
    cursor = new_cursor("s", ConsumerType.Shared, 10)
    cursor.acked = RangeSet([[15, 20], [40, 45]])
    cursor.claims = {"c1": RangeSet([[10, 15], [20, 30]]), "c2": RangeSet([[50, 60]])}
    cursor.redelivery = {12: 1, 25: 2, 55: 3}
    count = acknowledge_ranges(cursor, RangeSet([[5, 13], [18, 26], [50, 52], [1_000_000, 3_000_000]]))
    # [10, 13) moves markDelete; [18, 26) joins [15, 20); the rest are new ranges
    assert cursor.mark_delete == 13
    assert cursor.acked.to_json() == [[15, 26], [40, 45], [50, 52], [1_000_000, 3_000_000]]
    assert count == 3 + 6 + 2 + 2_000_000
    assert cursor.claims["c1"].to_json() == [[13, 15], [26, 30]] and cursor.claims["c2"].to_json() == [
        [52, 60]
    ]
    assert cursor.redelivery == {55: 3}
    assert acknowledge_ranges(cursor, RangeSet([[0, 13], [15, 26]])) == 0  # already acknowledged


def test_ttl_beside_a_live_consumer(tmp_path: Path) -> None:
    """A consumer receives and acknowledges while TTL runs over and over with a short TTL: every
    message ends acknowledged (by the consumer or by expiry), the cursor only moves forward, and the
    consumer never fails."""
    clock = ManualClock(NOW)
    client = Client(str(tmp_path), broker_config=BrokerConfig(fsync_enabled=False), clock=clock)
    consumer = client.subscribe(
        T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
    )
    producer = client.create_producer(T, batching_enabled=True, batching_max_publish_delay_ms=1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            while not stop.is_set():
                try:
                    consumer.acknowledge(consumer.receive(100))
                except Timeout:
                    continue
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    marks = []
    for round_ in range(30):
        for i in range(20):
            producer.send_async(f"{round_}-{i}".encode(), None)
        producer.flush()
        clock.advance(2 * S)
        run_ttl(client._broker, T, now_ms=clock.now_ms(), ttl_seconds=3)
        marks.append(cursor_of(client._broker, "s").mark_delete)
    clock.advance(10 * S)
    run_ttl(client._broker, T, now_ms=clock.now_ms(), ttl_seconds=3)
    time.sleep(0.3)
    stop.set()
    thread.join(10)
    consumer.close()
    assert not errors, errors
    assert marks == sorted(marks)
    final = cursor_of(client._broker, "s")
    assert final.mark_delete == 600 and not final.acked
    client.close()
