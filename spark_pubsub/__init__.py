"""The Spark connector for spark-pubsub (Python Data Source API).

It stays thin: options are parsed into typed models and every messaging decision is made by
``broker_core``.  The data source itself arrives with the connector issue; this package exists so the
layout (and the import direction: spark_pubsub imports broker_core, never the reverse) is fixed now.
"""

from __future__ import annotations

__all__: list[str] = []
