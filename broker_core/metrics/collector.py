"""The Prometheus collector: Pulsar's topic and subscription metrics, computed at scrape time.

Names, types and labels are Pulsar's (``cluster``, ``namespace``, ``topic``, ``subscription``), so a
dashboard or alert written for a Pulsar broker reads these unchanged; the values follow from commits
and cursors (``sampling``; their meaning: ``docs/CLI.md`` "Metrics", ``docs/DECISIONS.md`` D160-D163).
Pulsar exports them all as gauges, ``pulsar_in_messages_total`` included, and so does this.

Two families of its own say what a scrape cost: ``pubsub_metrics_scrape_duration_seconds`` and
``pubsub_metrics_scrape_storage_requests`` (object stores only; per request type).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from broker_core.broker.tenancy import topic_dir
from broker_core.clock import SYSTEM_CLOCK, Clock
from broker_core.metrics import lag, maintenance
from broker_core.metrics.delayed import DelayedCounter
from broker_core.metrics.sampling import Sampler, TopicSample, topic_in_rates
from broker_core.naming import TopicName

Row = tuple[tuple[str, ...], float]
"""Label values (in the family's label order) and the value."""
Upkeep = dict[str, tuple[list[str], list[Row]]]
"""The maintenance families: name -> (label names, rows)."""


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of a scrape (every family here is a gauge, as Pulsar's are)."""

    name: str
    doc: str
    labels: list[str]
    rows: list[Row]


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
    "pulsar_subscription_delayed": "Unacknowledged messages whose deliver-at time is still in the future",
}
SCRAPE_GAUGES: dict[str, str] = {
    "pubsub_metrics_scrape_duration_seconds": "Seconds the last scrape took to read storage",
    "pubsub_metrics_scrape_storage_requests": "Storage requests the last scrape made, per type (object stores)",
}


def exported_names() -> set[str]:
    """Every metric family name the exporter can produce (the dashboard test checks against it)."""
    return {*TOPIC_GAUGES, *SUBSCRIPTION_GAUGES, *SCRAPE_GAUGES, *lag.GAUGES, *maintenance.GAUGES}


class PulsarCollector(Collector):
    """A ``prometheus_client`` collector over one root (register it, or use ``exporter.serve``)."""

    def __init__(self, sampler: Sampler, *, cluster: str = "standalone", clock: Clock = SYSTEM_CLOCK,
                 spark_lag: lag.LagBoard | None = None) -> None:
        self.sampler = sampler
        self.cluster = cluster
        self.clock = clock
        self.spark_lag = lag.BOARD if spark_lag is None else spark_lag
        self.delayed = DelayedCounter(sampler.broker.io)
        self.maintenance = maintenance.MaintenanceReader(sampler.broker, refresh_s=sampler.inventory_refresh_s)
        self.last_duration_s = 0.0
        self.last_requests: dict[str, int] = {}
        self._label_text: dict[tuple[str, ...], str] = {}

    def scrape(self) -> list[Family]:
        """Read storage once and return every family's rows (label values in the family's label order)."""
        return self._families(*self._read())

    def _read(self) -> tuple[int, list[TopicSample], dict[TopicName, dict[str, int]], Upkeep]:
        """The storage pass: (the scrape's clock, samples, delayed counts per topic, maintenance rows)."""
        now_ms = self.clock.now_ms()
        io: Any = self.sampler.broker.io
        before = dict(getattr(io, "request_counts", {}))
        started = time.perf_counter()
        samples = self.sampler.sample_all(now_ms)
        counts = self.sampler.map(lambda sample: self._delayed(sample, now_ms), samples)
        delayed = {sample.topic: n for sample, n in zip(samples, counts, strict=True)}
        self.delayed.forget_except(set(delayed))
        upkeep = self.maintenance.rows(self.cluster, now_ms)
        self.last_duration_s = time.perf_counter() - started
        after = dict(getattr(io, "request_counts", {}))
        self.last_requests = {kind: after[kind] - before.get(kind, 0) for kind in after}
        return now_ms, samples, delayed, upkeep

    def _families(self, now_ms: int, samples: list[TopicSample], delayed: dict[TopicName, dict[str, int]],
                  upkeep: Upkeep) -> list[Family]:
        topic: dict[str, list[Row]] = {name: [] for name in TOPIC_GAUGES}
        sub: dict[str, list[Row]] = {name: [] for name in SUBSCRIPTION_GAUGES}
        for sample in samples:
            self._topic(sample, now_ms, topic, sub, delayed[sample.topic])
        families = [Family(name, TOPIC_GAUGES[name], TOPIC_LABELS, rows) for name, rows in topic.items()]
        families += [Family(name, SUBSCRIPTION_GAUGES[name], SUBSCRIPTION_LABELS, rows) for name, rows in sub.items()]
        families.append(Family("pubsub_metrics_scrape_duration_seconds",
                               SCRAPE_GAUGES["pubsub_metrics_scrape_duration_seconds"], ["cluster"],
                               [((self.cluster,), self.last_duration_s)]))
        families.append(Family("pubsub_metrics_scrape_storage_requests",
                               SCRAPE_GAUGES["pubsub_metrics_scrape_storage_requests"], ["cluster", "type"],
                               [((self.cluster, kind), n) for kind, n in sorted(self.last_requests.items())]))
        families += [Family(name, lag.GAUGES[name], lag.LABELS, rows)
                     for name, rows in self.spark_lag.rows(self.cluster).items()]
        families += [Family(name, maintenance.GAUGES[name], names, rows) for name, (names, rows) in upkeep.items()]
        return families

    def collect(self) -> Iterator[Metric]:
        """The ``prometheus_client`` way (a registry of the application's own can hold this collector)."""
        for family in self.scrape():
            gauge = GaugeMetricFamily(family.name, family.doc, labels=family.labels)
            for values, value in family.rows:
                gauge.add_metric(list(values), value)
            yield gauge

    def render(self) -> str:
        """One scrape in Prometheus's text format, written directly: ten thousand topics are ~150,000
        samples, which ``prometheus_client.generate_latest`` takes seconds to format one by one; each
        topic's label text is built once and kept (D163).  ``exporter`` serves this."""
        read = self._read()
        with _cyclic_gc_paused():
            return self._text(self._families(*read))

    def _text(self, families: list[Family]) -> str:
        out: list[str] = []
        cache = self._label_text
        fresh: dict[tuple[str, ...], str] = {}
        for family in families:
            out.append(f"# HELP {family.name} {family.doc}\n# TYPE {family.name} gauge\n")
            keys = family.labels
            for values, value in family.rows:
                text = fresh.get(values)
                if text is None:
                    text = cache.get(values)
                    if text is None:
                        text = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(keys, values, strict=True)) + "}"
                    fresh[values] = text
                out.append(f"{family.name}{text} {floatToGoString(value)}\n")
        self._label_text = fresh  # labels of topics gone since the last scrape are dropped
        return "".join(out)

    def _delayed(self, sample: TopicSample, now_ms: int) -> dict[str, int]:
        subs = sample.subscriptions
        if not any(s.backlog for s in subs.values()):
            return dict.fromkeys(subs, 0)
        return self.delayed.count(sample.topic, topic_dir(sample.topic), sample.snapshot,
                                  {name: s.first_unacked for name, s in subs.items()},
                                  {name: s.doc for name, s in subs.items()}, now_ms)

    def _topic(self, sample: TopicSample, now_ms: int, topic: dict[str, list[Row]],
               sub: dict[str, list[Row]], delayed: dict[str, int]) -> None:
        labels = (self.cluster, sample.namespace, str(sample.topic))
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
            key = (*labels, name)
            sub["pulsar_subscription_back_log"].append((key, s.backlog))
            sub["pulsar_subscription_unacked_messages"].append((key, s.unacked))
            sub["pulsar_subscription_msg_rate_out"].append((key, recent.msg_rate_out))
            sub["pulsar_subscription_msg_throughput_out"].append((key, recent.msg_rate_out * bytes_per_msg))
            sub["pulsar_subscription_msg_rate_redeliver"].append((key, recent.msg_rate_redeliver))
            sub["pulsar_subscription_delayed"].append((key, delayed.get(name, 0)))
        subs = sample.subscriptions.values()
        topic["pulsar_rate_in"].append((labels, rate_in))
        topic["pulsar_rate_out"].append((labels, rate_out))
        topic["pulsar_throughput_in"].append((labels, throughput_in))
        topic["pulsar_throughput_out"].append((labels, throughput_out))
        topic["pulsar_in_messages_total"].append((labels, sample.snapshot.next_offset))
        topic["pulsar_storage_size"].append((labels, sample.storage_bytes))
        topic["pulsar_storage_backlog_size"].append((labels, max((s.backlog_bytes for s in subs), default=0)))
        topic["pulsar_storage_backlog_age_seconds"].append(
            (labels, max(0, now_ms - earliest) / 1000 if earliest else 0.0))
        topic["pulsar_msg_backlog"].append((labels, sum(s.backlog for s in subs)))
        topic["pulsar_subscriptions_count"].append((labels, len(sample.subscriptions)))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a scrape formats its text (D187).

    Ten thousand topics make ~170,000 short-lived row tuples, whose allocation triggers full
    collections that walk every log and cursor handle the exporter keeps (half a second).  The rows
    hold no cycles: reference counting frees them when the text is built, so the collector has
    nothing left to do when it resumes.  The storage pass is not paused: what it allocates is kept,
    and a paused collector would only meet it later.  Left alone when the application disabled it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


__all__ = ["SUBSCRIPTION_GAUGES", "SUBSCRIPTION_LABELS", "TOPIC_GAUGES", "TOPIC_LABELS", "PulsarCollector",
           "exported_names"]
