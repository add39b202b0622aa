"""Metrics: Pulsar's Prometheus metrics computed from a root's commits and cursors.

- ``sampling``: per internal topic, what a scrape reads (cheaply, with state kept between scrapes);
- ``collector``: the ``prometheus_client`` collector with Pulsar's names and labels;
- ``exporter``: serve it over HTTP (``pubsub metrics serve``) or render it once (``pubsub metrics dump``);
- ``lag``: the board where ``spark_pubsub.monitor`` publishes streaming queries' lag.

Needs ``prometheus_client`` (the ``metrics`` extra); nothing else in the core imports this package.
May import every layer up to ``broker`` (it sits beside ``client`` and ``jobs``; ``tests/test_layering.py``).
"""

from __future__ import annotations

__all__: list[str] = []
