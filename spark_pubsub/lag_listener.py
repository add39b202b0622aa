"""``monitor(query, root)``: a streaming query's lag behind its topics, after every micro-batch.

A Python data source cannot fill ``sources[].metrics`` of a query's progress (Spark reads those from
JVM sources only), so Kafka's ``min/max/avgOffsetsBehindLatest`` have no place there.  This listener
computes them on the driver from each progress event instead: the source's ``endOffset`` (the next
offset the query will read, per internal topic) against each internal topic's log now, plus the age
of the oldest message the query has not processed.  The numbers go to the process's lag board
(``broker_core.metrics.lag``, served by an exporter in the same process as
``pubsub_spark_*_offsets_behind_latest`` and ``pubsub_spark_oldest_unprocessed_age_seconds``) and to
the ``spark_pubsub.monitor`` logger.

Queries reading with a ``subscription`` of type Shared or Key_Shared have no per-partition position
in their offsets (they claim messages in the cursor); their lag is the subscription's backlog, which
the exporter already publishes (``pulsar_subscription_back_log``), so the monitor skips them.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from broker_core.broker.broker import Broker
from broker_core.broker.stats_fields import publish_time_ms
from broker_core.metrics import lag
from broker_core.naming import TopicName

_LOG = logging.getLogger("spark_pubsub.monitor")


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def query_lag(broker: Broker, end_offset: Mapping[str, Any], now_ms: int) -> dict[str, lag.QueryLag]:
    """Lag per topic (a partitioned topic's partitions together) from one source's ``endOffset``."""
    parts = end_offset.get("parts")
    if not isinstance(parts, Mapping):
        return {}
    behind: dict[str, list[int]] = defaultdict(list)
    oldest: dict[str, int] = {}
    for display, position in parts.items():
        name = TopicName.parse(display)
        topic = str(name.partitioned_topic_name) if name.is_partition else str(name)
        log = broker.topic_log(name, create=False)
        if not log.exists():
            behind[topic].append(0)
            continue
        snap = log.snapshot()
        start = max(int(position), snap.first_offset)
        count = max(0, snap.next_offset - start)
        behind[topic].append(count)
        if count:
            published = publish_time_ms(log, snap, start)
            if published is not None:
                oldest[topic] = min(oldest.get(topic, published), published)
    return {
        topic: lag.QueryLag(
            min_offsets_behind=min(counts),
            max_offsets_behind=max(counts),
            avg_offsets_behind=sum(counts) / len(counts),
            oldest_unprocessed_age_s=max(0, now_ms - oldest[topic]) / 1000 if topic in oldest else 0.0,
        )
        for topic, counts in behind.items()
    }


class PubSubLagListener(StreamingQueryListener):
    """Publishes the lag of one query (``query_id``; None: of every query) after each progress event."""

    def __init__(self, broker: Broker, *, query_id: str | None = None, board: lag.LagBoard | None = None) -> None:
        self.broker = broker
        self.query_id = query_id
        self.board = lag.BOARD if board is None else board

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to publish before the query's first progress (Spark requires the method)."""

    def onQueryIdle(self, event: Any) -> None:
        """An idle trigger leaves the last progress's figures standing."""

    def onQueryProgress(self, event: Any) -> None:
        try:
            self.handle_progress(event.progress)
        except Exception:  # a listener must never break the query; say why the numbers are missing
            _LOG.exception("spark_pubsub.monitor: could not compute the lag of a progress event")

    def onQueryTerminated(self, event: Any) -> None:
        query = str(event.id)
        if self.query_id is None or query == self.query_id:
            self.board.forget(query)

    def handle_progress(self, progress: Any) -> dict[str, lag.QueryLag]:
        """Compute, publish and log the lag after one progress (a ``StreamingQueryProgress`` or its dict)."""
        query = str(_field(progress, "id"))
        if self.query_id is not None and query != self.query_id:
            return {}
        now_ms = time.time_ns() // 1_000_000
        found: dict[str, lag.QueryLag] = {}
        for source in _field(progress, "sources") or []:
            end = _field(source, "endOffset")
            if isinstance(end, str):
                try:
                    end = json.loads(end)
                except ValueError:
                    continue
            if isinstance(end, Mapping):
                found.update(query_lag(self.broker, end, now_ms))
        for topic, value in found.items():
            self.board.publish(query, topic, value)
            _LOG.info("query %s on %s: offsets behind latest min %d max %d avg %.1f, oldest unprocessed %.1f s",
                      query, topic, value.min_offsets_behind, value.max_offsets_behind, value.avg_offsets_behind,
                      value.oldest_unprocessed_age_s)
        return found


def monitor(query: Any, root: str, *, storage_options: Mapping[str, str] | None = None,
            board: lag.LagBoard | None = None) -> PubSubLagListener:
    """Watch ``query`` (a started ``StreamingQuery`` reading ``format("pubsub")`` from ``root``).

    Adds a listener to the active session (the query's); remove it with
    ``spark.streams.removeListener(listener)``.  Serve the numbers with an exporter in the
    same process (``broker_core.metrics.exporter.serve``); they are logged too.
    """
    broker = Broker.for_url(root, storage_options=storage_options)
    listener = PubSubLagListener(broker, query_id=str(query.id), board=board)
    session = getattr(query, "sparkSession", None) or SparkSession.active()
    session.streams.addListener(listener)
    return listener


__all__ = ["PubSubLagListener", "monitor", "query_lag"]
