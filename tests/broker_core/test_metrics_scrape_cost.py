"""What a scrape costs on an object store: a warm scrape of unchanged, idle topics is one GET per log and
per cursor at any scrape interval (the handles' idle staleness checks wait for the inventory refresh,
except an active cursor's), and a cursor that moved past its kept versions between two scrapes is caught
up at the next scrape when it was active, at that refresh when it was idle (D185)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from metrics_helpers import families
from moto_s3 import MotoS3, Root

from broker_core import BrokerConfig, Client, InitialPosition
from broker_core.broker.tenancy import topic_dir
from broker_core.clock import ManualClock
from broker_core.log import state_store, transaction_log
from broker_core.log.transaction_log import TransactionLog
from broker_core.metrics.collector import PulsarCollector
from broker_core.metrics.exporter import exposition
from broker_core.metrics.sampling import Sampler
from broker_core.naming import TopicName
from broker_core.subscription.cursor import Cursor

T = "persistent://public/default/t"
U = "persistent://public/default/u"


@pytest.fixture
def overdue_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every handle opened from now on finds its staleness checks due at each poll, as a scrape interval
    above the 10 s verify period makes them (Prometheus scrapes every 15-60 s)."""
    monkeypatch.setattr(transaction_log, "verify_period_s", lambda _io: 0.0)
    monkeypatch.setattr(state_store, "verify_period_s", lambda _io: 0.0)


@pytest.fixture
def s3_client(moto_s3: MotoS3, overdue_checks: None) -> Iterator[Client]:
    c = Client(moto_s3.fresh_root(), storage_options=moto_s3.storage_options,
               broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()


def fill(client: Client) -> None:
    """t: 5 messages, subscriptions a (acked 2) and b; u: 1 message, subscription c."""
    consumer = client.subscribe(T, "a", initial_position=InitialPosition.Earliest)
    client.subscribe(T, "b", initial_position=InitialPosition.Earliest).close()
    client.subscribe(U, "c", initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(T, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
    client.create_producer(U).send(b"x")
    for _ in range(2):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()


def test_a_warm_scrape_is_one_get_per_log_and_cursor_when_the_staleness_checks_are_due(s3_client: Client) -> None:
    fill(s3_client)
    # ten minutes on: every subscription has been idle for longer than the subscription refresh (5 min)
    collector = PulsarCollector(Sampler(s3_client._broker), clock=ManualClock(int(time.time() * 1000) + 600_000))
    exposition(collector)  # cold: lists the inventory, opens every log and cursor
    for _ in range(3):
        got = families(exposition(collector))
        # 2 logs + 3 cursors, one GET each (the next version, 404), no HEAD, LIST or floor read
        assert {k: n for k, n in collector.last_requests.items() if n} == {"GET": 5}
    assert got["pulsar_subscription_back_log"][(("cluster", "standalone"), ("namespace", "public/default"),
                                                 ("subscription", "a"), ("topic", T))] == 3


def test_the_inventory_refresh_still_makes_the_staleness_checks(s3_client: Client) -> None:
    fill(s3_client)
    collector = PulsarCollector(Sampler(s3_client._broker, inventory_refresh_s=0.0, subscription_refresh_s=0.0))
    exposition(collector)
    exposition(collector)
    assert collector.last_requests.get("HEAD", 0) > 0  # the cached versions are checked to still exist


def test_a_cursor_that_moved_past_its_kept_versions_is_caught_up_at_the_inventory_refresh(
        any_root: Root, overdue_checks: None) -> None:
    """Cursor versions are cleaned up 50 behind the newest: a warm poll of the next version then finds
    nothing (the number is stale), the check that runs with the inventory refresh re-lists it."""
    client = Client(any_root.url, storage_options=any_root.storage_options,
                    broker_config=BrokerConfig(fsync_enabled=False))
    try:
        client.subscribe(U, "c", initial_position=InitialPosition.Earliest).close()
        producer = client.create_producer(U, batching_enabled=False)
        for i in range(120):
            producer.send(f"m{i}".encode())
        sampler = Sampler(client._broker)
        collector = PulsarCollector(sampler)
        key = (("cluster", "standalone"), ("namespace", "public/default"), ("subscription", "c"), ("topic", U))
        assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 120
        store = client._broker.cursor_store(client._broker.partitions(U)[0], "c")
        for i in range(110):  # 110 versions, each acking one more message; cleanup keeps the newest 50
            store.update(lambda c, i=i: _acked_through(c, i))
            cleaner = store.state._cleaner
            if cleaner is not None:
                cleaner.join()
        sampler.inventory_refresh_s = sampler.subscription_refresh_s = 0.0  # the next scrape refreshes both
        assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 10
    finally:
        client.close()


def test_an_active_cursor_that_moved_past_its_kept_versions_is_caught_up_at_the_next_scrape(
        any_root: Root, overdue_checks: None) -> None:
    """A cursor that acked within the inventory refresh gets its staleness check on every scrape."""
    client = Client(any_root.url, storage_options=any_root.storage_options,
                    broker_config=BrokerConfig(fsync_enabled=False))
    try:
        client.subscribe(U, "c", initial_position=InitialPosition.Earliest).close()
        producer = client.create_producer(U, batching_enabled=False)
        for i in range(120):
            producer.send(f"m{i}".encode())
        store = client._broker.cursor_store(client._broker.partitions(U)[0], "c")
        store.update(lambda c: _acked_through(c, 0))  # active: it acked just now
        collector = PulsarCollector(Sampler(client._broker))
        key = (("cluster", "standalone"), ("namespace", "public/default"), ("subscription", "c"), ("topic", U))
        assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 119
        for i in range(1, 110):
            store.update(lambda c, i=i: _acked_through(c, i))
            cleaner = store.state._cleaner
            if cleaner is not None:
                cleaner.join()
        assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 10
    finally:
        client.close()


def _acked_through(cursor: Cursor | None, offset: int) -> Cursor | None:
    assert cursor is not None
    cursor.mark_delete = offset + 1  # the first offset not acknowledged
    return cursor


def test_opening_a_log_without_a_checkpoint_lists_it_once(s3_client: Client) -> None:
    """The listing that finds no checkpoint also shows that no commit lies beyond the last one replayed:
    the gap check at opening needs no second listing (a cold scrape opens every log)."""
    s3_client.create_producer(U).send(b"x")
    io = s3_client._broker.io
    before = dict(io.request_counts)
    snap = TransactionLog(io, topic_dir(TopicName.parse(U))).snapshot()
    assert snap.next_offset == 1
    assert io.request_counts["LIST"] - before.get("LIST", 0) == 1


def test_a_caught_up_subscription_on_an_unchanged_log_costs_no_request(s3_client: Client) -> None:
    """One GET per topic (its log's next version) while its subscriptions are caught up; a message moves
    the log and the cursor is polled again; a seek back shows at the subscription refresh (D197)."""
    v = "persistent://public/default/v"
    key = (("cluster", "standalone"), ("namespace", "public/default"), ("subscription", "d"), ("topic", v))
    consumer = s3_client.subscribe(v, "d", initial_position=InitialPosition.Earliest)
    producer = s3_client.create_producer(v, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    for _ in range(3):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    sampler = Sampler(s3_client._broker)
    collector = PulsarCollector(sampler, clock=ManualClock(int(time.time() * 1000) + 600_000))
    exposition(collector)  # cold
    exposition(collector)  # polls the cursor once more: it sees the sample it kept is current
    for _ in range(2):
        got = families(exposition(collector))
        assert {k: n for k, n in collector.last_requests.items() if n} == {"GET": 1}  # the log's poll only
        assert got["pulsar_subscription_back_log"][key] == 0

    producer.send(b"m3")  # the log moves: the cursor is polled again and the backlog is seen
    assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 1
    assert collector.last_requests["GET"] >= 2

    consumer = s3_client.subscribe(v, "d")
    consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()  # (the acknowledgment is committed by then)
    assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 0  # caught up again
    rewind = s3_client.subscribe(v, "d")
    rewind.seek(0)  # back to the first message (publish time 0): the log does not move
    rewind.close()
    assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 0  # not polled ...
    sampler.subscription_refresh_s = 0.0
    assert families(exposition(collector))["pulsar_subscription_back_log"][key] == 4  # ... until the refresh
