"""Client metrics through OpenTelemetry's API, named as Pulsar's client metrics (PIP-342).

The library only uses ``opentelemetry-api``: until the application installs an SDK (a
``MeterProvider``), every instrument is a no-op.  Even a no-op call costs a function call, so the hot
paths record per batch, never per message (a commit's messages, an ack flush's offsets), and only
while an SDK is installed (``_sdk_installed``, a type check per batch).  Queue sizes and received
messages are observed by the SDK when it collects (``telemetry_gauges``), not recorded on the way.
The whole set, with what each means here where there is no broker (``docs/CLIENT.md`` "Client
metrics", ``docs/DECISIONS.md`` D164, D190-D194):

- producers: ``pulsar.client.producer.message.send.duration`` (histogram, s; per message, send to
  durable), ``.rpc.send.duration`` (histogram, s; per batch, its upload and commit), both with
  ``pulsar.response.status``; ``.message.send.size`` (counter, By), ``.message.pending.count`` /
  ``.size`` (up-down counters), ``.opened`` / ``.closed`` (counters);
- consumers: ``pulsar.client.consumer.opened`` / ``.closed``, ``.message.received.count`` / ``.size``
  (taken by the application), ``.receive_queue.count`` / ``.size`` (up-down counters),
  ``.message.ack``, ``.nack``, ``.dlq``, ``.ack.timeout`` (counters);
- the client: ``pulsar.client.connection.opened`` / ``.closed`` / ``.failed`` (a ``Client``'s
  opening of its storage root) and ``pulsar.client.lookup.duration`` (histogram, s; resolving a topic).

Attributes: ``pulsar.tenant``, ``pulsar.namespace``, ``pulsar.topic`` (the internal topic, a
partition's own name), ``pulsar.partition`` (when partitioned) and ``pulsar.subscription`` (consumers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from opentelemetry import metrics

from broker_core.client import telemetry_gauges as gauges
from broker_core.errors import BrokerPersistenceError, PulsarException
from broker_core.naming import TopicName
from broker_core.version import package_version

T = TypeVar("T")

# the instruments (``create_instruments`` binds them)
SEND_DURATION: metrics.Histogram
RPC_DURATION: metrics.Histogram
LOOKUP_DURATION: metrics.Histogram
SEND_SIZE: metrics.Counter
PRODUCER_OPENED: metrics.Counter
PRODUCER_CLOSED: metrics.Counter
CONSUMER_OPENED: metrics.Counter
CONSUMER_CLOSED: metrics.Counter
ACKS: metrics.Counter
NACKS: metrics.Counter
DLQ: metrics.Counter
ACK_TIMEOUT: metrics.Counter
CONNECTIONS_OPENED: metrics.Counter
CONNECTIONS_CLOSED: metrics.Counter
CONNECTIONS_FAILED: metrics.Counter
OBSERVED: list[Any]  # the asynchronous instruments (kept referenced)


def create_instruments(meter: metrics.Meter) -> None:
    """(Re)create the instruments on ``meter``: the global one at import, an SDK's own in tests."""
    global SEND_DURATION, RPC_DURATION, SEND_SIZE, PRODUCER_OPENED, PRODUCER_CLOSED, CONSUMER_OPENED
    global CONSUMER_CLOSED, ACKS, NACKS, DLQ, ACK_TIMEOUT, CONNECTIONS_OPENED, CONNECTIONS_CLOSED
    global CONNECTIONS_FAILED, LOOKUP_DURATION, OBSERVED
    SEND_DURATION = meter.create_histogram("pulsar.client.producer.message.send.duration", unit="s",
                                           description="Time from send to durable, per message")
    RPC_DURATION = meter.create_histogram("pulsar.client.producer.rpc.send.duration", unit="s",
                                          description="Time to upload and commit a batch, per batch")
    SEND_SIZE = meter.create_counter("pulsar.client.producer.message.send.size", unit="By",
                                     description="Payload bytes committed")
    PRODUCER_OPENED = meter.create_counter("pulsar.client.producer.opened", unit="{session}",
                                           description="Producers opened")
    PRODUCER_CLOSED = meter.create_counter("pulsar.client.producer.closed", unit="{session}",
                                           description="Producers closed")
    CONSUMER_OPENED = meter.create_counter("pulsar.client.consumer.opened", unit="{session}",
                                           description="Consumers opened")
    CONSUMER_CLOSED = meter.create_counter("pulsar.client.consumer.closed", unit="{session}",
                                           description="Consumers closed")
    ACKS = meter.create_counter("pulsar.client.consumer.message.ack", unit="{message}",
                                description="Acknowledgments committed")
    NACKS = meter.create_counter("pulsar.client.consumer.message.nack", unit="{message}",
                                 description="Negative acknowledgments")
    DLQ = meter.create_counter("pulsar.client.consumer.message.dlq", unit="{message}",
                               description="Messages moved to the dead letter topic")
    ACK_TIMEOUT = meter.create_counter("pulsar.client.consumer.message.ack.timeout", unit="{message}",
                                       description="Messages redelivered because their ack timeout ran out")
    CONNECTIONS_OPENED = meter.create_counter("pulsar.client.connection.opened", unit="{connection}",
                                              description="Storage roots opened by a client")
    CONNECTIONS_CLOSED = meter.create_counter("pulsar.client.connection.closed", unit="{connection}",
                                              description="Storage roots closed by a client")
    CONNECTIONS_FAILED = meter.create_counter("pulsar.client.connection.failed", unit="{connection}",
                                              description="Failed openings of a storage root")
    LOOKUP_DURATION = meter.create_histogram("pulsar.client.lookup.duration", unit="s",
                                             description="Time to resolve a topic's partitions or open its log")
    OBSERVED = [
        meter.create_observable_up_down_counter(
            "pulsar.client.producer.message.pending.count", [gauges.observe_pending_count], unit="{message}",
            description="Messages sent and not yet durable"),
        meter.create_observable_up_down_counter(
            "pulsar.client.producer.message.pending.size", [gauges.observe_pending_size], unit="By",
            description="Payload bytes sent and not yet durable"),
        meter.create_observable_up_down_counter(
            "pulsar.client.consumer.receive_queue.count", [gauges.observe_queue_count], unit="{message}",
            description="Messages in the receiver queue"),
        meter.create_observable_up_down_counter(
            "pulsar.client.consumer.receive_queue.size", [gauges.observe_queue_size], unit="By",
            description="Payload bytes in the receiver queue"),
        meter.create_observable_counter(
            "pulsar.client.consumer.message.received.count", [gauges.observe_received_count], unit="{message}",
            description="Messages received by the application"),
        meter.create_observable_counter(
            "pulsar.client.consumer.message.received.size", [gauges.observe_received_size], unit="By",
            description="Payload bytes received by the application"),
    ]


create_instruments(metrics.get_meter("broker_core", package_version()))

_NO_SDK = ("_ProxyMeterProvider", "NoOpMeterProvider")


def _sdk_installed() -> bool:
    """Is a real ``MeterProvider`` installed (so per-message recording is worth its cost)?"""
    return type(metrics.get_meter_provider()).__name__ not in _NO_SDK


def topic_attributes(topic: TopicName | str, subscription: str | None = None) -> dict[str, Any]:
    """The attributes of a handle's metrics (a multi-topic consumer's label is not one topic: it goes as is)."""
    try:
        topic = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    except PulsarException:
        attrs: dict[str, Any] = {"pulsar.topic": str(topic)}
    else:
        attrs = {"pulsar.tenant": topic.tenant, "pulsar.namespace": topic.namespace_name, "pulsar.topic": str(topic)}
    if isinstance(topic, TopicName) and topic.partition_index >= 0:
        attrs["pulsar.partition"] = topic.partition_index
    if subscription is not None:
        attrs["pulsar.subscription"] = subscription
    return attrs


def record_sent(attrs: dict[str, Any], publish_ms: Iterable[int], size_bytes: int, *, ok: bool,
                rpc_s: float) -> None:
    """A committed (or failed) batch: its bytes, its upload and commit time (``rpc_s``) and each message's
    send duration (SDK installed only)."""
    if not _sdk_installed():
        return
    if ok:
        SEND_SIZE.add(size_bytes, attrs)
    now_ms = time.time_ns() / 1_000_000
    status = {**attrs, "pulsar.response.status": "success" if ok else "failed"}
    RPC_DURATION.record(max(0.0, rpc_s), status)
    for ms in publish_ms:
        SEND_DURATION.record(max(0.0, (now_ms - ms) / 1000), status)


def transport_type(io: Any) -> str:
    """``pulsar.lookup.transport-type`` of a root: ``http`` for an object store (its API is HTTP, as
    Pulsar's HTTP lookups), ``file`` for a folder and ``memory`` for a ``memory://`` root (D192)."""
    if io.is_local:
        return "file"
    return "memory" if str(io.root_uri).startswith("memory://") else "http"


def lookup(transport: str, kind: str, fn: Callable[[], T]) -> T:
    """Run a lookup (``kind``: ``metadata``, a topic's partitions; ``topic``, opening an internal topic's
    log) and record its duration and outcome (SDK installed only)."""
    if not _sdk_installed():
        return fn()
    attrs = {"pulsar.lookup.transport-type": transport, "pulsar.lookup.type": kind}
    started = time.perf_counter()
    try:
        result = fn()
    except BaseException:
        LOOKUP_DURATION.record(time.perf_counter() - started, {**attrs, "pulsar.response.status": "failed"})
        raise
    LOOKUP_DURATION.record(time.perf_counter() - started, {**attrs, "pulsar.response.status": "success"})
    return result


def failure_type(exc: BaseException) -> str:
    """``pulsar.failure.type`` of a failed root opening: ``tcp-failed`` when the store could not be
    reached or answered with an error, ``handshake`` when the root itself was refused (missing, not a
    folder, unusable settings)."""
    return "tcp-failed" if isinstance(exc, BrokerPersistenceError) else "handshake"


__all__ = [
    "ACKS", "ACK_TIMEOUT", "CONNECTIONS_CLOSED", "CONNECTIONS_FAILED", "CONNECTIONS_OPENED", "CONSUMER_CLOSED",
    "CONSUMER_OPENED", "DLQ", "LOOKUP_DURATION", "NACKS", "PRODUCER_CLOSED", "PRODUCER_OPENED", "RPC_DURATION",
    "SEND_DURATION", "SEND_SIZE", "create_instruments", "failure_type", "lookup", "record_sent", "topic_attributes",
    "transport_type",
]
