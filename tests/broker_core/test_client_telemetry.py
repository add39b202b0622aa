"""Client metrics through OpenTelemetry (``client/telemetry.py``, ``client/telemetry_gauges.py``): with an
SDK installed, real client operations record Pulsar's client metrics (PIP-342 names, units, instrument
kinds and attributes); without one nothing is recorded and nothing fails."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto_s3 import Root
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, Metric, Sum

from broker_core import BrokerConfig, Client, ConsumerDeadLetterPolicy, ConsumerType, InitialPosition
from broker_core.client import telemetry, telemetry_gauges
from broker_core.errors import ConnectError, RootNotFound, StorageUnavailable, TopicNotFound

T = "persistent://public/default/t"
NS = {"pulsar.tenant": "public", "pulsar.namespace": "public/default"}
WAIT_MS = 10_000
INSTRUMENTS = [
    "SEND_DURATION", "RPC_DURATION", "LOOKUP_DURATION", "SEND_SIZE", "PRODUCER_OPENED", "PRODUCER_CLOSED",
    "CONSUMER_OPENED", "CONSUMER_CLOSED", "ACKS", "NACKS", "DLQ", "ACK_TIMEOUT", "CONNECTIONS_OPENED",
    "CONNECTIONS_CLOSED", "CONNECTIONS_FAILED", "OBSERVED",
]
# PIP-342's set: name -> (unit, kind); "histogram", "counter" (a monotonic sum), "updown" (a non-monotonic sum)
PIP_342 = {
    "pulsar.client.connection.opened": ("{connection}", "counter"),
    "pulsar.client.connection.closed": ("{connection}", "counter"),
    "pulsar.client.connection.failed": ("{connection}", "counter"),
    "pulsar.client.lookup.duration": ("s", "histogram"),
    "pulsar.client.producer.opened": ("{session}", "counter"),
    "pulsar.client.producer.closed": ("{session}", "counter"),
    "pulsar.client.producer.message.send.duration": ("s", "histogram"),
    "pulsar.client.producer.rpc.send.duration": ("s", "histogram"),
    "pulsar.client.producer.message.send.size": ("By", "counter"),
    "pulsar.client.producer.message.pending.count": ("{message}", "updown"),
    "pulsar.client.producer.message.pending.size": ("By", "updown"),
    "pulsar.client.consumer.opened": ("{session}", "counter"),
    "pulsar.client.consumer.closed": ("{session}", "counter"),
    "pulsar.client.consumer.message.received.count": ("{message}", "counter"),
    "pulsar.client.consumer.message.received.size": ("By", "counter"),
    "pulsar.client.consumer.receive_queue.count": ("{message}", "updown"),
    "pulsar.client.consumer.receive_queue.size": ("By", "updown"),
    "pulsar.client.consumer.message.ack": ("{message}", "counter"),
    "pulsar.client.consumer.message.nack": ("{message}", "counter"),
    "pulsar.client.consumer.message.dlq": ("{message}", "counter"),
    "pulsar.client.consumer.message.ack.timeout": ("{message}", "counter"),
}


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    """An SDK installed for this test only: the module's instruments are re-created on its meter (the
    global provider can be set once per process, so the test does not set it); the shipped ones come
    back afterwards.  The process-wide state of the observed instruments starts afresh too."""
    monkeypatch.setattr(telemetry_gauges, "_SEEN", {})
    monkeypatch.setattr(telemetry_gauges, "_RECEIVED_CLOSED", {})
    for name in INSTRUMENTS:
        monkeypatch.setattr(telemetry, name, getattr(telemetry, name))  # (restored at teardown)
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    telemetry.create_instruments(provider.get_meter("test"))
    monkeypatch.setattr(telemetry, "_sdk_installed", lambda: True)
    yield memory
    provider.shutdown()


def collect(memory: InMemoryMetricReader) -> dict[str, Metric]:
    data = memory.get_metrics_data()
    return {m.name: m for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics for m in sm.metrics}


def value(memory: InMemoryMetricReader, name: str, **attrs: Any) -> float:
    """The sum (a histogram: the count) of ``name``'s points whose attributes include ``attrs``
    (``pulsar_x_y`` stands for ``pulsar.x.y``)."""
    wanted = {k.replace("_", ".").replace("transport.type", "transport-type"): v for k, v in attrs.items()}
    metric = collect(memory).get(name)
    if metric is None:
        return 0
    points = [p for p in metric.data.data_points if wanted.items() <= dict(p.attributes or {}).items()]
    return sum(p.count if isinstance(metric.data, Histogram) else p.value for p in points)


def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait (at most ``WAIT_MS``) for a background thread's work, e.g. a dispatch round filling the queue."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def client_for(root: Root, **config: Any) -> Client:
    return Client(root.url, storage_options=root.storage_options,
                  broker_config=BrokerConfig(fsync_enabled=False, **config))


def test_every_pip_342_instrument_has_its_name_unit_and_kind(reader: InMemoryMetricReader, tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    client = client_for(Root("local", str(tmp_path / "root"), {}))
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest,
                                dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=1))
    producer = client.create_producer(T)
    producer.send(b"x")
    consumer.acknowledge(consumer.receive(WAIT_MS))
    telemetry.DLQ.add(0, {})  # (the counters of rarer events: present once used; their values are tested below)
    telemetry.ACK_TIMEOUT.add(0, {})
    telemetry.NACKS.add(0, {})
    telemetry.CONNECTIONS_FAILED.add(0, {})
    consumer.close()
    producer.close()
    client.close()
    got = collect(reader)
    for name, (unit, kind) in PIP_342.items():
        assert name in got, name
        metric = got[name]
        assert metric.unit == unit, name
        if kind == "histogram":
            assert isinstance(metric.data, Histogram), name
        else:
            assert isinstance(metric.data, Sum) and metric.data.is_monotonic == (kind == "counter"), name


def test_a_produce_and_consume_round_records_pulsars_client_metrics(reader: InMemoryMetricReader,
                                                                   any_root: Root) -> None:
    client = client_for(any_root)
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(T)
    for i in range(5):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    for _ in range(5):
        msg = consumer.receive(timeout_millis=WAIT_MS)
        consumer.acknowledge(msg)
    consumer.negative_acknowledge(msg)
    consumer.close()
    producer.close()
    client.close()
    send = "pulsar.client.producer.message.send.duration"
    assert value(reader, send, pulsar_topic=T, pulsar_response_status="success", **NS) == 5
    assert value(reader, "pulsar.client.producer.message.send.size", pulsar_topic=T) == 10
    assert value(reader, "pulsar.client.consumer.message.received.count", pulsar_topic=T, pulsar_subscription="s") == 5
    assert value(reader, "pulsar.client.consumer.message.received.size", pulsar_topic=T) == 10
    assert value(reader, "pulsar.client.consumer.message.ack", pulsar_subscription="s") == 5
    assert value(reader, "pulsar.client.consumer.message.nack", pulsar_subscription="s") == 1
    for name in ("producer.opened", "producer.closed", "consumer.opened", "consumer.closed"):
        assert value(reader, f"pulsar.client.{name}", pulsar_topic=T) == 1


def test_the_producer_reports_its_pending_messages_commits_and_lookups(reader: InMemoryMetricReader,
                                                                      any_root: Root) -> None:
    client = client_for(any_root)
    transport = "http" if any_root.is_s3 else "file"
    lookups = {"pulsar_lookup_transport_type": transport, "pulsar_response_status": "success"}
    producer = client.create_producer(T, batching_enabled=True, batching_max_publish_delay_ms=600_000)
    assert value(reader, "pulsar.client.connection.opened") == 1
    assert value(reader, "pulsar.client.lookup.duration", pulsar_lookup_type="metadata", **lookups) == 1
    assert value(reader, "pulsar.client.lookup.duration", pulsar_lookup_type="topic", **lookups) == 1
    for _ in range(3):
        producer.send_async(b"abcd", None)
    assert value(reader, "pulsar.client.producer.message.pending.count", pulsar_topic=T, **NS) == 3  # held by the delay
    assert value(reader, "pulsar.client.producer.message.pending.size", pulsar_topic=T) == 12
    assert value(reader, "pulsar.client.producer.rpc.send.duration", pulsar_topic=T) == 0
    producer.flush()
    assert value(reader, "pulsar.client.producer.message.pending.count", pulsar_topic=T) == 0
    assert value(reader, "pulsar.client.producer.message.pending.size", pulsar_topic=T) == 0
    rpc = "pulsar.client.producer.rpc.send.duration"
    assert value(reader, rpc, pulsar_topic=T, pulsar_response_status="success", **NS) == 1  # one batch, one commit
    assert value(reader, "pulsar.client.producer.message.send.duration", pulsar_topic=T) == 3
    producer.send(b"x")
    producer.send(b"y")
    assert value(reader, rpc, pulsar_topic=T) == 3
    producer.close()
    assert value(reader, "pulsar.client.connection.closed") == 0
    client.close()
    assert value(reader, "pulsar.client.connection.closed") == 1
    connections = collect(reader)["pulsar.client.connection.opened"].data.data_points
    assert [dict(p.attributes or {}) for p in connections] == [{}]  # as Pulsar's: no attributes


def test_the_receive_queue_and_received_messages_are_reported(reader: InMemoryMetricReader, any_root: Root) -> None:
    client = client_for(any_root)
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest)
    producer = client.create_producer(T)
    for _ in range(10):
        producer.send_async(b"hello", None)
    producer.flush()
    queued = "pulsar.client.consumer.receive_queue.count"
    for _ in range(3):
        consumer.receive(WAIT_MS)
    sub = {"pulsar_topic": T, "pulsar_subscription": "s", **NS}
    eventually(lambda: value(reader, queued, **sub) == 7, "the other 7 messages reach the receiver queue")
    assert value(reader, "pulsar.client.consumer.receive_queue.size", **sub) == 35
    assert value(reader, "pulsar.client.consumer.message.received.count", **sub) == 3  # taken, not queued
    assert value(reader, "pulsar.client.consumer.message.received.size", **sub) == 15
    consumer.close()
    assert value(reader, queued, **sub) == 0  # its queue is gone
    assert value(reader, "pulsar.client.consumer.message.received.count", **sub) == 3  # a counter stays
    producer.close()
    client.close()


def test_ack_timeouts_and_dead_letters_are_counted(reader: InMemoryMetricReader, any_root: Root) -> None:
    client = client_for(any_root)
    consumer = client.subscribe(T, "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest,
                                dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=1),
                                unacked_messages_timeout_ms=1000)
    producer = client.create_producer(T)
    producer.send(b"slow")
    sub = {"pulsar_topic": T, "pulsar_subscription": "s"}
    assert consumer.receive(WAIT_MS).redelivery_count() == 0
    assert consumer.receive(WAIT_MS).redelivery_count() == 1  # after the ack timeout
    assert value(reader, "pulsar.client.consumer.message.ack.timeout", **sub) == 1
    assert value(reader, "pulsar.client.consumer.message.dlq", **sub) == 0
    dlq = client.subscribe(f"{T}-s-DLQ", "check", initial_position=InitialPosition.Earliest)
    assert dlq.receive(WAIT_MS).data() == b"slow"  # after the second timeout
    assert value(reader, "pulsar.client.consumer.message.ack.timeout", **sub) == 2
    # (counted once the letter's send returned: the DLQ's consumer may see the letter a moment before)
    eventually(lambda: value(reader, "pulsar.client.consumer.message.dlq", **sub, **NS) == 1, "the letter is counted")
    dlq.close()
    consumer.close()
    producer.close()
    client.close()


def test_a_root_that_cannot_be_opened_is_a_failed_connection(reader: InMemoryMetricReader, any_root: Root) -> None:
    missing = f"{any_root.url}-{uuid.uuid4().hex[:8]}"  # a folder or prefix next to the root: nothing there
    with pytest.raises(RootNotFound):
        Client(missing, storage_options=any_root.storage_options)
    assert value(reader, "pulsar.client.connection.failed", pulsar_failure_type="handshake") == 1
    assert value(reader, "pulsar.client.connection.opened") == 0
    assert telemetry.failure_type(ConnectError("refused")) == "tcp-failed"  # the store itself unreachable


def test_an_unreachable_store_is_a_failed_connection_of_its_own_type(reader: InMemoryMetricReader) -> None:
    options = {"aws_endpoint": "http://127.0.0.1:9", "aws_allow_http": "true", "aws_region": "us-east-1",
               "aws_access_key_id": "k", "aws_secret_access_key": "s"}  # (port 9: nothing listens)
    with pytest.raises(StorageUnavailable):
        Client("s3://bucket/root", storage_options=options)
    assert value(reader, "pulsar.client.connection.failed", pulsar_failure_type="tcp-failed") == 1
    assert value(reader, "pulsar.client.connection.failed", pulsar_failure_type="handshake") == 0


def test_a_failed_lookup_is_recorded_as_failed(reader: InMemoryMetricReader, any_root: Root) -> None:
    client = client_for(any_root, allow_auto_topic_creation=False)
    with pytest.raises(TopicNotFound):
        client.create_producer(T)
    lookup = "pulsar.client.lookup.duration"
    assert value(reader, lookup, pulsar_lookup_type="metadata", pulsar_response_status="failed") == 1
    assert value(reader, lookup, pulsar_response_status="success") == 0
    client.close()


def test_without_an_sdk_the_instruments_are_no_ops(tmp_path: Path) -> None:
    assert type(metrics.get_meter_provider()).__name__ in telemetry._NO_SDK
    assert not telemetry._sdk_installed()
    telemetry.record_sent({"pulsar.topic": T}, [1, 2], 10, ok=True, rpc_s=0.1)  # nothing to record into
    assert telemetry.lookup("file", "topic", lambda: 42) == 42
    (tmp_path / "root").mkdir()
    client = Client(str(tmp_path / "root"), broker_config=BrokerConfig(fsync_enabled=False))
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    client.create_producer(T).send(b"x")
    assert consumer.receive(WAIT_MS).data() == b"x"
    assert not consumer._metered and consumer._received_count == 0  # not even counted
    client.close()
