"""Lets Spark find ``format("pubsub")`` by itself.

Spark's Python worker imports every top-level module whose name starts with ``pyspark_`` and
registers its ``DefaultSource``, so a fresh session or a ``spark-submit`` job can use the format
without calling ``spark_pubsub.register``.
"""

from __future__ import annotations

from spark_pubsub.source import PubSubDataSource as DefaultSource

__all__ = ["DefaultSource"]
