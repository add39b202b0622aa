"""Client metrics through OpenTelemetry's API, named as Pulsar's client metrics (PIP-342).

The library only uses ``opentelemetry-api``: until the application installs an SDK (a
``MeterProvider``), every instrument is a no-op.  Even a no-op call costs a function call, so the hot
paths record per batch, never per message (a commit's messages, a dispatch round's messages, an ack
flush's offsets), and only while an SDK is installed (``_sdk_installed``, a type check per batch).
The subset implemented (``docs/CLIENT.md`` "Client metrics", ``docs/DECISIONS.md`` D164):

- ``pulsar.client.producer.message.send.duration`` (histogram, s; per message, from enqueue to durable,
  attribute ``pulsar.response.status`` = ``success`` | ``failed``);
- ``pulsar.client.producer.message.send.size`` (counter, By; payload bytes committed);
- ``pulsar.client.producer.opened`` / ``.closed``, ``pulsar.client.consumer.opened`` / ``.closed`` (counters);
- ``pulsar.client.consumer.message.received.count`` / ``.size`` (counters; messages put in the receive
  queue, as Pulsar counts them on arrival);
- ``pulsar.client.consumer.message.ack`` (counter; acknowledgments committed to the cursor) and
  ``pulsar.client.consumer.message.nack`` (counter).

Attributes: ``pulsar.tenant``, ``pulsar.namespace``, ``pulsar.topic`` (the internal topic, a
partition's own name), ``pulsar.partition`` (when partitioned) and ``pulsar.subscription`` (consumers).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics

from broker_core.errors import PulsarException
from broker_core.naming import TopicName
from broker_core.version import package_version

_METER = metrics.get_meter("broker_core", package_version())
SEND_DURATION = _METER.create_histogram("pulsar.client.producer.message.send.duration", unit="s",
                                        description="Time from send to durable, per message")
SEND_SIZE = _METER.create_counter("pulsar.client.producer.message.send.size", unit="By",
                                  description="Payload bytes committed")
PRODUCER_OPENED = _METER.create_counter("pulsar.client.producer.opened", unit="{session}",
                                        description="Producers opened")
PRODUCER_CLOSED = _METER.create_counter("pulsar.client.producer.closed", unit="{session}",
                                        description="Producers closed")
CONSUMER_OPENED = _METER.create_counter("pulsar.client.consumer.opened", unit="{session}",
                                        description="Consumers opened")
CONSUMER_CLOSED = _METER.create_counter("pulsar.client.consumer.closed", unit="{session}",
                                        description="Consumers closed")
RECEIVED_COUNT = _METER.create_counter("pulsar.client.consumer.message.received.count", unit="{message}",
                                       description="Messages received into the receive queue")
RECEIVED_SIZE = _METER.create_counter("pulsar.client.consumer.message.received.size", unit="By",
                                      description="Payload bytes received into the receive queue")
ACKS = _METER.create_counter("pulsar.client.consumer.message.ack", unit="{message}",
                             description="Acknowledgments committed")
NACKS = _METER.create_counter("pulsar.client.consumer.message.nack", unit="{message}",
                              description="Negative acknowledgments")

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


def record_sent(attrs: dict[str, Any], publish_ms: Iterable[int], size_bytes: int, *, ok: bool) -> None:
    """A committed (or failed) batch: its bytes, and each message's send duration (SDK installed only)."""
    if not _sdk_installed():
        return
    if ok:
        SEND_SIZE.add(size_bytes, attrs)
    now_ms = time.time_ns() / 1_000_000
    status = {**attrs, "pulsar.response.status": "success" if ok else "failed"}
    for ms in publish_ms:
        SEND_DURATION.record(max(0.0, (now_ms - ms) / 1000), status)


def record_received(attrs: dict[str, Any], msgs: Iterable[Any]) -> None:
    """A dispatch round's messages entering the receive queue (``Message`` objects; SDK installed only)."""
    if not _sdk_installed():
        return
    count = size = 0
    for msg in msgs:
        count += 1
        size += len(msg.data())
    if count:
        RECEIVED_COUNT.add(count, attrs)
        RECEIVED_SIZE.add(size, attrs)


__all__ = [
    "ACKS", "CONSUMER_CLOSED", "CONSUMER_OPENED", "NACKS", "PRODUCER_CLOSED", "PRODUCER_OPENED", "RECEIVED_COUNT",
    "RECEIVED_SIZE", "SEND_DURATION", "SEND_SIZE", "record_received", "record_sent", "topic_attributes",
]
