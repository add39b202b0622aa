"""The Prometheus collector: Pulsar's topic and subscription metrics, computed at scrape time.

Names, types and labels are Pulsar's (``cluster``, ``namespace``, ``topic``, ``subscription``), so a
dashboard or alert written for a Pulsar broker reads these unchanged; the values follow from commits
and cursors (``sampling``; their meaning: ``docs/CLI.md`` "Metrics", ``docs/DECISIONS.md`` D160-D163).
Pulsar exports them all as gauges, ``pulsar_in_messages_total`` included, and so does this.

Two families of its own say what a scrape cost: ``pubsub_metrics_scrape_duration_seconds`` and
``pubsub_metrics_scrape_storage_requests`` (object stores only; per request type).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.metrics import lag
from broker_core.metrics.sampling import Sampler, TopicSample, topic_in_rates

TOPIC_LABELS = ["cluster", "namespace", "topic"]
SUBSCRIPTION_LABELS = [*TOPIC_LABELS, "subscription"]

TOPIC_GAUGES: dict[str, str] = {
    "pulsar_rate_in": "Messages per second published to the topic (last minute)",
    "pulsar_rate_out": "Messages per second consumed from the topic, all subscriptions (last minute)",
    "pulsar_throughput_in": "Bytes per second published to the topic, as stored (last minute)",
    "pulsar_throughput_out": "Bytes per second consumed from the topic, all subscriptions (last minute)",
    "pulsar_in_messages_total": "Messages ever published to the topic",
    "pulsar_storage_size": "Bytes the topic's live segments take in storage",
    "pulsar_storage_backlog_size": "Bytes of the slowest subscription's backlog",
    "pulsar_storage_backlog_age_seconds": "Age of the oldest unacknowledged message of any subscription",
    "pulsar_msg_backlog": "Messages not acknowledged, summed over subscriptions",
    "pulsar_subscriptions_count": "Durable subscriptions of the topic",
}
SUBSCRIPTION_GAUGES: dict[str, str] = {
    "pulsar_subscription_back_log": "Messages the subscription has not acknowledged",
    "pulsar_subscription_unacked_messages": "Messages delivered to consumers and not acknowledged yet",
    "pulsar_subscription_msg_rate_out": "Messages per second acknowledged by the subscription (last minute)",
    "pulsar_subscription_msg_throughput_out": "Bytes per second consumed by the subscription (last minute)",
    "pulsar_subscription_msg_rate_redeliver": "Messages per second redelivered (last minute)",
}
SCRAPE_GAUGES: dict[str, str] = {
    "pubsub_metrics_scrape_duration_seconds": "Seconds the last scrape took to read storage",
    "pubsub_metrics_scrape_storage_requests": "Storage requests the last scrape made, per type (object stores)",
}


def exported_names() -> set[str]:
    """Every metric family name the exporter can produce (the dashboard test checks against it)."""
    return {*TOPIC_GAUGES, *SUBSCRIPTION_GAUGES, *SCRAPE_GAUGES, *lag.GAUGES}


class PulsarCollector(Collector):
    """A ``prometheus_client`` collector over one root (register it, or use ``exporter.serve``)."""

    def __init__(self, sampler: Sampler, *, cluster: str = "standalone", clock: Clock = SYSTEM_CLOCK,
                 spark_lag: lag.LagBoard | None = None) -> None:
        self.sampler = sampler
        self.cluster = cluster
        self.clock = clock
        self.spark_lag = lag.BOARD if spark_lag is None else spark_lag
        self.last_duration_s = 0.0
        self.last_requests: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        now_ms = self.clock.now_ms()
        io: Any = self.sampler.broker.io
        before = dict(getattr(io, "request_counts", {}))
        started = time.perf_counter()
        samples = self.sampler.sample_all(now_ms)
        self.last_duration_s = time.perf_counter() - started
        after = dict(getattr(io, "request_counts", {}))
        self.last_requests = {kind: after[kind] - before.get(kind, 0) for kind in after}
        topic = {name: GaugeMetricFamily(name, doc, labels=TOPIC_LABELS) for name, doc in TOPIC_GAUGES.items()}
        sub = {name: GaugeMetricFamily(name, doc, labels=SUBSCRIPTION_LABELS)
               for name, doc in SUBSCRIPTION_GAUGES.items()}
        for sample in samples:
            self._topic(sample, now_ms, topic, sub)
        yield from topic.values()
        yield from sub.values()
        duration = GaugeMetricFamily("pubsub_metrics_scrape_duration_seconds",
                                     SCRAPE_GAUGES["pubsub_metrics_scrape_duration_seconds"],
                                     labels=["cluster"])
        duration.add_metric([self.cluster], self.last_duration_s)
        yield duration
        requests = GaugeMetricFamily("pubsub_metrics_scrape_storage_requests",
                                     SCRAPE_GAUGES["pubsub_metrics_scrape_storage_requests"],
                                     labels=["cluster", "type"])
        for kind, n in sorted(self.last_requests.items()):
            requests.add_metric([self.cluster, kind], n)
        yield requests
        yield from self.spark_lag.families(self.cluster)

    def _topic(self, sample: TopicSample, now_ms: int, topic: dict[str, GaugeMetricFamily],
               sub: dict[str, GaugeMetricFamily]) -> None:
        labels = [self.cluster, sample.namespace, str(sample.topic)]
        rate_in, throughput_in = topic_in_rates(sample, now_ms)
        live = sample.snapshot.next_offset - sample.snapshot.first_offset
        bytes_per_msg = sample.storage_bytes / live if live else 0.0
        rate_out = throughput_out = 0.0
        earliest = 0
        for name, s in sorted(sample.subscriptions.items()):
            recent = s.rates(now_ms)
            rate_out += recent.msg_rate_out
            throughput_out += recent.msg_rate_out * bytes_per_msg
            if s.earliest_ms and (not earliest or s.earliest_ms < earliest):
                earliest = s.earliest_ms
            values = {
                "pulsar_subscription_back_log": s.backlog,
                "pulsar_subscription_unacked_messages": s.unacked,
                "pulsar_subscription_msg_rate_out": recent.msg_rate_out,
                "pulsar_subscription_msg_throughput_out": recent.msg_rate_out * bytes_per_msg,
                "pulsar_subscription_msg_rate_redeliver": recent.msg_rate_redeliver,
            }
            for key, value in values.items():
                sub[key].add_metric([*labels, name], value)
        subs = sample.subscriptions.values()
        values = {
            "pulsar_rate_in": rate_in,
            "pulsar_rate_out": rate_out,
            "pulsar_throughput_in": throughput_in,
            "pulsar_throughput_out": throughput_out,
            "pulsar_in_messages_total": sample.snapshot.next_offset,
            "pulsar_storage_size": sample.storage_bytes,
            "pulsar_storage_backlog_size": max((s.backlog_bytes for s in subs), default=0),
            "pulsar_storage_backlog_age_seconds": max(0, now_ms - earliest) / 1000 if earliest else 0.0,
            "pulsar_msg_backlog": sum(s.backlog for s in subs),
            "pulsar_subscriptions_count": len(sample.subscriptions),
        }
        for key, value in values.items():
            topic[key].add_metric(labels, value)


__all__ = ["SUBSCRIPTION_GAUGES", "SUBSCRIPTION_LABELS", "TOPIC_GAUGES", "TOPIC_LABELS", "PulsarCollector",
           "exported_names"]
