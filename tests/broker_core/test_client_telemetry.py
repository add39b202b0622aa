"""Client metrics through OpenTelemetry (``client/telemetry.py``): with an SDK installed, a produce and
consume round records Pulsar's client metric names (PIP-342) with the topic's attributes; without one
nothing is recorded and nothing fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from broker_core import BrokerConfig, Client, InitialPosition
from broker_core.client import telemetry

T = "persistent://public/default/t"
INSTRUMENTS = {
    "SEND_DURATION": "pulsar.client.producer.message.send.duration",
    "SEND_SIZE": "pulsar.client.producer.message.send.size",
    "PRODUCER_OPENED": "pulsar.client.producer.opened",
    "PRODUCER_CLOSED": "pulsar.client.producer.closed",
    "CONSUMER_OPENED": "pulsar.client.consumer.opened",
    "CONSUMER_CLOSED": "pulsar.client.consumer.closed",
    "RECEIVED_COUNT": "pulsar.client.consumer.message.received.count",
    "RECEIVED_SIZE": "pulsar.client.consumer.message.received.size",
    "ACKS": "pulsar.client.consumer.message.ack",
    "NACKS": "pulsar.client.consumer.message.nack",
}


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    """An SDK installed for this test only: the module's instruments are re-created on its meter (the
    global provider can be set once per process, so the test does not set it)."""
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    meter = provider.get_meter("test")
    for attr, name in INSTRUMENTS.items():
        make = meter.create_histogram if attr == "SEND_DURATION" else meter.create_counter
        monkeypatch.setattr(telemetry, attr, make(name))
    monkeypatch.setattr(telemetry, "_sdk_installed", lambda: True)
    yield memory
    provider.shutdown()


def points(memory: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = memory.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_a_produce_and_consume_round_records_pulsars_client_metrics(
        reader: InMemoryMetricReader, tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    client = Client(str(tmp_path / "root"), broker_config=BrokerConfig(fsync_enabled=False))
    consumer = client.subscribe(T, "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(T)
    for i in range(5):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    for _ in range(5):
        msg = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(msg)
    consumer.negative_acknowledge(msg)
    consumer.close()
    producer.close()
    client.close()
    got = points(reader)
    durations = got["pulsar.client.producer.message.send.duration"]
    assert sum(p.count for p in durations) == 5
    assert durations[0].attributes["pulsar.response.status"] == "success"
    assert durations[0].attributes["pulsar.topic"] == T
    assert durations[0].attributes["pulsar.namespace"] == "public/default"
    assert sum(p.value for p in got["pulsar.client.producer.message.send.size"]) == 10
    assert sum(p.value for p in got["pulsar.client.consumer.message.received.count"]) == 5
    assert sum(p.value for p in got["pulsar.client.consumer.message.received.size"]) == 10
    assert sum(p.value for p in got["pulsar.client.consumer.message.ack"]) == 5
    assert sum(p.value for p in got["pulsar.client.consumer.message.nack"]) == 1
    acks = got["pulsar.client.consumer.message.ack"][0]
    assert acks.attributes["pulsar.subscription"] == "s"
    for name in ("producer.opened", "producer.closed", "consumer.opened", "consumer.closed"):
        assert sum(p.value for p in got[f"pulsar.client.{name}"]) == 1


def test_the_instruments_carry_pulsars_names() -> None:
    for attr, name in INSTRUMENTS.items():
        assert getattr(telemetry, attr)._name == name


def test_without_an_sdk_the_instruments_are_no_ops() -> None:
    assert type(metrics.get_meter_provider()).__name__ in telemetry._NO_SDK
    assert not telemetry._sdk_installed()
    telemetry.record_sent({"pulsar.topic": T}, [1, 2], 10, ok=True)  # nothing to record into, nothing raised
    telemetry.record_received({"pulsar.topic": T}, [object()])  # not even looked at
