"""The Spark connector for spark-pubsub: ``format("pubsub")`` for streaming and batch reads and writes.

``read_topic(spark, root, ...)`` is the native batch read: the same options and rows as
``spark.read.format("pubsub")``, read by Spark's own Parquet reader; ``read_ranges(spark, root,
ranges)`` reads a micro-batch of a stream with ``.option("emit", "ranges")`` the same way.  It
stays thin: options are parsed into typed models and every messaging decision is made by
``broker_core``.
``register(spark)`` makes the format available in a session; the companion ``pyspark_pubsub``
module also lets Spark discover it on its own (fresh sessions, spark-submit).
"""

from __future__ import annotations

from typing import Any

from spark_pubsub.native_scan import read_topic
from spark_pubsub.range_reads import read_ranges
from spark_pubsub.source import PubSubDataSource


def monitor(query: Any, root: str, **kwargs: Any) -> Any:
    """Publish a streaming query's lag after each micro-batch (``spark_pubsub.lag_listener.monitor``)."""
    from spark_pubsub.lag_listener import monitor as start

    return start(query, root, **kwargs)


def register(spark: Any) -> None:
    """Make ``format("pubsub")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(PubSubDataSource)


__all__ = ["PubSubDataSource", "monitor", "read_ranges", "read_topic", "register"]
