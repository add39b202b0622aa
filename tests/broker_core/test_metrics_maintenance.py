"""The exporter publishes ``pulsar_subscription_delayed`` and the maintenance pass's results from
what the pass commits (last-run times per job, the last executed pass's summary, the lease's holder), on
a folder and on S3; a dry run records no summary; a warm scrape costs no request for them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from metrics_helpers import C, families
from moto_s3 import Root

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition
from broker_core.clock import ManualClock
from broker_core.jobs import maintain
from broker_core.jobs.maintenance_lease import MaintenanceLease
from broker_core.metrics.collector import PulsarCollector, exported_names
from broker_core.metrics.exporter import exposition
from broker_core.metrics.sampling import Sampler

START_MS = 1_700_000_000_000


@pytest.fixture
def client(any_root: Root) -> Iterator[Client]:
    c = Client(any_root.url, storage_options=any_root.storage_options, broker_config=BrokerConfig(fsync_enabled=False))
    yield c
    c.close()




def job(name: str) -> tuple[tuple[str, str], ...]:
    return (("cluster", "standalone"), ("job", name))


def test_an_executed_pass_is_exported_with_its_job_times_counts_and_errors(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    for topic in ("a", "b"):
        client.create_producer(f"persistent://public/default/{topic}").send(b"x")
    broker = client._broker
    clock = ManualClock(START_MS)
    real = maintain.run_job

    def vacuum_fails(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if args[2] == "vacuum":
            raise OSError("disk on fire")
        return real(*args, **kwargs)

    monkeypatch.setattr(maintain, "run_job", vacuum_fails)
    lease = MaintenanceLease(broker.io, holder="runner-1", clock=clock)
    out = maintain.run_maintenance_pass(broker, execute=True, clock=clock, lease=lease)
    assert out["status"] == "done"
    got = families(exposition(PulsarCollector(Sampler(broker), clock=clock)))
    assert {n for n in got if n.startswith("pubsub_maintenance")} <= exported_names()
    for name in maintain.JOBS:
        assert got["pubsub_maintenance_last_run_timestamp_seconds"][job(name)] == START_MS / 1000
        assert got["pubsub_maintenance_oldest_run_timestamp_seconds"][job(name)] == START_MS / 1000
        assert got["pubsub_maintenance_topics"][job(name)] == 2
    assert got["pubsub_maintenance_last_pass_end_timestamp_seconds"][C] == START_MS / 1000
    assert got["pubsub_maintenance_last_pass_duration_seconds"][C] == 0
    assert got["pubsub_maintenance_last_pass_topics"][C] == 2
    assert got["pubsub_maintenance_last_pass_jobs"][C] == 2 * len(maintain.JOBS)
    assert got["pubsub_maintenance_last_pass_errors"][C] == 2
    assert got["pubsub_maintenance_last_pass_completed"][C] == 1
    # the pass released its lease: nobody leads
    assert "pubsub_maintenance_leader_info" not in got
    assert got["pubsub_maintenance_lease_expiry_timestamp_seconds"][C] == 0

    # a later pass with nothing due keeps the older times; another runner now holds the lease
    clock.advance(1_000)
    maintain.run_maintenance_pass(broker, execute=True, clock=clock, lease=lease)
    assert MaintenanceLease(broker.io, holder="runner-2", clock=clock, lease_ms=60_000).acquire()
    got = families(exposition(PulsarCollector(Sampler(broker), clock=clock)))
    assert got["pubsub_maintenance_last_run_timestamp_seconds"][job("vacuum")] == START_MS / 1000
    assert got["pubsub_maintenance_last_pass_end_timestamp_seconds"][C] == (START_MS + 1_000) / 1000
    assert got["pubsub_maintenance_last_pass_jobs"][C] == 0
    assert got["pubsub_maintenance_last_pass_errors"][C] == 0
    assert got["pubsub_maintenance_leader_info"][(("cluster", "standalone"), ("holder", "runner-2"))] == 1
    assert got["pubsub_maintenance_lease_expiry_timestamp_seconds"][C] == (START_MS + 61_000) / 1000


def test_a_dry_run_records_no_summary_and_a_root_without_passes_exports_no_times(client: Client) -> None:
    client.create_producer("persistent://public/default/a").send(b"x")
    broker = client._broker
    clock = ManualClock(START_MS)
    maintain.run_maintenance_pass(broker, execute=False, clock=clock)
    got = families(exposition(PulsarCollector(Sampler(broker), clock=clock)))
    assert "pubsub_maintenance_last_run_timestamp_seconds" not in got
    assert "pubsub_maintenance_last_pass_end_timestamp_seconds" not in got
    assert got["pubsub_maintenance_lease_expiry_timestamp_seconds"][C] == 0


def test_a_summary_survives_a_later_flush_of_last_run_times(client: Client) -> None:
    """``lastPass`` is additive: merging last-run times keeps it (and keeps unknown keys)."""
    state = maintain.state_store(client._broker)
    state.update(lambda doc: {"lastRun": {}, "futureKey": 1})
    maintain.record_last_runs(state, {}, {"endedMs": 5, "status": "done"})
    maintain.record_last_runs(state, {"persistent://public/default/a": {"ttl": 7}})
    _, doc = state.latest()
    assert doc == {"lastRun": {"persistent://public/default/a": {"ttl": 7}}, "futureKey": 1,
                   "lastPass": {"endedMs": 5, "status": "done"}}
    assert maintain.read_last_pass(state) == {"endedMs": 5, "status": "done"}


def test_warm_scrapes_read_the_maintenance_documents_only_with_the_inventory(
        client: Client, any_root: Root) -> None:
    client.create_producer("persistent://public/default/a").send(b"x")
    broker = client._broker
    clock = ManualClock(START_MS)
    collector = PulsarCollector(Sampler(broker), clock=clock)
    exposition(collector)
    maintain.run_maintenance_pass(broker, execute=True, clock=clock)
    warm = families(exposition(collector))  # within the inventory's refresh: the old (empty) view
    assert "pubsub_maintenance_last_pass_jobs" not in warm
    if any_root.is_s3:  # the pass's commit to the log and the poll after it, none for the maintenance documents
        assert collector.last_requests.get("GET") == 2
    fresh = PulsarCollector(Sampler(broker, inventory_refresh_s=0.0, subscription_refresh_s=0.0), clock=clock)
    assert families(exposition(fresh))["pubsub_maintenance_last_pass_jobs"][C] == len(maintain.JOBS)


def test_delayed_messages_are_counted_per_subscription_until_their_time_comes(client: Client, any_root: Root) -> None:
    """``pulsar_subscription_delayed``: unacked messages whose deliver-at time is in the future; a warm
    scrape of the unchanged topic reads no segment again."""
    topic = "persistent://public/default/later"
    shared = ConsumerType.Shared
    consumer = client.subscribe(topic, "s", consumer_type=shared, initial_position=InitialPosition.Earliest)
    client.subscribe(topic, "idle", consumer_type=shared, initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    now_ms = int(time.time() * 1000)
    for i in range(3):
        producer.send(f"now{i}".encode())
    producer.send(b"hour", deliver_after=timedelta(hours=1))
    producer.send(b"day", deliver_at=now_ms + 86_400_000)
    producer.send(b"past", deliver_at=now_ms - 1_000)
    for _ in range(4):  # the three immediate ones and the one already due
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    clock = ManualClock(now_ms)
    collector = PulsarCollector(Sampler(client._broker), clock=clock)
    s, idle = ((*C, ("namespace", "public/default"), ("subscription", n), ("topic", topic)) for n in ("s", "idle"))
    got = families(exposition(collector))
    assert got["pulsar_subscription_delayed"][s] == 2
    assert got["pulsar_subscription_back_log"][s] == 2
    assert got["pulsar_subscription_delayed"][idle] == 2
    got = families(exposition(collector))
    if any_root.is_s3:  # the log and two cursors, one GET each: no segment read again
        assert collector.last_requests.get("GET") == 3
    assert got["pulsar_subscription_delayed"][s] == 2
    clock.advance(2 * 3_600_000)  # the hour has passed, the day has not
    got = families(exposition(collector))
    assert got["pulsar_subscription_delayed"][s] == 1
    assert got["pulsar_subscription_delayed"][idle] == 1
    clock.advance(86_400_000)
    assert families(exposition(collector))["pulsar_subscription_delayed"][s] == 0


def test_a_topic_without_delayed_messages_exports_zero(client: Client) -> None:
    topic = "persistent://public/default/plain"
    client.subscribe(topic, "s", initial_position=InitialPosition.Earliest).close()
    client.create_producer(topic).send(b"x")
    got = families(exposition(PulsarCollector(Sampler(client._broker))))
    key = (*C, ("namespace", "public/default"), ("subscription", "s"), ("topic", topic))
    assert got["pulsar_subscription_delayed"][key] == 0
