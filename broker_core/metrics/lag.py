"""How far streaming queries are behind, as published by ``spark_pubsub.monitor`` (or any reader).

Spark's Python data sources cannot fill a query's ``sources[].metrics``, so the monitor computes a
query's lag on the driver from each progress event and puts it here; the exporter serving in the same
process (``exporter.serve``) publishes the newest values of every query it heard of.  Nothing here
reads storage: it is a thread-safe board of numbers (no ``prometheus_client`` needed).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

GAUGES: dict[str, str] = {
    "pubsub_spark_min_offsets_behind_latest": "Fewest messages a partition of the topic is behind (per query)",
    "pubsub_spark_max_offsets_behind_latest": "Most messages a partition of the topic is behind (per query)",
    "pubsub_spark_avg_offsets_behind_latest": "Mean messages a partition of the topic is behind (per query)",
    "pubsub_spark_oldest_unprocessed_age_seconds": "Age of the oldest message the query has not processed",
}
LABELS = ["cluster", "query", "topic"]


@dataclass(frozen=True, slots=True)
class QueryLag:
    """One query's lag on one topic after its latest batch."""

    min_offsets_behind: int
    max_offsets_behind: int
    avg_offsets_behind: float
    oldest_unprocessed_age_s: float


class LagBoard:
    """The newest ``QueryLag`` per (query, topic)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lags: dict[tuple[str, str], QueryLag] = {}

    def publish(self, query: str, topic: str, value: QueryLag) -> None:
        with self._lock:
            self._lags[(query, topic)] = value

    def forget(self, query: str) -> None:
        """Drop a query's values (it terminated)."""
        with self._lock:
            self._lags = {k: v for k, v in self._lags.items() if k[0] != query}

    def snapshot(self) -> dict[tuple[str, str], QueryLag]:
        with self._lock:
            return dict(self._lags)

    def rows(self, cluster: str) -> dict[str, list[tuple[tuple[str, ...], float]]]:
        """The board as rows per gauge (label values in ``LABELS`` order); empty when nothing was published."""
        lags = self.snapshot()
        if not lags:
            return {}
        out: dict[str, list[tuple[tuple[str, ...], float]]] = {name: [] for name in GAUGES}
        for (query, topic), v in sorted(lags.items()):
            labels = (cluster, query, topic)
            out["pubsub_spark_min_offsets_behind_latest"].append((labels, v.min_offsets_behind))
            out["pubsub_spark_max_offsets_behind_latest"].append((labels, v.max_offsets_behind))
            out["pubsub_spark_avg_offsets_behind_latest"].append((labels, v.avg_offsets_behind))
            out["pubsub_spark_oldest_unprocessed_age_seconds"].append((labels, v.oldest_unprocessed_age_s))
        return out


BOARD = LagBoard()
"""The process's board: what ``spark_pubsub.monitor`` publishes and the exporter serves."""

__all__ = ["BOARD", "GAUGES", "LABELS", "LagBoard", "QueryLag"]
