"""What the metrics tests share: an exposition parsed with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

C = (("cluster", "standalone"),)
"""The labels every sample of a default broker carries before its own."""


def families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> (sorted labels -> value), as a scraper reads the text."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out
